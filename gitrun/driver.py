"""The driver: launching attempts, judging them from disk, handing them to the committer.

At most the governor's number of attempts run at once, stage by stage. Each
attempt's outcome comes from the files on disk alone (throttled when it
failed and its output says so); it is recorded in the ledger, valid tasks go
to the background committer, and the governor decides when to back off and
when to halt. :mod:`gitrun.session` sets a driver up for start and resume.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gitrun import git, ledger
from gitrun.attempt import Attempt, AttemptEnd, Monitor
from gitrun.audit import Audit, Violation
from gitrun.committer import CommitQueue, Committed, Committer, Landing, landing_message
from gitrun.executor import command_template, render_command
from gitrun.governor import (
    PERSISTENT,
    STRICT,
    EndFacts,
    Governor,
    Halt,
    choose_canary,
    is_throttled,
    last_line,
)
from gitrun.history import find_base
from gitrun.local import LocalPaths
from gitrun.lock import RunLock
from gitrun.outputs import check_task, prepare_outputs, prior_in_tree, quarantine
from gitrun.pointer import render_pointer
from gitrun.proc import clean_env
from gitrun.reaper import kill_attempt_processes, kill_leftovers, kill_recorded_group
from gitrun.runfiles import definition_files, definition_snapshot
from gitrun.runs import RunDef, Task
from gitrun.state import RunStatus, committed_tasks, read_status, running_records

HEARTBEAT = 2.0  # seconds between owner-record heartbeats
TICK = 0.5  # longest wait before the loop looks at deadlines and signals again
AUDIT_EVERY = 2.0  # seconds between stray-write audits while attempts end

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_HALTED = 3

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


@dataclass
class RunOutcome:
    status: RunStatus
    exit_code: int
    stopped_by: str | None = None
    halt: Halt | None = None
    violations: list[Violation] = field(default_factory=list)
    load_held: float = 0.0  # seconds the load gate held starts back


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
        self.repo = run.repo
        self.local = local
        self.lock = lock
        self.committer = committer
        self.report = report
        self.progress = progress
        self.limits = run.packet.limits
        self.tasks = {task.id: task for task in run.tasks}
        self.ledger = ledger.LedgerWriter(self.repo / run.dir)
        self.journal: ledger.LineWriter | None = None  # opened when driving starts
        records = ledger.read_ledger(self.repo / run.dir)
        summary = ledger.summarize(records)
        # Attempts the ledger already holds: a driver killed between writing an
        # attempt's record and closing it in the journal must not make the
        # next resume record it again.
        self.recorded = {
            (r["task"], r["attempt"])
            for r in records
            if isinstance(r.get("task"), str) and isinstance(r.get("attempt"), int)
        }
        self.history = {tid: summary.of(tid) for tid in self.tasks}
        tip = git.rev_parse(self.repo, committer.ref)
        done = committed_tasks(run, tip, find_base(self.repo, run.id)) if tip else set()
        self.status: dict[str, str] = {}
        self.queues: dict[str, deque[str]] = {stage: deque() for stage in run.stage_names}
        # Tasks per stage still pending or running: a stage starts when the one
        # before it has none.
        self.open: dict[str, int] = dict.fromkeys(run.stage_names, 0)
        for task in run.tasks:
            if task.id in done:
                self.status[task.id] = "done"
            elif self.history[task.id].used >= self.limits.max_attempts:
                self.status[task.id] = "failed"
            else:
                self.status[task.id] = "pending"
                self.open[run.stage_of(task)] += 1
                self.queues[run.stage_of(task)].append(task.id)
        self.running: dict[str, Attempt] = {}
        self.before: dict[str, dict[str, str | None]] = {}
        self.monitor = Monitor(kill_grace=self.limits.kill_grace)
        self.base_env = clean_env()
        self.made_dirs: set[Path] = set()
        self.stop_signal: int | None = None
        self.stopping = False
        self.template = command_template(run.packet.executor)
        self.started_at = time.time()
        self.finished_here = 0
        self.governor = Governor(
            self.limits,
            tasks=len(run.tasks),
            spawns=summary.spawns,
            canary=[],
            failed=sum(1 for s in self.status.values() if s == "failed"),
            usable=len(done),
            halt=Halt(**summary.halt) if summary.halt else None,
        )
        self.halt_recorded = summary.halt is not None
        self.load_held = False  # the load gate held starts at the last look
        self.proven_stage: str | None = None  # the stage whose symlink proof holds
        self.attempt_ids: set[str] = set()  # of the attempts this session started
        self.id_of: dict[str, str] = {}  # task -> the id of its latest attempt
        # The definition as it is now, which is what this driver runs: what a
        # worker writes into it later is reported by the audit, never committed.
        self.definition = definition_snapshot(run)
        self.load_held_since = 0.0
        self.load_held_for = 0.0  # seconds held, in earlier spells
        # psutil takes ~25 ms to import; imported now, the first attempt's
        # journal record follows its start at once (a driver killed in between
        # leaves a worker the next resume cannot stop).
        import psutil  # noqa: F401

        self.audit: Audit | None = None
        self.audit_due = False  # an attempt ended since the last audit
        self.violations: list[Violation] = []

    # -- before driving -----------------------------------------------------------

    def recover_orphans(self) -> None:
        """Stop workers a dead driver left running and record their attempts;
        stop what its ended attempts left behind, too."""
        ids = {r.get("attempt_id") for r in ledger.read_lines(self.local.running)}
        for tid, record in running_records(self.local).items():
            if "pid" in record:
                stopped = kill_recorded_group(record)
            else:  # killed between the write-ahead record and the spawn's record
                stopped = kill_attempt_processes(record)
            task = self.tasks.get(tid)
            if task is None:
                continue
            number = record.get("attempt")
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                number = self.history[tid].attempts  # a damaged record: the last one known
            if (tid, number) in self.recorded:
                continue  # recorded already; only its journal entry was not closed
            prior = record.get("before")
            prior = prior if isinstance(prior, dict) else {}
            check = check_task(self.run, task, prior, self.committer.object_format)
            outcome = "valid" if check.outcome == "valid" else ledger.ABANDONED
            if check.outcome == "invalid":
                quarantine(self.repo, self.local.quarantine_of(tid, number), check.outputs)
            started = record.get("started")
            if not isinstance(started, int | float) or not math.isfinite(started):
                started = time.time()
            reason = check.reason if outcome != "valid" else ""
            self._record(tid, number, started, time.time(), None, None, False, outcome, reason)
            how = "stopped" if stopped else "nothing of it verifiably running, nothing signalled"
            self.report(f"{tid} attempt {number}: left by a dead driver; {how} ({outcome})")
        for pid in kill_leftovers(self.run.id, {i for i in ids if isinstance(i, str) and i}):
            self.report(f"stopped pid {pid}, left behind by an attempt of a dead driver")

    @functools.cached_property
    def base_tree(self) -> dict[str, tuple[str, str]]:
        """The files at the commit the run forked from (what "new content" means)."""
        base = find_base(self.repo, self.run.id)
        return git.ls_tree(self.repo, base) if base else {}

    def reconcile(self) -> None:
        """Commit valid outputs already on disk; quarantine invalid ones."""
        at_base = self.base_tree
        landings: list[Landing] = []
        for tid, status in self.status.items():
            if status == "done":
                continue
            task = self.tasks[tid]
            prior = prior_in_tree(self.run, task, at_base)
            check = check_task(self.run, task, prior, self.committer.object_format)
            history = self.history[tid]
            if check.outcome == "valid":
                landings.append(Landing(tid, history.attempts, check.outputs))
                self._set_status(tid, "done")
                self.governor.usable += 1
            elif check.outcome == "invalid":
                where = self.local.quarantine_of(tid, history.attempts)
                moved = quarantine(self.repo, where, check.outputs)
                self.report(f"{tid}: quarantined {', '.join(moved)} ({check.reason})")
        if landings:
            message = landing_message(self.run.id, landings)
            self.committer.commit(landings, self._own_files(), message)
            self.report(
                f"reconciled: committed {len(landings)} tasks whose valid outputs were on disk"
            )

    # -- the loop -----------------------------------------------------------------------

    def drive(self) -> RunOutcome:
        # Orphans are handled (recover_orphans) before a new journal begins.
        self.local.running.unlink(missing_ok=True)
        self.journal = ledger.LineWriter(self.local.running)
        self.audit = Audit(self.run)
        self._choose_canary()
        self.proven_stage = self._current_stage()  # check_run proved it just now
        commits = CommitQueue(self.committer, self._own_files, self._on_commit)
        self.commits = commits
        last_beat = last_audit = 0.0
        halted_reported = False
        with _signals_to(self._on_signal):
            try:
                while True:
                    now = time.time()
                    self._handle_stops(commits)
                    halt = self.governor.halt
                    if halt is not None and not halted_reported:
                        halted_reported = True
                        self.report(f"halted: {halt.message}")
                        self._record_halt(halt)
                    if not self.stopping and halt is None:
                        self._launch_ready(now)
                        self._say_load_gate()
                    if not self.running and not self._waiting(now):
                        break
                    self._wait_and_finish(commits, now)
                    now = time.time()
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
                        self._beat()
                        last_beat = now
                self._audit()  # before the last commit, so violations reach the ledger
                halt = self.governor.halt
                if halt is not None and not halted_reported:
                    self.report(f"halted: {halt.message}")
                    self._record_halt(halt)
            finally:
                for attempt in self.running.values():
                    attempt.stop()
                self._kill_leftovers()
                commits.flush()
                commits.close()
                self.journal.close()
                self.ledger.close()
        if commits.error is not None:
            raise commits.error
        return self._outcome()

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
            self.report(f"{reason}: terminating {len(self.running)} attempts")
            for attempt in self.running.values():
                attempt.stop()

    def _waiting(self, now: float) -> bool:
        """Nothing runs: is there still work that may start later (after a backoff
        or once the load drops)?"""
        if self.stopping or self.governor.halt is not None or self._current_stage() is None:
            return False
        return self.governor.next_wake(now) is not None

    def _outcome(self) -> RunOutcome:
        status = read_status(self.repo, self.run.id, self.run)
        halt = self.governor.halt
        stopped = None
        if self.stop_signal is not None:
            code = 128 + self.stop_signal
            stopped = signal.Signals(self.stop_signal).name
        elif halt is not None:
            code = EXIT_HALTED
        else:
            code = EXIT_DONE if status.counts()["done"] == len(self.tasks) else EXIT_FAILED
        held = self.load_held_for + (time.time() - self.load_held_since if self.load_held else 0)
        return RunOutcome(status, code, stopped, halt, self.violations, held)

    def _wait_and_finish(self, commits: CommitQueue, now: float) -> None:
        wakes = [a.next_event for a in self.running.values()]
        governor_wake = self.governor.next_wake(now)
        if governor_wake is not None:
            wakes.append(governor_wake)
        timeout = max(0.0, min([TICK, *(w - now for w in wakes)]))
        for end in self.monitor.poll(timeout):
            self._finish(end, commits)
        if self.progress is not None:
            self.progress(self._progress(time.time()))

    def _current_stage(self) -> str | None:
        return next((stage for stage in self.run.stage_names if self.open[stage]), None)

    def _set_status(self, tid: str, status: str) -> None:
        old = self.status[tid]
        stage = self.run.stage_of(self.tasks[tid])
        self.open[stage] += (status in ("pending", "running")) - (old in ("pending", "running"))
        self.status[tid] = status

    def _choose_canary(self) -> None:
        """The first `canary` open tasks run alone until one validates,
        unless some task already produced valid output."""
        stage = self._current_stage()
        if stage is None or self.governor.halt is not None:
            return
        any_done = any(s == "done" for s in self.status.values())
        self.governor.canary = choose_canary(list(self.queues[stage]), self.limits.canary, any_done)
        if self.governor.canary:
            self.report(f"canary: {', '.join(self.governor.canary)} run alone first")

    def _launch_ready(self, now: float) -> None:
        slots = self.governor.slots(len(self.running), now)
        if slots <= 0:
            return
        stage = self._current_stage()
        if stage is None or not self._stage_still_proven(stage):
            return
        pending = self.queues[stage]
        skipped: list[str] = []
        while pending and slots > 0:
            tid = pending.popleft()
            if self.status[tid] != "pending":
                continue
            if not self.governor.eligible(tid):
                skipped.append(tid)
                continue
            if self._valid_on_disk(self.tasks[tid]):
                continue
            self._launch(self.tasks[tid])
            slots -= 1
        pending.extendleft(reversed(skipped))

    def _valid_on_disk(self, task: Task) -> bool:
        """Rule 5 at the moment of dispatch: a task whose valid output is on
        disk already (written by a worker of a driver that died before it
        recorded it, or by a person) is committed, not dispatched again."""
        outputs = self.run.outputs_of(task)
        if not all(os.path.lexists(self.repo / o.path) for o in outputs):
            return False  # the usual case, one stat per output
        prior = prior_in_tree(self.run, task, self.base_tree)
        check = check_task(self.run, task, prior, self.committer.object_format)
        if check.outcome != "valid":
            return False
        self._set_status(task.id, "done")
        self.governor.usable += 1
        self.commits.put(Landing(task.id, self.history[task.id].attempts, check.outputs))
        self.report(f"{task.id}: a valid output is already on disk; committed, not dispatched")
        return True

    def _launch(self, task: Task) -> None:
        history = self.history[task.id]
        history.attempts += 1
        number = history.attempts
        outputs = [o.path for o in self.run.outputs_of(task)]
        aside = self.local.quarantine_of(task.id, number - 1)  # left before this attempt
        before = prepare_outputs(self.run, task, self.committer.object_format, aside)
        self.before[task.id] = before
        stage = self.run.stage_of(task)
        values = {
            "pointer": render_pointer(self.run, task),
            "task": task.id,
            "run": self.run.id,
            "model": self.run.packet.model_for(stage),
            "packet": self.run.packet_path,
            "attempt": str(number),
            "outputs": "\n".join(outputs),
            "stage": stage,
        }
        assert self.template is not None  # check_run refuses a command executor without one
        attempt_id = uuid.uuid4().hex
        self.attempt_ids.add(attempt_id)
        self.id_of[task.id] = attempt_id
        env = dict(self.base_env)
        env.update({f"GITRUN_{k.upper()}": v for k, v in values.items()})
        env.update(self.run.packet.executor.env)
        env["GITRUN_ATTEMPT_ID"] = attempt_id
        log = self.local.log_of(task.id, number)
        self._mkdir(log.parent)
        argv = render_command(self.template, values)
        assert self.journal is not None
        # Write-ahead: a driver killed between the spawn and the full record
        # leaves this, and the next resume finds the worker by its attempt id.
        journaled = {
            "run": self.run.id,
            "task": task.id,
            "attempt": number,
            "attempt_id": attempt_id,
            "started": time.time(),
            "before": before,
        }
        self.journal.write(journaled)
        attempt = self.monitor.launch(
            task.id, number, argv, env, self.repo, log, self.limits.timeout
        )
        self.running[task.id] = attempt
        self._set_status(task.id, "running")
        self.governor.started()
        assert self.audit is not None and self.journal is not None
        self.audit.running(task.id)
        if attempt.proc is not None:
            self.journal.write(
                {
                    **journaled,
                    # Who it is, as psutil saw it at once: a later driver
                    # signals it only if pid, create time and command line match.
                    "pid": attempt.pid,
                    "create_time": attempt.create_time,
                    "cmdline": attempt.cmdline,
                    "started": attempt.started,
                    "deadline": attempt.deadline,
                }
            )
        self.report(f"{task.id} attempt {number}: started")

    def _finish(self, end: AttemptEnd, commits: CommitQueue) -> None:
        self.running.pop(end.task, None)
        task = self.tasks[end.task]
        before = self.before.pop(end.task, None)
        check = check_task(self.run, task, before, self.committer.object_format)
        outcome = check.outcome
        if outcome == "invalid":
            quarantine(self.repo, self.local.quarantine_of(end.task, end.attempt), check.outputs)
        if outcome != "valid":
            if is_throttled(end.exit_code, end.tail, self.limits.throttle_patterns):
                outcome = ledger.THROTTLED
            elif end.stopped and not end.timed_out:
                outcome = ledger.INTERRUPTED
        history = self.history[end.task]
        counted = outcome in ledger.COUNTED
        failed_for_good = counted and history.used + 1 >= self.limits.max_attempts
        facts = EndFacts(
            end.task,
            outcome,
            end.duration,
            end.exit_code,
            end.signal,
            all(o.reason == "does not exist" for o in check.outputs),
            last_line(end.tail),
        )
        self.governor.ended(facts, time.time(), failed_for_good)
        backed_off = self.governor.concurrency if outcome == ledger.THROTTLED else None
        self._record(
            end.task,
            end.attempt,
            end.started,
            end.ended,
            end.exit_code,
            end.signal,
            end.timed_out,
            outcome,
            check.reason,
            backed_off,
        )
        assert self.journal is not None
        self.journal.write({"task": end.task, "attempt": end.attempt, "end": True})
        self.finished_here += 1
        self.audit_due = True
        how = f"signal {end.signal}" if end.signal else f"exit {end.exit_code}"
        if end.timed_out:
            how += ", timed out"
        if outcome == "valid":
            self._set_status(end.task, "done")
            commits.put(Landing(end.task, end.attempt, check.outputs))
            self.report(f"{end.task} attempt {end.attempt}: valid ({how}, {end.duration:.1f} s)")
            return
        if failed_for_good:
            self._set_status(end.task, "failed")
            verdict = f"failed for good after {history.used} attempts"
        else:
            self._set_status(end.task, "pending")
            self.queues[self.run.stage_of(task)].append(end.task)
            verdict = {
                ledger.THROTTLED: f"throttled; concurrency now {self.governor.concurrency}",
                ledger.INTERRUPTED: "pending",
            }.get(outcome, "will retry")
        detail = f": {check.reason}" if check.reason else ""
        self.report(f"{end.task} attempt {end.attempt}: {outcome} ({how}){detail} — {verdict}")

    def _record(
        self,
        tid: str,
        number: int,
        started: float,
        ended: float,
        exit_code: int | None,
        sig: int | None,
        timed_out: bool,
        outcome: str,
        reason: str,
        concurrency: int | None = None,
    ) -> None:
        record = ledger.AttemptRecord(
            tid,
            number,
            self.run.stage_of(self.tasks[tid]),
            started,
            ended,
            outcome,
            exit_code,
            sig,
            timed_out,
            reason,
            concurrency=concurrency,
        )
        self.ledger.write(record.to_json())
        self.recorded.add((tid, number))
        history = self.history[tid]
        history.attempts = max(history.attempts, number)
        history.spawns += 1
        if outcome in ledger.COUNTED:
            history.used += 1
        history.last_outcome = outcome
        history.last_reason = reason or None

    def _stage_still_proven(self, stage: str) -> bool:
        """Before a later stage starts, make the symlink proof again for its
        tasks; a link an earlier stage made halts the run instead."""
        if stage == self.proven_stage:
            return True
        self.proven_stage = stage
        from gitrun.check import stage_symlink_problems

        problems = stage_symlink_problems(self.run, stage)
        if not problems:
            return True
        self.governor.stop_for(
            Halt(
                STRICT,
                f"before stage {stage!r}: {problems[0].message}; remove the link, then "
                f"`gitrun retry {self.run.id}` and `gitrun resume {self.run.id}`",
            )
        )
        return False

    def _kill_leftovers(self) -> None:
        """What this session's workers left behind outside their process groups
        (by their attempt ids) must not write on after the run."""
        ended = self.attempt_ids - {self.id_of[task] for task in self.running}
        for pid in kill_leftovers(self.run.id, ended):
            self.report(f"stopped pid {pid}, left behind by a finished attempt")

    def _say_load_gate(self) -> None:
        """Say when the load gate starts and stops holding starts back (no silent stall)."""
        held = self.governor.waiting_for_load
        if held == self.load_held:
            return
        self.load_held = held
        now = time.time()
        if held:
            self.load_held_since = now
        else:
            self.load_held_for += now - self.load_held_since
        bound = self.limits.load_bound()
        if held:
            self.report(
                f"starts held: the load average {self.governor.load:.1f} is over max_load "
                f"{bound:g}; one attempt at a time until it drops"
            )
        else:
            self.report(f"the load average is under max_load {bound:g} again; starts resume")

    def _record_halt(self, halt: Halt) -> None:
        """A halt only a person can lift holds every later resume (``retry`` lifts it)."""
        if halt.kind in PERSISTENT and not self.halt_recorded:
            self.halt_recorded = True
            record = {"event": ledger.HALT, "kind": halt.kind, "message": halt.message}
            self.ledger.write({**record, "at": ledger.iso(time.time())})

    def _audit(self) -> None:
        if self.audit is None:
            return
        for violation in self.audit.check(self.running):
            self.violations.append(violation)
            self.ledger.write(violation.to_record())
            self.report(f"ownership violation: {violation.describe()}")
            if self.run.packet.ownership.strict:
                self.governor.stop_for(Halt(STRICT, f"ownership violation: {violation.describe()}"))

    def _beat(self) -> None:
        state = self.governor.snapshot()
        state["kill_grace"] = self.limits.kill_grace
        state["running"] = [
            {"task": a.task, "attempt": a.number, "started": a.started, "deadline": a.deadline}
            for a in self.running.values()
        ]
        self.lock.beat(state)

    def _progress(self, now: float) -> Progress:
        counts = dict.fromkeys(("done", "running", "pending", "failed"), 0)
        for status in self.status.values():
            counts[status] += 1
        rate = self.finished_here / max(1e-6, now - self.started_at)
        left = counts["pending"] + counts["running"]
        return Progress(
            counts=counts,
            running=[(a.task, a.number, now - a.started) for a in self.running.values()],
            concurrency=self.governor.concurrency,
            max_concurrency=self.limits.concurrency,
            backoff=max(0.0, self.governor.backoff_until - now),
            waiting_for_load=self.governor.waiting_for_load,
            canary=list(self.governor.canary),
            spawns=self.governor.spawns,
            usable=counts["done"],
            eta=left / rate if rate > 0 and self.finished_here >= 3 else None,
        )

    def _mkdir(self, path: Path) -> None:
        if path not in self.made_dirs:
            path.mkdir(parents=True, exist_ok=True)
            self.made_dirs.add(path)

    def _own_files(self) -> dict[str, bytes]:
        return definition_files(self.run, self.ledger, self.definition)

    def _on_commit(self, committed: Committed) -> None:
        if committed.tasks:
            self.report(f"committed {', '.join(committed.tasks)} as {committed.commit[:10]}")

    def _on_signal(self, signum: int) -> None:
        self.stop_signal = signum


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
