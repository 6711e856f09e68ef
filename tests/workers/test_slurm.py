"""The batch-scheduler recipe: the command executor through ``srun`` on a shared filesystem.

``srun`` here is tests/fake_srun.py, which runs the job step outside srun's
process group and session and forwards signals the way srun does, so these
tests show that gitrun's timeout, kill escalation and throttle handling hold
when the worker runs as a Slurm job step: the process group gitrun signals
is srun's, and srun (or Slurm, once srun is gone) ends the step.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gitrun.commands.session import start_run
from gitrun.definition.load import load_run
from gitrun.proof.check import check_run
from gitrun.store import ledger
from tests.helpers import FAKE_WORKER, fake_worker_run, git, ledger_records, wait_for, write_run

FAKE_SRUN = Path(__file__).resolve().parent.parent / "fake_srun.py"


def quiet(_line: str) -> None:
    pass


@pytest.fixture
def srun_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``srun`` on PATH, as on a cluster's login node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SRUN}" "$@"\n')
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_KILL_WAIT", "0.5")
    return srun


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where a step writes its pid; a step still alive afterwards (a failed
    test) is killed, so no test leaves a process behind."""
    path = tmp_path / "step.pid"
    yield path
    if path.exists() and _alive(pid := int(path.read_text())):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.usefixtures("clis")
def test_the_readme_recipe_passes_check(git_repo: Path) -> None:
    command = ["srun", "--ntasks=1", "--time=30", "claude", "-p", "{pointer}", "--model", "{model}"]
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": command}},
    )
    assert check_run(load_run(git_repo, "r")).problems == []


def test_workers_run_as_job_steps_and_their_outputs_are_committed(
    git_repo: Path, srun_on_path: Path
) -> None:
    spec = git_repo.parent / "r-spec.json"
    command = ["srun", "--ntasks=1", "--time=5", sys.executable, str(FAKE_WORKER), str(spec)]
    fake_worker_run(
        git_repo,
        "r",
        6,
        {"default": "write", "tasks": {"t02": "write_then_fail"}},
        {"executor": {"command": command}, "limits": {"max_load": 1000.0}},
    )
    assert start_run(git_repo, "r", quiet).exit_code == 0
    tree = git(git_repo, "ls-tree", "-r", "--name-only", "gitrun/r", "out").split()
    assert tree == [f"out/t0{i}.json" for i in range(1, 7)]
    t02 = [r for r in ledger_records(git_repo) if r.get("task") == "t02"]
    assert [(r["outcome"], r["exit"]) for r in t02] == [("valid", 1)]  # srun passed on its status


def _one_task(repo: Path, script: str, **limits: object) -> None:
    command = ["srun", "--ntasks=1", "--time=10", sys.executable, "-c", script]
    own = {"max_attempts": 1, "canary": 0, "max_load": 1000.0, **limits}
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": command}, "limits": own},
    )


def test_a_timeout_reaches_the_step_through_srun(
    git_repo: Path, srun_on_path: Path, pidfile: Path
) -> None:
    script = (
        f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); "
        "print('working', flush=True); time.sleep(120)"
    )
    _one_task(git_repo, script, timeout="2s", kill_grace="5s")
    started = time.monotonic()
    assert start_run(git_repo, "r", quiet).exit_code == 1
    assert time.monotonic() - started < 30  # ended by the TERM srun forwarded, not the grace
    [record] = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert record["timed_out"] is True
    assert record["exit"] == 128 + signal.SIGTERM  # srun's status: the step died of SIGTERM
    step = int(pidfile.read_text())
    wait_for(lambda: not _alive(step), 10, what="the timed-out step ended")
    log = next((git_repo / ".git/gitrun/r").rglob("t1.1.log")).read_text()
    assert "working" in log  # the step's output came through srun


def test_a_step_that_ignores_sigterm_is_cancelled_once_srun_is_killed(
    git_repo: Path, srun_on_path: Path, pidfile: Path
) -> None:
    script = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    _one_task(git_repo, script, timeout="2s", kill_grace="1s")
    assert start_run(git_repo, "r", quiet).exit_code == 1
    [record] = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert record["timed_out"] is True and record["signal"] == signal.SIGKILL  # srun, killed
    # gitrun killed srun; Slurm then cancels the step (TERM, KillWait, KILL).
    step = int(pidfile.read_text())
    wait_for(lambda: not _alive(step), 10, what="Slurm cancelled the step that ignored SIGTERM")


def test_throttles_come_through_srun(git_repo: Path, srun_on_path: Path) -> None:
    script = (
        "import json, os, sys; task = os.environ['GITRUN_TASK']; "
        "mark = os.path.join('..', task + '.tried'); first = not os.path.exists(mark); "
        "open(mark, 'w').close(); "
        "sys.exit(75) if first and task == 't1' else None; "
        "sys.exit(print('Error: 429 Too Many Requests', file=sys.stderr) or 1) if first else None; "
        "open('out/' + task + '.json', 'w').write(json.dumps([task]))"
    )
    command = ["srun", "--ntasks=1", sys.executable, "-c", script]
    limits = {"max_attempts": 1, "canary": 0, "max_load": 1000.0, "backoff_base": "0.1s"}
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2)
    ]
    write_run(git_repo, "r", tasks, {"executor": {"command": command}, "limits": limits})
    assert start_run(git_repo, "r", quiet).exit_code == 0  # throttles used no attempt
    for task in ("t1", "t2"):
        outcomes = [r["outcome"] for r in ledger_records(git_repo) if r.get("task") == task]
        assert outcomes == [ledger.THROTTLED, ledger.VALID], task


def test_srun_forwards_signals_and_passes_on_the_status(tmp_path: Path) -> None:
    """The stand-in itself: one SIGINT is not forwarded, two within a second
    are; SIGUSR1 is; the status is the step's."""
    import subprocess

    marks = tmp_path / "marks"
    script = (
        "import signal, sys, time\n"
        f"marks = open({str(marks)!r}, 'a', buffering=1)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: marks.write('usr1\\n'))\n"
        "signal.signal(signal.SIGINT, lambda *_: (marks.write('int\\n'), sys.exit(7)))\n"
        "marks.write('ready\\n')\n"
        "while True: time.sleep(0.05)\n"
    )
    proc = subprocess.Popen([sys.executable, str(FAKE_SRUN), sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not (marks.exists() and "ready" in marks.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        while "usr1" not in marks.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # srun: "one more within 1 sec to abort"
        time.sleep(0.3)
        assert "int" not in marks.read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 7
    finally:
        proc.kill()
        proc.wait()
