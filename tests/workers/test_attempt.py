"""The local runner: how a worker is started, what its log keeps, what it inherits.

Real child processes throughout; each test waits for its workers with a
deadline and stops any that are left.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gitrun.workers.attempt import AttemptEnd, Monitor, usage_file

PY = sys.executable


def _run_all(monitor: Monitor, seconds: float = 30.0) -> list[AttemptEnd]:
    """Poll until every started attempt ended (stopping them at the deadline)."""
    ended: list[AttemptEnd] = []
    deadline = time.monotonic() + seconds
    while monitor.running or monitor._failed:
        if time.monotonic() > deadline:
            for attempt in monitor.running:
                attempt.stop()
                attempt.escalate(time.monotonic() + 60)
            deadline += 10
        ended += monitor.poll(0.1)
    return ended


def _launch(
    monitor: Monitor, tmp_path: Path, argv: list[str], name: str = "t1", **env: str
) -> Path:
    log = tmp_path / "logs" / f"{name}.1.log"
    log.parent.mkdir(exist_ok=True)
    monitor.launch(name, 1, argv, {**os.environ, **env}, tmp_path, log, 60)
    return log


def test_a_silent_worker_leaves_no_log_and_one_that_prints_leaves_all_of_it(
    tmp_path: Path,
) -> None:
    """A log is made at the first byte: most workers of a big fan-out print
    nothing, and creating a file costs more than the rest of a launch."""
    monitor = Monitor()
    quiet = _launch(monitor, tmp_path, [PY, "-c", "pass"], "quiet")
    loud = _launch(monitor, tmp_path, [PY, "-c", "print('hello'); print('x' * 70000)"], "loud")
    ends = {end.task: end for end in _run_all(monitor)}
    monitor.close()
    assert ends["quiet"].exit_code == 0 and ends["loud"].exit_code == 0
    assert not quiet.exists()
    assert loud.read_text() == "hello\n" + "x" * 70000 + "\n"
    assert ends["loud"].tail.endswith("x" * 100 + "\n")


def test_an_earlier_life_s_log_and_usage_file_are_removed_at_launch(tmp_path: Path) -> None:
    """A run started over reuses attempt numbers: what an earlier worker of
    the same number left must not pass for this one's."""
    log = tmp_path / "logs" / "t1.1.log"
    log.parent.mkdir()
    log.write_text("an earlier life's output\n")
    usage_file(log).write_text('{"input": 1}')
    monitor = Monitor()
    _launch(monitor, tmp_path, [PY, "-c", "pass"])
    (end,) = _run_all(monitor)
    monitor.close()
    assert end.exit_code == 0 and end.usage is None
    assert not log.exists() and not usage_file(log).exists()


def test_a_log_that_cannot_be_written_costs_the_log_not_the_attempt(tmp_path: Path) -> None:
    """The logs directory went away: one warning, and the attempt still ends
    with its output's tail for the ledger."""
    warnings: list[str] = []
    monitor = Monitor(warn=warnings.append)
    log = tmp_path / "gone" / "t1.1.log"
    monitor.launch("t1", 1, [PY, "-c", "print('said')"], dict(os.environ), tmp_path, log, 60)
    (end,) = _run_all(monitor)
    monitor.close()
    assert end.exit_code == 0 and end.tail == "said\n"
    assert len(warnings) == 1 and str(log) in warnings[0] and "t1 attempt 1" in warnings[0]


def test_a_program_that_cannot_start_is_logged_and_ends_with_127(tmp_path: Path) -> None:
    monitor = Monitor()
    log = _launch(monitor, tmp_path, ["no-such-program-anywhere"])
    (end,) = _run_all(monitor)
    monitor.close()
    assert end.exit_code == 127
    assert "no-such-program-anywhere" in end.tail
    assert end.unstarted == "`no-such-program-anywhere`: not found on PATH"
    assert "cannot start the worker: `no-such-program-anywhere`" in log.read_text()
    assert not end.fault  # the driver halts for it, once, with the fix


def _program(where: Path, says: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    script = where / "prog"
    script.write_text(f"#!/bin/sh\necho {says}\n")
    script.chmod(0o755)


def test_a_program_is_found_on_path_once_and_again_when_it_moves(tmp_path: Path) -> None:
    """The launcher remembers where a name lies on PATH; a program removed
    since is searched for again, never reported missing while PATH has it."""
    first, second = tmp_path / "first", tmp_path / "second"
    _program(first, "one")
    _program(second, "two")
    path = f"{first}{os.pathsep}{second}{os.pathsep}{os.environ['PATH']}"
    monitor = Monitor()
    _launch(monitor, tmp_path, ["prog"], "a", PATH=path)
    (end_a,) = _run_all(monitor)
    (first / "prog").unlink()
    _launch(monitor, tmp_path, ["prog"], "b", PATH=path)
    (end_b,) = _run_all(monitor)
    monitor.close()
    assert (end_a.tail, end_b.tail) == ("one\n", "two\n")


def test_a_relative_path_entry_is_the_worker_s_to_resolve(tmp_path: Path) -> None:
    """A relative PATH directory names a place below the worker's cwd, not
    the driver's: such a PATH is never resolved ahead of the start."""
    _program(tmp_path / "bin", "here")
    monitor = Monitor()
    _launch(monitor, tmp_path, ["prog"], PATH=f"bin{os.pathsep}{os.environ['PATH']}")
    (end,) = _run_all(monitor)
    monitor.close()
    assert (end.exit_code, end.tail) == (0, "here\n")


def test_a_worker_inherits_only_stdin_stdout_and_stderr(tmp_path: Path) -> None:
    """No other worker's pipe, no log, no /dev/null handle of the launcher:
    a worker holding another's pipe would keep that one from ending."""
    monitor = Monitor()
    lister = (
        "import os; print(os.readlink('/proc/self/fd/0'));"
        "print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
    )
    sleeper = _launch(monitor, tmp_path, [PY, "-c", "import time; time.sleep(1)"], "sleeper")
    _launch(monitor, tmp_path, [PY, "-c", lister], "lister")
    ends = {end.task: end for end in _run_all(monitor)}
    monitor.close()
    stdin, listing = ends["lister"].tail.splitlines()
    fds = [int(fd) for fd in listing.strip("[]").split(", ")]
    assert stdin == "/dev/null"
    assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # and the listing's own
    assert ends["sleeper"].exit_code == 0 and not sleeper.exists()
