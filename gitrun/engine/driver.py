"""The driver: launching attempts, judging them from disk, handing them to the committer.

At most the governor's number of attempts run at once, stage by stage. Each
attempt's outcome is judged from the files on disk and what was seen of it
(:mod:`gitrun.engine.verdict`); it is recorded in the ledger, valid tasks go
to the background committer, and the governor decides when to back off and
when to halt; the run says how it goes (:mod:`gitrun.engine.progress`).
:mod:`gitrun.commands.session` sets a driver up for start and resume.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gitrun.clock import to_wall
from gitrun.definition.inputs import bundle_paths
from gitrun.definition.load import RunDef, Task
from gitrun.definition.outputs import check_task, prepare_outputs, prior_in_tree, quarantine
from gitrun.definition.provenance import Provenance
from gitrun.definition.runfiles import (
    definition_files,
    definition_snapshot,
    open_ledger,
)
from gitrun.engine.audit import Audit, Signature, Violation
from gitrun.engine.audit import signature as audit_signature
from gitrun.engine.committer import CommitQueue, Committed, Committer, Landing
from gitrun.engine.crashpoints import crash_point
from gitrun.engine.governor import ENVIRONMENT, STRICT, Halt, last_line
from gitrun.engine.progress import (
    LoadGate,
    Progress,
    Reporter,
    RunOutcome,
    ended_line,
    live_state_of,
    progress_of,
)
from gitrun.engine.recovery import bring_back, reconcile, recover_orphans
from gitrun.engine.states import (
    COMPLETE,
    DONE,
    FAILED,
    PENDING,
    Ended,
    Engine,
    committed_tasks,
)
from gitrun.engine.status import RunStatus, read_status, status_of
from gitrun.engine.strays import fold_denials
from gitrun.engine.traces import NoTraces, Traces, open_traces
from gitrun.engine.verdict import Facts, Park, Rules, judge
from gitrun.errors import EXIT_DONE, EXIT_FAILED, EXIT_HALTED
from gitrun.processes import reaper
from gitrun.processes.proc import clean_env
from gitrun.processes.reaper import kill_leftovers
from gitrun.store import git, ledger
from gitrun.store.journal import Journal, JournalEntry
from gitrun.store.jsonlines import shown
from gitrun.store.local import LocalPaths
from gitrun.store.lock import RunLock
from gitrun.visible import last_lines, visible
from gitrun.words import counted
from gitrun.workers.attempt import AttemptEnd, Monitor, Runner, RunningAttempt
from gitrun.workers.executor import command_template, render_command
from gitrun.workers.pointer import attempt_values
from gitrun.workers.sandbox import (
    Claims,
    Confined,
    Isolated,
    Isolation,
    Plan,
    claims_of,
    isolation_of,
    left_by,
    plan_of,
)
from gitrun.workers.scratch import AttemptFiles, Scratch
from gitrun.workers.workerfiles import worker_files

# What commands build a driver with, and get back from it.
__all__ = ["Driver", "Progress", "Reporter", "RunOutcome"]

HEARTBEAT = 2.0  # seconds between owner-record heartbeats
TICK = 0.5  # longest wait before the loop looks at deadlines and signals again
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
        self.repo = run.repo
        self.local = local
        self.lock = lock
        self.committer = committer
        self.report = report
        self.progress = progress
        self.limits = run.limits
        self.tasks = run.tasks_by_id
        self.journal: Journal | None = None  # started when driving starts
        self.traces: Traces = NoTraces()  # opened when driving starts (gitrun.engine.traces)
        # Nothing runs yet: the attempts a dead driver's journal names are
        # recovered (recover) before this driver starts its own.
        tip = committer.last_tip or git.rev_parse(self.repo, committer.ref)
        self.ledger = open_ledger(run, tip)
        # Its deadlines, backoff and holds on the monotonic clock (gitrun.clock).
        self.engine = Engine(run, local, tip, running=(), clock=time.monotonic)
        self.governor = self.engine.governor
        self.running: dict[str, RunningAttempt] = {}
        self.before: dict[str, dict[str, str | None]] = {}
        # What each running attempt makes its outputs from, as its launch found it.
        self.made_from: dict[str, dict[str, str]] = {}
        # The tries of each running attempt's number the API throttled before it.
        self.throttles: dict[str, int] = {}
        self.provenance = Provenance(run, worker_files(run))
        self.monitor = self._runner()
        self.base_env = _worker_env()
        self.made_logs = False  # the logs directory was made
        self.id_prefix = uuid.uuid4().hex[:24]
        self.launched = 0
        self.stop_signal: int | None = None
        self.stopping = False
        self.template = command_template(run.packet.executor)
        self.started_at = time.monotonic()
        self.finished_here = 0
        self.load_gate = LoadGate(self.limits, report)
        self.proven_stage: str | None = None  # the stage whose symlink proof holds
        self.attempt_ids: set[str] = set()  # of the attempts this session started
        self.id_of: dict[str, str] = {}  # task -> the id of its latest attempt
        # The definition as it is now, which is what this driver runs: what a
        # worker writes into it later is reported by the audit, never committed.
        self.definition = definition_snapshot(run)
        # Where identities come from psutil (no /proc), it takes ~25 ms to
        # import; imported now, the first attempt's journal record follows its
        # start at once (a driver killed in between leaves a worker the next
        # resume cannot stop). With /proc, a start needs no psutil at all.
        if not reaper.HAS_PROC:  # pragma: no cover - macOS and the BSDs
            import psutil  # noqa: F401

        # Isolation (gitrun.workers.sandbox, .scratch): decided as driving
        # begins; each task's plan made at its first launch; each running
        # attempt's own.
        self.isolation = Isolation()
        self.plans: dict[str, Plan] = {}
        self.confined: dict[str, Isolated] = {}
        self.audit: Audit | None = None
        self.audit_due = False  # an attempt ended since the last audit
        self.violations: list[Violation] = []
        self.at_start: dict[str, Signature] = {}  # the audit's first look (drive)

    def _isolate(self) -> None:
        """Decide how this driver's attempts are confined, and say so; a
        sandbox asked for and not to be had here halts the run (running
        its workers unconfined instead is the user's choice, not gitrun's)."""
        # What a dead driver's isolated attempts left (their own files were
        # brought back by recover_orphans): none of the rest counts.
        sandboxes = self.local.sandboxes
        with contextlib.suppress(OSError):  # a FIFO or a link there: removed, never opened
            if not stat.S_ISDIR(os.lstat(sandboxes).st_mode):
                os.unlink(sandboxes)
        for folder in os.listdir(sandboxes) if sandboxes.is_dir() else ():
            left = left_by(sandboxes / folder, self.repo)
            if isinstance(left, Scratch):
                left.discard()  # its scratch directory lies outside the git directory
        shutil.rmtree(self.local.sandboxes, ignore_errors=True)
        self.isolation = isolation_of(self.run, self.base_env)
        self.template = command_template(self.run.packet.executor, self.isolation.confined)
        if self.isolation.problem:
            self.governor.stop_for(
                Halt(
                    ENVIRONMENT,
                    f"environment fault: {self.isolation.problem}; then `gitrun retry "
                    f"{self.run.id}` and `gitrun resume {self.run.id}`",
                )
            )
        elif self.isolation.said:
            self.report(
                self.isolation.said if self.isolation.confined else f"notice: {self.isolation.said}"
            )

    def _place(self, task: Task, attempt_id: str, values: dict[str, str]) -> tuple[list[str], Path]:
        """Where an attempt of ``task`` runs: the command that starts it
        confined (nothing when attempts are not) and its working directory,
        the repository or its scratch directory (then ``values`` tell the
        worker so: ``{repo}`` and ``$GITRUN_REPO`` name it)."""
        mode = self.isolation.mode
        if mode == "scratch":
            outputs = tuple(self.run.output_paths(task))
            cap = self.limits.max_output_bytes
            scratch = Scratch(self.repo, self.local.sandboxes / attempt_id, outputs, cap)
            self.confined[task.id] = scratch
            place = scratch.start(self.attempt_files.files_of(task))
            values["repo"] = str(place)
            return [], place
        if mode != "sandbox":
            return [], self.repo
        plan = self.plans.get(task.id)
        if plan is None:
            plan = self.plans[task.id] = plan_of(self.run, task)
        git_dirs = {self.local.root.parent.parent, self.local.here.parent.parent}
        inputs = values["inputs"].splitlines()
        confined = Confined(
            self.repo,
            plan,
            self.local.sandboxes / attempt_id,
            tuple(self.run.owns_of(task)),
            tuple(self.run.output_paths(task)),
            (*inputs, *(bundle_paths(self.run, task) if task.bundle else ())),
            tuple(d for d in sorted(git_dirs) if not d.is_relative_to(self.repo)),
            (self.local.logs,),
            task.id,
            self.claims,
        )
        self.confined[task.id] = confined
        prefix = confined.prefix()
        for directory in confined.unbound:
            self.report(
                f"{task.id}: {visible(directory)} is reached through a link, so it stays "
                "read-only for the attempt (remove the link)"
            )
        return prefix, self.repo

    @functools.cached_property
    def claims(self) -> Claims:
        """Every task's literal owned names, by directory: the walls of a
        confined attempt's staging directories (made once a run)."""
        return claims_of(self.run)

    @functools.cached_property
    def attempt_files(self) -> AttemptFiles:
        """What a scratch attempt takes with it (as a Ray node's does)."""
        return AttemptFiles(self.run, self.engine.base)

    def _runner(self) -> Runner:
        """Where attempts run: child processes here, or tasks on a Ray cluster
        (imported only then: Ray is an optional extra, and heavy)."""
        if self.run.packet.executor.kind == "ray":
            from gitrun.workers.ray.executor import RayRunner

            return RayRunner(self.run, self.engine.base, self.report)
        return Monitor(kill_grace=self.limits.kill_grace)

    # -- before driving -----------------------------------------------------------

    def recover(self) -> None:
        """Stop what a dead driver of this run left running and record its attempts."""
        recover_orphans(
            self.run, self.engine, self.ledger, self.committer.object_format, self.report
        )

    @functools.cached_property
    def base_tree(self) -> dict[str, tuple[str, str]]:
        """The files at the commit the run forked from (what "new content" means)."""
        base = self.engine.base
        return git.ls_tree(self.repo, base) if base else {}

    def reconcile(self) -> None:
        """Commit valid outputs already on disk; quarantine invalid ones."""
        reconcile(
            self.run, self.engine, self.committer, self.base_tree, self._own_files, self.report
        )

    # -- the loop -----------------------------------------------------------------------

    def drive(self) -> RunOutcome:
        # Orphans are handled (recover_orphans) before a new journal begins.
        self.journal = Journal(self.local)
        self.traces = open_traces(self.run.id, len(self.tasks), self.report)
        self._isolate()
        parked = self.governor.parked_text(
            time.monotonic()
        )  # from the ledger: a usage limit's reset
        if parked:
            self.report(
                f"{parked}: nothing starts before the reset, and the run goes on by itself then"
            )
        self.audit = Audit(self.run)
        # The work tree's changes as driving began: an output that is not as
        # it was then appeared while this driver's attempts ran.
        self.at_start = dict(self.audit.known)
        self._choose_canary()
        self.proven_stage = self.engine.current_stage()  # check_run proved it just now
        commits = CommitQueue(self.committer, self._own_files, self._on_commit)
        self.commits = commits
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
                        self._launch_ready(now)
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
                self._kill_leftovers()
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
        return self._outcome()

    def _halted(self, halt: Halt) -> None:
        self.report(f"halted: {halt.message}")
        self.engine.record_halt(self.ledger)
        self.traces.event("halt", {"gitrun.halt": halt.kind, "message": halt.message})

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
        """Nothing runs: is there still work that may start later (after a backoff
        or once the load drops)?"""
        if self.stopping or self.governor.halt is not None or self.engine.current_stage() is None:
            return False
        return self.governor.next_wake(now) is not None

    def _outcome(self) -> RunOutcome:
        status = self._summary()
        halt = self.governor.halt
        stopped = None
        if self.stop_signal is not None:
            code = 128 + self.stop_signal
            stopped = signal.Signals(self.stop_signal).name
        elif halt is not None:
            code = EXIT_HALTED
        else:
            complete = sum(status.counts()[s] for s in COMPLETE)
            code = EXIT_DONE if complete == len(self.tasks) else EXIT_FAILED
        held = self.load_gate.held_for()
        return RunOutcome(status, code, stopped, halt, self.violations, held)

    def _summary(self) -> RunStatus:
        """The run's status at the end, as ``gitrun status`` reads it next
        (no driver shown: this one is letting go of the run).

        From this driver's own engine when that is provably the same answer:
        every attempt it started ended and was recorded through the engine
        (which keeps its records and summary as a read of the ledger finds
        them), every landing was committed by this committer (the run's lock
        keeps other writers off the branch, so its last commit is the tip),
        and the tasks done in the engine are the tasks done at that tip (one
        ``diff-tree``: a task judged valid against its launch may have put
        back the content of the fork point, which is not done). Otherwise
        (stopped by a signal, nothing committed here, the two disagree) the
        engine is loaded again from the branch, the ledger and the journal."""
        tip = self.committer.last_tip
        if self.stop_signal is None and not self.running and tip is not None:
            engine = self.engine
            done = {tid for tid, status in engine.status.items() if status == DONE}
            if committed_tasks(self.run, tip, engine.base, engine.summary.made) == done:
                return status_of(self.run, engine, tip, self.repo, driver=None)
        status = read_status(self.repo, self.run.id, self.run)
        status.driver = None
        return status

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
            self.progress(
                progress_of(self.engine, running, self.finished_here, self.started_at, now)
            )

    def _choose_canary(self) -> None:
        if self.engine.choose_canary():
            self.report(f"canary: {', '.join(self.governor.canary)} run alone first")

    def _launch_ready(self, now: float) -> None:
        stage = self.engine.current_stage()
        slots = self.governor.slots(len(self.running), now, stage)
        if slots <= 0:
            return
        if stage is None or not self._stage_still_proven(stage):
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
            if self._launch(self.tasks[tid]):
                slots -= 1
        pending.extendleft(reversed(skipped))

    def _valid_on_disk(self, task: Task) -> bool | None:
        """Outputs decide, even at the moment of dispatch: a task whose valid
        output is on disk as it was when driving began (a dead driver's
        worker's, say) is committed, not dispatched again. One that appeared
        since, while attempts of other tasks ran, is none of this task's
        work (a worker wrote its neighbour's output): it is set aside as
        suspect, recorded with the tasks that were running, and the task
        dispatched. True: committed; None: set aside; False: not valid.
        Asked only when every output is a regular file there."""
        prior = prior_in_tree(self.run, task, self.base_tree)
        check = check_task(self.run, task, prior, self.committer.object_format)
        if check.outcome != "valid":
            return False
        appeared = [o.path for o in check.outputs if self._appeared(o.path, o.blob)]
        if appeared:
            number = self.engine.history[task.id].attempts
            where = self.local.quarantine_of(task.id, number)
            quarantine(self.repo, where, check.outputs, suspect=True)
            suspects = self._out_when_written(appeared)
            record = {
                "event": "suspect",
                "task": task.id,
                "paths": appeared,
                "tasks": suspects,
                "aside": number,  # kept under its last attempt's number (gitrun.engine.strays)
                "at": ledger.iso(time.time()),
            }
            self.engine.write(self.ledger, record)
            self.report(
                f"{task.id}: {', '.join(visible(p) for p in appeared)} appeared while other "
                f"tasks ran ({', '.join(suspects) or 'which, unknown'}), not by an attempt of "
                f"{task.id}: set aside in {shown(where)}, and {task.id} dispatched"
            )
            return None
        self.engine.mark_done(task.id)
        self.commits.put(Landing(task.id, self.engine.history[task.id].attempts, check.outputs))
        self.report(f"{task.id}: a valid output is already on disk; committed, not dispatched")
        return True

    def _out_when_written(self, paths: list[str]) -> list[str]:
        """The tasks that were out when ``paths`` changed, as the audit saw
        them (or that are out since its last look, when it has not looked)."""
        assert self.audit is not None
        found: set[str] = set()
        for path in paths:
            found.update(self.audit.seen_with.get(path) or self.audit.active | set(self.running))
        return sorted(found)

    def _appeared(self, path: str, blob: str) -> bool:
        """Whether the output at ``path`` (content ``blob``) is not as it was
        when driving began: neither the base commit's file nor the one in
        the work tree then."""
        if path in self.base_tree and self.base_tree[path][1] == blob:
            return False
        return self.at_start.get(path, None) != audit_signature(self.repo / path)

    def _launch(self, task: Task) -> bool:
        """Start an attempt of ``task``; False when its valid output was on
        disk already (committed instead)."""
        number, throttles = self.engine.history[task.id].upcoming
        # Where a link standing at an output goes (left before this attempt).
        aside = functools.partial(self.local.quarantine_of, task.id, number - 1)
        before = prepare_outputs(self.run, task, self.committer.object_format, aside)
        # Each output's state at launch answers whether it is on disk at all
        # (a mark: a regular file there), so the usual launch asks nothing more.
        if None not in before.values():
            found = self._valid_on_disk(task)
            if found:
                return False
            if found is None:  # set aside: its outputs are not on disk now
                before = prepare_outputs(self.run, task, self.committer.object_format, aside)
        self.before[task.id] = before
        made_from = self.made_from[task.id] = self.provenance.of(task).to_json()
        values = attempt_values(self.run, task, number)
        assert self.template is not None  # check_run refuses a command executor without one
        attempt_id = self._next_attempt_id()
        self.attempt_ids.add(attempt_id)
        self.id_of[task.id] = attempt_id
        confine, cwd = self._place(task, attempt_id, values)
        env = {**self.base_env, **{_env_name(k): v for k, v in values.items()}}
        env.update(self.run.packet.executor.env)
        env["GITRUN_ATTEMPT_ID"] = attempt_id
        env.update(self.traces.attempt_started(task.id, number, time.time()))
        log = self.local.log_of(task.id, number)
        self.local.prune_logs(task.id, number)
        if not self.made_logs:
            log.parent.mkdir(parents=True, exist_ok=True)
            self.made_logs = True
        argv = render_command(self.template, values)
        assert self.journal is not None
        # Write-ahead: a driver killed between the spawn and the full record
        # leaves this, and the next resume finds the worker by its attempt id.
        ahead = JournalEntry(
            task.id,
            number,
            self.run.id,
            attempt_id,
            time.time(),
            before,
            made_from=made_from,
            throttles=throttles,
        )
        self.journal.write(ahead)
        crash_point("launch.ahead")
        attempt = self.monitor.launch(
            task.id, number, argv, env, cwd, log, self.limits.timeout, confine
        )
        crash_point("launch.spawned")
        self.running[task.id] = attempt
        self.throttles[task.id] = throttles
        self.engine.begin(task.id)
        assert self.audit is not None
        self.audit.running(task.id)
        if attempt.pid:
            # Who it is, as psutil saw it at once: a later driver signals it
            # only if pid, create time and command line match.
            spawned = JournalEntry(
                task.id,
                number,
                self.run.id,
                attempt_id,
                attempt.started,
                before,
                attempt.pid,
                attempt.create_time,
                attempt.cmdline,
                to_wall(attempt.deadline),  # a later driver reads it
                made_from=made_from,
                throttles=throttles,
            )
            self.journal.write(spawned)
            crash_point("launch.journaled")
        again = f" again, after {throttles} throttled" if throttles else ""
        self.report(f"{task.id} attempt {number}: started{again}")
        return True

    def _next_attempt_id(self) -> str:
        """A new attempt's id, unique to it: 96 random bits drawn once per
        driver, then its count (uuid4's 32 hex digits, without a read of the
        random device per launch)."""
        self.launched += 1
        return f"{self.id_prefix}{self.launched:08x}"

    def _finish(self, end: AttemptEnd, commits: CommitQueue) -> None:
        self.running.pop(end.task, None)
        task = self.tasks[end.task]
        before = self.before.pop(end.task, None)
        made_from = self.made_from.pop(end.task, None)
        throttles = self.throttles.pop(end.task, 0)
        confined = self.confined.pop(end.task, None)
        if confined:
            bring_back(confined, self.engine, self.ledger, end.task, end.attempt, self.report)
        check = check_task(self.run, task, before, self.committer.object_format)
        if check.outcome == ledger.INVALID:
            quarantine(self.repo, self.local.quarantine_of(end.task, end.attempt), check.outputs)
        facts = Facts(
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
            parked_until=self.governor.parked_until,
        )
        client = os.path.basename(self.template[0]) if self.template else "the worker"
        verdict = judge(facts, Rules(self.run.id, self.limits, client))
        outcome, reason = verdict.outcome, verdict.reason
        if verdict.halt is not None:
            self.governor.stop_for(verdict.halt)
        if verdict.park is not None:
            self._park(verdict.park)
        ended = Ended(
            end.task,
            end.attempt,
            end.started,
            end.ended,
            outcome,
            reason,
            end.exit_code,
            end.signal,
            end.timed_out,
            dispatch=end.dispatch,
            wrote_nothing=all(o.reason == "does not exist" for o in check.outputs),
            diagnostic=last_line(end.lost or end.tail),
            said=() if outcome == ledger.VALID else tuple(last_lines(end.lost or end.tail)),
            usage=end.usage,
            made_from=made_from,
            made=check.made if outcome == ledger.VALID else None,
            throttles=throttles,
            span=end.span,
        )
        crash_point("end.judged")
        fold_denials(self.engine, self.ledger, end.task, end.attempt)
        status = self.engine.end(self.ledger, ended)
        self.traces.attempt_ended(ended)
        crash_point("end.recorded")
        assert self.journal is not None
        self.journal.write(JournalEntry(end.task, end.attempt, end=True, throttles=throttles))
        crash_point("end.closed")
        self.finished_here += 1
        self.audit_due = True
        if outcome == ledger.VALID:
            commits.put(Landing(end.task, end.attempt, check.outputs, made_from))
        used = self.engine.history[end.task].used if status == FAILED else None
        log = self.local.log_of(end.task, end.attempt)
        self.report(ended_line(end, outcome, reason, used, self.governor.concurrency, log))

    def _park(self, park: Park) -> None:
        """Park the run for a usage limit: no new starts until its reset (the
        running attempts finish), recorded so that a later driver waits too."""
        self.engine.record_park(self.ledger, park.until, park.reason)
        self.traces.event("park", {"gitrun.until": ledger.iso(park.until), "reason": park.reason})
        if self.commits is not None:  # on the branch now: a move to another clone waits too
            self.commits.flush()
        read = (
            f" (its reset could not be read from {park.unread!r}: limits.park_default)"
            if park.unread
            else ""
        )
        self.report(
            f"{self.governor.parked_text(time.monotonic())}{read}: no new starts, running attempts finish, and "
            "the run goes on by itself at the reset"
        )

    def _stage_still_proven(self, stage: str) -> bool:
        """Before a later stage starts, make the symlink proof again for its
        tasks; a link an earlier stage made halts the run instead."""
        if stage == self.proven_stage:
            return True
        self.proven_stage = stage
        from gitrun.proof.check import stage_symlink_problems

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

    def _audit(self) -> None:
        if self.audit is None:
            return
        for violation in self.audit.check(self.running):
            self.engine.write(self.ledger, violation.to_record())
            if violation.edit:
                self.report(
                    f"notice: {violation.describe()}; this driver goes on with the definition it "
                    f"started with, and `gitrun resume {self.run.id} --take-edits` takes the edit"
                )
                continue
            self.violations.append(violation)
            self.report(f"ownership violation: {violation.describe()}")
            if self.run.packet.ownership.strict:
                self.governor.stop_for(Halt(STRICT, f"ownership violation: {violation.describe()}"))

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


@functools.cache
def _env_name(placeholder: str) -> str:
    """The variable a placeholder's value reaches a worker in: ``GITRUN_TASK``..."""
    return f"GITRUN_{placeholder.upper()}"


def _worker_env() -> dict[str, str]:
    """The environment every worker starts from. Its hooks call ``gitrun``
    (installed hooks fail closed: a gitrun they cannot find blocks every
    write), so when PATH has none, the directory of this installation's
    ``gitrun`` script joins the end of PATH (a venv's bin/, run without
    activating it); it never shadows the user's own programs."""
    env = clean_env()
    path = env.get("PATH", os.defpath)
    here = Path(sys.executable).parent
    if shutil.which("gitrun", path=path) is None and (here / "gitrun").is_file():
        env["PATH"] = f"{path}{os.pathsep}{here}" if path else str(here)
    return env


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
