"""Who a process is: the start time and command line gitrun records and checks.

:func:`gitrun.processes.reaper.identity` reads ``/proc`` itself (two small reads where
psutil makes five); records it made must keep matching what the checks read
later, and what psutil reports, bit for bit. Real processes throughout, each
killed in a finally.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from gitrun.processes.reaper import (
    CREATE_TIME_SLACK,
    identity,
    is_recorded_process,
    is_recorded_worker,
    kill_recorded_group,
    start_time,
)
from tests.helpers import ATTEMPT_ENV, ATTEMPT_ID


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a sleeping process in a session of its own; all are killed after."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(*argv: str | bytes) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", *argv],
            env={**os.environ, **ATTEMPT_ENV},
            start_new_session=True,
        )
        started.append(proc)
        deadline = time.monotonic() + 10
        while identity(proc.pid).get("cmdline", [None])[0] != sys.executable:
            assert time.monotonic() < deadline, "the process never showed its command line"
            time.sleep(0.01)
        return proc

    try:
        yield spawn
    finally:
        for proc in started:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _record(pid: int, found: dict[str, object]) -> dict[str, object]:
    return {"run": "r", "task": "t1", "attempt": 1, "attempt_id": ATTEMPT_ID, "pid": pid, **found}


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("two words", ""),
        ("", "", "x"),
        ("line\r\nbreaks\rand\nnewlines",),
        (os.fsdecode(b"not utf-8: \xff\xfe"),),
    ],
)
def test_identity_is_what_psutil_reads(
    argv: tuple[str, ...], start: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """A driver's owner record is compared with psutil's view of the live
    process (is_recorded_process): odd arguments must read the same."""
    proc = start(*argv)
    live = psutil.Process(proc.pid)
    assert identity(proc.pid) == {"create_time": live.create_time(), "cmdline": live.cmdline()}
    assert start_time(proc.pid) == live.create_time()


@pytest.mark.skipif(shutil.which("perl") is None, reason="needs perl to retitle a process")
def test_a_process_that_retitled_itself_reads_as_psutil_reads_it() -> None:
    """A program that sets its own title (perl's ``$0``, setproctitle) leaves
    one argument with spaces; psutil then splits on the spaces, and so must
    a record."""
    proc = subprocess.Popen(
        ["perl", "-e", '$0 = "worker: busy with t1"; $| = 1; print "ready\\n"; sleep 60'],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        live = psutil.Process(proc.pid)
        assert live.cmdline() == ["worker:", "busy", "with", "t1"]
        assert identity(proc.pid) == {"create_time": live.create_time(), "cmdline": live.cmdline()}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_pid_that_now_names_a_later_process_is_refused(
    start: Callable[..., subprocess.Popen[bytes]],
) -> None:
    """A recycled pid: the record names a pid whose process started later
    than recorded. Even carrying the attempt's id, the process is not the
    one recorded, and nothing signals it."""
    earlier = start()
    recorded = identity(earlier.pid)
    time.sleep(5 * CREATE_TIME_SLACK)  # clock ticks apart, beyond the slack
    later = start()
    assert start_time(later.pid) - recorded["create_time"] > CREATE_TIME_SLACK
    as_if_recycled = _record(later.pid, recorded)
    assert not is_recorded_process(as_if_recycled)
    assert not is_recorded_worker(as_if_recycled)
    assert kill_recorded_group(as_if_recycled) is False
    assert psutil.Process(later.pid).status() != psutil.STATUS_ZOMBIE
    # ...while the record of the process itself, made the same way, matches.
    assert is_recorded_worker(_record(later.pid, identity(later.pid)))
    assert kill_recorded_group(_record(later.pid, identity(later.pid))) is True


def test_a_process_gone_or_a_zombie_has_no_identity() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    assert identity(proc.pid) == {}
    assert time.monotonic() - started < 0.5, "a zombie's empty command line is not waited on"
    assert start_time(proc.pid) == psutil.Process(proc.pid).create_time()
    proc.wait(timeout=10)
    assert identity(proc.pid) == {} and start_time(proc.pid) is None


def test_an_environment_block_reads_as_psutil_reads_it() -> None:
    """Whether a process carries an attempt's id is decided from its initial
    environment block, parsed as psutil parses it."""
    env = {
        **os.environ,
        "GITRUN_ATTEMPT_ID": ATTEMPT_ID,
        "WITH_EQUALS": "a=b=c",
        "EMPTY": "",
        "LINES": "one\r\ntwo\rthree\n",
        "BYTES": os.fsdecode(b"\xff\xfe"),
    }
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        from gitrun.processes.reaper import _environ

        deadline = time.monotonic() + 10  # just after an exec the block reads empty
        while not _environ(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        found = _environ(proc.pid)
        assert found == psutil.Process(proc.pid).environ()
        assert found is not None and found["WITH_EQUALS"] == "a=b=c"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert _environ(proc.pid) is None


def test_leftovers_are_the_processes_carrying_an_ended_attempt_s_id() -> None:
    """What a worker left running in a session of its own goes at the end of
    the run, and nothing else: not another attempt's, not another run's, not a
    process that merely mentions the id."""
    from gitrun.processes.reaper import kill_leftovers

    ended, other = uuid.uuid4().hex, uuid.uuid4().hex
    envs = {
        "left": {"GITRUN_RUN": "r", "GITRUN_ATTEMPT_ID": ended},
        "other attempt": {"GITRUN_RUN": "r", "GITRUN_ATTEMPT_ID": other},
        "other run": {"GITRUN_RUN": "r2", "GITRUN_ATTEMPT_ID": ended},
        "mention": {"GITRUN_RUN": "r", "NOTE": f"GITRUN_ATTEMPT_ID={ended}"},
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={**os.environ, **env},
            start_new_session=True,
        )
        for name, env in envs.items()
    }
    try:
        from gitrun.processes.reaper import _environ

        deadline = time.monotonic() + 10  # just after an exec the block reads empty
        while not all(_environ(proc.pid) for proc in procs.values()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert kill_leftovers("r", {ended}) == [procs["left"].pid]
        assert procs["left"].wait(timeout=10) == -signal.SIGKILL
        assert all(procs[name].poll() is None for name in envs if name != "left")
        assert kill_leftovers("r", set()) == []
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=10)
