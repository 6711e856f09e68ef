"""gitrun never signals what it did not start.

A journal record is proof only together with the attempt's identity in the
process's environment (``GITRUN_ATTEMPT_ID``): workers can write `.git/`, so
a record's content alone can be forged.

Each test starts a sacrificial process group of its own (`setsid ...`),
always killed in a finally. Signals are watched by a spy that forwards only
those aimed at the sacrificial group and swallows (and records) any other,
so a regression in the guards shows as a failed assertion instead of a
killed test run, init, or an unrelated process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitrun.processes.reaper import (
    identity,
    is_recorded_process,
    is_recorded_worker,
    kill_recorded_group,
    may_signal,
    signal_recorded_process,
)
from gitrun.store.local import LocalPaths
from gitrun.store.lock import read_owner
from gitrun.workers.attempt import Monitor
from tests.forkserver import run_gitrun_call
from tests.helpers import ATTEMPT_ENV, ATTEMPT_ID, commit_all, gitrun_process, wait_for, write_run


@dataclass
class Victim:
    """A sacrificial process group: its leader, and the members it started."""

    proc: subprocess.Popen[bytes]
    members: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def record(self, **changes: Any) -> dict[str, Any]:
        """The journal record gitrun writes for it, with ``changes``."""
        found = identity(self.pid)
        record: dict[str, Any] = {
            "run": "r",
            "task": "t1",
            "attempt": 1,
            "attempt_id": ATTEMPT_ID,
            "pid": self.pid,
        }
        record.update(found)
        record.update(changes)
        return {k: v for k, v in record.items() if v is not DROP}

    def alive(self) -> list[int]:
        return [p for p in [self.pid, *self.members] if _running(p)]


DROP = object()


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _gone(pid: int) -> bool:
    return not _running(pid)


_REAL_KILL, _REAL_KILLPG = os.kill, os.killpg
SACRIFICIAL: set[int] = set()  # process groups the running test started


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Victim]]:
    """Start `setsid sh -c SCRIPT` groups; every one is killed at the end."""
    started: list[Victim] = []

    def start(script: str = "sleep 1000 & wait", env: dict[str, str] | None = None) -> Victim:
        pidfile = tmp_path / f"members{len(started)}"
        proc = subprocess.Popen(
            ["setsid", "sh", "-c", script.replace("@PIDS@", str(pidfile))],
            env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE,
        )
        victim = Victim(proc)
        started.append(victim)
        wait_for(
            lambda: os.getpgid(proc.pid) == proc.pid, 10, what="the child led its own process group"
        )
        # setsid has made the group; wait until it has exec'd what it runs, or
        # a record taken now names a command line the process is about to drop.
        wait_for(
            lambda: (identity(proc.pid).get("cmdline") or ["setsid"])[0] != "setsid",
            10,
            what="setsid exec'd its command",
        )
        SACRIFICIAL.add(proc.pid)
        if "@PIDS@" in script:
            wait_for(
                lambda: pidfile.exists() and pidfile.read_text().endswith("\n"),
                10,
                what="the child wrote its pid file",
            )
            victim.members = [int(line) for line in pidfile.read_text().split()]
        return victim

    try:
        yield start
    finally:
        for victim in started:
            for pid in victim.alive():
                with contextlib.suppress(OSError):
                    _REAL_KILL(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                _REAL_KILLPG(victim.pid, signal.SIGKILL)
            victim.proc.wait(timeout=10)
            SACRIFICIAL.discard(victim.pid)
            for pid in victim.members:
                wait_for(functools.partial(_gone, pid), 10, what="the sacrificial process ended")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every kill/killpg made while the test runs; only those aimed at a
    process group this test started reach the kernel."""
    calls: list[tuple[str, int, int]] = []

    def group_of(pid: int) -> int | None:
        try:
            return os.getpgid(pid)
        except OSError:
            return None

    def kill(pid: int, sig: int) -> None:
        calls.append(("kill", pid, sig))
        if pid > 1 and group_of(pid) in SACRIFICIAL:
            _REAL_KILL(pid, sig)

    def killpg(pgid: int, sig: int) -> None:
        calls.append(("killpg", pgid, sig))
        if pgid in SACRIFICIAL:
            _REAL_KILLPG(pgid, sig)

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(os, "killpg", killpg)
    return calls


def test_a_complete_matching_record_kills_the_whole_group(
    spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    victim = spawn("sleep 1000 & echo $! > @PIDS@; wait", env=ATTEMPT_ENV)
    record = victim.record()
    assert record["cmdline"][:2] == ["sh", "-c"] and isinstance(record["create_time"], float)
    assert kill_recorded_group(record) is True
    assert ("killpg", victim.pid, signal.SIGKILL) in sent
    wait_for(lambda: not victim.alive(), 10, what="the victim ended")


@pytest.mark.parametrize(
    "case",
    [
        "no create_time",
        "null create_time",
        "wrong create_time",
        "nan create_time",
        "string create_time",
        "no cmdline",
        # (a different live command line with the attempt's id is a worker
        # that exec'd: see the exec test; for an owner record, the last test)
        "empty cmdline",
        "cmdline not a list",
        "string pid",
        "float pid",
        "bool pid",
        "no pid",
        "negative pid",
        "no attempt_id",
        "empty attempt_id",
        "wrong attempt_id",
        "other task",
        "other attempt",
    ],
)
def test_a_partial_or_wrong_record_signals_nothing(
    case: str, spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    victim = spawn("sleep 1000 & echo $! > @PIDS@; wait", env=ATTEMPT_ENV)
    right = victim.record()
    table: dict[str, dict[str, Any]] = {
        "no create_time": {"create_time": DROP},
        "null create_time": {"create_time": None},
        "wrong create_time": {"create_time": right["create_time"] - 5.0},
        "nan create_time": {"create_time": float("nan")},
        "string create_time": {"create_time": str(right["create_time"])},
        "no cmdline": {"cmdline": DROP},
        "wrong cmdline": {"cmdline": ["sleep", "1000"]},
        "empty cmdline": {"cmdline": []},
        "cmdline not a list": {"cmdline": " ".join(right["cmdline"])},
        "string pid": {"pid": str(victim.pid)},
        "float pid": {"pid": float(victim.pid)},
        "bool pid": {"pid": True},
        "no pid": {"pid": DROP},
        "negative pid": {"pid": -victim.pid},
        "no attempt_id": {"attempt_id": DROP},
        "empty attempt_id": {"attempt_id": ""},
        "wrong attempt_id": {"attempt_id": uuid.uuid4().hex},
        "other task": {"task": "t2"},
        "other attempt": {"attempt": 2},
    }
    record = victim.record(**table[case])
    assert kill_recorded_group(record) is False
    assert not is_recorded_worker(record)
    if "pid" in case or "create_time" in case or "cmdline" in case:
        assert signal_recorded_process(record, signal.SIGKILL) is False
    assert sent == []
    assert victim.alive() == [victim.pid, *victim.members]


@pytest.mark.parametrize("pid", [0, 1, -1])
def test_pids_that_mean_more_than_one_process_are_never_signalled(
    pid: int, sent: list[tuple[str, int, int]]
) -> None:
    """kill(0) is gitrun's own group, 1 is init, -1 is every process."""
    record = {"pid": pid, "run": "r", "task": "t1", "attempt": 1, **identity(max(pid, 1))}
    record.setdefault("create_time", 0.0)
    record.setdefault("cmdline", ["init"])
    assert kill_recorded_group(record) is False
    assert signal_recorded_process(record, signal.SIGKILL) is False
    assert not may_signal(pid)
    assert sent == []


def test_gitrun_never_signals_its_own_pid_group_or_session(
    sent: list[tuple[str, int, int]],
) -> None:
    for pid in {os.getpid(), os.getpgid(0), os.getsid(0)}:
        # The leader of this group or session may be gone (pytest run as a
        # background job of a shell that has exited): no process to read, so
        # the record carries this process's identity, complete all the same.
        found = identity(pid) or identity(os.getpid())
        record = {"pid": pid, "run": "r", "task": "t1", "attempt": 1, **found}
        assert record.get("cmdline"), "the record must otherwise match"
        assert not may_signal(pid)
        assert kill_recorded_group(record) is False
        assert signal_recorded_process(record, signal.SIGKILL) is False
    assert sent == []


def test_a_worker_that_exec_d_is_known_by_its_attempt_environment(
    spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    """`sh -c 'exec agent'` keeps pid and start time, not the command line."""
    victim = spawn("exec sleep 1001", env=ATTEMPT_ENV)
    wait_for(
        lambda: identity(victim.pid).get("cmdline") == ["sleep", "1001"],
        10,
        what="the victim became `sleep 1001`",
    )
    as_launched = {"cmdline": ["sh", "-c", "exec sleep 1001"]}
    assert kill_recorded_group(victim.record(attempt=2, **as_launched)) is False
    assert kill_recorded_group(victim.record(run="other", **as_launched)) is False
    assert sent == [] and victim.alive() == [victim.pid]
    assert kill_recorded_group(victim.record(**as_launched)) is True
    wait_for(lambda: not victim.alive(), 10, what="the victim ended")


@pytest.mark.parametrize("theirs", [True, False])
def test_a_zombie_leader_s_group_loses_only_the_attempt_s_own_members(
    theirs: bool, spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    """The leader exited and nobody reaped it: its environment can no longer
    be read, so nothing proves the group is the attempt's; only members that
    carry the attempt's id go, one by one."""
    env = ATTEMPT_ENV if theirs else {**ATTEMPT_ENV, "GITRUN_ATTEMPT_ID": "forged"}
    victim = spawn("sleep 1000 & echo $! > @PIDS@; read x", env=env)
    record = victim.record()
    assert victim.proc.stdin is not None
    victim.proc.stdin.close()  # `read` ends; the leader exits, unreaped
    wait_for(
        lambda: psutil.Process(victim.pid).status() == psutil.STATUS_ZOMBIE,
        10,
        what="the victim became a zombie",
    )
    assert victim.alive() == victim.members
    assert kill_recorded_group(record) is theirs
    assert not any(call[0] == "killpg" for call in sent)
    if theirs:
        wait_for(lambda: not victim.alive(), 10, what="the victim ended")
    else:
        assert sent == [] and victim.alive() == victim.members


@pytest.mark.parametrize("theirs", [True, False])
def test_a_leaderless_group_loses_only_the_attempt_s_own_members(
    theirs: bool, spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    """The leader is gone (reaped): the group id may have been reused, so
    only members carrying this attempt's GITRUN_* environment are killed,
    one by one; the group is never signalled as a whole."""
    env = ATTEMPT_ENV if theirs else {**ATTEMPT_ENV, "GITRUN_ATTEMPT": "7"}
    victim = spawn("sleep 1000 & echo $! > @PIDS@; read x", env=env)
    record = victim.record()
    assert victim.proc.stdin is not None
    victim.proc.stdin.close()
    victim.proc.wait(timeout=10)
    assert victim.alive() == victim.members
    assert kill_recorded_group(record) is theirs
    assert not any(call[0] == "killpg" for call in sent)
    if theirs:
        wait_for(lambda: not victim.alive(), 10, what="the victim ended")
    else:
        assert sent == [] and victim.alive() == victim.members


def test_signal_recorded_process_checks_the_owner_record_the_same_way(
    spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    victim = spawn()
    assert signal_recorded_process(victim.record(create_time=DROP), signal.SIGTERM) is False
    assert signal_recorded_process(victim.record(cmdline=["gitrun"]), signal.SIGTERM) is False
    assert sent == []
    assert is_recorded_process(victim.record())
    assert not is_recorded_worker(victim.record()), "it carries no attempt id"
    assert signal_recorded_process(victim.record(), signal.SIGKILL) is True
    wait_for(lambda: not _running(victim.pid), 10, what="the victim ended")


def test_the_monitor_records_who_it_started(tmp_path: Path) -> None:
    monitor = Monitor(kill_grace=0.5)
    argv = [sys.executable, "-c", "import time; time.sleep(1000)", "t1"]
    attempt = monitor.launch("t1", 1, argv, dict(os.environ), tmp_path, tmp_path / "log", 60)
    try:
        assert attempt.cmdline == argv
        assert attempt.create_time == psutil.Process(attempt.pid).create_time()
    finally:
        attempt.stop()
        attempt.escalate(time.monotonic() + 1)
        deadline = time.monotonic() + 10
        while monitor.running and time.monotonic() < deadline:
            monitor.poll(0.1)
    assert not monitor.running


def test_the_journal_record_is_complete_and_enough_to_stop_an_orphan(git_repo: Path) -> None:
    """A real driver's journal record names its worker fully; after the driver
    dies by SIGKILL, that record alone lets gitrun stop the orphan."""
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {
                "command": [sys.executable, "-c", "import time; time.sleep(1000)", "{task}"]
            },
            "limits": {"timeout": "10m"},
        },
    )
    commit_all(git_repo, "define r")
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    journal = LocalPaths.of(git_repo, "r").running
    worker = 0
    try:

        def spawned() -> list[dict[str, object]]:
            lines = journal.read_text().splitlines() if journal.exists() else []
            return [r for r in map(json.loads, lines) if "pid" in r]  # after the write-ahead one

        wait_for(lambda: bool(spawned()), 60, what="the driver spawned its worker")
        record = spawned()[0]
        worker = record["pid"]
        assert isinstance(worker, int)
        assert record["run"] == "r" and record["task"] == "t1" and record["attempt"] == 1
        assert record["cmdline"] == psutil.Process(worker).cmdline()
        assert record["cmdline"][-1] == "t1"
        assert record["create_time"] == psutil.Process(worker).create_time()
        owner = read_owner(LocalPaths.of(git_repo, "r"))
        assert owner is not None and owner.pid == driver.pid
        assert owner.cmdline == psutil.Process(driver.pid).cmdline()
        assert owner.create_time == psutil.Process(driver.pid).create_time()
        driver.kill()
        driver.wait(timeout=10)
        assert _running(worker), "the worker runs on in its own session"
        assert kill_recorded_group(record) is True
        wait_for(lambda: not _running(worker), 10, what="the worker ended")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        if worker and _running(worker):
            created = psutil.Process(worker).create_time()
            if created == record.get("create_time"):
                os.killpg(worker, signal.SIGKILL)


def test_a_complete_record_of_a_process_without_the_attempt_id_signals_nothing(
    spawn: Callable[..., Victim], sent: list[tuple[str, int, int]]
) -> None:
    """Pid, create time and command line can all be copied into a forged
    record; the fresh attempt id in the process's own environment cannot."""
    victim = spawn("sleep 1000 & echo $! > @PIDS@; wait")  # no GITRUN_* at all
    imitator = spawn("sleep 1000 & echo $! > @PIDS@; wait", env={**ATTEMPT_ENV, "X": "1"})
    for record in (victim.record(), victim.record(attempt_id=DROP)):
        assert kill_recorded_group(record) is False
    # run, task and attempt number alone are not enough either: anyone can set them
    partial = {k: v for k, v in ATTEMPT_ENV.items() if k != "GITRUN_ATTEMPT_ID"}
    stranger = spawn("sleep 1000 & echo $! > @PIDS@; wait", env=partial)
    assert kill_recorded_group(stranger.record()) is False
    assert kill_recorded_group(stranger.record(attempt_id=DROP)) is False
    assert sent == []
    assert victim.alive() == [victim.pid, *victim.members]
    assert kill_recorded_group(imitator.record()) is True  # the control: it carries the id


GATED_WORKER = """\
import os, time
while os.environ["GITRUN_ATTEMPT"] == "1":  # the first attempt hangs until killed
    time.sleep(1)
for out in os.environ["GITRUN_OUTPUTS"].splitlines():
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as handle:
        handle.write("{}")
"""


def test_resume_kills_a_real_orphan_but_not_a_process_named_by_a_forged_record(
    git_repo: Path, tmp_path: Path
) -> None:
    """The red-team repro through the real CLI: a driver killed by SIGKILL,
    then records appended to its journal naming a sacrificial `setsid sleep`
    by pid, create time and command line (one without an attempt id, one
    with an id the victim never got). `gitrun resume` stops the real orphan
    and leaves the victim alone."""
    write_run(
        git_repo,
        "r",
        [{"id": f"t{n}", "outputs": [f"out/t{n}.json"]} for n in (1, 2, 3)],
        {
            "executor": {"command": [sys.executable, "-c", GATED_WORKER]},
            "limits": {"timeout": "10m"},
        },
    )
    commit_all(git_repo, "define r")
    journal = LocalPaths.of(git_repo, "r").running
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    victim = subprocess.Popen(["setsid", "sleep", "1000"], start_new_session=False)
    worker = 0
    try:

        def spawned() -> list[dict[str, Any]]:
            lines = journal.read_text().splitlines() if journal.exists() else []
            return [r for r in map(json.loads, lines) if "pid" in r]

        wait_for(lambda: bool(spawned()), 60, what="the driver spawned its worker")
        [real] = spawned()  # the canary runs alone
        worker = real["pid"]
        driver.kill()
        driver.wait(timeout=10)
        assert _running(worker), "the worker runs on in its own session"
        wait_for(
            lambda: bool(identity(victim.pid).get("cmdline") == ["sleep", "1000"]),
            10,
            what="the victim became `sleep 1000`",
        )
        seen = identity(victim.pid)
        others = [t for t in ("t1", "t2", "t3") if t != real["task"]]
        forged = [
            {"run": "r", "task": others[0], "attempt": 1, "pid": victim.pid, **seen},
            {
                "run": "r",
                "task": others[1],
                "attempt": 1,
                "attempt_id": uuid.uuid4().hex,
                "pid": victim.pid,
                **seen,
            },
        ]
        with journal.open("a") as handle:
            handle.write("".join(json.dumps(record) + "\n" for record in forged))
        resumed = run_gitrun_call(["resume", "r"], git_repo, timeout=120)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert _running(victim.pid), "resume killed a process gitrun never started"
        wait_for(lambda: not _running(worker), 10, what="the real orphan ended")
        said = resumed.stdout + resumed.stderr
        assert f"{real['task']} attempt 1: left by a dead driver; stopped" in said, said
        assert f"{others[0]} attempt 1: left by a dead driver; nothing" in said
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        with contextlib.suppress(OSError):
            _REAL_KILL(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        if worker and _running(worker):
            _REAL_KILLPG(worker, signal.SIGKILL)
