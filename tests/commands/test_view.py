"""The live view renders what the driver knows."""

from __future__ import annotations

import io

from rich.console import Console

from gitrun.commands.live import LiveView
from gitrun.engine.driver import Progress


def _render(view: LiveView) -> str:
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(view)
    return out.getvalue()


def test_live_view_shows_counts_running_tasks_concurrency_backoff_and_eta() -> None:
    view = LiveView("summaries")
    assert "starting" in _render(view)
    view.event("t0003 attempt 1: throttled (exit 75) — throttled; concurrency now 2")
    view.progress(
        Progress(
            counts={"done": 3, "running": 2, "pending": 5, "failed": 1},
            running=[("t0005", 2, 12.0), ("t0006", 1, 75.0)],
            concurrency=2,
            max_concurrency=4,
            backoff=3.2,
            waiting_for_load=True,
            canary=[],
            spawns=9,
            usable=3,
            eta=130.0,
        )
    )
    text = _render(view)
    assert "gitrun summaries  3 done  2 running  5 pending  1 failed" in text
    assert (
        "concurrency 2/4 · backing off 3s · waiting for load · 9 spawns for 3 usable · ETA 2m10s"
        in text
    )
    assert text.index("t0006 #1  1m15s") < text.index("t0005 #2  12s")  # longest-running first
    assert "throttled; concurrency now 2" in text


def test_live_view_says_until_when_a_parked_run_waits() -> None:
    view = LiveView("summaries")
    view.progress(
        Progress(
            counts={"done": 3, "running": 0, "pending": 5, "failed": 0},
            running=[],
            concurrency=2,
            max_concurrency=4,
            backoff=0.0,
            waiting_for_load=False,
            canary=[],
            spawns=4,
            usable=3,
            eta=None,
            parked="parked until 22:51 UTC (usage limit of claude)",
        )
    )
    assert "concurrency 2/4 · parked until 22:51 UTC (usage limit of claude) ·" in _render(view)
