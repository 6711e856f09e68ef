"""The live display of a running fan-out, for terminals (rich).

It shows the counts per status, the running tasks with their elapsed time,
the current concurrency and backoff, spawns against usable outputs, an ETA
and the latest events. The driver hands it snapshots as often as it likes;
rich redraws a few times a second from the latest one.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from gitrun.engine.budget import money, per_usable
from gitrun.engine.driver import Progress
from gitrun.visible import visible
from gitrun.words import counted


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _spend(p: Progress) -> str:
    """Spend so far, short: "spent $1.20 of $40 (2 unknown); $0.10/usable; wasted $0.30"."""
    usage, budget = p.usage, p.budget
    if usage is None or not usage.attempts:
        return ""
    if not usage.stage_costs:
        text = f"spend unknown ({counted(usage.attempts, 'attempt')} reported no cost)"
    else:
        text = f"spent {money(usage.spent_usd)}"
        if budget is not None and budget.cost_usd is not None:
            text += f" of {money(budget.cost_usd)}"
        if usage.unknown_cost:
            text += f" ({usage.unknown_cost} unknown)"
        per = per_usable(usage, p.usable)
        if per is not None:
            text += f"; {money(per)}/usable"
        if usage.wasted_usd:
            text += f"; wasted {money(usage.wasted_usd)}"
    if usage.tokens:
        text += f"; {usage.tokens:,} tokens"
        if budget is not None and budget.tokens is not None:
            text += f" of {budget.tokens:,}"
    return text


class LiveView:
    def __init__(self, run_id: str, max_running_shown: int = 12) -> None:
        self.run_id = run_id
        self.latest: Progress | None = None
        self.events: deque[str] = deque(maxlen=6)
        self.max_running_shown = max_running_shown
        self._live = Live(self, console=Console(stderr=True), refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._live.__exit__(kind, value, traceback)

    def event(self, line: str) -> None:
        self.events.append(visible(line))  # as the plain lines show it (commands.drive.event)

    def progress(self, snapshot: Progress) -> None:
        self.latest = snapshot

    def __rich__(self) -> Any:
        p = self.latest
        if p is None:
            return Text(f"gitrun {self.run_id}: starting…")
        c = p.counts
        head = Text.assemble(
            (f"gitrun {self.run_id}  ", "bold"),
            (f"{c['done']} done", "green"),
            "  ",
            (f"{c['running']} running", "cyan"),
            f"  {c['pending']} pending  ",
            (f"{c['failed']} failed", "red" if c["failed"] else ""),
        )
        state = [f"concurrency {p.concurrency}/{p.max_concurrency}"]
        if p.parked:
            state.append(p.parked)
        elif p.backoff > 0:
            state.append(f"backing off {p.backoff:.0f}s")
        if p.waiting_for_load:
            state.append("waiting for load")
        if p.canary:
            state.append(f"canary {', '.join(p.canary)}")
        state.append(f"{p.spawns} spawns for {p.usable} usable")
        spend = _spend(p)
        if spend:
            state.append(spend)
        state.append(f"ETA {_duration(p.eta)}" if p.eta is not None else "ETA …")
        lines = [head, Text("  " + " · ".join(state))]
        for task, attempt, elapsed in sorted(p.running, key=lambda r: -r[2])[
            : self.max_running_shown
        ]:
            lines.append(Text(f"  ▸ {task} #{attempt}  {_duration(elapsed)}", style="cyan"))
        if len(p.running) > self.max_running_shown:
            lines.append(Text(f"  … and {len(p.running) - self.max_running_shown} more running"))
        lines += [Text(f"  {line}", style="dim") for line in self.events]
        return Group(*lines)
