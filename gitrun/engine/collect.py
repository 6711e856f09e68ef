"""Collect: judging what an external run's leased tasks left on disk.

Once the lead's subagents have returned, ``gitrun collect`` judges every
leased task from the disk alone, through the same verdict as a driver's
attempts (:mod:`gitrun.engine.verdict`): valid outputs are committed,
everything else is released with an attempt used (invalid files
quarantined); tasks the lead names as throttled back off without using one,
and a resume taking the run over from a lead that is gone abandons the
rest. Tasks not handed out whose valid outputs appeared anyway are
committed too. :class:`gitrun.engine.external.External` holds the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gitrun.definition.outputs import check_task, prior_in_tree, quarantine
from gitrun.definition.runfiles import definition_files, open_ledger
from gitrun.engine.committer import Landing, landing_message
from gitrun.engine.states import COMPLETE, FAILED, Ended
from gitrun.engine.strays import fold_denials
from gitrun.engine.verdict import Facts, Rules, judge
from gitrun.errors import GitrunError
from gitrun.store import git
from gitrun.store.dispatches import subagent_of
from gitrun.store.events import Outcome
from gitrun.store.records import warn_stderr
from gitrun.store.regular import read_regular
from gitrun.store.usage import Usage
from gitrun.visible import last_lines
from gitrun.words import counted
from gitrun.workers.clientusage import read_usage_file

if TYPE_CHECKING:
    from pathlib import Path

    from gitrun.definition.load import RunDef
    from gitrun.definition.schema import Limits
    from gitrun.engine.audit import Audit
    from gitrun.engine.committer import Committer
    from gitrun.engine.governor import Governor
    from gitrun.engine.states import Engine
    from gitrun.store.leases import Lease
    from gitrun.store.local import LocalPaths

MAX_SAID_READ = 2 << 20  # bytes of an attempt's log read for its last lines


@dataclass
class Collected:
    done: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)
    # Handed out to a lead session that is gone (a resume took the run over):
    # released with no attempt used.
    abandoned: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # used up their attempts now
    reasons: dict[str, str] = field(default_factory=dict)
    # What a task's subagent said last, stopping without valid outputs (its
    # SubagentStop hook keeps it in the attempt's log), visible.
    said: dict[str, list[str]] = field(default_factory=dict)
    next_step: str = ""
    halted: bool = False
    violations: list[str] = field(default_factory=list)  # found by this call's audit
    notices: list[str] = field(default_factory=list)  # the spend budget's (gitrun.engine.budget)

    def to_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "missing": self.missing,
            "invalid": self.invalid,
            "throttled": self.throttled,
            "abandoned": self.abandoned,
            "failed": self.failed,
            "reasons": self.reasons,
            "said": self.said,
            "next": self.next_step,
            "halted": self.halted,
            "violations": self.violations,
            "notices": self.notices,
        }


class External(Protocol):
    """What collect needs of an external run held under its lock
    (:class:`gitrun.engine.external.External`, which calls it)."""

    run: RunDef
    repo: Path
    local: LocalPaths
    limits: Limits
    tip: str
    leases: dict[str, Lease]
    engine: Engine
    governor: Governor
    committer: Committer
    audit: Audit

    def audit_changes(self) -> tuple[list[str], list[str]]: ...

    def usage_file(self, task_id: str, attempt: int) -> Path: ...

    def save(self) -> None: ...


def collect(ext: External, throttled: list[str], abandon: bool = False) -> Collected:
    """Judge every leased task of ``ext`` from the disk. ``abandon`` (a resume
    taking the run over from a lead session that is gone, and its subagents
    with it): a lease without valid outputs is ``abandoned`` and uses no
    attempt; the loss breaker still halts a run whose sessions keep dying."""
    run, engine, leases = ext.run, ext.engine, ext.leases
    unknown = [t for t in throttled if t not in leases]
    if unknown:
        raise GitrunError(
            f"--throttled names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
            f"not leased; see `gitrun status {run.id}`"
        )
    violations, edits = ext.audit_changes()
    result = Collected(violations=violations, notices=edits)
    landings: list[Landing] = []
    now = time.time()
    base = engine.base
    at_base = git.ls_tree(ext.repo, base) if base else {}
    object_format = ext.committer.object_format
    rules = Rules(run.id, ext.limits)
    writer = open_ledger(run, ext.tip)
    try:
        for task_id, lease in list(leases.items()):
            check = check_task(run, run.tasks_by_id[task_id], lease.before, object_format)
            if check.outcome == Outcome.INVALID:
                where = ext.local.quarantine_of(task_id, lease.attempt)
                quarantine(ext.repo, where, check.outputs)
            facts = Facts(
                check.outcome,
                check.reason,
                timed_out=now > lease.expires,
                named_throttled=task_id in throttled,
                abandoned=abandon,
            )
            verdict = judge(facts, rules)
            outcome, reason = verdict.outcome, verdict.reason
            if reason:
                result.reasons[task_id] = reason
            said = _said_by(ext, task_id, lease.attempt) if outcome != Outcome.VALID else []
            if said:
                result.said[task_id] = said
            # The subagent that held the lease (its client's conversation), and
            # the try it continued when the lead sent it this lease's pointer.
            subagent = subagent_of(ext.local, task_id, lease.try_of)
            before = engine.history[task_id]
            resumed = (
                bool(subagent) and subagent == before.conversation and before.last_try != (0, 0)
            )
            ended = Ended(
                task_id,
                lease.attempt,
                lease.leased,
                now,
                outcome,
                reason,
                timed_out=facts.timed_out,
                conversation=subagent,
                resumed_from=before.last_try if resumed else None,
                dispatch="external",
                usage=_read_usage(ext, task_id, lease.attempt),
                made_from=lease.made_from,
                made=check.made if outcome == Outcome.VALID else None,
                said=tuple(said),
                throttles=lease.throttles,
            )
            fold_denials(engine, writer, task_id, lease.attempt)
            status = engine.end(writer, ended)
            leases.pop(task_id)
            if outcome == Outcome.VALID:
                landings.append(Landing(task_id, lease.attempt, check.outputs, lease.made_from))
                result.done.append(task_id)
            elif outcome == Outcome.THROTTLED:
                result.throttled.append(task_id)
            elif outcome == Outcome.ABANDONED:
                result.abandoned.append(task_id)
            else:
                (result.invalid if outcome == Outcome.INVALID else result.missing).append(task_id)
                if status == FAILED:
                    result.failed.append(task_id)
        # Tasks not handed out whose valid outputs appeared anyway are
        # committed (outputs decide, not who wrote them), without an attempt
        # to record.
        for task_id in engine.pending():
            task = run.tasks_by_id[task_id]
            prior = prior_in_tree(run, task, at_base)
            check = check_task(run, task, prior, object_format)
            if check.outcome == Outcome.VALID:
                engine.mark_done(task_id)
                landings.append(Landing(task_id, engine.history[task_id].attempts, check.outputs))
                result.done.append(task_id)
        engine.record_halt(writer)
    finally:
        writer.close()
    ext.audit.active = set(leases)  # what is still out after this collect
    recorded = result.done + result.missing + result.invalid + result.throttled + result.abandoned
    if recorded:  # nothing judged, nothing to commit
        own = definition_files(run)
        ext.committer.commit(landings, own, landing_message(run.id, landings))
        left_out = ext.committer.take_left_out()
        result.done = [tid for tid in result.done if tid not in left_out]
        result.notices += left_out.values()
    ext.save()
    result.next_step = _next_step(ext)
    result.halted = ext.governor.halt is not None
    result.notices += ext.governor.take_notices()
    return result


def _next_step(ext: External) -> str:
    run_id = ext.run.id
    if ext.governor.halt is not None:
        return f"halted: {ext.governor.halt.message}"
    left = [tid for tid, status in ext.engine.status.items() if status not in COMPLETE]
    if not left:
        return f"every task is done or up to date; bring the results in with `gitrun land {run_id}`"
    if not ext.engine.pending() and not ext.leases:
        return (
            f"{counted(len(left), 'task')} used up {'its' if len(left) == 1 else 'their'} "
            f"attempts; `gitrun retry {run_id}` gives {'it' if len(left) == 1 else 'them'} more"
        )
    return f"`gitrun next {run_id}` hands out the next batch"


def _said_by(ext: External, task_id: str, attempt: int) -> list[str]:
    """The last lines of an attempt's log (a subagent's last message)."""
    try:
        data = read_regular(ext.local.log_of(task_id, attempt), limit=MAX_SAID_READ)
    except OSError:
        return []
    # deferred: next and collect (<= 35x `python -c pass`) need it only here
    from gitrun.guard.write import WORDS_HEADER

    return last_lines(data.decode(errors="replace").rpartition(WORDS_HEADER)[2])


def _read_usage(ext: External, task_id: str, attempt: int) -> Usage | None:
    """What the orchestrator wrote the subagent used; None: nothing (unknown)."""
    path = ext.usage_file(task_id, attempt)
    usage, problem = read_usage_file(path)
    if problem:
        warn_stderr(
            f"{task_id} attempt {attempt}: the usage file {path} {problem}; its usage is "
            "unknown (write one JSON object, as docs/ledger.md shows under 'Usage and cost')"
        )
    return usage
