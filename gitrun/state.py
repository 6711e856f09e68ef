"""A run's state, derived — never stored (DESIGN.md rule 2).

A task is *done* when every output is in the run branch's tree with content
other than at the fork point; *failed* when it used up its attempts (from the
ledger); *running* when a live driver has an attempt out for it; otherwise
*pending*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrun import git, ledger
from gitrun.committer import branch_ref
from gitrun.history import find_base
from gitrun.local import LocalPaths
from gitrun.lock import Owner, is_locked, read_owner
from gitrun.runs import RunDef, load_run

DONE = "done"
PENDING = "pending"
RUNNING = "running"
FAILED = "failed"
STATUSES = (DONE, PENDING, RUNNING, FAILED)


@dataclass
class TaskStatus:
    id: str
    stage: str
    status: str
    attempts: int  # attempts used against max_attempts
    last_attempt: int
    missing: list[str] = field(default_factory=list)
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status,
            "stage": self.stage,
            "attempts": self.attempts,
            "last_attempt": self.last_attempt,
        }
        if self.missing:
            data["missing"] = self.missing
        if self.reason:
            data["reason"] = self.reason
        return data


@dataclass
class RunStatus:
    run: str
    started: bool
    stages: list[str]
    tasks: dict[str, TaskStatus]
    spawns: int
    driver: Owner | None = None
    violations: list[dict[str, Any]] = field(default_factory=list)
    halt: dict[str, str] | None = None  # a halt that holds the run until `gitrun retry`
    damaged: bool = False  # the branch names a commit whose objects are missing

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

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "started": self.started,
            "counts": self.counts(),
            "stages": {stage: self.counts(stage) for stage in self.stages},
            "spawns": self.spawns,
            "usable": self.usable,
            "yield": self.yield_ratio,
            "driver": self.driver.to_json() if self.driver else None,
            "violations": self.violations,
            "halt": self.halt,
            "tasks": {tid: task.to_json() for tid, task in self.tasks.items()},
        }


def read_run_ledger(run: RunDef) -> list[dict[str, Any]]:
    """The run's ledger records, in order."""
    return ledger.read_ledger(run.repo / run.dir)


def committed_tasks(run: RunDef, tip: str, base: str | None) -> set[str]:
    """Tasks whose every output is in ``tip``'s tree with content new since ``base``."""
    outputs = {o.path for task in run.tasks for o in run.outputs_of(task)}
    tops = sorted({path.split("/", 1)[0] for path in outputs})
    if len(tops) > 256:  # a command line has limits; list the whole tree then
        tops = []
    at_tip = git.ls_tree(run.repo, tip, tops)
    at_base = git.ls_tree(run.repo, base, tops) if base else {}
    done = set()
    for task in run.tasks:
        paths = [o.path for o in run.outputs_of(task)]
        if all(p in at_tip and at_tip[p][1] != at_base.get(p, ("", ""))[1] for p in paths):
            done.add(task.id)
    return done


def running_records(local: LocalPaths) -> dict[str, dict[str, Any]]:
    """Attempts the running journal shows started and not ended, by task."""
    records: dict[str, dict[str, Any]] = {}
    for record in ledger.read_lines(local.running):
        if not isinstance(record.get("task"), str):
            continue  # a junk record says nothing about any task
        if record.get("end"):
            if records.get(record["task"], {}).get("attempt") == record.get("attempt"):
                del records[record["task"]]
        else:
            records[record["task"]] = record
    return records


def read_status(repo: Path, run_id: str, run: RunDef | None = None) -> RunStatus:
    run = run or load_run(repo, run_id)
    tip = git.rev_parse(repo, branch_ref(run_id))
    # The branch exists but its tip's objects are gone (a prune during the run).
    damaged = tip is None and git.ref_target(repo, branch_ref(run_id)) is not None
    done = committed_tasks(run, tip, find_base(repo, run_id)) if tip else set()
    records = read_run_ledger(run)
    summary = ledger.summarize(records)
    local = LocalPaths.of(repo, run_id)
    live = is_locked(local)
    running: dict[str, Any] = running_records(local) if live else {}
    if run.packet.executor.kind == "external":
        from gitrun.leases import read_leases

        running = dict(read_leases(local))
    max_attempts = run.packet.limits.max_attempts
    tasks: dict[str, TaskStatus] = {}
    for task in run.tasks:
        history = summary.of(task.id)
        if task.id in done:
            status = DONE
        elif task.id in running:
            status = RUNNING
        elif history.used >= max_attempts:
            status = FAILED
        else:
            status = PENDING
        missing = [] if status == DONE else [o.path for o in run.outputs_of(task)]
        reason = history.last_reason if status != DONE else None
        tasks[task.id] = TaskStatus(
            task.id, run.stage_of(task), status, history.used, history.attempts, missing, reason
        )
    return RunStatus(
        run=run_id,
        started=tip is not None or damaged,
        damaged=damaged,
        stages=run.stage_names,
        tasks=tasks,
        spawns=summary.spawns,
        driver=read_owner(local) if live else None,
        violations=[r for r in records if r.get("event") == "violation"],
        halt=summary.halt,
    )
