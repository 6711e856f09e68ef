"""Launching an attempt: where it runs, with what, and the journal's word for it.

A task at its turn is first looked for on disk (outputs decide, even at the
moment of dispatch: a valid output there is committed, not dispatched; one
that appeared while other tasks ran is set aside as suspect). Otherwise its
attempt is placed (confined by bubblewrap, in a scratch directory, or in the
repository, as the run's isolation decides), journaled ahead of its spawn,
started by the runner (child processes here, or a Ray cluster) and journaled
again with who it is. :class:`Launcher` keeps what each running attempt's end
needs (its outputs' marks at launch, its provenance, its confinement), and
hands it over with :meth:`Launcher.take`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.clock import to_wall
from gitrun.definition.inputs import bundle_paths
from gitrun.definition.load import RunDef, Task
from gitrun.definition.outputs import (
    check_task,
    prepare_outputs,
    prior_in_tree,
    quarantine,
)
from gitrun.definition.provenance import Provenance
from gitrun.engine.audit import Audit, Signature
from gitrun.engine.audit import signature as audit_signature
from gitrun.engine.commitqueue import CommitQueue
from gitrun.engine.committer import Committer, Landing
from gitrun.engine.crashpoints import crash_point
from gitrun.engine.governor import ENVIRONMENT, STRICT, Halt
from gitrun.engine.progress import Reporter
from gitrun.engine.salvage import Salvage, Start
from gitrun.engine.states import Engine
from gitrun.engine.traces import NoTraces, Traces
from gitrun.processes import reaper
from gitrun.processes.proc import clean_env
from gitrun.processes.reaper import kill_leftovers
from gitrun.proof.check import stage_symlink_problems
from gitrun.store import git, ledger
from gitrun.store.events import Outcome, Suspect, iso
from gitrun.store.journal import Journal, JournalEntry
from gitrun.store.jsonlines import shown
from gitrun.store.local import LocalPaths
from gitrun.visible import visible
from gitrun.workers.attempt import Monitor, Runner, RunningAttempt
from gitrun.workers.executor import command_template, render_command
from gitrun.workers.pointer import attempt_values
from gitrun.workers.ray.executor import RayRunner
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


@dataclass(frozen=True)
class Launched:
    """What a running attempt's end needs from its launch."""

    before: dict[str, str | None]  # each output's mark at launch
    made_from: dict[str, str]  # what it makes its outputs from, as its launch found it
    throttles: int  # the tries of its number the API throttled before it
    confined: Isolated | None  # its sandbox or scratch directory (None: the repository)
    start: Start = field(default_factory=Start)  # its conversation, the try it continues


class Placement:
    """Where a driver's attempts run: confined by bubblewrap (a plan per
    task), each in a scratch directory, or in the repository itself, as
    the run's isolation decides when driving begins; and the worker's
    command, which confinement changes."""

    def __init__(
        self, run: RunDef, local: LocalPaths, engine: Engine, env: dict[str, str], report: Reporter
    ) -> None:
        self.run = run
        self.repo = run.repo
        self.local = local
        self.engine = engine
        self.env = env
        self.report = report
        # Isolation (gitrun.workers.sandbox, .scratch): decided as driving
        # begins; each task's plan made at its first launch.
        self.isolation = Isolation()
        self.plans: dict[str, Plan] = {}
        self.template = command_template(run.packet.executor)
        self.resumed_template = command_template(run.packet.executor, resumed=True)

    @property
    def client(self) -> str:
        """The worker's program, as a usage limit's or billing's sentence names it."""
        return os.path.basename(self.template[0]) if self.template else "the worker"

    def isolate(self) -> None:
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
        self.isolation = isolation_of(self.run, self.env)
        executor, confined = self.run.packet.executor, self.isolation.confined
        self.template = command_template(executor, confined)
        self.resumed_template = command_template(executor, confined, resumed=True)
        if self.isolation.problem:
            self.engine.governor.stop_for(
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

    def place(
        self, task: Task, attempt_id: str, values: dict[str, str]
    ) -> tuple[list[str], Path, Isolated | None]:
        """Where an attempt of ``task`` runs: the command that starts it
        confined (nothing when attempts are not), its working directory,
        the repository or its scratch directory (then ``values`` tell the
        worker so: ``{repo}`` and ``$GITRUN_REPO`` name it), and its
        confinement."""
        mode = self.isolation.mode
        run, local = self.run, self.local
        if mode == "scratch":
            outputs = tuple(run.output_paths(task))
            cap = run.limits.max_output_bytes
            scratch = Scratch(self.repo, local.sandboxes / attempt_id, outputs, cap)
            place = scratch.start(self.attempt_files.files_of(task))
            values["repo"] = str(place)
            return [], place, scratch
        if mode != "sandbox":
            return [], self.repo, None
        plan = self.plans.get(task.id)
        if plan is None:
            plan = self.plans[task.id] = plan_of(run, task)
        git_dirs = {local.root.parent.parent, local.here.parent.parent}
        inputs = values["inputs"].splitlines()
        confined = Confined(
            self.repo,
            plan,
            local.sandboxes / attempt_id,
            tuple(run.owns_of(task)),
            tuple(run.output_paths(task)),
            (*inputs, *(bundle_paths(run, task) if task.bundle else ())),
            tuple(d for d in sorted(git_dirs) if not d.is_relative_to(self.repo)),
            (local.logs,),
            task.id,
            self.claims,
        )
        prefix = confined.prefix()
        for directory in confined.unbound:
            self.report(
                f"{task.id}: {visible(directory)} is reached through a link, so it stays "
                "read-only for the attempt (remove the link)"
            )
        return prefix, self.repo, confined

    @functools.cached_property
    def claims(self) -> Claims:
        """Every task's literal owned names, by directory: the walls of a
        confined attempt's staging directories (made once a run)."""
        return claims_of(self.run)

    @functools.cached_property
    def attempt_files(self) -> AttemptFiles:
        """What a scratch attempt takes with it (as a Ray node's does)."""
        return AttemptFiles(self.run, self.engine.base)


class Launcher:
    """Starts the attempts of one driver, and keeps what each one's end needs."""

    def __init__(
        self,
        run: RunDef,
        local: LocalPaths,
        engine: Engine,
        writer: ledger.LedgerWriter,
        committer: Committer,
        report: Reporter,
    ) -> None:
        self.run = run
        self.repo = run.repo
        self.local = local
        self.engine = engine
        self.ledger = writer
        self.committer = committer
        self.report = report
        self.running: dict[str, RunningAttempt] = {}
        self.launched: dict[str, Launched] = {}
        self.provenance = Provenance(run, worker_files(run))
        self.monitor = self._runner()
        self.base_env = _worker_env()
        self.placement = Placement(run, local, engine, self.base_env, report)
        self.salvage = Salvage(run, self.base_env)
        self.made_logs = False  # the logs directory was made
        self.id_prefix = uuid.uuid4().hex[:24]
        self.count = 0  # attempts started by this driver
        self.attempt_ids: set[str] = set()  # of the attempts this session started
        self.id_of: dict[str, str] = {}  # task -> the id of its latest attempt
        # Where identities come from psutil (no /proc), it takes ~25 ms to
        # import; imported now, the first attempt's journal record follows its
        # start at once (a driver killed in between leaves a worker the next
        # resume cannot stop). With /proc, a start needs no psutil at all.
        if not reaper.HAS_PROC:  # pragma: no cover - macOS and the BSDs
            reaper.identity(os.getpid())  # psutil loads now

        # Set as driving begins (:meth:`begin`).
        self.journal: Journal | None = None
        self.traces: Traces = NoTraces()
        self.audit: Audit | None = None
        self.commits: CommitQueue | None = None
        self.at_start: dict[str, Signature] = {}  # the audit's first look
        self.proven_stage: str | None = None  # the stage whose symlink proof holds

    def begin(self, journal: Journal, traces: Traces, audit: Audit, commits: CommitQueue) -> None:
        """Driving begins: attempts are journaled and traced here, their writes
        audited, and valid outputs found on disk committed through ``commits``."""
        self.journal, self.traces, self.audit, self.commits = journal, traces, audit, commits
        # The work tree's changes as driving began: an output that is not as
        # it was then appeared while this driver's attempts ran.
        self.at_start = dict(audit.known)
        self.proven_stage = self.engine.current_stage()  # check_run proved it just now

    @functools.cached_property
    def base_tree(self) -> dict[str, tuple[str, str]]:
        """The files at the commit the run forked from (what "new content" means)."""
        base = self.engine.base
        return git.ls_tree(self.repo, base) if base else {}

    def launch(self, task: Task) -> bool:
        """Start an attempt of ``task``; False when its valid output was on
        disk already (committed instead)."""
        history = self.engine.history[task.id]
        number, throttles = history.upcoming
        values = attempt_values(self.run, task, number)
        start = self.salvage.start(history, values)
        if not start.resumed and history.conversation:
            self._set_aside_kept(task, number - 1)
        # Where a link standing at an output goes (left before this attempt).
        aside = functools.partial(self.local.quarantine_of, task.id, number - 1)
        object_format = self.committer.object_format
        before = prepare_outputs(self.run, task, object_format, aside)
        # Each output's state at launch answers whether it is on disk at all
        # (a mark: a regular file there), so the usual launch asks nothing more.
        if None not in before.values():
            found = self._valid_on_disk(task)
            if found:
                return False
            if found is None:  # set aside: its outputs are not on disk now
                before = prepare_outputs(self.run, task, object_format, aside)
        made_from = self.provenance.of(task).to_json()
        template = self.placement.resumed_template if start.resumed else self.placement.template
        assert template is not None  # check_run refuses a command executor without one
        attempt_id = self._next_attempt_id()
        self.attempt_ids.add(attempt_id)
        self.id_of[task.id] = attempt_id
        confine, cwd, confined = self.placement.place(task, attempt_id, values)
        self.launched[task.id] = Launched(before, made_from, throttles, confined, start)
        env = {**self.base_env, **{_env_name(k): v for k, v in values.items()}}
        env.update(self.run.packet.executor.env)
        env["GITRUN_ATTEMPT_ID"] = attempt_id
        env.update(self.traces.attempt_started(task.id, number, time.time()))
        log = self.local.log_of(task.id, number)
        self.local.prune_logs(task.id, number)
        if not self.made_logs:
            log.parent.mkdir(parents=True, exist_ok=True)
            self.made_logs = True
        argv = render_command(template, values)
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
            conversation=start.conversation,
            resumed_from=start.resumed_from,
            resumed_turns=start.turns,
        )
        self.journal.write(ahead)
        crash_point("launch.ahead")
        limits = self.run.limits
        attempt = self.monitor.launch(task.id, number, argv, env, cwd, log, limits.timeout, confine)
        crash_point("launch.spawned")
        self.running[task.id] = attempt
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
                conversation=start.conversation,
                resumed_from=start.resumed_from,
                resumed_turns=start.turns,
            )
            self.journal.write(spawned)
            crash_point("launch.journaled")
        again = f" again, after {throttles} throttled" if throttles else ""
        if start.resumed:
            again += f", continuing the conversation of attempt {history.last_try[0]}"
        self.report(f"{task.id} attempt {number}: started{again}")
        return True

    def stage_proven(self, stage: str) -> bool:
        """Before a later stage starts, make the symlink proof again for its
        tasks; a link an earlier stage made halts the run instead."""
        if stage == self.proven_stage:
            return True
        self.proven_stage = stage

        problems = stage_symlink_problems(self.run, stage)
        if not problems:
            return True
        self.engine.governor.stop_for(
            Halt(
                STRICT,
                f"before stage {stage!r}: {problems[0].message}; remove the link, then "
                f"`gitrun retry {self.run.id}` and `gitrun resume {self.run.id}`",
            )
        )
        return False

    def _set_aside_kept(self, task: Task, number: int) -> None:
        """A fresh try after one whose invalid outputs stayed for a resumed
        try that is not to be (its conversation gone since): they are
        quarantined now, as they would have been when it ended."""
        check = check_task(self.run, task, None, self.committer.object_format)
        if check.outcome == Outcome.INVALID:
            quarantine(self.repo, self.local.quarantine_of(task.id, number), check.outputs)

    def take(self, task_id: str) -> Launched | None:
        """An attempt of ``task_id`` ended: what its launch kept (None: nothing
        launched here, as for an attempt another driver started)."""
        self.running.pop(task_id, None)
        return self.launched.pop(task_id, None)

    def kill_leftovers(self) -> None:
        """What this session's workers left behind outside their process groups
        (by their attempt ids) must not write on after the run."""
        ended = self.attempt_ids - {self.id_of[task] for task in self.running}
        for pid in kill_leftovers(self.run.id, ended):
            self.report(f"stopped pid {pid}, left behind by a finished attempt")

    def _runner(self) -> Runner:
        """Where attempts run: child processes here, or tasks on a Ray cluster
        (imported only then: Ray is an optional extra, and heavy)."""
        if self.run.packet.executor.kind == "ray":
            return RayRunner(self.run, self.engine.base, self.report)
        return Monitor(kill_grace=self.run.limits.kill_grace)

    def _next_attempt_id(self) -> str:
        """A new attempt's id, unique to it: 96 random bits drawn once per
        driver, then its count (uuid4's 32 hex digits, without a read of the
        random device per launch)."""
        self.count += 1
        return f"{self.id_prefix}{self.count:08x}"

    # -- outputs decide, even at dispatch ------------------------------------------------

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
        if check.outcome != Outcome.VALID:
            return False
        appeared = [o.path for o in check.outputs if self._appeared(o.path, o.blob)]
        if appeared:
            number = self.engine.history[task.id].attempts
            where = self.local.quarantine_of(task.id, number)
            quarantine(self.repo, where, check.outputs, suspect=True)
            suspects = self._out_when_written(appeared)
            # Kept under its last attempt's number (gitrun.engine.strays).
            record = Suspect(task.id, appeared, suspects, number, iso(time.time()))
            self.engine.write(self.ledger, record)
            self.report(
                f"{task.id}: {', '.join(visible(p) for p in appeared)} appeared while other "
                f"tasks ran ({', '.join(suspects) or 'which, unknown'}), not by an attempt of "
                f"{task.id}: set aside in {shown(where)}, and {task.id} dispatched"
            )
            return None
        self.engine.mark_done(task.id)
        assert self.commits is not None
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
