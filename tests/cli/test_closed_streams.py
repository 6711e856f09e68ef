"""How gitrun starts and ends with a closed standard stream (``gitrun status
r >&-``), attacked with real child processes: no traceback, no internal
error, and a run that is driven all the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import commit_all, fake_worker_run, git

# Buffered streams, as a user's are.
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def gitrun_closing(repo: Path, closed: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``gitrun ARGS`` started by a shell with ``closed`` (``>&-``, ``2>&-``,
    ``<&-``): the stream is not there at all, as for `gitrun status r >&-`.
    Temporary files (a crash log) go to a directory of the test's own."""
    scratch = repo.parent / "tmp"
    scratch.mkdir(exist_ok=True)
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {closed}', "sh", sys.executable, "-m", "gitrun", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env={**BUFFERED, "TMPDIR": str(scratch)},
    )


def crash_logs(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo.parent / "tmp").glob("gitrun-crash-*"))


@pytest.fixture
def two_tasks(git_repo: Path) -> Path:
    fake_worker_run(git_repo, "r", 2, {"default": "write"}, {"limits": {"canary": 0}})
    commit_all(git_repo, "define r")
    return git_repo


def test_a_start_with_stdout_closed_runs_and_exits_without_an_internal_error(
    two_tasks: Path,
) -> None:
    """Its summary goes nowhere, as any other command's output does; before,
    the summary's write failed on a missing stdout: an internal error, exit 70
    and a crash log after a run that had succeeded."""
    started = gitrun_closing(two_tasks, ">&-", "start", "r")
    assert (started.returncode, crash_logs(two_tasks)) == (0, []), started.stderr
    assert "internal error" not in started.stderr
    assert "committed" in started.stderr  # the events still arrive
    assert git(two_tasks, "ls-tree", "-r", "--name-only", "gitrun/r", "out").split() == [
        "out/t01.json",
        "out/t02.json",
    ]
    status = gitrun_closing(two_tasks, ">&-", "status", "r")
    assert (status.returncode, status.stderr, crash_logs(two_tasks)) == (0, "", [])


def test_a_start_with_stderr_closed_drives_the_run(two_tasks: Path) -> None:
    """Before, the first event line failed before the branch was made: exit 70,
    nothing run, and no line saying so (stderr was the one closed)."""
    started = gitrun_closing(two_tasks, "2>&-", "start", "r")
    assert (started.returncode, crash_logs(two_tasks)) == (0, [])
    assert "all done" in started.stdout
    assert "2 done" in gitrun_closing(two_tasks, "", "status", "r").stdout


def test_version_with_stdout_closed_is_no_traceback(tmp_path: Path) -> None:
    done = gitrun_closing(tmp_path, ">&-", "--version")
    assert (done.returncode, done.stderr) == (0, "")
