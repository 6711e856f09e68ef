"""Before a driver drives: what a dead driver left, and valid outputs already on disk.

``recover_orphans`` stops the workers a dead driver's journal names (by pid,
create time and command line, or by attempt id when it died before the
spawn's record), brings a confined one's own files into the work tree
(``bring_back``, as its driver would have) and records their attempts once;
``reconcile`` commits valid
outputs that are on disk but not on the branch and quarantines invalid ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gitrun.definition.load import RunDef
from gitrun.definition.outputs import check_task, prior_in_tree, quarantine
from gitrun.engine.committer import Committer, Landing, landing_message
from gitrun.engine.crashpoints import crash_point
from gitrun.engine.salvage import Salvage
from gitrun.engine.states import COMPLETE, Ended, Engine
from gitrun.engine.strays import fold_denials
from gitrun.engine.verdict import Facts, Rules, judge
from gitrun.processes.cgroups import end_left_group
from gitrun.processes.reaper import kill_attempt_processes, kill_leftovers, kill_recorded_group
from gitrun.store import ledger
from gitrun.store.events import Outcome, Stray, iso
from gitrun.store.journal import read_journal, running_records
from gitrun.visible import visible
from gitrun.workers.sandbox import Isolated, left_by

Reporter = Callable[[str], None]


def recover_orphans(
    run: RunDef,
    engine: Engine,
    writer: ledger.LedgerWriter,
    object_format: str,
    report: Reporter,
    salvage: Salvage,
) -> None:
    """Stop workers a dead driver left running and record their attempts (each
    once, whatever step the dead driver reached); stop what its ended attempts
    left behind, too."""
    local = engine.local
    ids = {entry.attempt_id for entry in read_journal(local) if entry.attempt_id}
    for tid, entry in running_records(local).items():
        record = entry.to_json()
        if entry.pid is not None:
            stopped = kill_recorded_group(record)
        else:  # killed between the write-ahead record and the spawn's record
            stopped = kill_attempt_processes(record)
        if end_left_group(entry.attempt_id or ""):  # what left its group and session, too
            stopped = True
        task = run.tasks_by_id.get(tid)
        if task is None or (tid, entry.attempt, entry.throttles) in engine.recorded:
            continue  # not this run's task, or recorded already (its end not journaled)
        confined = (
            left_by(local.sandboxes / entry.attempt_id, run.repo) if entry.attempt_id else None
        )
        if confined is not None:  # stopped now: what it wrote of its own counts
            bring_back(confined, engine, writer, tid, entry.attempt, report)
        check = check_task(run, task, entry.before, object_format)
        # Its driver is gone: a lease abandoned, whatever else it did.
        verdict = judge(
            Facts(check.outcome, check.reason, abandoned=True), Rules(run.id, run.limits)
        )
        outcome, reason = verdict.outcome, verdict.reason
        conversation = entry.conversation or salvage.said(local.log_of(tid, entry.attempt))
        resumed = entry.resumed_from is not None
        kept = salvage.after(outcome, False, conversation, resumed).resume
        if check.outcome == Outcome.INVALID and not kept:  # a resumed try finds them in place
            quarantine(run.repo, local.quarantine_of(tid, entry.attempt), check.outputs)
        now = time.time()
        made = check.made if outcome == Outcome.VALID else None
        ended = Ended(
            tid,
            entry.attempt,
            entry.started or now,
            now,
            outcome,
            reason,
            made_from=entry.made_from,
            made=made,
            throttles=entry.throttles,
            conversation=conversation,
            resumed_from=entry.resumed_from,
            resumed_turns=entry.resumed_turns,
        )
        fold_denials(engine, writer, tid, entry.attempt)
        engine.record(writer, ended)
        crash_point("recover.recorded")
        how = "stopped" if stopped else "nothing of it verifiably running, nothing signalled"
        report(f"{tid} attempt {entry.attempt}: left by a dead driver; {how} ({outcome})")
    for pid in kill_leftovers(run.id, ids):
        report(f"stopped pid {pid}, left behind by an attempt of a dead driver")


def bring_back(
    confined: Isolated,
    engine: Engine,
    writer: ledger.LedgerWriter,
    task: str,
    attempt: int,
    report: Reporter,
) -> None:
    """Move an ended confined (or scratch) attempt's own files into the work
    tree; record and say what it wrote that its task does not own (kept out of it)."""
    strays = confined.finish()
    for line in confined.unmoved:
        report(f"{task} attempt {attempt}: could not bring back {visible(line)}")
    if not strays:
        return
    engine.write(writer, Stray(task, attempt, strays, iso(time.time())))
    shown_paths = ", ".join(visible(p) for p in strays[:5])
    more = f" and {len(strays) - 5} more" if len(strays) > 5 else ""
    report(
        f"{task} attempt {attempt} wrote {shown_paths}{more}, which it does "
        "not own: kept out of the work tree"
    )


def reconcile(
    run: RunDef,
    engine: Engine,
    committer: Committer,
    at_base: dict[str, tuple[str, str]],
    own_files: Callable[[], dict[str, bytes]],
    report: Reporter,
    salvage: Salvage | None = None,
) -> None:
    """Commit valid outputs already on disk; quarantine invalid ones (but
    those a resumed try is to find in place)."""
    landings: list[Landing] = []
    for tid, status in list(engine.status.items()):
        if status in COMPLETE:
            continue
        task = run.tasks_by_id[tid]
        prior = prior_in_tree(run, task, at_base)
        check = check_task(run, task, prior, committer.object_format)
        attempts = engine.history[tid].attempts
        if check.outcome == Outcome.VALID:
            landings.append(Landing(tid, attempts, check.outputs))
            engine.mark_done(tid)
        elif check.outcome == Outcome.INVALID:
            if salvage is not None and salvage.keeps(engine.history[tid]):
                continue
            moved = quarantine(run.repo, engine.local.quarantine_of(tid, attempts), check.outputs)
            report(f"{tid}: quarantined {', '.join(moved)} ({check.reason})")
    if landings:
        committer.commit(landings, own_files(), landing_message(run.id, landings))
        left_out = committer.take_left_out()
        for line in left_out.values():
            report(line)
        if len(landings) > len(left_out):
            committed = len(landings) - len(left_out)
            report(f"reconciled: committed {committed} tasks whose valid outputs were on disk")
