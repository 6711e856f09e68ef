"""`gitrun stop`: a real driver stopped as Ctrl-C would, found by its lock, never by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from gitrun.processes.reaper import is_running
from gitrun.store.journal import running_records
from gitrun.store.local import LocalPaths
from tests.helpers import (
    commit_all,
    gitrun_process,
    ledger_records,
    run_gitrun,
    wait_until,
    write_run,
)

# t1 writes its output at once; the others wait while .git/hold exists, then write theirs.
_HELD = (
    'if [ "$GITRUN_TASK" != t1 ]; then while [ -e .git/hold ]; do sleep 0.1; done; fi; '
    'echo "{}" > "$GITRUN_OUTPUTS"'
)
# Writes its output, then waits while .git/hold exists.
_WRITES_THEN_WAITS = 'echo "{}" > "$GITRUN_OUTPUTS"; while [ -e .git/hold ]; do sleep 0.1; done'


def _run(repo: Path, script: str, tasks: int) -> None:
    write_run(
        repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)],
        {
            "executor": {"command": ["sh", "-c", script], "isolation": "none"},
            "limits": {"concurrency": 1, "timeout": "10m"},
        },
    )
    commit_all(repo, "define r")
    (repo / ".git/hold").touch()


def _committed(repo: Path, task: str) -> bool:
    log = subprocess.run(
        ["git", "log", "--format=%B", "gitrun/r", "--"], cwd=repo, capture_output=True, text=True
    )
    return f"Gitrun-Task: {task}" in log.stdout


def _workers(local: LocalPaths) -> list[int]:
    return [entry.pid for entry in running_records(local).values() if entry.pid]


def _end(driver: subprocess.Popen[str], local: LocalPaths) -> None:
    """Leave no process behind, whatever the test did."""
    workers = _workers(local)
    if driver.poll() is None:
        driver.kill()
        driver.wait(timeout=10)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_stop_ends_a_real_driver_as_ctrl_c_would_and_resume_goes_on(git_repo: Path) -> None:
    _run(git_repo, _HELD, 3)
    local = LocalPaths.of(git_repo, "r")
    driver = gitrun_process(git_repo, "start", "r")
    try:
        wait_until(driver, lambda: _committed(git_repo, "t1") and _workers(local))
        [worker] = _workers(local)
        stopped = run_gitrun(git_repo, "stop", "r")
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 0, said
        assert f"sent its driver (pid {driver.pid}) SIGINT, as Ctrl-C would" in said
        assert "run 'r': stopped; continue it with `gitrun resume r`" in said
        # It had gone when stop returned, as on Ctrl-C: exit 130, its worker stopped.
        assert driver.poll() == 130, driver.communicate()
        assert not is_running(worker)
        out, err = driver.communicate(timeout=10)
        assert "stopped by SIGINT; continue with `gitrun resume r`" in out, out + err
        [t2] = [r for r in ledger_records(git_repo) if r.get("task") == "t2"]
        assert t2["outcome"] == "interrupted"  # no attempt used
    finally:
        _end(driver, local)
    again = run_gitrun(git_repo, "stop", "r")
    assert again.returncode == 0
    assert "run 'r': no live driver to stop; continue it with `gitrun resume r`" in again.stdout
    (git_repo / ".git/hold").unlink()
    resumed = run_gitrun(git_repo, "resume", "r", "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert all(_committed(git_repo, t) for t in ("t1", "t2", "t3"))


def test_a_stop_of_a_run_whose_every_task_is_done_says_to_land_it(git_repo: Path) -> None:
    """The worker wrote its valid output and lingers: stopped, it is judged
    valid and committed, and both the driver (as on Ctrl-C) and stop say land."""
    _run(git_repo, _WRITES_THEN_WAITS, 1)
    local = LocalPaths.of(git_repo, "r")
    driver = gitrun_process(git_repo, "start", "r")
    try:
        wait_until(driver, lambda: (git_repo / "out/t1.json").exists() and _workers(local))
        stopped = run_gitrun(git_repo, "stop", "r")
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 0, said
        assert "stopped; every task is done: bring the results in with `gitrun land r`" in said
        out, _err = driver.communicate(timeout=30)
        assert driver.returncode == 130
        assert "stopped by SIGINT with every task done; bring the results in with" in out, out
        assert "gitrun resume" not in out
    finally:
        _end(driver, local)
    assert _committed(git_repo, "t1")
    again = run_gitrun(git_repo, "stop", "r")
    assert "no live driver to stop; every task is done" in again.stdout


def test_stop_of_a_run_nobody_drives_or_that_does_not_exist_is_said(git_repo: Path) -> None:
    _run(git_repo, _HELD, 1)
    out = run_gitrun(git_repo, "stop", "r")
    assert out.returncode == 0
    assert out.stdout == (
        "run 'r': no live driver to stop; it has not started: `gitrun start r` starts it\n"
    )
    out = run_gitrun(git_repo, "stop", "nope")
    assert (out.returncode, out.stdout) == (
        0,
        "run 'nope': no such run here, so no driver to stop\n",
    )
    out = run_gitrun(git_repo, "stop", "r", "--wait", "soon")
    assert out.returncode == 2 and "--wait 'soon'" in out.stderr
