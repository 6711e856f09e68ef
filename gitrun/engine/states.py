"""The engine: what state each task of a run is in, and what an ended attempt changes.

The one owner of that fact, which is derived, never stored: a stored copy could
disagree with the run branch and the ledger. A task is *done* when every
output is in the run branch's tree with content other than at the fork point,
or with the content a valid attempt of this round recorded it made (a
deterministic worker may make the same bytes again); *up to date* when the
round's start found its outputs current (:mod:`gitrun.definition.provenance`)
and nothing ran it since; *failed* when it used up its attempts (the ledger);
*running* while an attempt is out for it (the journal of a live driver, or a
lease of an external run); otherwise *pending*. Work goes stage by stage: a
stage starts when the one before it has nothing pending or running.

Command mode's driver, external mode's next/collect, ``status``, ``retry``
and ``watchdog`` all ask this module; it asks nothing above it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitrun.definition.runfiles import read_run_ledger
from gitrun.engine import memory
from gitrun.engine.budget import SpendGate, budget_of
from gitrun.engine.governor import PERSISTENT, EndFacts, Governor, Halt, choose_canary
from gitrun.engine.strays import StrayWrite, stray_writes
from gitrun.store import events, git, ledger
from gitrun.store.branches import committed_records, find_tip
from gitrun.store.events import COUNTED, AttemptRecord, Outcome, Park, Record, iso
from gitrun.store.history import find_base
from gitrun.store.journal import running_records
from gitrun.store.leases import read_leases
from gitrun.store.local import LocalPaths
from gitrun.store.lock import is_locked
from gitrun.store.usage import Usage

if TYPE_CHECKING:
    from gitrun.definition.load import RunDef, Task

DONE = "done"
UP_TO_DATE = "up-to-date"
PENDING = "pending"
RUNNING = "running"
FAILED = "failed"
STATUSES = (DONE, UP_TO_DATE, PENDING, RUNNING, FAILED)
OPEN = (PENDING, RUNNING)
COMPLETE = (DONE, UP_TO_DATE)  # nothing left to do for the task


def committed_tasks(
    run: RunDef, tip: str, base: str | None, made: Mapping[str, Mapping[str, str]] | None = None
) -> set[str]:
    """Tasks whose every output is in ``tip``'s tree with content new since
    ``base``, or as ``made`` (task -> path -> blob id: what a valid attempt
    made) says its attempt made it."""
    paths_of = [run.output_paths(task) for task in run.tasks]
    tops = sorted({path.partition("/")[0] for paths in paths_of for path in paths})
    if len(tops) > 256:  # a command line has limits; list the whole tree then
        tops = []
    new = git.new_files(run.repo, base, tip, tops) if base else git.ls_tree(run.repo, tip, tops)
    done = {
        task.id
        for task, paths in zip(run.tasks, paths_of, strict=True)
        if all(p in new for p in paths)
    }
    # The rest: a valid attempt that made what the fork point held already.
    same = {
        task.id: paths
        for task, paths in zip(run.tasks, paths_of, strict=True)
        if task.id not in done and (made or {}).get(task.id)
    }
    if same and made is not None:
        wanted = sorted({p for paths in same.values() for p in paths})
        at_tip = git.ls_tree(run.repo, tip, wanted if len(wanted) <= 256 else tops)
        for tid, paths in same.items():
            said = made[tid]
            if len(said) == len(paths) and all(
                p in at_tip and at_tip[p][1] == said.get(p) for p in paths
            ):
                done.add(tid)
    return done


def running_now(run: RunDef, local: LocalPaths) -> set[str]:
    """Tasks with an attempt out, as the machine-local state says: the leases of
    an external run, or the journal of a live driver (a dead driver's journal
    names attempts nobody runs any more)."""
    if run.executor_kind == "external":
        return set(read_leases(local))
    return set(running_records(local)) if is_locked(local) else set()


@dataclass(frozen=True)
class Ended:
    """What a dispatch mode knows about an attempt that ended, its outcome
    already decided from the disk (and throttle and interruption facts)."""

    task: str
    attempt: int
    started: float
    ended: float
    outcome: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    dispatch: str = "command"
    wrote_nothing: bool = False  # for the breaker: no output file exists
    diagnostic: str = ""  # the worker's last line, for the breaker's message
    said: tuple[str, ...] = ()  # a failed attempt's last lines of output (visible)
    usage: Usage | None = None  # what its client reported it used; None: unknown
    # A valid attempt's provenance: what it made its outputs from (the
    # digests of gitrun.definition.provenance), and each output's blob id.
    made_from: Mapping[str, str] | None = None
    made: Mapping[str, str] | None = None
    throttles: int = 0  # the tries of this attempt number the API throttled before it
    # Its start and end on the engine's clock where that is not the wall
    # clock (a driver's monotonic one), for the governor's arithmetic; None:
    # ``started`` and ``ended`` serve.
    span: tuple[float, float] | None = None
    # Its conversation, the try it continued, why it started fresh
    # (gitrun.store.ledger.AttemptRecord).
    conversation: str = ""
    resumed_from: tuple[int, int] | None = None
    fresh_because: str = ""
    resumed_turns: int = 0  # the turns the continued conversation held


def _try_named(found: tuple[int, int] | None) -> dict[str, int] | None:
    return None if found is None else {"attempt": found[0], "throttles": found[1]}


class _Histories(dict[str, ledger.TaskHistory]):
    """Each task's history: the ledger summary's, or a new one made (in the
    summary too) when the task is first asked about (a big run's status
    reads 100,000 tasks and writes none). The summary's own objects, so that
    one record noted in it (:func:`gitrun.store.ledger.note`) moves both."""

    def __init__(self, tasks: Collection[str], summary: ledger.LedgerSummary) -> None:
        super().__init__((tid, h) for tid, h in summary.tasks.items() if tid in tasks)
        self._tasks = tasks
        self._summary = summary

    def __missing__(self, tid: str) -> ledger.TaskHistory:
        if tid not in self._tasks:
            raise KeyError(tid)
        history = self[tid] = self._summary.tasks.setdefault(tid, ledger.TaskHistory())
        return history


class Engine:
    """A run's task states, from the branch, the ledger and what runs now.

    ``tip`` is the run branch's tip (None before the first commit); ``running``
    names the tasks with an attempt out (default: as the machine-local state
    says; a driver about to recover a dead one's attempts passes none).
    ``records`` is the ledger (default: the one on disk; the report passes the
    one committed at ``tip``, which may be a remote's copy of the branch).
    ``clock`` is the governor's (gitrun.engine.governor): a driver's is monotonic.
    """

    def __init__(
        self,
        run: RunDef,
        local: LocalPaths,
        tip: str | None,
        running: Collection[str] | None = None,
        records: list[dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run = run
        self.clock = clock
        self.local = local
        self.limits = run.limits
        self.tasks: Mapping[str, Task] = run.tasks_by_id
        # The round's ledger first (what its valid attempts made decides some
        # tasks done), then the branch's listing, kept only as the done set.
        self.base = find_base(run.repo, run.id, tip) if tip else None
        if records is None:  # the branch's records, and what the work tree adds
            records = read_run_ledger(run.repo, run.dir, tip)
        self.records = ledger.current_round(records)
        self.summary = ledger.summarize(self.records)
        if len(self.records) < len(records):  # attempt numbers go on across rounds
            ledger.note_numbers(self.summary, records[: len(records) - len(self.records)])
        done = committed_tasks(run, tip, self.base, self.summary.made) if tip else set()
        # Attempts the ledger holds already: one killed between writing a record
        # and closing its journal entry (or lease) must not be recorded twice.
        self.recorded = {key for r in self.records if (key := ledger.try_of(r)) is not None}
        self.history = _Histories(self.tasks, self.summary)
        running = running_now(run, local) if running is None else running
        self.status: dict[str, str] = {}
        # Per stage, the tasks that may start, in table order; and how many are
        # pending or running (a stage starts when the one before has none).
        self.queues: dict[str, deque[str]] = {stage: deque() for stage in run.stage_names}
        self.open: dict[str, int] = dict.fromkeys(run.stage_names, 0)
        for task in run.tasks:
            stage = run.stage_of(task)
            if task.id in done:
                self.status[task.id] = DONE
            elif task.id in self.history and self.history[task.id].up_to_date:
                self.status[task.id] = UP_TO_DATE
            elif task.id in running:
                self.status[task.id] = RUNNING
                self.open[stage] += 1
            elif task.id in self.history and self.history[task.id].used >= self.limits.max_attempts:
                self.status[task.id] = FAILED
            else:
                self.status[task.id] = PENDING
                self.open[stage] += 1
                self.queues[stage].append(task.id)
        self.governor = Governor(
            self.limits,
            tasks=len(run.tasks),
            spawns=self.summary.spawns + sum(1 for s in self.status.values() if s == RUNNING),
            canary=[],
            failed=self.count(FAILED),
            usable=len(done),
            refused=self.summary.refused,
            halt=Halt(**self.summary.halt) if self.summary.halt else None,
            clock=clock,
            stage_buckets={stage: run.packet.bucket_for(stage) for stage in run.stage_names},
        )
        self.halt_recorded = self.summary.halt is not None
        # Each bucket as the ledger last left it: a resumed run's first wave
        # goes out at the concurrency its bucket knew.
        seen = {c.bucket: c for c in events.concurrency_changes(self.records)}
        for change in seen.values():
            self.governor.buckets.keyed(change.bucket).seed(change.concurrency, change.ceiling)
        if not seen and not self.recorded:  # no attempt yet: what this repository's runs learnt
            keys = (run.packet.bucket_for(stage) for stage in run.stage_names)
            memory.recall(self.governor.buckets, keys, local, time.time())
        park = self.summary.park
        if park is not None:  # a usage limit's reset, from the ledger: any driver waits for it
            self.governor.park(float(park["until"]), str(park["reason"]))
        # What the run's attempts cost so far (kept current as attempts end),
        # and its budget: the packet's, as `gitrun retry --budget` raised it.
        self.usage = ledger.usage_totals(self.records)
        self.budget = budget_of(self.limits, self.records)
        if self.budget.is_set:
            self.governor.spend = SpendGate(
                run.id,
                self.budget,
                self.usage,
                len(run.tasks),
                self.limits.max_projection,
                shape=run,
            )

    # -- what state is each task in -----------------------------------------------------

    def count(self, status: str) -> int:
        return sum(1 for s in self.status.values() if s == status)

    def current_stage(self) -> str | None:
        """The first stage with a task pending or running."""
        return next((stage for stage in self.run.stage_names if self.open[stage]), None)

    def pending(self) -> list[str]:
        """Tasks of the current stage that may start, in table order."""
        stage = self.current_stage()
        if stage is None:
            return []
        # A task handed out stays queued until its end queues it again (the
        # driver pops what it launches; external mode's engine lives one call).
        return list(dict.fromkeys(t for t in self.queues[stage] if self.status[t] == PENDING))

    def open_tasks(self) -> list[str]:
        """Tasks of the current stage pending or running, in table order."""
        stage = self.current_stage()
        return [
            tid
            for tid, status in self.status.items()
            if status in OPEN and self.run.stage_of(self.tasks[tid]) == stage
        ]

    def choose_canary(self) -> list[str]:
        """The first ``canary`` open tasks of the current stage run alone until
        one validates, unless some task already produced valid output (one rule
        for both dispatch modes)."""
        if self.current_stage() is None or self.governor.halt is not None:
            self.governor.canary = []
        else:
            any_done = any(s == DONE for s in self.status.values())
            self.governor.canary = choose_canary(self.open_tasks(), self.limits.canary, any_done)
        return self.governor.canary

    # -- transitions --------------------------------------------------------------------

    def begin(self, tid: str) -> None:
        """An attempt of ``tid`` starts (its number and throttles are the
        history's ``upcoming`` until its record is written)."""
        self._set(tid, RUNNING)
        self.governor.started(tid, self.clock(), self.run.stage_of(self.tasks[tid]))

    def mark_done(self, tid: str) -> None:
        """``tid``'s valid outputs are on disk without an attempt to record
        (reconciled, or left by a worker nobody recorded): they go to a commit."""
        if self.status[tid] != DONE:
            self._set(tid, DONE)
            self.governor.usable += 1

    def end(self, writer: ledger.LedgerWriter, ended: Ended) -> str:
        """Record an ended attempt: the governor hears of it, the ledger gets
        its record (once), and the task moves on. Returns its new status."""
        tid = ended.task
        history = self.history[tid]
        counted = ended.outcome in COUNTED
        failed_for_good = counted and history.used + 1 >= self.limits.max_attempts
        began, finished = ended.span or (ended.started, ended.ended)
        facts = EndFacts(
            tid,
            ended.outcome,
            finished - began,
            ended.exit_code,
            ended.signal,
            ended.wrote_nothing,
            ended.diagnostic,
            began,
        )
        in_canary = bool(self.governor.canary)
        self.governor.ended(facts, self.clock(), failed_for_good)
        backed_off = self.governor.concurrency if ended.outcome == Outcome.THROTTLED else None
        self.record(writer, ended, backed_off)
        changes = self.governor.take_changes()
        for change in changes:  # what the governor did, and why
            self.write(writer, change)
        memory.keep(self.local, self.run.id, changes)  # and for the next run
        if ended.outcome == Outcome.VALID:  # its cost is in self.usage now
            stage = self.run.stage_of(self.tasks[tid])
            self.governor.output_valid(stage, in_canary and not self.governor.canary)
        if ended.outcome == Outcome.VALID:
            self._set(tid, DONE)
        elif failed_for_good:
            self._set(tid, FAILED)
        else:
            self._set(tid, PENDING)
            queue = self.queues[self.run.stage_of(self.tasks[tid])]
            if ended.outcome == Outcome.THROTTLED:
                queue.appendleft(tid)  # not its fault: first again, not after the rest
            else:
                queue.append(tid)
        return self.status[tid]

    def record(
        self, writer: ledger.LedgerWriter, ended: Ended, concurrency: int | None = None
    ) -> bool:
        """Write ``ended``'s ledger record unless the ledger has it already;
        whether it was written."""
        key = (ended.task, ended.attempt, ended.throttles)
        if key in self.recorded:
            return False
        record = AttemptRecord(
            ended.task,
            ended.attempt,
            self.run.stage_of(self.tasks[ended.task]),
            ended.started,
            ended.ended,
            ended.outcome,
            ended.exit_code,
            ended.signal,
            ended.timed_out,
            ended.reason,
            dispatch=ended.dispatch,
            concurrency=concurrency,
            usage=ended.usage,
            made_from=dict(ended.made_from) if ended.made_from else None,
            made=dict(ended.made) if ended.made else None,
            said=list(ended.said),
            throttles=ended.throttles,
            conversation=ended.conversation,
            resumed_from=_try_named(ended.resumed_from),
            fresh_because=ended.fresh_because,
            resumed_turns=ended.resumed_turns,
        )
        self.write(writer, record)
        self.recorded.add(key)
        # The usage as the ledger keeps it (a cost in micro-dollars), as a
        # later read of the ledger adds it up.
        ledger.note_usage(self.usage, record)
        return True

    def write(self, writer: ledger.LedgerWriter, record: Record) -> None:
        """Write ``record`` to the ledger, and keep what the engine read of
        the ledger (records, summary) as a read of it now would find it."""
        writer.write(record)
        line = record.to_json()
        self.records.append(line)
        ledger.note(self.summary, line)

    def record_park(self, writer: ledger.LedgerWriter, until: float, reason: str) -> None:
        """Park the run until ``until`` (a usage limit's reset), in the ledger:
        a resume, even on another clone, waits for it too."""
        self.governor.park(until, reason)
        self.write(writer, Park(iso(until), reason, iso(time.time())))

    def record_halt(self, writer: ledger.LedgerWriter) -> None:
        """A halt only a person can lift holds every later resume, next and
        collect (``retry`` lifts it): it goes to the ledger, once."""
        halt = self.governor.halt
        if halt is None or halt.kind not in PERSISTENT or self.halt_recorded:
            return
        self.halt_recorded = True
        self.write(writer, events.Halt(halt.kind, halt.message, iso(time.time())))

    def _set(self, tid: str, status: str) -> None:
        old = self.status[tid]
        stage = self.run.stage_of(self.tasks[tid])
        self.open[stage] += (status in OPEN) - (old in OPEN)
        self.status[tid] = status

    # -- for status ------------------------------------------------------------------------

    def violations(self) -> list[StrayWrite]:
        """Every stray write the ledger holds, and every write a hook denied."""
        return stray_writes(self.records)


def load_engine(
    run: RunDef, local: LocalPaths, running: Collection[str] | None = None
) -> tuple[Engine, str | None]:
    """The engine of ``run`` at its branch's tip, and that tip."""
    found = find_tip(run.repo, run.id)
    if found is None:
        return Engine(run, local, None, running), None
    # A remote's copy (a fresh clone): its committed ledger is the run's;
    # the disk holds none of it until `gitrun resume` takes the branch.
    records = committed_records(run.repo, run.id, found.tip) if found.is_remote else None
    return Engine(run, local, found.tip, running, records=records), found.tip
