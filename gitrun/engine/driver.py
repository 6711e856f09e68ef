"""The driver: the loop that runs a run's attempts to its end.

At most the governor's number of attempts run at once, stage by stage: the
loop launches what may start (:mod:`gitrun.engine.launch`), waits for an
attempt to end or a deadline to pass, judges each attempt that ended from
the files on disk and what was seen of it (:mod:`gitrun.engine.verdict`),
records it in the ledger, hands valid tasks to the background committer,
and lets the governor decide when to back off, park and halt; it says how
the run goes (:mod:`gitrun.engine.progress`). :mod:`gitrun.commands.session`
sets a driver up for start and resume.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from gitrun.definition.load import RunDef
from gitrun.definition.outputs import TaskCheck, check_task, quarantine
from gitrun.definition.runfiles import definition_files, definition_snapshot, open_ledger
from gitrun.definition.schema import Task
from gitrun.engine.audit import Audit, Violation
from gitrun.engine.commitqueue import CommitQueue, Committed
from gitrun.engine.committer import Committer, Landing
from gitrun.engine.crashpoints import crash_point
from gitrun.engine.governor import STRICT, Halt, last_line
from gitrun.engine.launch import Launched, Launcher
from gitrun.engine.progress import (
    LoadGate,
    Progress,
    Reporter,
    RunOutcome,
    ended_line,
    live_state_of,
    outcome_of,
    parked_line,
    progress_of,
)
from gitrun.engine.recovery import bring_back, reconcile, recover_orphans
from gitrun.engine.salvage import Start
from gitrun.engine.states import FAILED, PENDING, Ended, Engine
from gitrun.engine.strays import fold_denials
from gitrun.engine.traces import NoTraces, Traces, open_traces
from gitrun.engine.verdict import Facts, Park, Rules, Verdict, judge
from gitrun.store import git
from gitrun.store.events import Event, Outcome, iso
from gitrun.store.journal import Journal, JournalEntry
from gitrun.store.ledger import LedgerWriter
from gitrun.store.local import LocalPaths
from gitrun.store.lock import RunLock
from gitrun.visible import last_lines
from gitrun.words import counted
from gitrun.workers.attempt import AttemptEnd
from gitrun.workers.sandbox import Confined, Isolated
from gitrun.workers.scratch import Scratch

# What commands build a driver with, and get back from it.
__all__ = ["Driver", "Progress", "Reporter", "RunOutcome"]

HEARTBEAT = 2.0  # seconds between owner-record heartbeats
TICK = 0.5  # longest wait before the loop looks at deadlines and signals again
CANARY_LOOK = 0.25  # seconds between two looks at a running canary's outputs
AUDIT_EVERY = 2.0  # seconds between stray-write audits while attempts end


class Driver:
    def __init__(
        self,
        run: RunDef,
        local: LocalPaths,
        lock: RunLock,
        committer: Committer,
        report: Reporter,
        progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.run = run
        self.local = local
        self.lock = lock
        self.committer = committer
        self.report = report
        self.progress = progress
        self.tasks = run.tasks_by_id
        self.journal: Journal | None = None  # started when driving starts
        self.traces: Traces = NoTraces()  # opened when driving starts (gitrun.engine.traces)
        # Nothing runs yet: the attempts a dead driver's journal names are
        # recovered (recover) before this driver starts its own.
        tip = committer.last_tip or git.rev_parse(run.repo, committer.ref)
        self.ledger = open_ledger(run, tip)
        # Its deadlines, backoff and holds on the monotonic clock (gitrun.clock).
        self.engine = Engine(run, local, tip, running=(), clock=time.monotonic)
        self.governor = self.engine.governor
        self.launcher = Launcher(run, local, self.engine, self.ledger, committer, report)
        self.running = self.launcher.running  # the attempts out, by task
        self.monitor = self.launcher.monitor
        self.commits: CommitQueue | None = None  # made when driving starts
        self.stop_signal: int | None = None
        self.stopping = False
        self._canary_look = 0.0  # when to look at a running canary's outputs next
        self.started_at = time.monotonic()
        self.finished_here = 0
        self.load_gate = LoadGate(run.limits, report)
        # The definition as it is now, which is what this driver runs: what a
        # worker writes into it later is reported by the audit, never committed.
        self.definition = definition_snapshot(run)
        self.audit: Audit | None = None
        self.audit_due = False  # an attempt ended since the last audit
        self.violations: list[Violation] = []

    # -- before driving -----------------------------------------------------------

    def recover(self) -> None:
        """Stop what a dead driver of this run left running and record its attempts."""
        recover_orphans(
            self.run,
            self.engine,
            self.ledger,
            self.committer.object_format,
            self.report,
            self.launcher.salvage,
        )

    def reconcile(self) -> None:
        """Commit valid outputs already on disk; quarantine invalid ones."""
        base_tree = self.launcher.base_tree
        reconcile(
            self.run,
            self.engine,
            self.committer,
            base_tree,
            self._own_files,
            self.report,
            self.launcher.salvage,
        )

    # -- the loop -----------------------------------------------------------------------

    def drive(self) -> RunOutcome:
        # Orphans are handled (recover_orphans) before a new journal begins.
        self.journal = Journal(self.local)
        self.traces = open_traces(self.run.id, len(self.tasks), self.report)
        self.launcher.placement.isolate()
        parked = self.governor.parked_text(
            time.monotonic()
        )  # from the ledger: a usage limit's reset
        if parked:
            self.report(
                f"{parked}: nothing starts before the reset, and the run goes on by itself then"
            )
        self.audit = Audit(self.run)
        self._choose_canary()
        commits = CommitQueue(self.committer, self._own_files, self._on_commit)
        self.commits = commits
        self.launcher.begin(self.journal, self.traces, self.audit, commits)
        last_beat = last_audit = 0.0
        halted_reported = False
        with _signals_to(self._on_signal):
            try:
                while True:
                    now = time.monotonic()
                    self._handle_stops(commits)
                    halt = self.governor.halt
                    if halt is not None and not halted_reported:
                        halted_reported = True
                        self._halted(halt)
                    if not self.stopping and halt is None:
                        self._widen_past_the_canary(now)
                        self._launch_ready(now)
                        if self.engine.current_stage() is not None:  # a start to hold back
                            self.load_gate.look(self.governor)
                    if not self.running and not self._waiting(now):
                        break
                    self._wait_and_finish(commits, now)
                    for line in self.governor.take_notices():  # the spend budget's
                        self.report(line)
                    now = time.monotonic()
                    for attempt in self.running.values():
                        if now >= attempt.deadline:
                            attempt.expire()
                        attempt.escalate(now)
                    # Strict ownership audits after every attempt, so it halts on
                    # the first violation; otherwise every few seconds.
                    strict = self.run.packet.ownership.strict
                    if (strict and self.audit_due) or now - last_audit >= AUDIT_EVERY:
                        self._audit()
                        last_audit = now
                        self.audit_due = False
                    if now - last_beat >= HEARTBEAT:
                        self.lock.beat(live_state_of(self.governor, self.running.values()))
                        last_beat = now
                self._audit()  # before the last commit, so violations reach the ledger
                halt = self.governor.halt
                if halt is not None and not halted_reported:
                    self._halted(halt)
            finally:
                for attempt in self.running.values():
                    attempt.stop()
                self.launcher.kill_leftovers()
                commits.flush()
                commits.close()
                self.monitor.close()
                # Every attempt ended and recorded: the journal has nothing left
                # to tell a later driver, which would read it all to find so.
                self.journal.close(discard=not self.running)
                self.ledger.close()
                self.traces.close()
        if commits.error is not None:
            raise commits.error
        settled = self.stop_signal is None and not self.running
        held = self.load_gate.held_for()
        tip = self.committer.last_tip
        return outcome_of(self.engine, tip, self.stop_signal, settled, self.violations, held)

    def _widen_past_the_canary(self, now: float) -> None:
        """A canary whose outputs already validate, in place, while its worker
        still runs (an agent's summary turn after its last write): the
        fan-out widens now instead of a task's time later. Not with a spend
        budget, whose projection needs the canary's cost."""
        governor = self.governor
        if not governor.canary or governor.spend is not None or now < self._canary_look:
            return
        self._canary_look = now + CANARY_LOOK
        tid = _validating_canary(self.run, self.tasks, self.launcher, governor.canary)
        if tid is not None:
            self.report(f"canary: {tid}'s outputs validate: the fan-out widens")
            governor.canary_passed()

    def _halted(self, halt: Halt) -> None:
        self.report(f"halted: {halt.message}")
        self.engine.record_halt(self.ledger)
        self.traces.event(Event.HALT, {"gitrun.halt": halt.kind, "message": halt.message})

    def _handle_stops(self, commits: CommitQueue) -> None:
        if self.stopping:
            return
        reason = None
        if self.stop_signal is not None:
            reason = f"stopping ({signal.Signals(self.stop_signal).name})"
        elif commits.error is not None:
            reason = f"stopping: committing failed ({commits.error})"
        if reason:
            self.stopping = True
            self.report(f"{reason}: terminating {counted(len(self.running), 'attempt')}")
            for attempt in self.running.values():
                attempt.stop()

    def _waiting(self, now: float) -> bool:
        """Nothing runs: may work still start later (after a backoff, or once the load drops)?"""
        if self.stopping or self.governor.halt is not None or self.engine.current_stage() is None:
            return False
        return self.governor.next_wake(now) is not None

    def _wait_and_finish(self, commits: CommitQueue, now: float) -> None:
        wakes = [a.next_event for a in self.running.values()]
        governor_wake = self.governor.next_wake(now)
        if governor_wake is not None:
            wakes.append(governor_wake)
        timeout = max(0.0, min([TICK, *(w - now for w in wakes)]))
        for end in self.monitor.poll(timeout):
            self._finish(end, commits)
        if self.progress is not None:
            now = time.monotonic()
            running = self.running.values()
            finished, since = self.finished_here, self.started_at
            self.progress(progress_of(self.engine, running, finished, since, now))

    def _choose_canary(self) -> None:
        if self.engine.choose_canary():
            self.report(f"canary: {', '.join(self.governor.canary)} run alone first")

    def _launch_ready(self, now: float) -> None:
        stage = self.engine.current_stage()
        slots = self.governor.slots(len(self.running), now, stage)
        if slots <= 0:
            return
        if stage is None or not self.launcher.stage_proven(stage):
            return
        pending = self.engine.queues[stage]
        skipped: list[str] = []
        while pending and slots > 0:
            tid = pending.popleft()
            if self.engine.status[tid] != PENDING:
                continue
            if not self.governor.eligible(tid):
                skipped.append(tid)
                continue
            if self.launcher.launch(self.tasks[tid]):
                slots -= 1
        pending.extendleft(reversed(skipped))

    # -- an attempt ends ------------------------------------------------------------------

    def _finish(self, end: AttemptEnd, commits: CommitQueue) -> None:
        launched = self.launcher.take(end.task)
        confined = launched.confined if launched else None
        if confined:
            bring_back(confined, self.engine, self.ledger, end.task, end.attempt, self.report)
        before = launched.before if launched else None
        check = check_task(self.run, self.tasks[end.task], before, self.committer.object_format)
        facts = _facts_of(end, check, confined, self.governor.parked_until)
        verdict = judge(facts, Rules(self.run.id, self.run.limits, self.launcher.placement.client))
        start = launched.start if launched else Start()
        salvage = self.launcher.salvage
        conversation = start.conversation or salvage.said(self.local.log_of(end.task, end.attempt))
        kept = salvage.after(verdict.outcome, end.timed_out, conversation, start.resumed).resume
        if check.outcome == Outcome.INVALID and not kept:  # a resumed try finds them in place
            where = self.local.quarantine_of(end.task, end.attempt)
            quarantine(self.run.repo, where, check.outputs)
        if verdict.halt is not None:
            self.governor.stop_for(verdict.halt)
        if verdict.park is not None:
            self._park(verdict.park)
        ended = replace(_ended(end, verdict, check, launched), conversation=conversation)
        crash_point("end.judged")
        fold_denials(self.engine, self.ledger, end.task, end.attempt)
        status = self.engine.end(self.ledger, ended)
        self.traces.attempt_ended(ended)
        crash_point("end.recorded")
        assert self.journal is not None
        closed = JournalEntry(end.task, end.attempt, end=True, throttles=ended.throttles)
        self.journal.write(closed)
        crash_point("end.closed")
        self.finished_here += 1
        self.audit_due = True
        if verdict.outcome == Outcome.VALID:
            commits.put(Landing(end.task, end.attempt, check.outputs, ended.made_from))
        used = self.engine.history[end.task].used if status == FAILED else None
        log = self.local.log_of(end.task, end.attempt)
        concurrency = self.governor.concurrency
        self.report(ended_line(end, verdict.outcome, verdict.reason, used, concurrency, log))

    def _park(self, park: Park) -> None:
        """Park the run for a usage limit: no new starts until its reset (the
        running attempts finish), recorded so that a later driver waits too."""
        self.engine.record_park(self.ledger, park.until, park.reason)
        self.traces.event(Event.PARK, {"gitrun.until": iso(park.until), "reason": park.reason})
        if self.commits is not None:  # on the branch now: a move to another clone waits too
            self.commits.flush()
        self.report(parked_line(self.governor, park))

    # -- along the way, and at the end ------------------------------------------------------

    def _audit(self) -> None:
        if self.audit is None:
            return
        found = self.audit.check(self.running)
        counted = _record_violations(found, self.engine, self.ledger, self.report, self.run.id)
        self.violations += counted
        if counted and self.run.packet.ownership.strict:
            self.governor.stop_for(Halt(STRICT, f"ownership violation: {counted[0].describe()}"))

    def _own_files(self) -> dict[str, bytes]:
        # What the committer last published is what the branch holds (else
        # its compare-and-swap fails and it builds again): no git process
        # per commit to read the ledger's blobs back.
        known = self.committer.own_blobs_at_tip()
        return definition_files(self.run, self.ledger, self.definition, known)

    def _on_commit(self, committed: Committed) -> None:
        for line in committed.left_out:
            self.report(line)
        if committed.tasks:
            self.report(f"committed {', '.join(committed.tasks)} as {committed.commit[:10]}")

    def _on_signal(self, signum: int) -> None:
        self.stop_signal = signum


def _record_violations(
    found: list[Violation], engine: Engine, ledger: LedgerWriter, report: Reporter, run_id: str
) -> list[Violation]:
    """Record each write the audit ``found`` and say it; the violations that
    count (an edit of the run's own definition is a notice: the driver goes
    on with the definition it started with)."""
    counted = []
    for violation in found:
        engine.write(ledger, violation.to_record())
        if violation.edit:
            report(
                f"notice: {violation.describe()}; this driver goes on with the definition it "
                f"started with, and `gitrun resume {run_id} --take-edits` takes the edit"
            )
            continue
        counted.append(violation)
        report(f"ownership violation: {violation.describe()}")
    return counted


def _validating_canary(
    run: RunDef, tasks: dict[str, Task], launcher: Launcher, canary: list[str]
) -> str | None:
    """The first of the running ``canary`` tasks whose outputs validate where
    its worker writes them (a confined worker's come back only when it ends)."""
    for tid in canary:
        launched = launcher.launched.get(tid)
        if launched is None or launched.confined is not None:
            continue
        fmt = launcher.committer.object_format
        if check_task(run, tasks[tid], launched.before, fmt).outcome == Outcome.VALID:
            return tid
    return None


def _facts_of(
    end: AttemptEnd, check: TaskCheck, confined: Isolated | None, parked_until: float
) -> Facts:
    """What was seen of a worker's attempt, for its verdict."""
    return Facts(
        check.outcome,
        check.reason,
        end.exit_code,
        end.signal,
        end.timed_out,
        end.stopped,
        end.tail,
        end.fault,
        end.lost,
        end.unstarted,
        not_back=end.refused or (confined.refused if isinstance(confined, Scratch) else ""),
        sandboxed=isinstance(confined, Confined),
        displaced=tuple(confined.displaced) if confined else (),
        now=time.time(),  # a reset the client announces is a wall-clock time
        parked_until=parked_until,
    )


def _ended(end: AttemptEnd, verdict: Verdict, check: TaskCheck, launched: Launched | None) -> Ended:
    """The record of a worker's attempt, judged."""
    valid = verdict.outcome == Outcome.VALID
    return Ended(
        end.task,
        end.attempt,
        end.started,
        end.ended,
        verdict.outcome,
        verdict.reason,
        end.exit_code,
        end.signal,
        end.timed_out,
        dispatch=end.dispatch,
        wrote_nothing=all(o.reason == "does not exist" for o in check.outputs),
        diagnostic=last_line(end.lost or end.tail),
        said=() if valid else tuple(last_lines(end.lost or end.tail)),
        usage=end.usage,
        made_from=launched.made_from if launched else None,
        made=check.made if valid else None,
        throttles=launched.throttles if launched else 0,
        span=end.span,
        resumed_from=launched.start.resumed_from if launched else None,
        fresh_because=launched.start.fresh_because if launched else "",
        resumed_turns=launched.start.turns if launched else 0,
    )


@contextmanager
def _signals_to(handler: Callable[[int], None]) -> Iterator[None]:
    """Route SIGINT and SIGTERM to ``handler`` while driving (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda signum, _frame: handler(signum))
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
