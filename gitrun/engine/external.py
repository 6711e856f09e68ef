"""External dispatch: an orchestrating agent session hands out the pointers itself.

``next`` leases tasks (as many as the governor allows, canary first) and
returns their pointers; the orchestrator dispatches each as a subagent and,
once they have returned, calls ``collect``, which judges every leased task
from the disk alone (:mod:`gitrun.engine.collect`): valid outputs are
committed, everything else is released with an attempt used (invalid files
quarantined), and tasks the orchestrator names as throttled back off without
using one. Leases and the governor's state are machine-local
(``.git/gitrun/<run>/``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrun.definition.load import RunDef, load_run
from gitrun.definition.outputs import prepare_outputs
from gitrun.definition.provenance import Provenance
from gitrun.definition.runfiles import definition_files, open_ledger
from gitrun.engine.audit import Audit, AuditState
from gitrun.engine.buckets import GovernorRecord
from gitrun.engine.budget import read_said, write_said
from gitrun.engine.collect import Collected as Collected  # what collect answers
from gitrun.engine.collect import collect
from gitrun.engine.committer import Committer, landing_message
from gitrun.engine.governor import STRICT, Halt
from gitrun.engine.states import FAILED, Engine
from gitrun.errors import GitrunError
from gitrun.guard import rules
from gitrun.guard.agents import worker_agent_type
from gitrun.layout import branch_ref
from gitrun.store import git
from gitrun.store.branches import find_tip
from gitrun.store.events import Outcome, iso
from gitrun.store.leases import Lease, read_leases, write_leases
from gitrun.store.ledger import TaskHistory
from gitrun.store.local import LocalPaths
from gitrun.store.lock import RunBusy, run_locked
from gitrun.store.records import load_record, warn_stderr, write_record
from gitrun.workers.pointer import render_pointer
from gitrun.workers.workerfiles import worker_files

LOCK_PATIENCE = 30.0  # seconds next/collect wait for another next/collect
LOAD_WAIT = 15.0  # seconds a lead waits before asking again while the machine is busy


@dataclass
class Batch:
    leased: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""  # why nothing (more) was handed out
    # A healthy run with less to hand out now than it has room for: what holds
    # it ("throttled", "load", "canary running", "leased", "budget", ...) and,
    # when waiting is the whole answer, how long.
    why: str | None = None
    wait_s: float | None = None
    done: bool = False  # every task is done
    halted: bool = False  # a halt holds the run until `gitrun retry` lifts it
    violations: list[str] = field(default_factory=list)  # found by this call's audit
    notices: list[str] = field(default_factory=list)  # the spend budget's (gitrun.engine.budget)

    def to_json(self, full: bool = False) -> dict[str, Any]:
        """The batch for a lead: ``leased`` maps each task to its pointer, and
        what every item shares is said once (the attempts of tasks not on
        their first); not the expiry, which no lead acts on (gitrun takes a
        lapsed lease back itself). ``full``: a list of every item whole
        (attempt, stage, outputs, model, expiry, usage file)."""
        shared: dict[str, Any] = {}
        leased: Any = [
            {k: v for k, v in item.items() if k != "usage_template"} for item in self.leased
        ]
        if not full:
            leased = {item["task"]: item["pointer"] for item in self.leased}
        if not full and self.leased:
            first = self.leased[0]
            shared = {
                "agent": first["agent"],
                "model": first["model"],
                "usage": first["usage_template"],
            }
            later = {item["task"]: item["attempt"] for item in self.leased if item["attempt"] != 1}
            if later:
                shared["attempts"] = later  # of tasks not on their first attempt
            going_on = {
                item["task"]: item["continue"] for item in self.leased if "continue" in item
            }
            if going_on:
                shared["continue"] = going_on  # the subagent to send the pointer to
        return {
            "leased": leased,
            **shared,
            "done": self.done,
            "halted": self.halted,
            "why": self.why,
            "wait_s": self.wait_s,
            "reason": self.reason,
        }


# Claude Code refuses Agent calls past this many running subagents (its
# default 20), telling the model not to retry. A lead's Bash tool runs
# gitrun with the session's environment, CLAUDECODE=1 among it.
CLIENT_LIMIT_ENV = "CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS"
CLIENT_LIMIT_DEFAULT = 20


def continued_subagent(history: TaskHistory) -> str:
    """The subagent a lead continues (SendMessage, its context intact) with a
    task's new lease instead of starting one: the one whose lease a throttle
    or a usage limit ended; never after a continued try that failed
    (``""``: start a fresh one)."""
    if history.last_outcome != Outcome.THROTTLED or history.last_resumed:
        return ""
    return history.conversation


def client_subagent_limit() -> int | None:
    """How many subagents the lead's client starts at once (None: not run by Claude Code)."""
    if os.environ.get("CLAUDECODE") != "1":
        return None
    try:
        return max(1, int(os.environ.get(CLIENT_LIMIT_ENV, CLIENT_LIMIT_DEFAULT)))
    except ValueError:
        return CLIENT_LIMIT_DEFAULT


def _from_repo(path: Path, repo: Path) -> str:
    """``path`` relative to the repository when it lies inside it (a shorter
    line in the lead's context), else whole (a linked work tree's git directory)."""
    return str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)


class External:
    """One next/collect call's view of a run, under its lock."""

    def __init__(self, run: RunDef, local: LocalPaths, afresh: bool = False) -> None:
        self.run = run
        self.repo = run.repo
        self.local = local
        self.committer = Committer(self.repo, run.id, local)
        self.provenance = Provenance(run, worker_files(run))
        tip = git.rev_parse(self.repo, branch_ref(run.id))
        if tip is None and git.ref_target(self.repo, branch_ref(run.id)):
            raise GitrunError(
                f"branch gitrun/{run.id} points at a commit whose objects are missing; "
                f"`gitrun resume {run.id}` moves it back to its newest whole commit"
            )
        remote = find_tip(self.repo, run.id) if tip is None else None
        if remote is not None:
            raise GitrunError(
                f"run {run.id!r} has its branch only on a remote ({remote.shown}); take it "
                f"here with `gitrun resume {run.id}`"
            )
        if tip is None:
            raise GitrunError(
                f"run {run.id!r} has not started; start it with `gitrun start {run.id}` "
                "(in external mode that hands out the first batch)"
            )
        self.leases = read_leases(local)
        self.tip = tip
        # On the wall clock (the default), unlike a driver's: the governor's
        # backoff and pacing, and each lease's expiry, outlive this call's
        # process, and a monotonic clock means nothing to the next one.
        self.engine = Engine(run, local, tip, running=self.leases)
        self.governor = self.engine.governor
        # Each batch costs the lead a turn: its leases go out together, unpaced
        # (a throttle among them still finds the ceiling, as one burst).
        self.governor.buckets.pace(False)
        self.limits = run.limits
        self._restore_governor()
        self._said = self._restore_said(afresh)
        self.engine.choose_canary()
        state = load_record(
            local.audit,
            AuditState.from_json,
            what="stray-write audit state",
            fix="the audit looks afresh from now on (changes before this command go unreported)",
            warn=warn_stderr,
        )
        self.audit = Audit(run, state)

    def audit_changes(self) -> tuple[list[str], list[str]]:
        """Changes outside every owned path since the last command, while tasks
        were leased: ownership violations, as in command mode (recorded in the
        ledger; under strict ownership they halt the run), and edits of the
        run's definition, as notices. With nothing leased since, a change is
        the orchestrator's own work, not a subagent's."""
        out = self.audit.active | set(self.leases)
        self.audit.active = out
        found = self.audit.check(self.leases)
        if not out or not found:
            return [], []
        edits = [
            f"notice: {edit.describe()}; every later command reads the definition as it is "
            "now, and the next commit keeps it"
            for edit in found
            if edit.edit
        ]
        writer = open_ledger(self.run, self.tip)
        try:
            for violation in found:
                writer.write(violation.to_record())
                if self.run.packet.ownership.strict and not violation.edit:
                    halt = Halt(STRICT, f"ownership violation: {violation.describe()}")
                    self.governor.stop_for(halt)
            self.engine.record_halt(writer)
        finally:
            writer.close()
        return [violation.describe() for violation in found if not violation.edit], edits

    # -- next ---------------------------------------------------------------------

    def next_batch(self, limit: int | None) -> Batch:
        violations, edits = self.audit_changes()
        batch = Batch(violations=violations, notices=edits)
        try:
            self._fill(batch, limit)
            if self.governor.halt is not None and not self.engine.halt_recorded:
                # This call halted the run (the spend budget): the halt holds
                # every later call until `gitrun retry` lifts it.
                writer = open_ledger(self.run, self.tip)
                try:
                    self.engine.record_halt(writer)
                finally:
                    writer.close()
                own = definition_files(self.run)
                self.committer.commit([], own, landing_message(self.run.id, []))
        finally:
            self.save()
        batch.notices += self.governor.take_notices()
        return batch

    def _fill(self, batch: Batch, limit: int | None) -> None:
        now = time.time()
        if self.governor.halt is not None:
            batch.halted = True
            batch.reason = f"halted: {self.governor.halt.message}"
            return
        pending = self.engine.pending()
        if not pending and not self.leases:
            failed = [tid for tid, status in self.engine.status.items() if status == FAILED]
            batch.done = not failed
            batch.reason = (
                f"every task is done or up to date; bring the results in with "
                f"`gitrun land {self.run.id}`"
                if batch.done
                else f"nothing left to hand out: {', '.join(failed)} used up their attempts "
                f"(`gitrun retry {self.run.id}`)"
            )
            return
        slots = self.governor.slots(len(self.leases), now, self.engine.current_stage())
        if self.governor.halt is not None:  # the spend budget, now that nothing is out
            batch.halted = True
            batch.reason = f"halted: {self.governor.halt.message}"
            return
        room = self.governor.concurrency - len(self.leases)
        held = self.governor.held
        if limit is not None and limit < slots:
            slots, held = limit, "max"
        client = client_subagent_limit()
        if client is not None and client - len(self.leases) < slots:
            # More than the lead's client starts at once would be refused by
            # it, and the model told not to retry: never hand them out.
            slots, held = max(0, client - len(self.leases)), "client"
        for task_id in pending:
            if slots <= 0:
                break
            if not self.governor.eligible(task_id):
                continue
            batch.leased.append(self._lease(task_id, now))
            slots -= 1
        if not batch.leased:  # nothing now: why, even when the concurrency is all out
            batch.why, batch.wait_s, batch.reason = self._why_none(now, held, len(pending))
            return
        if len(batch.leased) == len(pending) or len(batch.leased) >= room:
            return  # all there is, or all there is room for
        if held:
            batch.why = held
            batch.reason = f"leased {len(batch.leased)} of {room} free: {self._held_by(held)}"

    def _why_none(self, now: float, held: str, pending: int) -> tuple[str, float | None, str]:
        """Why a healthy run hands out nothing now, how long to wait (None:
        until the leased subagents return), and the sentence."""
        collect = f"`gitrun collect {self.run.id}`"
        leased = f"{len(self.leases)} leased ({', '.join(sorted(self.leases))})"
        if held in ("throttled", "parked", "pacing"):  # a wait the governor knows the end of
            wait = max(1.0, round((self.governor.next_wake(now) or now) - now))
            said = {"throttled": held, "parked": self.governor.parked_text(now)}
            what = said.get(held) or self._held_by(held)
            return held, wait, f"{what}: wait {wait:.0f} s, then `gitrun next {self.run.id}`"
        if held == "load" and not self.leases:
            return held, LOAD_WAIT, f"{self._held_by(held)}: wait {LOAD_WAIT:.0f} s and ask again"
        if held in ("canary running", "budget", "load", "failing fast") and self.leases:
            return held, None, f"{self._held_by(held)}; {leased}: wait for them, then {collect}"
        if self.leases:
            return "leased", None, f"{leased}: wait for their subagents, then {collect}"
        return "waiting", None, f"no task of the current stage is ready ({pending} pending)"

    def _held_by(self, held: str) -> str:
        """What keeps a batch smaller than the free concurrency, as a clause."""
        governor, limits = self.governor, self.limits
        return {
            "load": f"the machine is busy: the load average {governor.load:.1f} is over "
            f"{limits.load_bound_text()}, so one attempt at a time",
            "canary running": f"the canary ({', '.join(governor.canary)}) runs alone first",
            "failing fast": "attempts keep failing fast with no output, and the next ones decide "
            "whether it is an environment fault",
            "spawn budget": "the spawn budget (limits.max_spawns) allows no more",
            "budget": "the spend budget allows no more at once",
            "pacing": "starts above the level the API took are spaced while gitrun finds its "
            "ceiling",
            "client": f"Claude Code starts at most {client_subagent_limit()} subagents at once "
            f"(raise {CLIENT_LIMIT_ENV} to the run's concurrency, {self.limits.concurrency})",
            "max": "--max",
        }.get(held, held)

    def _lease(self, task_id: str, now: float) -> dict[str, Any]:
        task = self.run.tasks_by_id[task_id]
        history = self.engine.history[task_id]
        number, throttles = history.upcoming
        going_on = continued_subagent(history)
        self.local.prune_logs(task_id, number)
        outputs = [o.path for o in self.run.outputs_of(task)]
        # Where a link standing at an output goes (left before this attempt).
        aside = functools.partial(self.local.quarantine_of, task_id, number - 1)
        before = prepare_outputs(self.run, task, self.committer.object_format, aside)
        pointer = render_pointer(self.run, task)
        stage = self.run.stage_of(task)
        made_from = self.provenance.of(task).to_json()
        expires = now + self.limits.timeout
        self.leases[task_id] = Lease(
            task_id, number, now, expires, before, made_from=made_from, throttles=throttles
        )
        self.engine.begin(task_id)
        usage = self.usage_file(task_id, number)
        usage.parent.mkdir(parents=True, exist_ok=True)
        usage.unlink(missing_ok=True)  # an earlier life's, of a run started over
        item: dict[str, Any] = {
            "task": task_id,
            "attempt": number,
            "stage": stage,
            "pointer": pointer,
            "outputs": outputs,
            "model": self.run.packet.model_for(stage),
            "expires": iso(now + self.limits.timeout),
            "agent": worker_agent_type(self.repo),  # the subagent type to dispatch it with
            # Where the orchestrator may write what the subagent used (the JSON
            # object of $GITRUN_USAGE); collect puts it in the attempt's record.
            "usage": str(usage),
            # The same for every task of a batch (gitrun.workers.attempt.usage_file's
            # names), from the repository root, where the lead runs.
            "usage_template": _from_repo(usage.parent / "{task}.{attempt}.usage.json", self.repo),
        }
        if going_on:
            item["continue"] = going_on
        return item

    def usage_file(self, task_id: str, attempt: int) -> Path:
        # deferred: next and collect (<= 35x `python -c pass`) need it only here
        from gitrun.workers.attempt import usage_file

        return usage_file(self.local.log_of(task_id, attempt))

    # -- collect ------------------------------------------------------------------------

    def collect(self, throttled: list[str], abandon: bool = False) -> Collected:
        """Judge every leased task from the disk (:func:`gitrun.engine.collect.collect`)."""
        return collect(self, throttled, abandon)

    # -- state --------------------------------------------------------------------------

    def _restore_governor(self) -> None:
        state = load_record(
            self.local.governor,
            GovernorRecord.from_json,
            what="governor state",
            fix="concurrency and backoff start afresh from the ledger and the packet's limits",
            warn=warn_stderr,
        )
        if state is not None:
            self.governor.restore(state)

    def _restore_said(self, afresh: bool) -> set[str]:
        """The spend budget's warnings said already in this run: each call is
        a process of its own, and says one once (``afresh``: start and
        resume, which say them again, as a driver does in command mode)."""
        spend = self.governor.spend
        if afresh:
            with contextlib.suppress(OSError):  # what cannot go is only said once more
                self.local.budget_warnings.unlink(missing_ok=True)
            return set()
        if spend is None:
            return set()
        said = read_said(self.local.budget_warnings)
        spend.warned |= said
        return said

    def save(self) -> None:
        """Keep what the next call needs: the leases, the audit's look, the governor."""
        spend = self.governor.spend
        if spend is not None and spend.warned != self._said:
            write_said(self.local.budget_warnings, spend.warned)
            self._said = set(spend.warned)
        write_leases(self.local, self.leases)
        self.audit.active |= set(self.leases)
        write_record(self.local.audit, self.audit.state())
        write_record(self.local.governor, self.governor.export())


@contextmanager
def external_run(repo: Path, run_id: str, afresh: bool = False) -> Iterator[External]:
    """Load an external-mode run under its lock (waiting briefly for another call;
    ``afresh``: a start or resume, which says the budget's warnings again)."""
    run = load_run(repo, run_id)
    if run.packet.executor.kind != "external":
        raise GitrunError(
            f"run {run_id!r} uses the command executor, which gitrun drives itself; use "
            f"`gitrun start {run_id}` / `gitrun resume {run_id}` (or set [executor] kind = "
            '"external")'
        )
    local = LocalPaths.of(repo, run_id)
    deadline = time.monotonic() + LOCK_PATIENCE
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(run_locked(local, run_id))
                break
            except RunBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)
        rules.refresh(local, run)
        yield External(run, local, afresh)
