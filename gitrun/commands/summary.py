"""Plain-text renderings of a run's status for the terminal."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gitrun.engine.budget import spend_text, tokens_text
from gitrun.engine.governor import BUDGET, parked_clause
from gitrun.engine.motion import LED, STALLED, utc
from gitrun.engine.states import COMPLETE, DONE, FAILED, PENDING, RUNNING, UP_TO_DATE
from gitrun.engine.status import BRANCH_GONE, RunStatus, TaskStatus
from gitrun.engine.strays import WRITTEN
from gitrun.store.events import TIMED_OUT
from gitrun.store.lock import LiveState
from gitrun.visible import visible
from gitrun.words import counted

if TYPE_CHECKING:
    from gitrun.engine.governor import Halt


def _counts_text(counts: dict[str, int]) -> str:
    shown = [DONE, *([UP_TO_DATE] if counts.get(UP_TO_DATE) else []), RUNNING, PENDING, FAILED]
    return ", ".join(f"{counts[k]} {k}" for k in shown)


def _yield_text(status: RunStatus) -> str:
    ratio = status.yield_ratio
    shown = f"{ratio:.0%}" if ratio is not None else "n/a"
    spawns = counted(status.spawns, "spawn")
    return f"{spawns} for {counted(status.usable, 'usable output')} (yield {shown})"


def _spend_lines(status: RunStatus, indent: str) -> list[str]:
    """The spend so far and the tokens by model, each line when there is one."""
    lines = [
        spend_text(status.usage, status.usable, status.budget),
        tokens_text(status.usage),
    ]
    return [indent + line for line in lines if line]


def state_text(status: RunStatus) -> str:
    """Where the run is in its life: ``started``, ``landed in main as 1a2b3c4d5e``, ..."""
    if status.landed and not status.driver:
        return status.landed.describe()
    if status.state == BRANCH_GONE:
        return f"branch gitrun/{status.run} gone"
    if status.motion == STALLED:
        return _stalled(status)
    return status.state


def _stalled(status: RunStatus) -> str:
    """``stalled since 2025-06-01 14:03:07 UTC`` (when its last driver was last seen)."""
    since = status.stalled_since
    return f"stalled since {utc(since)}" if since is not None else "stalled"


def format_status_line(status: RunStatus) -> str:
    line = f"{status.run}: {state_text(status)}; {_counts_text(status.counts())}; {_yield_text(status)}"
    spend = spend_text(status.usage, status.usable, status.budget)
    return f"{line}; {spend}" if spend else line


def format_summary(
    status: RunStatus,
    stopped_by: str | None = None,
    halt: Halt | None = None,
    load_held: float = 0.0,
) -> str:
    total = len(status.tasks)
    lines = [
        f"run {status.run!r}: {_counts_text(status.counts())} of {total} tasks; {_yield_text(status)}"
    ]
    lines += _spend_lines(status, "")
    resumes = status.resumes
    if resumes:
        lines.append(resumes.saved_text())
    if load_held >= 1:
        lines.append(
            f"the load gate held starts back for {load_held:.0f} s (load average over max_load; "
            "one attempt at a time meanwhile)"
        )
    if halt is not None:
        lines.append(f"halted: {halt.message}")
    lines += _stray_lines(status)
    failed = [t for t in status.tasks.values() if t.status == "failed"]
    for task in failed[:20]:
        lines.append(
            f"  failed for good: {task.id} ({counted(task.attempts, 'attempt')}: "
            f"{_last(task, numbered=False)})"
        )
        lines += _words(status.run, task)
    if len(failed) > 20:
        lines.append(
            f"  ... and {len(failed) - 20} more failed (`gitrun status {status.run} --all`)"
        )
    every_done = sum(status.counts()[s] for s in COMPLETE) == total
    if stopped_by and every_done:
        lines.append(
            f"stopped by {stopped_by} with every task done; bring the results in with "
            f"`gitrun land {status.run}`"
        )
    elif stopped_by:
        lines.append(f"stopped by {stopped_by}; continue with `gitrun resume {status.run}`")
    elif halt is not None:
        pass  # the halt message says what to do
    elif failed:
        lines.append(
            f"give them new attempts with `gitrun retry {status.run}`, then `gitrun resume {status.run}`"
        )
    elif every_done:
        lines.append(f"all done; bring the results in with `gitrun land {status.run}`")
    return "\n".join(lines)


def format_status(status: RunStatus, limit: int | None = 20) -> str:
    lines = []
    if status.driver:
        d = status.driver
        lines.append(
            f"run {status.run!r}: driven by pid {d.pid} on {d.host}, heartbeat {d.silence:.0f} s ago"
        )
        lines.append(f"  {_live_state(d.state)}")
    elif status.damaged:
        lines.append(
            f"run {status.run!r}: its branch names a commit whose objects are missing; "
            f"`gitrun resume {status.run}` moves it back to its newest whole commit"
        )
    elif status.landing_stopped:
        lines.append(
            f"run {status.run!r}: a `gitrun land {status.run}` stopped half way; run it again "
            "to finish the landing"
        )
    elif status.landed:
        done = sum(status.counts()[s] for s in COMPLETE) == len(status.tasks)
        end = (
            f"; `gitrun start {status.run}` runs it again (what changed only), "
            f"`gitrun rm {status.run}` removes its branch and local state"
            if done
            else ""
        )
        lines.append(f"run {status.run!r}: {status.landed.describe()}{end}")
    elif status.branch_gone:
        lines.append(
            f"run {status.run!r}: its branch gitrun/{status.run} is gone; `gitrun start "
            f"{status.run}` starts it over, `gitrun rm {status.run}` removes what is left"
        )
    elif status.motion == STALLED:
        lines.append(
            f"run {status.run!r}: {_stalled(status)}: tasks are left and nothing runs them; "
            f"`gitrun resume {status.run}` continues it"
        )
    elif status.motion == LED:
        out = status.counts()[RUNNING]
        lines.append(f"run {status.run!r}: led by a session ({out} handed out)")
    else:
        lines.append(
            f"run {status.run!r}: {'no driver running' if status.started else 'not started'}"
        )
    for stage in status.stages:
        lines.append(f"  stage {stage}: {_counts_text(status.counts(stage))}")
    lines.append(f"  total: {_counts_text(status.counts())}; {_yield_text(status)}")
    lines += _spend_lines(status, "  ")
    lines += _resumed_lines(status, limit)
    if status.halt:
        # The spawn budget's message says what lifts it (a higher max_spawns).
        lifts = (
            ""
            if status.halt["kind"] == BUDGET
            else f" (`gitrun retry {status.run}` lifts the halt)"
        )
        lines.append(f"  halted: {status.halt['message']}{lifts}")
    if status.parked_until:
        lines.append(f"  {parked_text(status.parked_until, status.park_reason)}")
    for bucket in status.buckets:
        ceiling = f"ceiling ~{bucket.ceiling}" if bucket.ceiling else "no ceiling known"
        when = time.strftime("%H:%M:%S UTC", time.gmtime(bucket.when))
        lines.append(
            f"  model bucket {bucket.bucket}: concurrency {bucket.concurrency}, {ceiling} "
            f"({bucket.reason}, {when})"
        )
    lines += _stray_lines(status, limit)
    open_tasks = [t for t in status.tasks.values() if t.status not in COMPLETE]
    shown = open_tasks if limit is None else open_tasks[:limit]
    for task in shown:
        lines.append(f"  {task.id:<12} {task.status:<8} attempts {task.attempts}  {_last(task)}")
        lines += _words(status.run, task)
    if len(shown) < len(open_tasks):
        lines.append(f"  ... and {len(open_tasks) - len(shown)} more (--all lists them)")
    return "\n".join(lines)


def parked_text(until: float, reason: str) -> str:
    """A parked run, as status says it: until when (as everywhere, and with its
    date: a weekly limit resets days ahead) and why."""
    return (
        f"{parked_clause(until, reason or 'a usage limit')}: no new starts until "
        f"{utc(until)}; a driver goes on by itself then"
    )


def _last(task: TaskStatus, numbered: bool = True) -> str:
    """What a task not done is waiting on: its last attempt's kind (with its
    number when ``numbered``) and reason, or the outputs it has yet to make
    when no attempt ended."""
    if task.kind is None:
        return f"not tried yet; outputs {', '.join(task.missing)}"
    said = f"last attempt {task.ended_attempt} {task.kind}" if numbered else task.kind
    last = task.records[-1]
    held_by = last.get("conversation")
    if last.get("dispatch") == "external" and isinstance(held_by, str) and held_by:
        said += f" (subagent {visible(held_by)})"  # the subagent that held its lease
    if task.kind == TIMED_OUT:
        took = task.records[-1].get("duration")
        if isinstance(took, int | float):
            said += f" after {took:.0f} s (limits.timeout)"
    if task.reason:
        said += f": {task.reason}"
    if task.quarantine:
        said += f"; its outputs set aside in {task.quarantine}"
    return said


def _resumed_lines(status: RunStatus, limit: int | None) -> list[str]:
    """What resuming saved, then each try that continued a cut-off
    conversation or started fresh after one (the first ``limit``)."""
    resumes = status.resumes
    if not resumes:
        return []
    tries = resumes.tries
    shown = tries if limit is None else tries[:limit]
    lines = [f"  {resumes.saved_text()}", *(f"    {t.describe()}" for t in shown)]
    if len(shown) < len(tries):
        lines.append(f"    ... and {len(tries) - len(shown)} more (--all lists them)")
    return lines


def _stray_lines(status: RunStatus, limit: int | None = 10) -> list[str]:
    """Every stray write, and every write a hook denied (the first ``limit``)."""
    writes = status.violations
    lines = []
    for write in writes if limit is None else writes[:limit]:
        label = "ownership violation" if write.kind in WRITTEN else "write denied"
        lines.append(f"  {label}: {write.describe()}")
    if limit is not None and len(writes) > limit:
        lines.append(
            f"  ... and {len(writes) - limit} more stray or denied writes "
            f"(`gitrun status {status.run} --all` lists them)"
        )
    return lines


def _words(run: str, task: TaskStatus) -> list[str]:
    """What a task's last attempt said, and where its whole log is."""
    lines = [f"    it said: {line}" for line in task.said]
    if task.log:
        lines.append(f"    log: {task.log} (`gitrun logs {run} {task.id}`)")
    return lines


def _live_state(state: LiveState) -> str:
    def shown(value: int | None) -> str:
        return "?" if value is None else str(value)

    parts = [f"concurrency {shown(state.concurrency)}/{shown(state.max_concurrency)}"]
    until = state.backoff_until
    if until is not None and until > time.time():
        parts.append(f"backing off for {until - time.time():.0f} s")
    if state.waiting_for_load:
        parts.append("waiting for load")
    if state.canary:
        parts.append(f"canary {', '.join(state.canary)} running alone")
    if state.halt:
        parts.append(f"halting: {state.halt}")
    return "; ".join(parts)
