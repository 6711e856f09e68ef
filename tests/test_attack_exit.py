"""How gitrun ends (gitrun.entry.run and leave), attacked with real child
processes: closed standard streams, and descriptors that leave must not take
for ones the process was given.

The quick exit (os._exit after the atexit functions) was compared with the
usual exit for every command, through pipes, files, a pseudo-terminal,
SIGINT and SIGTERM during a start, a halting start and external runs: the
same output, exit codes, files, locks and processes. What is tested here is
what differed, or what the comparison could not reach."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import commit_all, fake_worker_run, git

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="the quick exit needs /proc to list descriptors"
)

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


PRELUDE = """
import os, sys
from gitrun.entry import leave, writable_descriptors
"""


def child(body: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
        env=BUFFERED,
        **kwargs,
    )


def test_a_given_descriptor_closed_and_its_file_opened_again_is_not_taken_for_the_given_one(
    tmp_path: Path,
) -> None:
    """The same number and the same file (device, inode), but an open file of
    the process's own with data still buffered: the quick exit would lose it."""
    out = tmp_path / "given.log"
    with open(out, "w") as given:
        fd = given.fileno()
        done = child(
            f"""
            inherited = writable_descriptors()
            os.close({fd})
            below = []  # the numbers free below it, taken read-only
            while (number := os.open(os.devnull, os.O_RDONLY)) != {fd}:
                below.append(number)
            os.close(number)
            again = open({str(out)!r}, "a")
            assert again.fileno() == {fd}
            again.write("kept " * 100)
            leave(0, inherited)
            """,
            pass_fds=(fd,),
        )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "kept " * 100


def test_a_file_on_the_number_of_a_stream_closed_at_start_is_not_taken_for_the_stream(
    tmp_path: Path,
) -> None:
    """Started with stdout closed, the first file the process opens takes
    descriptor 1: leave must see it as the process's own."""
    out = tmp_path / "own.txt"
    done = subprocess.run(
        [
            "sh",
            "-c",
            'exec "$@" >&-',
            "sh",
            sys.executable,
            "-c",
            PRELUDE
            + textwrap.dedent(f"""
            inherited = writable_descriptors()
            own = open({str(out)!r}, "w")
            assert own.fileno() == 1
            own.write("kept " * 100)
            leave(0, inherited)
            """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=BUFFERED,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "kept " * 100
