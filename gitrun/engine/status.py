"""A run's status, as ``gitrun status`` shows it: the engine's task states
(:mod:`gitrun.engine.states` derives them) with each task's attempts and reasons."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrun.collector import collector_paused
from gitrun.definition.committed import load_run_anywhere
from gitrun.definition.load import RunDef
from gitrun.engine.budget import Budget, spend_json
from gitrun.engine.motion import AT_REST, STALLED, MotionFacts, last_record_time, latest, motion_of
from gitrun.engine.resumes import Resumes, resumes_of
from gitrun.engine.states import COMPLETE, DONE, PENDING, RUNNING, STATUSES, Engine, load_engine
from gitrun.engine.strays import DENIED, MAX_DENIED, SUSPECT, StrayWrite, kept_denials
from gitrun.layout import branch_ref
from gitrun.store import events, git, ledger
from gitrun.store.branches import Landed, landed
from gitrun.store.events import AttemptRecord, iso
from gitrun.store.jsonlines import shown
from gitrun.store.leases import read_leases
from gitrun.store.local import LocalPaths
from gitrun.store.lock import Owner, is_locked, read_owner
from gitrun.store.records import RecordDamaged
from gitrun.store.repo import Repo, find_repo
from gitrun.store.usage import UsageTotals


@dataclass(slots=True)  # a big run's status holds 100,000 of them
class TaskStatus:
    id: str
    stage: str
    status: str
    attempts: int  # attempts used against max_attempts
    last_attempt: int  # its latest try's number: the one running, or the last that ended
    missing: Sequence[str] = ()
    reason: str | None = None
    records: Sequence[dict[str, Any]] = ()  # its attempts, from the ledger
    log: str | None = None  # its last attempt's log, where this machine has it
    # Where its last attempt's outputs that failed validation were set aside,
    # where this machine has them (machine-local: never committed).
    quarantine: str | None = None

    @property
    def kind(self) -> str | None:
        """What its last attempt that ended was (:func:`gitrun.store.ledger.attempt_kind`:
        timed out, invalid, missing, throttled, abandoned, stopped...), for a
        task not done; None before any ended."""
        if self.status in COMPLETE or not self.records:
            return None
        return ledger.attempt_kind(self.records[-1])

    @property
    def ended_attempt(self) -> int | None:
        """The number of its last attempt that ended (the one ``kind`` is of)."""
        return AttemptRecord.from_json(self.records[-1]).attempt or None if self.records else None

    @property
    def said(self) -> list[str]:
        """What its last attempt printed last, when it did not end valid."""
        return AttemptRecord.from_json(self.records[-1]).said if self.records else []

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status,
            "stage": self.stage,
            "attempts": self.attempts,
            "last_attempt": self.last_attempt,
        }
        if self.missing:
            data["missing"] = self.missing
        if self.kind:
            data["kind"] = self.kind
        if self.reason:
            data["reason"] = self.reason
        if self.quarantine:
            data["quarantine"] = self.quarantine
        if self.said:
            data["said"] = self.said
        if self.log:
            data["log"] = self.log
        data["records"] = self.records
        return data


# Where a run is in its life, as ``gitrun status`` names it.
NOT_STARTED = "not started"
STARTED = "started"
DRIVING = "driving"
LANDED = "landed"
BRANCH_GONE = "branch gone"  # started here, and its branch was deleted since


@dataclass
class RunStatus:
    run: str
    started: bool
    stages: list[str]
    tasks: dict[str, TaskStatus]
    spawns: int
    driver: Owner | None = None
    # Every stray write the ledger holds and every write a hook denied
    # (gitrun.engine.strays), with those of attempts running now.
    violations: list[StrayWrite] = field(default_factory=list)
    halt: dict[str, str] | None = None  # a halt that holds the run until `gitrun retry`
    parked_until: float | None = None  # a usage limit's reset, while it is ahead
    park_reason: str = ""
    damaged: bool = False  # the branch names a commit whose objects are missing
    usage: UsageTotals = field(default_factory=UsageTotals)  # what its attempts cost
    budget: Budget = field(default_factory=Budget)  # its spend budget now
    landed: Landed | None = None  # looked up only when asked (read_status's landing)
    branch_gone: bool = False
    landing_stopped: bool = False  # a `gitrun land` of it stopped half way (its journal)
    motion: str = AT_REST  # who moves it on now (gitrun.engine.motion), as read_status found
    stalled_since: float | None = None  # when its last driver was last seen, if it stalled
    # Each model bucket's last change of concurrency (gitrun.engine.congestion),
    # from the ledger: its concurrency, ceiling estimate and why.
    buckets: list[events.ConcurrencyChange] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.driver:
            return DRIVING
        if self.landed:
            return LANDED
        if self.started:
            return STARTED
        return BRANCH_GONE if self.branch_gone else NOT_STARTED

    def counts(self, stage: str | None = None) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for task in self.tasks.values():
            if stage is None or task.stage == stage:
                out[task.status] += 1
        return out

    @property
    def usable(self) -> int:
        return self.counts()[DONE]

    @property
    def yield_ratio(self) -> float | None:
        return self.usable / self.spawns if self.spawns else None

    @property
    def resumes(self) -> Resumes:
        """Its tries that continued a cut-off conversation, and those that could not."""
        return resumes_of(r for task in self.tasks.values() for r in task.records)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "started": self.started,
            "state": self.state,
            "landed_in": self.landed.commit if self.landed else None,
            "landed_branch": self.landed.branch if self.landed else None,
            "counts": self.counts(),
            "stages": {stage: self.counts(stage) for stage in self.stages},
            "spawns": self.spawns,
            "usable": self.usable,
            "yield": self.yield_ratio,
            "driver": self.driver.to_json() if self.driver else None,
            "violations": [write.to_json() for write in self.violations],
            "halt": self.halt,
            "parked": (
                {"until": iso(self.parked_until), "reason": self.park_reason}
                if self.parked_until
                else None
            ),
            "stalled_since": iso(self.stalled_since) if self.stalled_since else None,
            "buckets": [
                {
                    "bucket": b.bucket,
                    "concurrency": b.concurrency,
                    "ceiling": b.ceiling or None,
                    "reason": b.reason,
                    "at": b.at,
                }
                for b in self.buckets
            ],
            "spend": spend_json(self.usage, self.usable, self.budget),
            "resumed": self.resumes.to_json(),
            "tasks": {tid: task.to_json() for tid, task in self.tasks.items()},
        }


_NO_HISTORY = ledger.TaskHistory()  # of a task without attempts; only read


def read_status(
    repo: Path, run_id: str, run: RunDef | None = None, landing: bool = False
) -> RunStatus:
    """``run_id``'s status in ``repo``: of ``run`` when given, else of its
    definition as it is now (as its branch holds it, here or on a remote,
    where the work tree has none: a fresh clone); with ``landing``, also
    whether its branch landed in the current branch (one git process more)
    or is gone."""
    with collector_paused():  # a big run's states are 100,000s of objects
        found = where(repo)
        if run is None:
            run = load_run_anywhere(repo, run_id)
        local = LocalPaths.under(Path(found.git_dir), run_id)
        engine, tip = load_engine(run, local)
        alive = is_locked(local)
        driver = read_owner(local) if alive else None
        status = status_of(run, engine, tip, repo, driver)
        if landing and tip is not None:
            status.landed = landed(repo, run_id, tip, Path(found.git_dir))
            status.landing_stopped = os.path.lexists(local.land_journal)
        if landing and not status.started:
            status.branch_gone = os.path.lexists(local.tip)
        _note_motion(status, run, engine, local, alive)
        return status


def _note_motion(
    status: RunStatus, run: RunDef, engine: Engine, local: LocalPaths, alive: bool
) -> None:
    """Who moves the run on (:func:`gitrun.engine.motion.motion_of`), and since
    when it stalled if nobody does."""
    now = time.time()
    external = run.executor_kind == "external"
    leases_out = False
    if external:
        leases_out = any(lease.expires > now for lease in read_leases(local).values())
    heartbeat = None
    if not alive:  # a killed driver's record stays: its last heartbeat
        try:
            owner = read_owner(local)
        except RecordDamaged:
            owner = None
        heartbeat = owner.heartbeat if owner is not None else None
    counts = status.counts()
    facts = MotionFacts(
        started=status.started,
        landed=status.landed is not None,
        driver_alive=alive,
        external=external,
        leases_out=leases_out,
        open_tasks=counts[PENDING] + counts[RUNNING],
        halted=status.halt is not None,
        parked=status.parked_until is not None,
        last_seen=latest(heartbeat, last_record_time(engine.records)),
        now=now,
    )
    status.motion = motion_of(facts)
    if status.motion == STALLED:
        status.stalled_since = facts.last_seen


def _log_of(local: LocalPaths, task: str, attempt: int) -> str | None:
    log = local.log_of(task, attempt)
    return shown(log) if os.path.exists(log) else None


def _quarantine_of(local: LocalPaths, task: str, attempt: int | None) -> str | None:
    where = local.quarantine_of(task, attempt) if attempt is not None else None
    return f"{shown(where)}/" if where is not None and os.path.isdir(where) else None


def _stray_writes(engine: Engine, tasks: dict[str, TaskStatus]) -> list[StrayWrite]:
    """The ledger's stray and denied writes, with where a suspect output's
    bytes were set aside on this machine; and the writes the hooks denied
    attempts running now (kept beside their logs until they end)."""
    local = engine.local
    found = [
        dataclasses.replace(w, aside=_quarantine_of(local, w.task, w.kept_as))
        if w.kind == SUSPECT and w.task
        else w
        for w in engine.violations()
    ]
    for task in tasks.values():
        if task.status == RUNNING and task.last_attempt:
            kept = kept_denials(local.denials_of(task.id, task.last_attempt))
            for line in kept[:MAX_DENIED]:
                found.append(
                    StrayWrite(
                        DENIED,
                        line.path,
                        task.id,
                        task.last_attempt,
                        at=line.at,
                        tool=line.tool,
                        reason=line.reason,
                    )
                )
    return found


def status_of(
    run: RunDef, engine: Engine, tip: str | None, repo: Path, driver: Owner | None
) -> RunStatus:
    """The status of ``run`` as ``engine`` holds it at the branch tip ``tip``
    (``driver``: who drives it now): the one way a :class:`RunStatus` is made,
    from an engine just loaded (:func:`read_status`) or from the one a driver
    kept current as it ran (its summary at the end)."""
    # The branch exists but its tip's objects are gone (a prune during the run).
    damaged = tip is None and git.ref_target(repo, branch_ref(run.id)) is not None
    records: dict[str, list[dict[str, Any]]] = {}
    for record in ledger.attempt_records(engine.records):
        records.setdefault(AttemptRecord.from_json(record).task, []).append(record)
    tasks: dict[str, TaskStatus] = {}
    local = engine.local
    for task in run.tasks:
        history = engine.history.get(task.id) or _NO_HISTORY
        status = engine.status[task.id]
        done = status in COMPLETE
        last = history.upcoming[0] if status == RUNNING else history.last
        tasks[task.id] = TaskStatus(
            task.id,
            run.stage_of(task),
            status,
            history.used,
            last,
            () if done else run.output_paths(task),
            None if done else history.last_reason,
            records.get(task.id, ()),
            None if done or not last else _log_of(local, task.id, last),
        )
        if not done:
            ended = tasks[task.id].ended_attempt
            tasks[task.id].quarantine = _quarantine_of(local, task.id, ended)
    return RunStatus(
        run=run.id,
        started=tip is not None or damaged,
        damaged=damaged,
        stages=run.stage_names,
        tasks=tasks,
        spawns=engine.summary.spawns,
        driver=driver,
        violations=_stray_writes(engine, tasks),
        halt=_halt_of(engine, tasks),
        parked_until=parked if (parked := engine.governor.parked_until) > time.time() else None,
        park_reason=engine.governor.park_reason,
        usage=engine.usage,
        budget=engine.budget,
        buckets=list({c.bucket: c for c in events.concurrency_changes(engine.records)}.values()),
    )


def _halt_of(engine: Engine, tasks: dict[str, TaskStatus]) -> dict[str, str] | None:
    """The halt that holds the run: the one its ledger records, else one that
    follows from the ledger and the limits (the spawn budget, the halt policy:
    every driver halts at once on it) while tasks are left to run."""
    if engine.summary.halt:
        return engine.summary.halt
    halt = engine.governor.halt
    if halt is None or not any(task.status == PENDING for task in tasks.values()):
        return None
    return {"kind": halt.kind, "message": halt.message}


def where(repo: Path) -> Repo:
    """The repository at ``repo`` with its git directory, found without a git
    process where :func:`gitrun.guard.rules.find_repo` can."""
    found = find_repo(str(repo))
    if found is not None and found.root == os.path.realpath(repo):
        return found
    return Repo(str(repo), str(git.git_dir(repo)))
