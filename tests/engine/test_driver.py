"""Driving runs with real child processes, real git and real signals."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest

from gitrun.commands.retry import retry_tasks
from gitrun.commands.session import CheckFailed, resume_run, start_run
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.store.local import LocalPaths
from tests.helpers import (
    commit_all,
    committed_ledger,
    fake_worker_run,
    git,
    gitrun_ok,
    gitrun_process,
    ledger_records,
    run_gitrun,
    spawn_events,
    wait_until,
    write_run,
)

quiet = print if os.environ.get("GITRUN_TEST_VERBOSE") else (lambda _line: None)


def _ledger(repo: Path, run_id: str = "r") -> list[dict[str, object]]:
    """The attempt records (run-level events such as a halt left out)."""
    return [r for r in ledger_records(repo, run_id) if "attempt" in r]


def _branch_files(repo: Path, run_id: str = "r") -> set[str]:
    return set(git(repo, "ls-tree", "-r", "--name-only", f"gitrun/{run_id}").split())


def test_lying_workers_are_judged_by_their_files(git_repo: Path, tmp_path: Path) -> None:
    spec = {
        "tasks": {"t01": "write_then_fail", "t02": "nowrite", "t03": "invalid_then_write"},
        "spawn_log": str(tmp_path / "spawns.log"),
    }
    spec_path = fake_worker_run(git_repo, "r", 3, spec, {"limits": {"max_attempts": 2}})
    outcome = start_run(git_repo, "r", quiet)
    tasks = outcome.status.tasks
    assert tasks["t01"].status == "done"
    assert tasks["t02"].status == "failed" and tasks["t02"].attempts == 2
    assert tasks["t03"].status == "done"
    assert outcome.exit_code == 1
    spawns = [(t, a) for t, a, e, _ in spawn_events(spec_path) if e == "start"]
    assert spawns.count(("t01", 1)) == 1 and [t for t, _ in spawns].count("t01") == 1
    assert [t for t, _ in spawns].count("t02") == 2
    assert [t for t, _ in spawns].count("t03") == 2
    quarantined = LocalPaths.of(git_repo, "r").quarantine_of("t03", 1) / "out/t03.json"
    assert quarantined.read_text() == "{not json"
    ledger = _ledger(git_repo)
    t03 = [r for r in ledger if r["task"] == "t03"]
    assert [r["outcome"] for r in t03] == ["invalid", "valid"]
    assert "not valid JSON" in str(t03[0]["reason"])
    assert [r["exit"] for r in ledger if r["task"] == "t01"] == [1]
    assert {"out/t01.json", "out/t03.json"} <= _branch_files(git_repo)
    assert "out/t02.json" not in _branch_files(git_repo)


def test_commits_carry_trailers_and_the_ledger(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 5, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    log = git(git_repo, "log", "--format=%B%x00", "gitrun/r")
    bodies = [b for b in log.split("\0") if "Gitrun-Task" in b]
    tasks = [
        ln.split(": ")[1] for b in bodies for ln in b.splitlines() if ln.startswith("Gitrun-Task:")
    ]
    assert sorted(tasks) == ["t01", "t02", "t03", "t04", "t05"]
    assert all("Gitrun-Run: r" in b for b in bodies)
    assert all("Gitrun-Attempt: " in b for b in bodies)
    assert len(committed_ledger(git_repo)) == 1 + 5  # the round's start, the attempts
    subjects = git(git_repo, "log", "--reverse", "--format=%s", "HEAD..gitrun/r").splitlines()
    assert subjects[0] == "gitrun(r): start run"
    assert len(subjects) == len(bodies) + 1  # linear: the start, then the landings
    fork = git(git_repo, "rev-parse", f"gitrun/r~{len(subjects)}")
    assert fork == git(git_repo, "rev-parse", "HEAD")


def test_start_refuses_a_failing_check_and_an_existing_branch(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {}, {"ownership": {"protected": ["out/t01.json"]}})
    with pytest.raises(CheckFailed, match=r"\[protected\]"):
        start_run(git_repo, "r", quiet)
    assert git(git_repo, "branch", "--list", "gitrun/r") == ""
    fake_worker_run(git_repo, "r", 2, {})
    start_run(git_repo, "r", quiet)
    with pytest.raises(GitrunError, match="gitrun resume r"):
        start_run(git_repo, "r", quiet)


def test_stages_run_in_order(git_repo: Path, tmp_path: Path) -> None:
    spec = {"spawn_log": str(tmp_path / "spawns.log"), "sleep": 0.05}
    spec_path = fake_worker_run(
        git_repo, "r", 4, spec, {"stages": [{"name": "work"}, {"name": "review"}]}
    )
    tasks_file = git_repo / ".gitrun/runs/r/tasks.toml"
    text = tasks_file.read_text()
    # t03 and t04 review the work of t01 and t02.
    text = text.replace('id = "t03"', 'id = "t03"\nstage = "review"\ninputs = ["out/t01.json"]')
    text = text.replace('id = "t04"', 'id = "t04"\nstage = "review"\ninputs = ["out/t02.json"]')
    tasks_file.write_text(text)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    events = spawn_events(spec_path)
    work_done = max(at for t, _, e, at in events if e == "wrote" and t in ("t01", "t02"))
    review_start = min(at for t, _, e, at in events if e == "start" and t in ("t03", "t04"))
    assert work_done < review_start


def test_concurrency_is_capped(git_repo: Path, tmp_path: Path) -> None:
    """Three workers wait for each other (however slowly a loaded machine
    starts them), so the cap is reached; a fourth never joins them."""
    (tmp_path / "meet").mkdir()
    spec = {
        "spawn_log": str(tmp_path / "spawns.log"),
        "meet": {"dir": str(tmp_path / "meet"), "count": 3},
    }
    spec_path = fake_worker_run(
        git_repo, "r", 9, spec, {"limits": {"concurrency": 3, "canary": 0, "max_load": 1000.0}}
    )
    assert start_run(git_repo, "r", quiet).exit_code == 0
    events = sorted((at, e) for _, _, e, at in spawn_events(spec_path))
    # A worker counts as running from its "start" to its "wrote" line.
    running = peak = 0
    for _, event in events:
        running += 1 if event == "start" else -1
        peak = max(peak, running)
    assert peak == 3


def test_child_environment(git_repo: Path) -> None:
    script = (
        'printf "%s|%s|%s|%s|%s|%s" "$GITRUN_RUN" "$GITRUN_TASK" "$GITRUN_ATTEMPT" '
        '"$GITRUN_MODEL" "$GITRUN_PACKET" "$GITRUN_OUTPUTS" > out/env.txt; '
        'printf "%s" "$GITRUN_POINTER" > out/pointer.txt; echo "$1" "$2" > out/argv.txt'
    )
    from tests.helpers import write_run

    tasks = [{"id": "t1", "outputs": ["out/env.txt", "out/pointer.txt", "out/argv.txt"]}]
    command = ["sh", "-c", script, "sh", "{task}", "{model}"]
    write_run(git_repo, "r", tasks, {"executor": {"command": command}})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    env = (git_repo / "out/env.txt").read_text()
    assert (
        env
        == "r|t1|1|test-model|.gitrun/runs/r/packet.toml|out/env.txt\nout/pointer.txt\nout/argv.txt"
    )
    assert (git_repo / "out/pointer.txt").read_text().startswith("gitrun run r, task t1: follow")
    assert (git_repo / "out/argv.txt").read_text() == "t1 test-model\n"


def test_timeout_kills_the_whole_process_group(git_repo: Path, tmp_path: Path) -> None:
    from tests.helpers import write_run

    # The grandchild is found by its command line: confined, its pid is a
    # PID namespace's own.
    mark = b"sleep\x001000.0517\x00"
    script = "sleep 1000.0517 & wait"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": ["sh", "-c", script]},
            "limits": {"timeout": "1s", "max_attempts": 1},
        },
    )
    started = time.time()
    outcome = start_run(git_repo, "r", quiet)
    assert time.time() - started < 10
    assert outcome.status.tasks["t1"].status == "failed"
    running = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid) == mark]
    assert running == []
    [record] = _ledger(git_repo)
    assert record["timed_out"] is True and record["outcome"] == "missing"


def test_worker_that_wrote_then_hung_is_done(git_repo: Path) -> None:
    from tests.helpers import write_run

    script = "echo '{}' > out/t1.json; sleep 1000"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": ["sh", "-c", script]}, "limits": {"timeout": "1s"}},
    )
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert _ledger(git_repo)[0]["timed_out"] is True


def test_sigterm_stops_starts_commits_what_validated_and_resume_finishes(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = {"spawn_log": str(tmp_path / "spawns.log"), "sleep": [0.2, 0.6]}
    spec_path = fake_worker_run(git_repo, "r", 12, spec, {"limits": {"concurrency": 3}})
    proc = gitrun_process(git_repo, "start", "r")
    wait_until(
        proc,
        lambda: sum(e == "wrote" for _, _, e, _ in spawn_events(spec_path)) >= 3,
        20,
        what="three workers wrote their outputs",
    )
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    status = read_status(git_repo, "r")
    assert status.counts()["running"] == 0
    done_then = {t for t, s in status.tasks.items() if s.status == "done"}
    assert len(done_then) >= 3
    assert resume_run(git_repo, "r", quiet).exit_code == 0
    restarted = {t for t, _, e, _ in spawn_events(spec_path) if e == "start"}
    assert restarted == {f"t{i:02d}" for i in range(1, 13)}
    starts = [t for t, _, e, _ in spawn_events(spec_path) if e == "start"]
    assert all(starts.count(t) == 1 for t in done_then)


def test_two_resumes_at_once_one_drives_the_other_names_it(git_repo: Path, tmp_path: Path) -> None:
    spec = {"sleep": 0.3, "spawn_log": str(tmp_path / "spawns.log")}
    spec_path = fake_worker_run(git_repo, "r", 6, spec, {"limits": {"concurrency": 2}})
    first = gitrun_process(git_repo, "start", "r")
    wait_until(
        first,
        lambda: any(e == "start" for _, _, e, _ in spawn_events(spec_path)),
        20,
        what="the first worker started",
    )
    first.kill()
    first.wait()
    a, b = gitrun_process(git_repo, "resume", "r"), gitrun_process(git_repo, "resume", "r")
    results = [(p.wait(timeout=60), *p.communicate()) for p in (a, b)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, _, err in results if code == 1)
    winner_pid = a.pid if a.returncode == 0 else b.pid
    assert f"pid {winner_pid} on host {os.uname().nodename}" in loser
    assert loser.startswith("gitrun: error: run 'r' is already being driven by")


def test_resume_commits_valid_outputs_on_disk_and_quarantines_invalid(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = {"default": "nowrite", "spawn_log": str(tmp_path / "spawns.log")}
    limits = {"max_attempts": 1, "canary": 0}
    spec_path = fake_worker_run(git_repo, "r", 3, spec, {"limits": limits})
    assert start_run(git_repo, "r", quiet).exit_code == 1
    # The outputs arrive after all (a worker finished late, or a person wrote one).
    (git_repo / "out/t01.json").write_text('{"late": true}\n')
    (git_repo / "out/t02.json").write_text("{half written")
    spec_path.write_text(json.dumps({"default": "nowrite", "spawn_log": spec["spawn_log"]}))
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.status.tasks["t01"].status == "done"
    assert "out/t01.json" in _branch_files(git_repo)
    assert not (git_repo / "out/t02.json").exists()
    assert (LocalPaths.of(git_repo, "r").quarantine_of("t02", 1) / "out/t02.json").exists()
    starts = [t for t, _, e, _ in spawn_events(spec_path) if e == "start"]
    assert sorted(starts) == ["t01", "t02", "t03"]  # only the first run's attempts


def test_worker_log_is_bounded(git_repo: Path) -> None:
    from gitrun.workers.attempt import LOG_LIMIT, LOG_TAIL
    from tests.helpers import write_run

    script = "head -c 3000000 /dev/zero | tr '\\0' x; echo THE-END; echo '{}' > out/t1.json"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": ["sh", "-c", script]}},
    )
    assert start_run(git_repo, "r", quiet).exit_code == 0
    log = LocalPaths.of(git_repo, "r").log_of("t1", 1).read_bytes()
    assert LOG_LIMIT < len(log) <= LOG_LIMIT + LOG_TAIL + 200
    assert b"bytes dropped" in log and log.rstrip().endswith(b"THE-END")


def test_a_program_gone_mid_run_halts_at_once_and_uses_no_attempt(git_repo: Path) -> None:
    """`check` refuses a run whose program is missing; one that disappears
    after the canary (uninstalled, a moved venv) halts the run at its first
    failed start, naming it, instead of spending attempts and the spawn
    budget (a one-task run said "retry storm"). Put back, a resume finishes
    without a `retry`."""
    from tests.helpers import build_tree, write_run

    agent = (
        "#!/bin/sh\n"
        'echo "{\\"ok\\": true}" > "out/$GITRUN_TASK.json"\n'
        '[ "$GITRUN_TASK" = t1 ] && mv bin/agent bin/agent.aside\n'
        "exit 0\n"
    )
    build_tree(git_repo, {"bin/agent": agent})
    (git_repo / "bin/agent").chmod(0o755)
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)]
    write_run(
        git_repo,
        "r",
        tasks,
        {
            # Unconfined: the canary's worker removes the program itself.
            "executor": {"command": ["bin/agent", "{pointer}"], "isolation": "none"},
            "limits": {"canary": 1, "concurrency": 1, "max_attempts": 2},
        },
    )
    commit_all(git_repo, "run r")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    halt = outcome.status.halt
    assert halt is not None and halt["kind"] == "environment fault"
    assert "the worker cannot start: `bin/agent`: does not exist" in halt["message"]
    records = [r for r in _ledger(git_repo) if r.get("task")]
    assert [(r["task"], r["outcome"]) for r in records] == [("t1", "valid"), ("t2", "unstarted")]
    assert "cannot start the worker" in LocalPaths.of(git_repo, "r").log_of("t2", 1).read_text()
    (git_repo / "bin/agent.aside").rename(git_repo / "bin/agent")
    (git_repo / "bin/agent").write_text(agent.replace("mv bin/agent bin/agent.aside", "true"))
    retry_tasks(git_repo, "r", [])  # lifts the halt; no task used up its attempts
    resumed = resume_run(git_repo, "r", quiet)
    assert resumed.exit_code == 0, resumed.status.halt
    attempts = {r["task"]: r["attempt"] for r in _ledger(git_repo) if r.get("outcome") == "valid"}
    # t2's start that failed used none of its two attempts (its number stays taken).
    assert attempts == {"t1": 1, "t2": 2, "t3": 1, "t4": 1}


def test_a_dead_committers_index_lock_needs_no_manual_step(git_repo: Path) -> None:
    limits = {"max_attempts": 1, "canary": 0}
    fake_worker_run(git_repo, "r", 1, {"default": "nowrite"}, {"limits": limits})
    start_run(git_repo, "r", quiet)
    # A driver killed while git wrote gitrun's private index leaves its lock.
    (LocalPaths.of(git_repo, "r").root / "index.lock").write_text("")
    (git_repo / "out/t01.json").write_text('{"late": true}\n')
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.status.tasks["t01"].status == "done"
    assert "out/t01.json" in _branch_files(git_repo)


def test_a_valid_output_that_lands_before_dispatch_is_set_aside_and_the_task_run(
    git_repo: Path, tmp_path: Path
) -> None:
    """t03's output appears while the canary t01 runs, before t03's turn:
    none of t03's work, so it is set aside and t03 runs (a valid output on
    disk when driving begins is committed without a worker: reconcile)."""
    from tests.helpers import write_run

    spawns = tmp_path / "spawns.log"
    script = (
        f'echo "$GITRUN_TASK" >> {spawns}; '
        'if [ "$GITRUN_TASK" = t01 ]; then echo \'{"by": "someone else"}\' > out/t03.json; '
        "sleep 0.3; fi; "
        'echo \'{"ok": true}\' > "$GITRUN_OUTPUTS"'
    )
    tasks = [{"id": f"t0{i}", "outputs": [f"out/t0{i}.json"]} for i in range(1, 5)]
    write_run(git_repo, "r", tasks, {"executor": {"command": ["sh", "-c", script]}})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert sorted(spawns.read_text().split()) == ["t01", "t02", "t03", "t04"]
    assert "out/t03.json" in _branch_files(git_repo)
    committed = git(git_repo, "show", "gitrun/r:out/t03.json")
    assert committed == '{"ok": true}\n'


def test_workers_find_this_gitrun_when_path_has_none(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed hooks call `gitrun` and fail closed without it: a driver run
    from a venv that is not activated puts its own bin/ at the end of PATH."""
    import shutil
    import sys

    if not (Path(sys.executable).parent / "gitrun").is_file():
        pytest.skip("this interpreter has no gitrun script beside it (not a venv install)")
    probe = (
        "import json, os, shutil; "
        "json.dump({'gitrun': shutil.which('gitrun')}, open(os.environ['GITRUN_OUTPUTS'], 'w'))"
    )
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": [sys.executable, "-c", probe]}},
    )
    commit_all(git_repo, "define r")
    bare = "/usr/bin:/bin"
    assert shutil.which("gitrun", path=bare) is None, "gitrun is installed system-wide here"
    monkeypatch.setenv("PATH", bare)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    found = json.loads((git_repo / "out/t1.json").read_text())["gitrun"]
    assert found == str(Path(sys.executable).parent / "gitrun")


def test_tasks_landing_one_at_a_time_cost_six_git_processes_a_commit(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent-length tasks land alone and pay a whole commit each: between
    two landings' commits the driver runs exactly the commit's own six git
    processes (the stray-write audit's timed `git status` aside), no lookup
    of the tip or of the ledger's blobs there: one check-ignore for the
    batch's outputs, then the five that build and publish it."""
    import shutil

    real = shutil.which("git")
    assert real is not None
    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "git.log"
    (shim / "git").write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -*|*=*|/*) ;; *) '
        f'echo "$a" >> "{log}"; break;; esac; done\n'
        f'exec "{real}" "$@"\n'
    )
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    # One at a time, each longer than the commit queue's coalescing window.
    script = 'sleep 0.35; printf "{}" > "$GITRUN_OUTPUTS"'
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)
    ]
    packet = {
        "executor": {"command": ["sh", "-c", script]},
        "limits": {"concurrency": 1, "timeout": "60s"},
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "define r")
    assert start_run(git_repo, "r", quiet).exit_code == 0
    calls = [c for c in log.read_text().split() if c != "status"]
    published = [i for i, c in enumerate(calls) if c == "update-ref"]
    assert len(published) >= 5  # the branch, then a commit per landing
    # From the first landing's commit to the last one's.
    for before, after in itertools.pairwise(published[1:5]):
        between = calls[before + 1 : after + 1]
        assert between == [
            "check-ignore",
            "hash-object",
            "update-index",
            "write-tree",
            "commit-tree",
            "update-ref",
        ]


def test_a_start_on_linux_imports_no_psutil(git_repo: Path) -> None:
    """Identities come from /proc: psutil's ~25 ms import is not paid by a run
    that needs no kill (it is imported where /proc is missing). The reaper
    binds psutil lazily: the module executed is what its submodules show."""
    import subprocess
    import sys

    from gitrun.processes.reaper import HAS_PROC

    if not HAS_PROC:
        pytest.skip("no /proc here: identities come from psutil")
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"kind": "command", "command": ["sh", "-c", 'echo "{}" > "$GITRUN_OUTPUTS"']}},
    )
    commit_all(git_repo, "define")
    probe = (
        "import sys; from gitrun.cli.entry import main; sys.argv = ['gitrun', 'start', 'r', '-q']; "
        "code = main(); sys.exit(code + 10 * ('psutil._common' in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=git_repo, capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_round_with_nothing_to_run_says_nothing_of_the_load_gate(git_repo: Path) -> None:
    """Every task up to date: no start is held back by the load, so neither
    "starts held" nor "the load gate held starts back" is said."""
    if os.getloadavg()[0] <= 0.001:
        pytest.skip("the load average is 0: the gate cannot hold")
    fake_worker_run(git_repo, "r", 2, {}, isolation="none")
    commit_all(git_repo, "define r")
    gitrun_ok(git_repo, "start", "r")
    gitrun_ok(git_repo, "land", "r")
    again = run_gitrun(git_repo, "start", "r", env={"GITRUN_MAX_LOAD": "0.001"})
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "2 up-to-date" in said, said
    assert "starts held" not in said and "load gate" not in said, said
