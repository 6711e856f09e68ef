"""Every attempt confined to its own paths, with the real bubblewrap.

A careless worker's writes outside its task's paths fail at once or stay in
its staging directory; only the task's own files reach the work tree; a
neighbour's task is done only by its own attempt. Skipped, with the reason,
where bubblewrap cannot make a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run, start_run
from gitrun.definition.load import load_run
from gitrun.proof.check import check_run
from gitrun.workers.attempt import Monitor
from gitrun.workers.sandbox import WALLS, Claim, Confined, Plan, plan_of, probe
from tests.helpers import (
    build_tree,
    commit_all,
    git,
    gitrun_process,
    ledger_records,
    wait_until,
    write_run,
)

REFUSAL = probe()
pytestmark = pytest.mark.skipif(REFUSAL is not None, reason=str(REFUSAL))

quiet = lambda _line: None  # noqa: E731

# A careless worker: its own output, then its neighbour's (t2's, before t2
# ran), a protected file and the repository's git config.
CARELESS = """
mkdir -p out
printf '{"task": "%s"}\\n' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"
if [ "$GITRUN_TASK" = t1 ]; then
  printf '{"clobbered": true}\\n' > out/t2.json || echo "t2: refused"
  echo leaked >> SECRET.txt || echo "secret: refused"
  echo '[alias] x = !touch pwned' >> .git/config || echo "config: refused"
fi
"""


def _shell_run(repo: Path, script: str, tasks: list[dict[str, object]], **limits: object) -> None:
    packet = {
        "executor": {"preset": "shell", "shell": script, "isolation": "sandbox"},
        "limits": {"canary": 0, "timeout": "60s", **limits},
        "ownership": {"protected": ["SECRET.txt"]},
    }
    write_run(repo, "r", tasks, packet)
    commit_all(repo, "run r")


def _tasks(*ids: str) -> list[dict[str, object]]:
    return [{"id": t, "outputs": [f"out/{t}.json"]} for t in ids]


def test_a_careless_worker_changes_nothing_of_anyone_else(git_repo: Path) -> None:
    build_tree(git_repo, {"SECRET.txt": "mine\n"})
    commit_all(git_repo, "secret")
    config = (git_repo / ".git/config").read_bytes()
    _shell_run(git_repo, CARELESS, _tasks("t1", "t2"), concurrency=1)
    said: list[str] = []
    outcome = start_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0 and outcome.violations == []
    # The neighbour's task is done by its own attempt, with its own content.
    assert git(git_repo, "show", "gitrun/r:out/t2.json") == '{"task": "t2"}\n'
    t2 = [r for r in ledger_records(git_repo) if r.get("task") == "t2" and "outcome" in r]
    assert [r["outcome"] for r in t2] == ["valid"]
    # The protected file and the git config failed at once, as the worker saw.
    assert (git_repo / "SECRET.txt").read_text() == "mine\n"
    assert (git_repo / ".git/config").read_bytes() == config
    log = (git_repo / ".git/gitrun/r/logs/t1.1.log").read_text()
    assert "secret: refused" in log and "config: refused" in log and "t2: refused" in log
    assert "Read-only file system" in log
    assert [r for r in ledger_records(git_repo) if r.get("event") == "stray"] == []
    assert not list((git_repo / ".git/gitrun/r").glob("sandbox/*"))  # nothing left behind


def test_an_input_beside_the_output_is_readable_and_never_writable(git_repo: Path) -> None:
    """In the directory of its outputs a confined worker sees its own files
    and its declared inputs (read-only), and nothing else there."""
    script = (
        'if [ "$GITRUN_TASK" = sum ]; then cat out/t1.json > /dev/null || exit 9; '
        "[ -s out/t2.json ] && exit 8; "  # a wall: empty
        'printf x > out/t1.json && echo "wrote t1"; fi; '
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    )
    tasks: list[dict[str, object]] = [
        {"id": "t1", "stage": "one", "outputs": ["out/t1.json"]},
        {"id": "t2", "stage": "one", "outputs": ["out/t2.json"]},
        {"id": "sum", "stage": "two", "inputs": ["out/t1.json"], "outputs": ["out/sum.json"]},
    ]
    packet = {
        "executor": {"preset": "shell", "shell": script, "isolation": "sandbox"},
        "limits": {"canary": 0, "timeout": "60s"},
        "stages": [{"name": "one"}, {"name": "two"}],
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.counts()["done"] == 3, outcome.status.tasks["sum"]
    assert (git_repo / "out/t1.json").read_text() == '{"task": "t1"}\n'
    log = (git_repo / ".git/gitrun/r/logs/sum.1.log").read_text()
    assert "Read-only file system" in log and "wrote t1" not in log


def test_careful_writes_work_confined(git_repo: Path) -> None:
    """An atomic write (a temporary beside the output, renamed over it), an
    output edited in place, a subdirectory of a directory the task owns
    whole, an output at the repository's root and the private TMPDIR."""
    build_tree(git_repo, {"out/e.json": '{"n": 1}\n'})
    commit_all(git_repo, "an output to edit")
    script = """
import json, os, pathlib, tempfile
task = os.environ["GITRUN_TASK"]
assert os.environ["TMPDIR"] != "/tmp" and tempfile.mkstemp()
if task == "a":
    with open("out/a.json.part", "w") as f:
        json.dump({"task": task}, f)
    os.replace("out/a.json.part", "out/a.json")
elif task == "e":
    n = json.loads(pathlib.Path("out/e.json").read_text())["n"]
    pathlib.Path("out/e.json").write_text(json.dumps({"n": n + 1}))
elif task == "w":
    pathlib.Path("work/w/deep/er").mkdir(parents=True, exist_ok=True)
    pathlib.Path("work/w/deep/er/x.json").write_text("{}")
else:
    pathlib.Path("top.json").write_text("{}")
"""
    (git_repo.parent / "careful.py").write_text(script)
    tasks = [
        {"id": "a", "outputs": ["out/a.json"]},
        {"id": "e", "outputs": ["out/e.json"], "edits": True},
        {"id": "w", "owns": ["work/w/**"], "outputs": ["work/w/deep/er/x.json"]},
        {"id": "r", "outputs": ["top.json"]},
    ]
    packet = {
        "executor": {
            "command": [sys.executable, str(git_repo.parent / "careful.py")],
            "isolation": "sandbox",
        },
        "limits": {"canary": 0, "timeout": "60s"},
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.counts()["done"] == 4, outcome.status.tasks
    assert json.loads(git(git_repo, "show", "gitrun/r:out/e.json")) == {"n": 2}
    assert not (git_repo / "out/a.json.part").exists()
    assert git(git_repo, "show", "gitrun/r:top.json") == "{}"


def test_a_plan_binds_each_task_s_directories(git_repo: Path) -> None:
    tasks = [
        {"id": "a", "outputs": ["out/a.json", "out/sub/b.json"]},
        {"id": "g", "owns": ["logs/*.txt"], "outputs": ["logs/g.txt"]},
        {"id": "w", "owns": ["work/w/"], "outputs": ["work/w/x.json"]},
    ]
    write_run(git_repo, "r", tasks)
    run = load_run(git_repo, "r", environ={})
    plans = {t.id: plan_of(run, t) for t in run.tasks}
    assert plans["a"] == Plan(writable=(), staged=("out", "out/sub"))
    assert plans["g"] == Plan(writable=("logs",), staged=())  # judged after, as unconfined
    assert plans["w"] == Plan(writable=("work/w",), staged=())


def test_a_glob_at_the_root_cannot_be_confined_and_check_says_so(git_repo: Path) -> None:
    tasks = [{"id": "t1", "owns": ["*.md"], "outputs": ["notes.md"]}]
    write_run(git_repo, "r", tasks, {"executor": {"command": ["true"], "isolation": "sandbox"}})
    commit_all(git_repo, "run r")
    [problem] = [p for p in check_run(load_run(git_repo, "r")).problems if p.code == "isolation"]
    assert "task t1 owns '*.md', which names no directory to make writable" in problem.message
    write_run(git_repo, "r", tasks, {"executor": {"command": ["true"]}})  # auto: said, not refused
    report = check_run(load_run(git_repo, "r"))
    assert not [p for p in report.problems if p.code == "isolation"]
    assert "workers are not confined: task t1 owns '*.md'" in report.summary


def test_without_bubblewrap_a_sandbox_is_a_problem_and_auto_says_so(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"  # git and true as they are, and no bwrap
    bin_dir.mkdir()
    for name in ("git", "true"):
        found = shutil.which(name)
        assert found is not None
        os.symlink(found, bin_dir / name)
    monkeypatch.setenv("PATH", str(bin_dir))
    write_run(git_repo, "r", _tasks("t1"), {"executor": {"command": ["true"]}})
    assert "workers are not confined: bubblewrap (`bwrap`) is not installed: apt-get install " in (
        check_run(load_run(git_repo, "r"), check_dirty=False).summary
    )
    packet = {"executor": {"command": ["true"], "isolation": "sandbox"}}
    write_run(git_repo, "r", _tasks("t1"), packet)
    [problem] = [
        p
        for p in check_run(load_run(git_repo, "r"), check_dirty=False).problems
        if p.code == "isolation"
    ]
    assert problem.message.startswith('[executor] isolation = "sandbox", but bubblewrap')
    assert "apt-get install bubblewrap" in problem.message


def test_bubblewrap_refusing_an_attempt_halts_as_an_environment_fault(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bubblewrap that passes the probe but cannot confine a real attempt
    (no user namespaces for this command, say): one sentence, no attempt used."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text(
        '#!/bin/sh\nfor a; do last="$a"; done\n[ "$last" = true ] && exit 0\n'
        'echo "bwrap: No permissions to creating new namespace" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _shell_run(git_repo, CARELESS, _tasks("t1", "t2"))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3 and outcome.halt is not None
    assert outcome.halt.kind == "environment fault"
    assert "bubblewrap could not confine an attempt (bwrap: No permissions" in outcome.halt.message
    assert 'isolation = "scratch"' in outcome.halt.message and 'or "none"' in outcome.halt.message
    assert all(t.attempts == 0 for t in outcome.status.tasks.values())


def test_a_directory_taken_away_mid_attempt_interrupts_it_and_uses_no_attempt(
    git_repo: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    script = (
        f'[ -e "{gate}.seen" ] || {{ touch "{gate}.seen"; '
        f'while [ ! -e "{gate}" ]; do sleep 0.02; done; }}; '
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    )
    _shell_run(git_repo, script, _tasks("t1"), max_attempts=1)
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    try:
        wait_until(driver, lambda: Path(f"{gate}.seen").exists())
        os.rmdir(git_repo / "out")  # as `git stash -u` or `git clean -fd` would
        gate.touch()
        assert driver.wait(timeout=60) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    outcomes = [r["outcome"] for r in ledger_records(git_repo) if "outcome" in r]
    assert outcomes == ["interrupted", "valid"]  # max_attempts 1: the first used none
    [first] = [r for r in ledger_records(git_repo) if r.get("outcome") == "interrupted"]
    assert first["reason"] == "out was removed or replaced in the work tree while it ran"


def test_kill_9_of_the_driver_then_resume_leaves_nothing_of_the_dead_attempt(
    git_repo: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    script = (
        f'touch "{started}.$GITRUN_TASK"; '
        f'[ -e "{tmp_path}/resumed" ] || sleep 30; '
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"; '
        "printf x > out/stray.json"
    )
    _shell_run(git_repo, script, _tasks("t1", "t2"))
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    wait_until(driver, lambda: all(Path(f"{started}.{t}").exists() for t in ("t1", "t2")))
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    (tmp_path / "resumed").touch()
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    assert outcome.status.counts()["done"] == 2
    assert not (git_repo / "out/stray.json").exists()
    assert not list((git_repo / ".git/gitrun/r").glob("sandbox/*"))
    strays = [r for r in ledger_records(git_repo) if r.get("event") == "stray"]
    assert sorted(str(r["task"]) for r in strays) == ["t1", "t2"]


def test_an_output_written_before_its_driver_died_is_brought_back_by_resume(
    git_repo: Path, tmp_path: Path
) -> None:
    """An orphaned confined worker wrote its output into its staging
    directory: resume brings it into the work tree, the attempt is valid,
    nothing is dispatched again, and what it wrote of another's is named."""
    wrote = tmp_path / "wrote"
    script = (
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"; '
        "printf x > out/stray.json; "
        f'echo "$GITRUN_ATTEMPT" >> "{wrote}.$GITRUN_TASK"; sleep 60'
    )
    _shell_run(git_repo, script, _tasks("t1", "t2"))
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    wait_until(driver, lambda: all(Path(f"{wrote}.{t}").exists() for t in ("t1", "t2")))
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert not (git_repo / "out/t1.json").exists()  # still in its staging directory
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    assert outcome.status.counts()["done"] == 2
    for task in ("t1", "t2"):
        assert Path(f"{wrote}.{task}").read_text() == "1\n"  # one attempt each, never again
        assert git(git_repo, "show", f"gitrun/r:out/{task}.json") == f'{{"task": "{task}"}}\n'
    outcomes = [(r["task"], r["outcome"]) for r in ledger_records(git_repo) if "outcome" in r]
    assert sorted(outcomes) == [("t1", "valid"), ("t2", "valid")]
    assert not (git_repo / "out/stray.json").exists()
    strays = [r for r in ledger_records(git_repo) if r.get("event") == "stray"]
    assert sorted(str(r["task"]) for r in strays) == ["t1", "t2"]
    assert any("t1 attempt 1 wrote out/stray.json, which it does not own" in s for s in said)
    assert not list((git_repo / ".git/gitrun/r").glob("sandbox/*"))


def test_a_stray_name_is_shown_escaped(git_repo: Path) -> None:
    script = (
        "printf x > \"out/evil$(printf '\\033]0;PWNED\\007')\"; "
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    )
    _shell_run(git_repo, script, _tasks("t1"))
    said: list[str] = []
    start_run(git_repo, "r", said.append)
    [line] = [s for s in said if "which it does not own" in s]
    assert "\x1b" not in line and "out/evil\\x1b]0;PWNED\\x07" in line


def test_a_terminated_worker_keeps_its_grace_under_bubblewrap(tmp_path: Path) -> None:
    """SIGTERM ends bubblewrap at once; the worker it started still shuts
    down in its grace period, and its group is killed only after."""
    done = tmp_path / "graceful"
    monitor = Monitor(kill_grace=5.0)
    script = f"trap 'sleep 0.3; echo ok > {done}; exit 0' TERM; sleep 60 & wait"
    attempt = monitor.launch(
        "t1",
        1,
        ["sh", "-c", script],
        dict(os.environ),
        tmp_path,
        tmp_path / "t1.log",
        60,
        ["bwrap", "--dev-bind", "/", "/", "--"],
    )
    time.sleep(0.3)
    attempt.stop()
    deadline = time.monotonic() + 30
    ended = []
    while not ended:
        assert time.monotonic() < deadline, "the attempt never ended"
        ended = monitor.poll(0.1)
        for running in monitor.running:
            running.escalate(time.monotonic())
    monitor.close()
    assert done.read_text() == "ok\n"
    assert ended[0].signal == signal.SIGTERM  # bubblewrap's own end


def test_confined_files_come_back_across_file_systems(tmp_path: Path) -> None:
    """The staging directory may lie on another file system than the work
    tree: an own file then comes back by a copy renamed into place."""
    repo = tmp_path / "repo"
    (repo / "out").mkdir(parents=True)
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system at /dev/shm")
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="gitrun-test-"))
    confined = Confined(
        repo, Plan((), ("out",)), folder / "a", ("out/t1.json",), ("out/t1.json",), (), (), ()
    )
    prefix = confined.prefix()
    subprocess.run([*prefix, "sh", "-c", "echo '{}' > out/t1.json"], check=True, timeout=60)
    assert confined.finish() == [] and confined.unmoved == []
    assert (repo / "out/t1.json").read_text() == "{}\n"
    assert not (folder / "a").exists()
    folder.rmdir()


def test_the_claude_preset_keeps_its_own_sandbox(git_repo: Path) -> None:
    write_run(git_repo, "r", _tasks("t1"), {"executor": {"preset": "claude"}})
    assert "confined" not in check_run(load_run(git_repo, "r"), check_dirty=False).summary
    packet = {"executor": {"preset": "claude", "isolation": "sandbox"}}
    write_run(git_repo, "r", _tasks("t1"), packet)
    problems = check_run(load_run(git_repo, "r"), check_dirty=False).problems
    [problem] = [p for p in problems if p.code == "isolation"]
    assert "cannot confine the claude preset yet" in problem.message


def test_a_directory_reached_through_a_link_stays_read_only(tmp_path: Path) -> None:
    """A link at a task's own directory would bind where it points (the git
    directory, say): the place stays read-only and the move back refuses it."""
    repo = tmp_path / "repo"
    (repo / ".git/hooks").mkdir(parents=True)
    os.symlink(".git/hooks", repo / "out")
    confined = Confined(
        repo, Plan((), ("out",)), tmp_path / "a", ("out/post-commit",), (), (), (), ()
    )
    prefix = confined.prefix()
    assert confined.unbound == ["out"]
    ran = subprocess.run(
        [*prefix, "sh", "-c", "echo x > out/post-commit"], capture_output=True, text=True
    )
    assert ran.returncode != 0 and "Read-only file system" in ran.stderr
    confined.finish()
    assert not (repo / ".git/hooks/post-commit").exists()


def test_auto_confines_every_preset_but_those_with_a_sandbox_of_their_own(
    git_repo: Path,
) -> None:
    """gemini and aider have none by default and run confined (their real
    CLIs do, tests/realclient/test_real_*.py); codex's cannot nest in gitrun's, so auto
    leaves it its own, and only an explicit sandbox takes its place."""
    from gitrun.workers.executor import command_template
    from gitrun.workers.sandbox import isolation_of

    said = {}
    for preset in ("shell", "gemini", "aider", "codex", "claude"):
        executor: dict[str, object] = {"preset": preset}
        if preset == "shell":
            executor["shell"] = "true"
        write_run(git_repo, "r", _tasks("t1"), {"executor": executor})
        said[preset] = isolation_of(load_run(git_repo, "r"))
    assert [p for p, i in said.items() if i.confined] == ["shell", "gemini", "aider"]
    assert "codex's own sandbox holds them" in said["codex"].said
    assert said["claude"] == said["claude"].__class__()  # its own sandbox, said nowhere
    write_run(git_repo, "r", _tasks("t1"), {"executor": {"preset": "codex"}})
    executor = load_run(git_repo, "r").packet.executor
    assert "workspace-write" in (command_template(executor) or [])
    assert "danger-full-access" in (command_template(executor, confined=True) or [])


@pytest.mark.parametrize(
    "flags",
    [
        ["--sandbox", "workspace-write"],
        ["--sandbox=workspace-write"],
        ["-s", "workspace-write"],
        ["--full-auto"],
        ["-c", 'sandbox_mode="workspace-write"'],
    ],
)
def test_check_names_a_codex_command_whose_own_sandbox_cannot_nest_in_gitruns(
    git_repo: Path, clis: Path, flags: list[str]
) -> None:
    """Confined by gitrun, codex's own bubblewrap cannot make its mount points
    in the read-only repository: its worker writes nothing. The preset
    switches the flag; a command of one's own gets the problem and the fix."""
    command = ["codex", "exec", *flags, "--model", "{model}", "{pointer}"]
    write_run(git_repo, "r", _tasks("t1"), {"executor": {"command": command}})
    problems = [p for p in check_run(load_run(git_repo, "r")).problems if p.code == "isolation"]
    assert [p.message for p in problems] == [
        f"[executor] command runs codex with `{' '.join(flags)}` inside gitrun's sandbox, where "
        "codex's own sandbox cannot make its mount points in the read-only repository (its "
        "workers would write nothing); pass `--sandbox danger-full-access` instead, as the "
        "codex preset does there (gitrun's sandbox still holds each attempt to its task's "
        'paths), use preset = "codex", or set [executor] isolation = "none"'
    ]


@pytest.mark.parametrize(
    ("executor"),
    [
        {
            "command": ["codex", "exec", "--sandbox", "workspace-write", "{pointer}"],
            "isolation": "none",
        },
        {
            "command": ["codex", "exec", "--sandbox", "workspace-write", "{pointer}"],
            "isolation": "scratch",
        },
        {"command": ["codex", "exec", "--sandbox", "danger-full-access", "{pointer}"]},
        {"command": ["my-agent", "--sandbox", "workspace-write", "{pointer}"]},
        {"preset": "codex"},
        {"preset": "codex", "isolation": "sandbox"},
    ],
)
def test_codex_without_a_nested_sandbox_is_no_problem(
    git_repo: Path, clis: Path, executor: dict[str, object]
) -> None:
    write_run(git_repo, "r", _tasks("t1"), {"executor": executor})
    problems = check_run(load_run(git_repo, "r")).problems
    assert [p.message for p in problems if p.code == "isolation"] == []


def test_an_attempt_s_tmp_is_its_own_even_with_the_repository_in_tmp() -> None:
    """A confined worker sees none of the host's /tmp and leaves nothing
    there; its repository, under /tmp itself here, it still sees and writes."""
    host = Path(tempfile.mkdtemp(dir="/tmp", prefix="gitrun-test-"))
    try:
        (host / "seen").write_text("the host's\n")
        repo = host / "repo"
        (repo / "out").mkdir(parents=True)
        confined = Confined(
            repo, Plan((), ("out",)), host / "a", ("out/t1.json",), ("out/t1.json",), (), (), ()
        )
        script = (
            f'if [ -e "{host}/seen" ]; then echo "saw the host"; fi; '
            f'echo mine > /tmp/{host.name}.left && echo mine > "$TMPDIR/also" && cat /tmp/{host.name}.left; '
            "echo '{}' > out/t1.json"
        )
        done = subprocess.run(
            [*confined.prefix(), "sh", "-c", script], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "mine\n"
        assert confined.finish() == [] and confined.unmoved == []
        assert (repo / "out/t1.json").read_text() == "{}\n"
        assert sorted(p.name for p in host.iterdir()) == ["repo", "seen"]
        assert not Path(f"{host}.left").exists()
    finally:
        shutil.rmtree(host)


# A worker of ta goes for its neighbours' outputs in its own folder: tb's
# (written by tb before) and tc's (not written yet), by a plain write, by a
# rename over it and by removing it.
WALLED = """
if [ "$GITRUN_TASK" = ta ]; then
  echo '{"by": "ta"}' > out/tb.json || echo "tb: refused"
  echo '{"by": "ta"}' > out/tc.json || echo "tc: refused"
  echo '{"by": "ta"}' > out/part && { mv -f out/part out/tb.json || echo "mv: refused"; }
  rm -f out/part
  rm -f out/tb.json || echo "rm: refused"
  cat out/tb.json > /dev/null && [ ! -s out/tb.json ] && echo "tb: unread"
fi
printf '{"task": "%s"}\\n' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"
"""


def test_a_neighbour_s_output_in_the_same_folder_is_a_wall(git_repo: Path) -> None:
    """The worker sees each write to a neighbour's output fail (the
    file system's own error); the neighbour's file is as its task wrote it,
    and the worker's own output lands and validates."""
    tasks: list[dict[str, object]] = [
        {"id": "tb", "stage": "one", "outputs": ["out/tb.json"]},
        {"id": "ta", "stage": "two", "outputs": ["out/ta.json"]},
        {"id": "tc", "stage": "three", "outputs": ["out/tc.json"]},
    ]
    packet = {
        "executor": {"preset": "shell", "shell": WALLED, "isolation": "sandbox"},
        "limits": {"canary": 0, "timeout": "60s"},
        "stages": [{"name": "one"}, {"name": "two"}, {"name": "three"}],
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.status.counts()["done"] == 3
    log = (git_repo / ".git/gitrun/r/logs/ta.1.log").read_text()
    for refused in ("tb: refused", "tc: refused", "mv: refused", "rm: refused", "tb: unread"):
        assert refused in log, log
    assert "Read-only file system" in log and "busy" in log
    for task in ("ta", "tb", "tc"):
        assert (git_repo / f"out/{task}.json").read_text() == f'{{"task": "{task}"}}\n'
        assert git(git_repo, "show", f"gitrun/r:out/{task}.json") == f'{{"task": "{task}"}}\n'
    assert [r for r in ledger_records(git_repo) if r.get("event") == "stray"] == []
    assert not list((git_repo / ".git/gitrun/r").glob("sandbox/*"))


def test_walls_stop_at_their_bound_and_what_passes_is_a_stray(tmp_path: Path) -> None:
    """Of the neighbours' names in a folder, the :data:`WALLS` nearest to the
    task's own in sorted order are walls (where a slip most likely lands:
    the next item's output, the one before); past them a write lands in the
    staging directory, is kept out of the work tree and named."""
    repo = tmp_path / "repo"
    (repo / "out").mkdir(parents=True)
    names = [f"n{i:04d}.json" for i in range(3 * WALLS)]
    mine = names[WALLS]
    claims = {"out": {name: Claim({name}) for name in names}}
    own = (f"out/{mine}",)
    confined = Confined(
        repo, Plan((), ("out",)), tmp_path / "a", own, own, (), (), (), mine, claims
    )
    prefix = confined.prefix()
    assert prefix.count("--ro-bind") == WALLS + 1  # (and the repository)
    before, after, first, last = names[WALLS - 1], names[WALLS + 1], names[0], names[-1]
    script = (
        f"echo x > out/{before} || echo walled; echo x > out/{after} || echo walled; "
        f"echo x > out/{first} && echo passed; echo x > out/{last} && echo passed; "
        f"echo '{{}}' > out/{mine}"
    )
    done = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == "walled\nwalled\npassed\npassed\n", done.stderr
    assert confined.finish() == [f"out/{first}", f"out/{last}"]
    assert sorted(p.name for p in (repo / "out").iterdir()) == [mine]


# A worker of t1 plants, in the run's logs folder (writable to it, for its
# usage file), a link where t2's log will go and a FIFO where t3's will.
PLANTED = """
if [ "$GITRUN_TASK" = t1 ]; then
  logs=$(dirname "$GITRUN_USAGE")
  ln -s "$VICTIM" "$logs/t2.1.log" && mkfifo "$logs/t3.1.log" && echo planted
fi
echo "said by $GITRUN_TASK"
printf '{"task": "%s"}\\n' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"
"""


def test_a_neighbour_s_log_planted_as_a_link_or_fifo_is_never_followed(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver writes each attempt's log as a file of its own: a link a
    confined worker left at a neighbour's log name leads its writes nowhere
    (not into a file outside, not into the git config), and a FIFO there
    holds nothing up."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    monkeypatch.setenv("VICTIM", str(victim))
    tasks: list[dict[str, object]] = [
        {"id": "t1", "stage": "one", "outputs": ["out/t1.json"]},
        {"id": "t2", "stage": "two", "outputs": ["out/t2.json"]},
        {"id": "t3", "stage": "two", "outputs": ["out/t3.json"]},
    ]
    packet = {
        "executor": {"preset": "shell", "shell": PLANTED, "isolation": "sandbox"},
        "limits": {"canary": 0, "timeout": "60s"},
        "stages": [{"name": "one"}, {"name": "two"}],
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    proc = gitrun_process(git_repo, "start", "r")
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert victim.read_text() == "precious\n"
    logs = git_repo / ".git/gitrun/r/logs"
    assert "planted" in (logs / "t1.1.log").read_text()
    for task in ("t2", "t3"):
        assert not (logs / f"{task}.1.log").is_symlink()
        assert (logs / f"{task}.1.log").read_text() == f"said by {task}\n"


def test_a_worker_s_denials_file_made_a_directory_stops_nothing(git_repo: Path) -> None:
    """The file the hooks keep an attempt's denied writes in lies in the
    logs folder, writable to the confined worker: one it made a directory
    (or a FIFO) is no record of denials, and the run goes on."""
    script = (
        'logs=$(dirname "$GITRUN_USAGE"); '
        'mkdir "$logs/$GITRUN_TASK.$GITRUN_ATTEMPT.denied.jsonl"; '
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    )
    _shell_run(git_repo, script, _tasks("t1", "t2"))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.status.counts()["done"] == 2
    assert [r for r in ledger_records(git_repo) if r.get("event") == "denied"] == []
