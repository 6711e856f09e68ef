"""Who a just-started worker is, without reading /proc where the launch knows it.

:class:`gitrun.processes.reaper.Launches` gives the identity :func:`gitrun.processes.reaper.identity`
would read (start time and command line, as psutil reads them), from the
boot clock around the start and the argv it was given, once this machine
proved both agree for that program. Each test compares what a launch
recorded with what /proc says of the live process. Real processes
throughout, each killed in a finally.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gitrun.processes.reaper import HAS_PROC, Launches, boot_clock, identity
from gitrun.workers.attempt import Attempt, AttemptEnd, Monitor

pytestmark = pytest.mark.skipif(not HAS_PROC, reason="the shortcut serves Linux's /proc only")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def monitor() -> Iterator[Monitor]:
    """A monitor whose workers are all killed and reaped after the test."""
    monitor = Monitor()
    try:
        yield monitor
    finally:
        for attempt in monitor.running:
            with contextlib.suppress(OSError):
                os.killpg(attempt.pid, signal.SIGKILL)
            assert attempt.proc is not None
            attempt.proc.wait()
        monitor.close()


def _settled(pid: int) -> dict[str, object]:
    """/proc's identity of ``pid`` once its command line shows (what a later
    check reads)."""
    deadline = time.monotonic() + 10
    while not (found := identity(pid)):
        assert time.monotonic() < deadline, "the process never showed its command line"
        time.sleep(0.01)
    return found


def _launch(monitor: Monitor, tmp_path: Path, name: str, argv: list[str]) -> Attempt:
    (tmp_path / "logs").mkdir(exist_ok=True)
    log = tmp_path / "logs" / f"{name}.1.log"
    return monitor.launch(name, 1, argv, dict(os.environ), tmp_path, log, 60)


def test_every_launch_records_what_proc_says(monitor: Monitor, tmp_path: Path) -> None:
    """The first start of a program reads /proc; the later ones are worked
    out, and must read the same, to the bit."""
    attempts = [_launch(monitor, tmp_path, f"t{n}", SLEEPER) for n in range(8)]
    for attempt in attempts:
        live = psutil.Process(attempt.pid)
        assert {"create_time": attempt.create_time, "cmdline": attempt.cmdline} == _settled(
            attempt.pid
        )
        assert attempt.create_time == live.create_time()


def test_odd_arguments_read_as_psutil_reads_them(monitor: Monitor, tmp_path: Path) -> None:
    """One argument with spaces, empty ones, line breaks: what argv becomes
    in /proc and in psutil's reading of it, once worked out."""
    oddities = [
        [*SLEEPER, "two words", ""],
        [*SLEEPER, "line\r\nbreaks\rand\nnewlines"],
        [*SLEEPER, os.fsdecode(b"not utf-8: \xff\xfe")],
    ]
    _launch(monitor, tmp_path, "first", SLEEPER)  # proves the program
    for n, argv in enumerate(oddities):
        attempt = _launch(monitor, tmp_path, f"odd{n}", argv)
        assert attempt.cmdline == _settled(attempt.pid)["cmdline"]
        assert attempt.cmdline == psutil.Process(attempt.pid).cmdline()


def test_a_script_is_recorded_with_its_interpreter(monitor: Monitor, tmp_path: Path) -> None:
    """A #! script shows its interpreter first, not the argv it was given:
    its command line is read from /proc at every launch."""
    script = tmp_path / "worker"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    for n in range(3):
        attempt = _launch(monitor, tmp_path, f"s{n}", [str(script), "an argument"])
        assert attempt.cmdline is not None and attempt.cmdline[0] == "/bin/sh"
        assert {"create_time": attempt.create_time, "cmdline": attempt.cmdline} == _settled(
            attempt.pid
        )


def _sleeper(tmp_path: Path) -> psutil.Popen:
    proc = psutil.Popen(SLEEPER, start_new_session=True)
    _settled(proc.pid)
    return proc


def test_a_clock_that_disagrees_once_is_never_trusted(tmp_path: Path) -> None:
    """Readings of the boot clock that do not bracket the start (a clock
    /proc does not date by) give /proc's answer, now and for good."""
    launches = Launches()
    proc = _sleeper(tmp_path)
    try:
        truth = _settled(proc.pid)
        program = (SLEEPER[0], os.environ.get("PATH"))
        wrong = boot_clock() - 30 * 10**9  # half a minute before it started, within one tick
        assert launches.of(proc.pid, SLEEPER, program, wrong, wrong + 1) == truth
        later = _sleeper(tmp_path)
        try:
            # Proved wrong once: even a program known to show its argv is read.
            assert launches.of(later.pid, SLEEPER, program, wrong, wrong + 1) == identity(later.pid)
        finally:
            later.kill()
            later.wait()
    finally:
        proc.kill()
        proc.wait()


def test_a_start_that_spanned_a_tick_reads_its_start_time(monitor: Monitor, tmp_path: Path) -> None:
    """Once a program is proved, a start whose clock readings fall in two
    ticks takes its start time from /proc: either tick could be the one."""
    first = _launch(monitor, tmp_path, "first", SLEEPER)
    assert first.pid
    launches = monitor._launches
    proc = _sleeper(tmp_path)
    try:
        truth = _settled(proc.pid)
        program = (SLEEPER[0], os.environ.get("PATH"))
        # The readings span ticks around the real start; a worked-out time
        # would be the tick of the first reading, a second before.
        began = boot_clock() - 10**9
        assert launches.of(proc.pid, SLEEPER, program, began, boot_clock()) == truth
    finally:
        proc.kill()
        proc.wait()


def test_a_name_launched_again_loses_what_its_last_attempt_left(tmp_path: Path) -> None:
    """Stale files go by one listing of the logs directory, and by what this
    monitor launched since: a second launch of the same log name (a number
    used again) starts without the first one's log or usage file."""
    monitor = Monitor()
    try:
        loud = [sys.executable, "-c", _LOUD]
        first = _launch(monitor, tmp_path, "t1", loud)
        (end,) = _ends(monitor)
        assert first.log_path is not None and first.log_path.read_text() == "first life\n"
        assert end.usage is not None and end.usage.input == 7
        _launch(monitor, tmp_path, "t1", [sys.executable, "-c", "pass"])
        (end,) = _ends(monitor)
        assert not first.log_path.exists() and end.usage is None
    finally:
        monitor.close()


_LOUD = (
    "import os; print('first life'); open(os.environ['GITRUN_USAGE'], 'w').write('{\"input\": 7}')"
)


def _ends(monitor: Monitor) -> list[AttemptEnd]:
    ended: list[AttemptEnd] = []
    deadline = time.monotonic() + 30
    while monitor.running or monitor._failed:
        assert time.monotonic() < deadline, "a worker did not end"
        ended += monitor.poll(0.1)
    return ended
