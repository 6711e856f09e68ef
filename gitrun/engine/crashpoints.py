"""Deterministic crash points, for the "kill at every journal step" tests.

``GITRUN_CRASH_AT=<point>:<n>`` in a gitrun process's environment makes its ``n``-th
arrival at ``point`` end the process with SIGKILL, exactly as ``kill -9`` or
a power cut would: no handler, no flush, no cleanup. The points are the steps
between which a crash leaves different state on disk (see :data:`POINTS`
for the driver's, :data:`LAND_POINTS` for a landing's).
Unset (always, outside tests), :func:`crash_point` is one comparison.
"""

from __future__ import annotations

import functools
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
# Where `gitrun land` may die, in the order a landing passes them.
LAND_POINTS = (
    "land.journaled",  # the journal names the landing; nothing else changed
    "land.built",  # the merge commit exists and is journaled; no ref names it
    "land.moving",  # the journal says the branch is about to move; it has not
    "land.moved",  # the branch names the merge; work tree and index are the old ones
    "land.staged",  # the files to write are staged under .git; none is in place
    "land.file",  # one more of them is in place (the n-th arrival: the n-th file)
    "land.indexing",  # the work tree is the merge's; the journal names the index lock to be
    "land.holding",  # the landing holds index.lock; the index is the old one
    "land.indexed",  # the index is the merge's; the journal is not removed yet
)


@functools.cache
def _plan() -> tuple[str, int] | None:
    """The plan, read from the environment at the first crash point."""
    point, _, count = os.environ.get("GITRUN_CRASH_AT", "").partition(":")
    if point not in POINTS and point not in LAND_POINTS:
        return None
    return point, int(count) if count.isdigit() and int(count) > 0 else 1


_arrivals = 0
_lock = threading.Lock()  # commits arrive from the committer's thread


def crash_point(point: str) -> None:
    """Die here by SIGKILL if the environment asks for it at this arrival."""
    global _arrivals
    plan = _plan()
    if plan is None or plan[0] != point:
        return
    with _lock:
        _arrivals += 1
        if _arrivals == plan[1]:
            os.kill(os.getpid(), signal.SIGKILL)
