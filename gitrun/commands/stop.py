"""Stopping a run's live driver: ``gitrun stop``.

The driver is found from the run's lock and its owner record, never by
name: the record names the pid only together with the kernel's word that
this pid holds the run's lock (:func:`gitrun.commands.watchdog.unproven_driver`),
and the live process must still match the record's start time and command
line (:func:`gitrun.processes.reaper.signal_recorded_process`). It then gets
the signal Ctrl-C in its terminal sends (SIGINT, to its process group when it
leads one), so its attempts are stopped and judged exactly as on Ctrl-C:
valid outputs are committed, the rest are interrupted with no attempt used.
``gitrun resume`` goes on from there.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from gitrun.commands.watchdog import unproven_driver
from gitrun.definition.load import check_run_id, list_runs, load_run
from gitrun.engine.states import COMPLETE
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.processes.reaper import is_recorded_process, is_running, signal_recorded_process
from gitrun.store.local import LocalPaths
from gitrun.store.lock import Owner, is_locked, lock_damage, read_owner
from gitrun.store.records import RecordDamaged

STOP_PATIENCE = 60.0  # seconds `gitrun stop` waits for the driver to go, by default
OWNER_PATIENCE = 2.0  # seconds a driver that just took the lock has to write its record


def stop_run(
    repo: Path, run_id: str, say: Callable[[str], None], patience: float = STOP_PATIENCE
) -> None:
    """Stop the live driver of ``run_id`` and wait until it has gone (at most
    ``patience`` seconds); say what happened and what comes next. A run no
    driver runs is left as it is (that is said, and is no error). Raises
    :class:`GitrunError` when the driver cannot be proved, runs on another
    host, or did not stop in time."""
    check_run_id(run_id)
    local = LocalPaths.of(repo, run_id)
    damage = lock_damage(local)
    if damage:
        raise GitrunError(
            f"run {run_id!r}: not stopped: {damage}; gitrun signals nothing it cannot prove it "
            "started, so check that run's processes yourself"
        )
    if not is_locked(local):
        say(_nobody_drives(repo, run_id))
        return
    owner = _holder(local, run_id)
    if owner is None:  # it let go of the run meanwhile
        say(_nobody_drives(repo, run_id))
        return
    if owner.host != socket.gethostname():
        raise GitrunError(
            f"run {run_id!r} is driven by pid {owner.pid} on host {owner.host}; stop it there "
            f"(`gitrun stop {run_id}` on that host)"
        )
    refused = unproven_driver(local, run_id, owner.pid)
    if refused:
        raise GitrunError(refused)
    record = owner.to_json()
    if not signal_recorded_process(record, signal.SIGINT):
        if not is_locked(local):  # it ended by itself just now
            say(_nobody_drives(repo, run_id))
            return
        raise GitrunError(
            f"{run_id}: not stopped: pid {owner.pid} does not match the driver's owner record "
            f"({local.owner}) in start time and command line; check that process and stop it "
            "yourself if it is the driver"
        )
    say(
        f"run {run_id!r}: sent its driver (pid {owner.pid}) SIGINT, as Ctrl-C would; waiting for "
        "it to stop its attempts and commit what they finished"
    )
    deadline = time.monotonic() + patience
    while is_locked(local) or is_recorded_process(record):
        if time.monotonic() >= deadline:
            raise GitrunError(
                f"run {run_id!r}: its driver (pid {owner.pid}) still runs {patience:g} s after "
                f"SIGINT; wait longer (`gitrun stop {run_id} --wait 5m`), or end it with "
                "`gitrun watchdog --kill` once its heartbeat is stale"
            )
        time.sleep(0.05)
    say(f"run {run_id!r}: stopped; {_next_step(repo, run_id)}")


def _holder(local: LocalPaths, run_id: str) -> Owner | None:
    """The owner record of the lock's live holder; None once nobody holds the
    lock. A driver writes its record just after it takes the lock: a record
    missing or naming a dead process is waited for, briefly."""
    deadline = time.monotonic() + OWNER_PATIENCE
    while True:
        try:
            owner, damage = read_owner(local), ""
        except RecordDamaged as exc:
            owner, damage = None, exc.message
        if not is_locked(local):
            return None
        if owner is not None and (owner.host != socket.gethostname() or is_running(owner.pid)):
            return owner
        if time.monotonic() >= deadline:
            said = damage or f"{local.owner} names no live process"
            raise GitrunError(
                f"run {run_id!r}: a process holds its lock {local.lock}, but {said}; gitrun "
                "signals no process it cannot name, so find the driver yourself"
            )
        time.sleep(0.05)


def _nobody_drives(repo: Path, run_id: str) -> str:
    """What to say of a run no driver runs now, and what comes next."""
    if run_id not in list_runs(repo) and not LocalPaths.of(repo, run_id).root.exists():
        return f"run {run_id!r}: no such run here, so no driver to stop"

    try:
        external = load_run(repo, run_id).executor_kind == "external"
    except GitrunError:
        external = False
    if external:
        return (
            f"run {run_id!r}: no live driver to stop: an external run is led by the session that "
            f"calls `gitrun next {run_id}`; stop that session"
        )
    return f"run {run_id!r}: no live driver to stop; {_next_step(repo, run_id)}"


def _next_step(repo: Path, run_id: str) -> str:
    """The next command for a run nobody drives: land it when every task is
    done, else resume it (or start it, when it never started)."""
    try:
        status = read_status(repo, run_id, landing=True)
    except GitrunError:
        return f"`gitrun status {run_id}` says where it is"
    counts = status.counts()
    if status.landed:
        return f"it is {status.landed.describe()}"
    if sum(counts[s] for s in COMPLETE) == len(status.tasks):
        return f"every task is done: bring the results in with `gitrun land {run_id}`"
    if not status.started:
        return f"it has not started: `gitrun start {run_id}` starts it"
    if status.halt:
        return f"it is halted: {status.halt['message']}"
    return f"continue it with `gitrun resume {run_id}`"
