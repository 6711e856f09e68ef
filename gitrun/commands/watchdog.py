"""Finding stuck runs: ``gitrun watchdog``.

For every run of the repository: is a driver holding the run lock, how old is
its heartbeat, are attempts past their deadline, did a dead driver leave
workers running, and has a run with work left stalled (nobody drives or leads
it, and no halt or park holds it: :mod:`gitrun.engine.motion`)? Anything stale
makes the watchdog exit 1 (for cron and alerts); ``--kill`` ends a stale
driver so that the next ``resume`` takes over.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gitrun.definition.load import list_runs
from gitrun.definition.schema import parse_duration
from gitrun.engine.motion import STALLED, utc
from gitrun.engine.states import PENDING, RUNNING
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError, UsageError
from gitrun.processes.reaper import (
    is_recorded_worker,
    kill_recorded_group,
    signal_recorded_process,
)
from gitrun.store.journal import running_records
from gitrun.store.local import LocalPaths, local_runs
from gitrun.store.lock import PROC_LOCKS, is_locked, lock_damage, lock_holders, read_owner
from gitrun.store.records import RecordDamaged

DEFAULT_STALE = 120.0  # seconds without a heartbeat (the driver beats every 2 s)


@dataclass
class RunHealth:
    run: str
    # "alive", "dead" (nobody holds the lock), "elsewhere" (another host) or
    # "damaged" (the run's local state cannot be read or trusted: see reason)
    driver: str
    pid: int | None = None
    host: str | None = None
    heartbeat_age: float | None = None
    overdue: list[str] = field(default_factory=list)  # attempts past their deadline
    orphans: list[str] = field(default_factory=list)  # workers left by a dead driver
    stalled_since: str | None = None  # UTC: when its last driver was last seen, if it stalled
    stale: bool = False
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.driver == "damaged":
            return f"{self.run}: {self.reason}; STALE"
        if self.driver == "dead":
            state = "no driver"
        else:
            age = f"{self.heartbeat_age:.0f} s" if self.heartbeat_age is not None else "unknown"
            state = f"driver pid {self.pid} on {self.host}, heartbeat {age} ago"
        verdict = f"STALE: {self.reason}" if self.stale else "ok"
        return f"{self.run}: {state}; {verdict}"


def duration_option(option: str, text: str) -> float:
    """A duration option as typed (``90s``, ``5m``), in seconds, or a usage
    error naming the option."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: {exc}") from None


def watch_runs(
    repo: Path,
    stale_after: float,
    kill: bool,
    as_json: bool,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> int:
    """``gitrun watchdog``: say how every run is (``as_json``: one JSON
    array); ``kill``: end each stale driver, saying so (on ``warn`` with
    ``as_json``, to keep the JSON whole). 1 when any run is stale, else 0."""
    findings = inspect_runs(repo, stale_after)
    if as_json:
        say(json.dumps([h.to_json() for h in findings], indent=2, allow_nan=False))
    else:
        if not findings:
            say("no runs here")
        for health in findings:
            say(health.describe())
    stale_runs = [h for h in findings if h.stale]
    if kill:
        for health in stale_runs:
            (warn if as_json else say)(kill_stale(repo, health))
    return 1 if stale_runs else 0


def _runs_here(repo: Path) -> tuple[list[str], set[str]]:
    """Every run with a definition or local state here, and those with a definition."""
    defined = set(list_runs(repo))
    return sorted(defined | set(local_runs(repo))), defined


def inspect_runs(repo: Path, stale_after: float = DEFAULT_STALE) -> list[RunHealth]:
    """The health of every run; a run whose local state is damaged is reported
    as such (stale) and never stops the inspection of the others: a cron check
    that one broken run blinds to every other run would be worse than none."""
    now = time.time()
    found = []
    runs, defined = _runs_here(repo)
    for run_id in runs:
        local = LocalPaths.of(repo, run_id)
        try:
            damage = lock_damage(local)
            if damage:
                found.append(_damaged(run_id, damage))
            elif is_locked(local):
                found.append(_inspect_live(run_id, local, stale_after, now))
            else:
                found.append(_inspect_dead(repo, run_id, local, run_id in defined))
        except RecordDamaged as exc:  # the sentence names the file and the fix
            found.append(_damaged(run_id, exc.message))
        except Exception as exc:  # also RecursionError or a bad record: report, go on
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            where = getattr(exc, "filename", None) or local.root
            found.append(_damaged(run_id, f"cannot inspect {where}: {why or type(exc).__name__}"))
    return found


def _damaged(run_id: str, damage: str) -> RunHealth:
    return RunHealth(run_id, "damaged", stale=True, reason=f"damaged: {damage}")


def _inspect_live(run_id: str, local: LocalPaths, stale_after: float, now: float) -> RunHealth:
    owner = read_owner(local)
    if owner is None:
        return RunHealth(run_id, "alive", stale=False, reason="lock held, no owner record yet")
    here = owner.host == socket.gethostname()
    health = RunHealth(
        run_id, "alive" if here else "elsewhere", owner.pid, owner.host, now - owner.heartbeat
    )
    kill_grace = owner.state.kill_grace
    grace = (5.0 if kill_grace is None else kill_grace) + 30.0  # damaged: the default
    for attempt in owner.state.running:
        if now > attempt.deadline + grace:
            health.overdue.append(f"{attempt.task}#{attempt.attempt}")
    reasons = []
    if health.heartbeat_age is not None and health.heartbeat_age > stale_after:
        reasons.append(f"no heartbeat for {health.heartbeat_age:.0f} s")
    if health.overdue:
        reasons.append(f"attempts past their deadline: {', '.join(health.overdue)}")
    health.stale = bool(reasons)
    health.reason = "; ".join(reasons)
    return health


def _inspect_dead(repo: Path, run_id: str, local: LocalPaths, defined: bool) -> RunHealth:
    health = RunHealth(run_id, "dead")
    for task, entry in running_records(local).items():
        if is_recorded_worker(entry.to_json()):
            health.orphans.append(f"{task}#{entry.attempt} (pid {entry.pid})")
    reasons = []
    if health.orphans:
        reasons.append(f"workers left running by a dead driver: {', '.join(health.orphans)}")
    stalled = _stalled(repo, run_id) if defined else None
    if stalled is not None:
        since, left = stalled
        health.stalled_since = since
        reasons.append(
            f"stalled since {since}: {left} not done and nothing runs them; continue it with "
            f"`gitrun resume {run_id}`"
        )
    health.stale = bool(reasons)
    health.reason = "; ".join(reasons)
    return health


def _stalled(repo: Path, run_id: str) -> tuple[str, str] | None:
    """When the run stalled and how many tasks it has left, if it stalled.

    A definition that cannot be read leaves the question open (None): the
    watchdog watches drivers, and ``gitrun status`` or ``check`` name what is
    wrong with a definition.
    """
    try:
        status = read_status(repo, run_id, landing=True)
    except GitrunError:
        return None
    if status.motion != STALLED:
        return None
    counts = status.counts()
    left = counts[PENDING] + counts[RUNNING]
    since = utc(status.stalled_since) if status.stalled_since is not None else "an unknown time"
    return since, f"{left} task{'s' if left != 1 else ''}"


def kill_stale(repo: Path, health: RunHealth) -> str:
    """End a stale run's driver (its process group when it leads one) and the
    workers it recorded, so that `gitrun resume` can take over.

    The owner record is a file anyone who can write ``.git/`` can forge (a
    worker can), so it names the driver only together with the kernel's word
    that this very pid holds the run's lock (:func:`gitrun.store.lock.lock_holders`,
    read from ``/proc/locks``); then the live process must still match the
    record's create time and command line
    (:func:`gitrun.processes.reaper.signal_recorded_process`). Where the kernel cannot
    be asked, nothing is killed. Workers are killed only when they carry
    their attempt's id (:func:`gitrun.processes.reaper.kill_recorded_group`).
    """
    local = LocalPaths.of(repo, health.run)
    if health.driver == "damaged":
        return (
            f"{health.run}: not stopped: its local state is {health.reason}; gitrun signals "
            "nothing it cannot prove it started, so check that run's processes yourself and "
            f"repair or remove {local.root} once none of them runs"
        )
    if health.driver == "elsewhere":
        return f"{health.run}: the driver runs on {health.host}; kill it there"
    if health.pid is not None and health.driver == "alive":
        refused = unproven_driver(local, health.run, health.pid)
        if refused:
            return refused
        try:
            owner = read_owner(local)
        except RecordDamaged as exc:
            return f"{health.run}: not stopped: {exc.message}"
        record = owner.to_json() if owner is not None and owner.pid == health.pid else {}
        if not signal_recorded_process(record, signal.SIGKILL):
            return (
                f"{health.run}: not stopped: pid {health.pid} does not match the driver's owner "
                f"record ({local.owner}) in start time and command line; check that process "
                "and stop it yourself if it is the driver"
            )
        deadline = time.monotonic() + 10
        while is_locked(local) and time.monotonic() < deadline:
            time.sleep(0.05)
    for entry in running_records(local).values():
        kill_recorded_group(entry.to_json())
    if health.driver == "dead" and not health.orphans:
        return f"{health.run}: nothing runs to stop; continue it with `gitrun resume {health.run}`"
    return f"{health.run}: stopped; continue it with `gitrun resume {health.run}`"


def unproven_driver(local: LocalPaths, run_id: str, pid: int) -> str:
    """Why ``pid``, which the owner record names, is not proved to hold the run's
    lock ("" if it is): the kernel's word, which no file a worker writes can forge.

    The lock file must be gitrun's own (:func:`gitrun.store.lock.lock_damage`), before
    and after the kernel's table is read: through a hard link or a symlink the
    kernel would name the holder of some other file's lock.
    """
    damage = lock_damage(local)
    if damage:
        return f"{run_id}: not stopped: {damage}, so its holder proves nothing"
    before = _inode(local.lock)
    holders = lock_holders(local.lock)
    damage = lock_damage(local)
    if damage or before is None or _inode(local.lock) != before:
        return (
            f"{run_id}: not stopped: the run lock {local.lock} changed while gitrun read "
            "who holds it; run the command again"
        )
    if holders is None:
        return (
            f"{run_id}: not stopped: this system has no {PROC_LOCKS} to prove that pid "
            f"{pid} holds the run lock {local.lock}, and gitrun kills no driver it "
            "cannot prove; stop that process yourself if it is the driver"
        )
    if pid not in holders:
        held = ", ".join(f"pid {holder}" for holder in sorted(holders)) or "no listed process"
        return (
            f"{run_id}: not stopped: the owner record {local.owner} names pid {pid}, "
            f"but the kernel says the run lock {local.lock} is held by {held}; check those "
            "processes and stop the driver yourself"
        )
    return ""


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
