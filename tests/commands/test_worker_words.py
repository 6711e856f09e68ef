"""A failure carries the worker's own words, and `gitrun logs` prints them.

A worker that printed ``this one never writes anything`` to stderr was
reported as ``out/t1.json: does not exist``; its text was only in a log no
message named.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import build_tree, commit_all, ledger_records, run_gitrun, user_env, write_run

AGENT = (
    "#!/bin/sh\n"
    "echo 'starting up'\n"
    "printf 'this one never writes anything \\033]0;PWNED\\007\\n' >&2\n"
    "exit 0\n"
)


def _failing_run(repo: Path) -> None:
    build_tree(repo, {"bin/agent": AGENT})
    (repo / "bin/agent").chmod(0o755)
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": ["bin/agent", "{pointer}"]},
            "limits": {"canary": 0, "max_attempts": 2, "max_spawns": 10},
        },
    )
    commit_all(repo, "run r")


def test_every_failure_names_what_the_worker_said_and_its_log(git_repo: Path) -> None:
    _failing_run(git_repo)
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode != 0
    said = "it said: this one never writes anything \\x1b]0;PWNED\\x07"
    assert "\x1b" not in started.stdout + started.stderr  # shown, never obeyed
    line = next(ln for ln in started.stderr.splitlines() if "t1 attempt 1: missing" in ln)
    assert said in line and "(log: .git/gitrun/r/logs/t1.1.log)" in line
    status = run_gitrun(git_repo, "status", "r")
    assert "    it said: starting up\n" in status.stdout
    assert f"    {said}\n" in status.stdout
    assert "    log: .git/gitrun/r/logs/t1.2.log (`gitrun logs r t1`)" in status.stdout
    task = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)["tasks"]["t1"]
    assert task["said"] == ["starting up", said.removeprefix("it said: ")]
    assert task["log"] == ".git/gitrun/r/logs/t1.2.log"
    records = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert [r["said"][-1] for r in records] == [said.removeprefix("it said: ")] * 2


def test_gitrun_logs_prints_the_logs_of_what_failed(git_repo: Path) -> None:
    _failing_run(git_repo)
    run_gitrun(git_repo, "start", "r")
    every = run_gitrun(git_repo, "logs", "r")
    assert every.returncode == 0
    assert every.stdout.startswith("==> t1 attempt 2 (t1.2.log) <==\nstarting up\n")
    assert "this one never writes anything \\x1b]0;PWNED\\x07" in every.stdout
    first = run_gitrun(git_repo, "logs", "r", "t1", "--attempt", "1")
    assert first.stdout == "starting up\nthis one never writes anything \\x1b]0;PWNED\\x07\n"
    for args, said in (
        (("t9",), "run 'r' has no task 't9'"),
        (("t1", "--attempt", "3"), "task t1 of run 'r' has attempts 1 to 2"),
        (("--attempt", "1"), "--attempt needs a TASK"),
    ):
        proc = run_gitrun(git_repo, "logs", "r", *args)
        assert proc.returncode == 1 and said in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    (git_repo / ".git/gitrun/r/logs/t1.1.log").unlink()
    gone = run_gitrun(git_repo, "logs", "r", "t1", "--attempt", "1")
    assert gone.returncode == 1 and "left no log here" in gone.stderr


def test_the_report_shows_each_failed_attempt_s_words(git_repo: Path, tmp_path: Path) -> None:
    _failing_run(git_repo)
    run_gitrun(git_repo, "start", "r")
    page = tmp_path / "page.html"
    assert run_gitrun(git_repo, "report", "r", "-o", str(page)).returncode == 0
    html = page.read_text()
    assert "it said: this one never writes anything \\x1b]0;PWNED\\x07" in html
    assert "\x1b" not in html


def test_a_task_keeps_the_logs_of_its_last_five_attempts(git_repo: Path) -> None:
    build_tree(git_repo, {"bin/agent": AGENT})
    (git_repo / "bin/agent").chmod(0o755)
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": ["bin/agent", "{pointer}"]},
            "limits": {"canary": 0, "max_attempts": 7, "max_spawns": 10, "breaker_window": 9},
        },
    )
    commit_all(git_repo, "run r")
    run_gitrun(git_repo, "start", "r")
    logs = sorted(p.name for p in (git_repo / ".git/gitrun/r/logs").glob("t1.*.log"))
    assert logs == [f"t1.{n}.log" for n in (3, 4, 5, 6, 7)]


def test_logs_follow_prints_a_running_attempt_s_log_until_it_ends(git_repo: Path) -> None:
    ticking = (
        "#!/bin/sh\n"
        'for n in 1 2 3 4 5 6; do echo "tick $n"; sleep 0.4; done\n'
        'mkdir -p out && echo "{}" > "out/$GITRUN_TASK.json"\n'
    )
    build_tree(git_repo, {"bin/agent": ticking})
    (git_repo / "bin/agent").chmod(0o755)
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": ["bin/agent", "{pointer}"]}, "limits": {"canary": 0}},
    )
    commit_all(git_repo, "run r")
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r", "--quiet"],
        cwd=git_repo,
        env=user_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        log = git_repo / ".git/gitrun/r/logs/t1.1.log"
        deadline = time.monotonic() + 60
        while not log.exists():  # the attempt has started and printed
            assert time.monotonic() < deadline, "the attempt never printed"
            time.sleep(0.05)
        followed = run_gitrun(git_repo, "logs", "r", "t1", "--follow")
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout == "".join(f"tick {n}\n" for n in range(1, 7))
        assert driver.wait(timeout=60) == 0
    finally:
        driver.kill()
        driver.wait()
    said = run_gitrun(git_repo, "logs", "r", "--follow")
    assert said.returncode == 1 and "--follow needs a TASK" in said.stderr
