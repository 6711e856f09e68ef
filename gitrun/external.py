"""External dispatch: an orchestrating agent session hands out the pointers itself.

``next`` leases tasks (as many as the governor allows, canary first) and
returns their pointers; the orchestrator dispatches each as a subagent and,
once they have returned, calls ``collect``, which judges every leased task
from the disk alone: valid outputs are committed, everything else is released
with an attempt used (invalid files quarantined), and tasks the orchestrator
names as throttled back off without using one. Leases and the governor's
state are machine-local (``.git/gitrun/<run>/``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrun import git, ledger
from gitrun.committer import Committer, Landing, branch_ref, landing_message
from gitrun.errors import GitrunError
from gitrun.governor import PERSISTENT, EndFacts, Governor, Halt, choose_canary
from gitrun.history import find_base
from gitrun.leases import Lease, read_leases, write_leases
from gitrun.local import LocalPaths
from gitrun.lock import RunBusy, run_locked
from gitrun.outputs import check_task, prepare_outputs, prior_in_tree, quarantine
from gitrun.pointer import render_pointer
from gitrun.runfiles import definition_files
from gitrun.runs import RunDef, load_run
from gitrun.state import committed_tasks
from gitrun.tomlfile import write_atomic

LOCK_PATIENCE = 30.0  # seconds next/collect wait for another next/collect


@dataclass
class Batch:
    leased: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""  # why nothing (more) was handed out
    done: bool = False  # every task is done
    halted: bool = False  # a halt holds the run until `gitrun retry` lifts it


@dataclass
class Collected:
    done: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # used up their attempts now
    reasons: dict[str, str] = field(default_factory=dict)
    next_step: str = ""
    halted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "missing": self.missing,
            "invalid": self.invalid,
            "throttled": self.throttled,
            "failed": self.failed,
            "reasons": self.reasons,
            "next": self.next_step,
            "halted": self.halted,
        }


class External:
    """One next/collect call's view of a run, under its lock."""

    def __init__(self, run: RunDef, local: LocalPaths) -> None:
        self.run = run
        self.repo = run.repo
        self.local = local
        self.committer = Committer(self.repo, run.id, local)
        tip = git.rev_parse(self.repo, branch_ref(run.id))
        if tip is None and git.ref_target(self.repo, branch_ref(run.id)):
            raise GitrunError(
                f"branch gitrun/{run.id} points at a commit whose objects are missing; "
                f"`gitrun resume {run.id}` moves it back to its newest whole commit"
            )
        if tip is None:
            raise GitrunError(
                f"run {run.id!r} has not started; start it with `gitrun start {run.id}` "
                "(in external mode that hands out the first batch)"
            )
        self.base = find_base(self.repo, run.id)
        self.done = committed_tasks(run, tip, self.base)
        summary = ledger.summarize(ledger.read_ledger(self.repo / run.dir))
        self.history = {t.id: summary.of(t.id) for t in run.tasks}
        self.limits = run.packet.limits
        self.leases = self._read_leases()
        failed = sum(
            1
            for t in run.tasks
            if t.id not in self.done and self.history[t.id].used >= self.limits.max_attempts
        )
        self.governor = Governor(
            self.limits,
            tasks=len(run.tasks),
            spawns=summary.spawns + len(self.leases),
            canary=choose_canary(self._open_tasks(), self.limits.canary, bool(self.done)),
            failed=failed,
            usable=len(self.done),
            halt=Halt(**summary.halt) if summary.halt else None,
        )
        self.halt_recorded = summary.halt is not None
        self._restore_governor()

    # -- next ---------------------------------------------------------------------

    def next_batch(self, limit: int | None, agents: bool) -> Batch:
        batch = Batch()
        now = time.time()
        if self.governor.halt is not None:
            batch.halted = True
            batch.reason = f"halted: {self.governor.halt.message}"
            return batch
        pending = self._pending()
        if not pending and not self.leases:
            failed = [t.id for t in self.run.tasks if t.id not in self.done]
            batch.done = not failed
            batch.reason = (
                f"every task is done; bring the results in with `gitrun land {self.run.id}`"
                if batch.done
                else f"nothing left to hand out: {', '.join(failed)} used up their attempts "
                f"(`gitrun retry {self.run.id}`)"
            )
            return batch
        slots = self.governor.slots(len(self.leases), now)
        if limit is not None:
            slots = min(slots, limit)
        for task_id in pending:
            if slots <= 0:
                break
            if not self.governor.eligible(task_id):
                continue
            batch.leased.append(self._lease(task_id, now, agents))
            slots -= 1
        if not batch.leased:
            batch.reason = self._why_none(now, pending)
        self._save()
        return batch

    def _why_none(self, now: float, pending: list[str]) -> str:
        halt = self.governor.halt
        if halt is not None:
            return f"halted: {halt.message}"
        if now < self.governor.backoff_until:
            return (
                f"throttled: wait {self.governor.backoff_until - now:.0f} s before the next batch"
            )
        if self.leases:
            return (
                f"{len(self.leases)} tasks are leased ({', '.join(sorted(self.leases))}); wait for "
                f"their subagents, then `gitrun collect {self.run.id}`"
            )
        if self.governor.waiting_for_load:
            return "the machine is busy (load average over max_load); try again shortly"
        return f"no task of the current stage is ready ({len(pending)} pending)"

    def _pending(self) -> list[str]:
        """Tasks of the current stage that may be handed out, in table order."""
        return [t for t in self._open_tasks() if t not in self.leases]

    def _open_tasks(self) -> list[str]:
        """Tasks of the current stage not done and not failed for good (leased
        ones included), in table order: the first stage that has any."""
        open_by_stage: dict[str, list[str]] = {s: [] for s in self.run.stage_names}
        for task in self.run.tasks:
            if task.id in self.done or self.history[task.id].used >= self.limits.max_attempts:
                continue
            open_by_stage[self.run.stage_of(task)].append(task.id)
        return next((tasks for tasks in open_by_stage.values() if tasks), [])

    def _lease(self, task_id: str, now: float, agents: bool) -> dict[str, Any]:
        task = next(t for t in self.run.tasks if t.id == task_id)
        history = self.history[task_id]
        number = history.attempts + 1
        outputs = [o.path for o in self.run.outputs_of(task)]
        aside = self.local.quarantine_of(task_id, number - 1)  # left before this attempt
        before = prepare_outputs(self.run, task, self.committer.object_format, aside)
        pointer = render_pointer(self.run, task)
        stage = self.run.stage_of(task)
        agent = None
        if agents:
            from gitrun.agents import write_agent

            agent = write_agent(self.run, task, pointer)
        self.leases[task_id] = Lease(task_id, number, now, now + self.limits.timeout, before, agent)
        history.attempts = number
        self.governor.started()
        item: dict[str, Any] = {
            "task": task_id,
            "attempt": number,
            "stage": stage,
            "pointer": pointer,
            "outputs": outputs,
            "model": self.run.packet.model_for(stage),
            "expires": ledger.iso(now + self.limits.timeout),
        }
        if agent:
            item["agent"] = agent
        return item

    # -- collect ------------------------------------------------------------------------

    def collect(self, throttled: list[str]) -> Collected:
        unknown = [t for t in throttled if t not in self.leases]
        if unknown:
            raise GitrunError(
                f"--throttled names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
                f"not leased; see `gitrun status {self.run.id}`"
            )
        result = Collected()
        landings: list[Landing] = []
        now = time.time()
        at_base = git.ls_tree(self.repo, self.base) if self.base else {}
        tasks = {t.id: t for t in self.run.tasks}
        # Leased tasks, and pending ones whose outputs appeared anyway.
        candidates = list(self.leases) + [
            t.id for t in self.run.tasks if t.id not in self.done and t.id not in self.leases
        ]
        writer = ledger.LedgerWriter(self.repo / self.run.dir)
        try:
            for task_id in candidates:
                task = tasks[task_id]
                lease = self.leases.get(task_id)
                prior = lease.before if lease else prior_in_tree(self.run, task, at_base)
                check = check_task(self.run, task, prior, self.committer.object_format)
                if lease is None and check.outcome != "valid":
                    continue  # not handed out, nothing there: not this call's business
                number = lease.attempt if lease else self.history[task_id].attempts
                outcome = check.outcome
                if outcome == "invalid":
                    quarantine(self.repo, self.local.quarantine_of(task_id, number), check.outputs)
                if outcome != "valid" and task_id in throttled:
                    outcome = ledger.THROTTLED
                history = self.history[task_id]
                counted = outcome in ledger.COUNTED
                failed_now = counted and history.used + 1 >= self.limits.max_attempts
                started = lease.leased if lease else now
                facts = EndFacts(task_id, outcome, now - started, None, None, False, "")
                self.governor.ended(facts, now, failed_now)
                reason = check.reason if outcome != "valid" else ""
                if reason:
                    result.reasons[task_id] = reason
                record = ledger.AttemptRecord(
                    task_id,
                    number,
                    self.run.stage_of(task),
                    started,
                    now,
                    outcome,
                    timed_out=bool(lease and now > lease.expires),
                    reason=reason,
                    dispatch="external",
                    concurrency=self.governor.concurrency if outcome == ledger.THROTTLED else None,
                )
                writer.write(record.to_json())
                if counted:
                    history.used += 1
                self.leases.pop(task_id, None)
                if lease and lease.agent:
                    from gitrun.agents import remove_agent

                    remove_agent(self.repo, lease.agent)
                if outcome == "valid":
                    landings.append(Landing(task_id, number, check.outputs))
                    result.done.append(task_id)
                    self.done.add(task_id)
                elif outcome == ledger.THROTTLED:
                    result.throttled.append(task_id)
                else:
                    (result.invalid if outcome == "invalid" else result.missing).append(task_id)
                    if failed_now:
                        result.failed.append(task_id)
            halt = self.governor.halt
            if halt is not None and halt.kind in PERSISTENT and not self.halt_recorded:
                self.halt_recorded = True
                event = {"event": ledger.HALT, "kind": halt.kind, "message": halt.message}
                writer.write({**event, "at": ledger.iso(now)})
        finally:
            writer.close()
        recorded = result.done + result.missing + result.invalid + result.throttled
        if recorded:  # nothing judged, nothing to commit
            own = definition_files(self.run)
            self.committer.commit(landings, own, landing_message(self.run.id, landings))
        self._save()
        result.next_step = self._next_step()
        result.halted = self.governor.halt is not None
        return result

    def _next_step(self) -> str:
        run_id = self.run.id
        if self.governor.halt is not None:
            return f"halted: {self.governor.halt.message}"
        left = [t.id for t in self.run.tasks if t.id not in self.done]
        if not left:
            return f"every task is done; bring the results in with `gitrun land {run_id}`"
        if not self._pending():
            return (
                f"{len(left)} tasks used up their attempts; `gitrun retry {run_id}` gives them more"
            )
        return f"`gitrun next {run_id}` hands out the next batch"

    # -- state --------------------------------------------------------------------------

    def _read_leases(self) -> dict[str, Lease]:
        return read_leases(self.local)

    def _restore_governor(self) -> None:
        try:
            state = json.loads((self.local.root / "governor.json").read_text())
        except (OSError, ValueError):
            return
        if isinstance(state, dict):
            self.governor.restore(state)

    def _save(self) -> None:
        write_leases(self.local, self.leases)
        state = json.dumps(self.governor.export()).encode()
        write_atomic(self.local.root / "governor.json", state, durable=False)


@contextmanager
def external_run(repo: Path, run_id: str) -> Iterator[External]:
    """Load an external-mode run under its lock (waiting briefly for another call)."""
    run = load_run(repo, run_id)
    if run.packet.executor.kind != "external":
        raise GitrunError(
            f"run {run_id!r} uses the command executor, which gitrun drives itself; use "
            f"`gitrun start {run_id}` / `gitrun resume {run_id}` (or set [executor] kind = "
            '"external")'
        )
    local = LocalPaths.of(repo, run_id)
    deadline = time.time() + LOCK_PATIENCE
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(run_locked(local, run_id))
                break
            except RunBusy:
                if time.time() >= deadline:
                    raise
                time.sleep(0.1)
        yield External(run, local)
