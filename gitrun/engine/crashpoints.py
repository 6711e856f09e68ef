"""Deterministic crash points, for the chaos suite's "kill at every journal step" mode.

``GITRUN_CRASH_AT=<point>:<n>`` in a driver's environment makes its ``n``-th
arrival at ``point`` end the process with SIGKILL, exactly as ``kill -9`` or
a power cut would: no handler, no flush, no cleanup. The points are the steps
between which a crash leaves different state on disk (see :data:`POINTS`).
Unset (always, outside tests), :func:`crash_point` is one comparison.
"""

from __future__ import annotations

import os
import signal
import threading

# Where the driver may die, in the order an attempt passes them.
POINTS = (
    "launch.ahead",  # the write-ahead journal record is written; no worker yet
    "launch.spawned",  # the worker runs; its pid is not journaled
    "launch.journaled",  # pid, create time and command line are journaled
    "end.judged",  # the attempt ended and was judged; no ledger record yet
    "end.recorded",  # the ledger record is written; the journal's end is not
    "end.closed",  # the journal's end is written; the commit is not queued
    "commit.made",  # the commit object exists; the branch does not name it
    "commit.published",  # the branch names it; the local tip record is older
    "recover.recorded",  # a dead driver's attempt is recorded by its successor
)


def _plan() -> tuple[str, int] | None:
    point, _, count = os.environ.get("GITRUN_CRASH_AT", "").partition(":")
    if point not in POINTS:
        return None
    return point, int(count) if count.isdigit() and int(count) > 0 else 1


_PLAN = _plan()
_arrivals = 0
_lock = threading.Lock()  # commits arrive from the committer's thread


def crash_point(point: str) -> None:
    """Die here by SIGKILL if the environment asks for it at this arrival."""
    global _arrivals
    if _PLAN is None or _PLAN[0] != point:
        return
    with _lock:
        _arrivals += 1
        if _arrivals == _PLAN[1]:
            os.kill(os.getpid(), signal.SIGKILL)
