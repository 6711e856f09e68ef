"""``gitrun status RUN --watch``: the live view of a run driven anywhere.

A driver in another terminal, or an external run a session leads: this
process drives nothing, it reads the run's status every :data:`WATCH_EVERY`
seconds (the owner record's live state, the ledger, the leases) and redraws
it, on a terminal with the live view start and resume show
(:class:`gitrun.commands.live.LiveView`), elsewhere as one line per change.
It ends when nobody moves the run on any more (:mod:`gitrun.engine.motion`:
no live driver, nothing leased), printing the run's status; Ctrl-C ends it
sooner, as every command, with 130.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from gitrun.commands.drive import event
from gitrun.commands.live import LiveView
from gitrun.commands.summary import format_status, format_status_line
from gitrun.definition.load import RunDef, load_run
from gitrun.engine.driver import Progress
from gitrun.engine.governor import parked_clause
from gitrun.engine.motion import DRIVEN, LED
from gitrun.engine.states import DONE, FAILED, PENDING, RUNNING
from gitrun.engine.status import RunStatus, read_status
from gitrun.store.lock import LiveState
from gitrun.visible import visible

WATCH_EVERY = 1.0  # seconds between two readings of the run's status


def watch_status(repo: Path, run_id: str, every: float = WATCH_EVERY) -> int:
    """Show ``run_id`` as it moves until nobody moves it on; its exit code (0)."""
    run = load_run(repo, run_id)
    watcher = _Watcher(run_id)
    status = read_status(repo, run_id, run)
    if sys.stderr.isatty() and sys.stdout.isatty():
        with LiveView(run_id) as view:
            while _moving(status):
                for line in watcher.changes(status):
                    view.event(line)
                view.progress(watcher.progress(status))
                status = _after(every, repo, run_id, run)
    else:
        shown = ""
        while _moving(status):
            for line in watcher.changes(status):
                event(line)
            line = format_status_line(status)
            if line != shown:
                _write(line)
                shown = line
            status = _after(every, repo, run_id, run)
        for line in watcher.changes(status):
            event(line)
    _write(format_status(read_status(repo, run_id, landing=True)))
    return 0


def _moving(status: RunStatus) -> bool:
    return status.motion in (DRIVEN, LED)


def _after(seconds: float, repo: Path, run_id: str, run: RunDef) -> RunStatus:
    """The run's status ``seconds`` from now."""
    time.sleep(seconds)
    return read_status(repo, run_id, run)


def _write(text: str) -> None:
    sys.stdout.write(visible(text, lines=True) + "\n")
    sys.stdout.flush()


class _Watcher:
    """What changed between two readings, as event lines, and the live view's snapshot."""

    def __init__(self, run_id: str, clock: Callable[[], float] = time.time) -> None:
        self.run_id = run_id
        self.clock = clock
        self.seen: dict[str, tuple[str, int]] | None = None  # task -> (status, last attempt)
        self.began = clock()
        self.done_at_start: int | None = None

    def changes(self, status: RunStatus) -> list[str]:
        now = {tid: (t.status, t.last_attempt) for tid, t in status.tasks.items()}
        before, self.seen = self.seen, now
        if before is None:
            return []
        lines = []
        for tid, (state, attempt) in now.items():
            if before.get(tid) == (state, attempt):
                continue
            task = status.tasks[tid]
            if state == RUNNING:
                lines.append(f"{tid} attempt {attempt}: started")
            elif state == DONE:
                lines.append(f"{tid} attempt {attempt}: done")
            elif state == FAILED:
                lines.append(f"{tid}: failed for good ({task.reason or 'no output'})")
            elif state == PENDING and attempt:
                lines.append(f"{tid} attempt {attempt}: {task.reason or 'not done'}")
        return lines

    def progress(self, status: RunStatus) -> Progress:
        """The live view's snapshot, from the driver's heartbeat as status reads it."""
        now = self.clock()
        counts = status.counts()
        state = status.driver.state if status.driver is not None else LiveState()
        if self.done_at_start is None:
            self.done_at_start = counts[DONE]
        finished = counts[DONE] - self.done_at_start
        rate = finished / max(1e-6, now - self.began)
        left = counts[PENDING] + counts[RUNNING]
        running = [(a.task, a.attempt, now - a.started) for a in state.running]
        if not running:  # an external run's leases: which tasks, not since when
            running = [
                (t.id, t.last_attempt, 0.0) for t in status.tasks.values() if t.status == RUNNING
            ]
        return Progress(
            counts=counts,
            running=running,
            concurrency=state.concurrency or len(running),
            max_concurrency=state.max_concurrency or 0,
            backoff=max(0.0, (state.backoff_until or now) - now),
            waiting_for_load=state.waiting_for_load,
            canary=list(state.canary),
            spawns=status.spawns,
            usable=status.usable,
            eta=left / rate if rate > 0 and finished >= 3 else None,
            usage=status.usage,
            budget=status.budget,
            parked=(
                parked_clause(status.parked_until, status.park_reason)
                if status.parked_until
                else ""
            ),
        )
