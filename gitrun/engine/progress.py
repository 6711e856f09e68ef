"""Progress and reporting: what a driving run says of itself as it goes and at its end.

A :class:`Progress` snapshot for live views after every wait, the heartbeat's
:class:`~gitrun.store.lock.LiveState` for ``status`` and ``watchdog``, the
load gate said when it starts and stops holding starts back, one line per
attempt that ended and per park, and the :class:`RunOutcome` a driver
returns, with the run's status at its end.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.clock import to_wall
from gitrun.definition.schema import Limits
from gitrun.engine.audit import Violation
from gitrun.engine.budget import Budget
from gitrun.engine.governor import Governor, Halt, last_line
from gitrun.engine.states import (
    COMPLETE,
    DONE,
    PENDING,
    RUNNING,
    STATUSES,
    Engine,
    committed_tasks,
)
from gitrun.engine.status import RunStatus, read_status, status_of
from gitrun.engine.verdict import Park
from gitrun.errors import EXIT_DONE, EXIT_FAILED, EXIT_HALTED
from gitrun.store.events import Outcome
from gitrun.store.jsonlines import shown
from gitrun.store.lock import LiveAttempt, LiveState
from gitrun.store.usage import UsageTotals
from gitrun.words import counted
from gitrun.workers.attempt import AttemptEnd, RunningAttempt

Reporter = Callable[[str], None]


@dataclass(frozen=True)
class Progress:
    """A snapshot for live views."""

    counts: dict[str, int]
    running: list[tuple[str, int, float]]  # task, attempt, seconds running
    concurrency: int
    max_concurrency: int
    backoff: float  # seconds until starts may resume
    waiting_for_load: bool
    canary: list[str]
    spawns: int
    usable: int
    eta: float | None
    usage: UsageTotals | None = None  # what the run's attempts cost so far
    budget: Budget | None = None
    parked: str = ""  # "parked until 15:00 UTC (usage limit of claude)" while it is


@dataclass
class RunOutcome:
    status: RunStatus
    exit_code: int
    stopped_by: str | None = None
    halt: Halt | None = None
    violations: list[Violation] = field(default_factory=list)
    load_held: float = 0.0  # seconds the load gate held starts back


def progress_of(
    engine: Engine, running: Iterable[RunningAttempt], finished: int, since: float, now: float
) -> Progress:
    """The run as it stands at ``now`` (monotonic), ``finished`` attempts
    having ended in this driver since ``since``."""
    governor = engine.governor
    counts = {status: engine.count(status) for status in STATUSES}
    rate = finished / max(1e-6, now - since)
    left = counts[PENDING] + counts[RUNNING]
    return Progress(
        counts=counts,
        running=[(a.task, a.number, now - a.began) for a in running],
        concurrency=governor.concurrency,
        max_concurrency=governor.limits.concurrency,
        backoff=max(0.0, governor.backoff_until - now),
        waiting_for_load=governor.waiting_for_load,
        canary=list(governor.canary),
        spawns=governor.spawns,
        usable=counts[DONE],
        eta=left / rate if rate > 0 and finished >= 3 else None,
        usage=engine.usage,
        budget=engine.budget,
        parked=governor.parked_text(now),
    )


def live_state_of(governor: Governor, running: Iterable[RunningAttempt]) -> LiveState:
    """What a heartbeat writes: read by other processes (status, watchdog),
    so on the wall clock."""
    limits = governor.limits
    return LiveState(
        concurrency=governor.concurrency,
        max_concurrency=limits.concurrency,
        kill_grace=limits.kill_grace,
        backoff_until=to_wall(governor.backoff_until) if governor.backoff_until else None,
        waiting_for_load=governor.waiting_for_load,
        canary=list(governor.canary),
        halt=governor.halt.message if governor.halt else None,
        running=[LiveAttempt(a.task, a.number, a.started, to_wall(a.deadline)) for a in running],
    )


class LoadGate:
    """Says when the load gate starts and stops holding starts back (no
    silent stall), and how long it held them in all."""

    def __init__(self, limits: Limits, report: Reporter) -> None:
        self.limits = limits
        self.report = report
        self.held = False  # the load gate held starts at the last look
        self.since = 0.0
        self.before = 0.0  # seconds held, in earlier spells

    def look(self, governor: Governor) -> None:
        held = governor.waiting_for_load
        if held == self.held:
            return
        self.held = held
        now = time.monotonic()
        if held:
            self.since = now
        else:
            self.before += now - self.since
        if held:
            self.report(
                f"starts held: the load average {governor.load:.1f} is over "
                f"{self.limits.load_bound_text()}; one attempt at a time until it drops"
            )
        else:
            bound = self.limits.load_bound()
            self.report(f"the load average is under max_load {bound:g} again; starts resume")

    def held_for(self) -> float:
        """Seconds it held starts back, this spell included."""
        return self.before + (time.monotonic() - self.since if self.held else 0)


def ended_line(
    end: AttemptEnd, outcome: str, reason: str, used: int | None, concurrency: int, log: Path
) -> str:
    """The line said of an attempt that ended (``used``: the attempts a task
    failed for good after; ``log``: its worker's output, when kept)."""
    how = f"signal {end.signal}" if end.signal else f"exit {end.exit_code}"
    if end.lost:
        how = "lost with its node"
    if end.timed_out:
        how += ", timed out"
    if outcome == Outcome.VALID:
        return f"{end.task} attempt {end.attempt}: valid ({how}, {end.duration:.1f} s)"
    if used is not None:
        follows = f"failed for good after {counted(used, 'attempt')}"
    else:
        then: dict[str, str] = {
            Outcome.THROTTLED: f"throttled; concurrency now {concurrency}",
            Outcome.INTERRUPTED: "pending",
            Outcome.LOST: "pending, no attempt used",
            Outcome.UNSTARTED: "pending, no attempt used",
        }
        follows = then.get(outcome, "will retry")
    detail = f": {reason}" if reason else ""
    said = last_line(end.lost or end.tail)
    if said:
        detail += f"; it said: {said}"
    if os.path.exists(log):
        detail += f" (log: {shown(log)})"
    return f"{end.task} attempt {end.attempt}: {outcome} ({how}){detail} — {follows}"


def parked_line(governor: Governor, park: Park) -> str:
    """What is said as the run parks for a usage limit."""
    read = (
        f" (its reset could not be read from {park.unread!r}: limits.park_default)"
        if park.unread
        else ""
    )
    return (
        f"{governor.parked_text(time.monotonic())}{read}: no new starts, running attempts "
        "finish, and the run goes on by itself at the reset"
    )


def outcome_of(
    engine: Engine,
    tip: str | None,
    stop_signal: int | None,
    settled: bool,
    violations: list[Violation],
    load_held: float,
) -> RunOutcome:
    """What a driver returns as it lets go of the run: its status, its exit
    code (128 + a signal that stopped it, halted, done or failed), what
    stopped or halted it, the ownership violations found and how long the
    load gate held starts back. ``tip``: the last commit its committer made;
    ``settled``: no signal stopped it and every attempt it started ended."""
    status = status_at_end(engine, tip, settled)
    halt = engine.governor.halt
    stopped = None
    if stop_signal is not None:
        code = 128 + stop_signal
        stopped = signal.Signals(stop_signal).name
    elif halt is not None:
        code = EXIT_HALTED
    else:
        complete = sum(status.counts()[s] for s in COMPLETE)
        code = EXIT_DONE if complete == len(engine.run.tasks_by_id) else EXIT_FAILED
    return RunOutcome(status, code, stopped, halt, violations, load_held)


def status_at_end(engine: Engine, tip: str | None, settled: bool) -> RunStatus:
    """The run's status at the end, as ``gitrun status`` reads it next
    (no driver shown: this one is letting go of the run).

    From the driver's own engine when that is provably the same answer:
    every attempt it started ended and was recorded through the engine
    (which keeps its records and summary as a read of the ledger finds
    them), every landing was committed by its committer (the run's lock
    keeps other writers off the branch, so its last commit, ``tip``, is the
    tip), and the tasks done in the engine are the tasks done at that tip
    (one ``diff-tree``: a task judged valid against its launch may have put
    back the content of the fork point, which is not done). Otherwise
    (stopped by a signal, nothing committed here, the two disagree) the
    engine is loaded again from the branch, the ledger and the journal."""
    run = engine.run
    if settled and tip is not None:
        done = {tid for tid, status in engine.status.items() if status == DONE}
        if committed_tasks(run, tip, engine.base, engine.summary.made) == done:
            return status_of(run, engine, tip, run.repo, driver=None)
    status = read_status(run.repo, run.id, run)
    status.driver = None
    return status
