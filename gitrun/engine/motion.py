"""Whether anyone moves a run on: driven, led, stalled, or at rest.

A run is *driven* while a live process holds its lock (a driver, or an
external run's ``next``/``collect`` for an instant), *led* while an external
run's lead has a lease out that has not expired (or, between batches, was
heard from within :data:`LEAD_PATIENCE`), and *stalled* when it has work left
that would start (tasks pending, or running as nobody's) and nobody moves it:
no live driver, no lead, no halt holding it for ``gitrun retry``, no park
waiting for a reset. Otherwise it is *at rest*: not started, landed, done,
done but for tasks failed for good, halted or parked. ``status``,
``status --watch`` and ``watchdog`` all ask :func:`motion_of`.

A stalled run is stalled since its last driver (or lead) was last seen
alive: the last heartbeat its owner record holds (a driver killed by
``SIGKILL`` leaves it behind) or the last record of its ledger, whichever is
later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DRIVEN = "driven"
LED = "led"
STALLED = "stalled"
AT_REST = "at rest"

# Seconds an external run's lead may go without a lease out (between a
# `collect` and its next `next`) before its run counts as stalled.
LEAD_PATIENCE = 120.0


@dataclass(frozen=True)
class MotionFacts:
    started: bool
    landed: bool
    driver_alive: bool  # a live process holds the run's lock
    external: bool
    leases_out: bool  # an external run has a lease that has not expired
    open_tasks: int  # pending, or running as the local state says
    halted: bool
    parked: bool  # a usage limit's reset is still ahead
    last_seen: float | None  # wall clock; None: nothing says
    now: float


def motion_of(facts: MotionFacts) -> str:
    """Who moves the run on now: :data:`DRIVEN`, :data:`LED`, :data:`STALLED`
    or :data:`AT_REST` (the table in tests/engine/test_motion.py)."""
    if facts.driver_alive:
        return DRIVEN
    if facts.external and facts.leases_out:
        return LED
    if not facts.started or facts.landed or facts.open_tasks == 0:
        return AT_REST
    if facts.halted or facts.parked:
        return AT_REST
    heard = facts.last_seen
    if facts.external and heard is not None and facts.now - heard < LEAD_PATIENCE:
        return LED  # between a collect and the next batch
    return STALLED


def last_record_time(records: list[dict[str, Any]], tail: int = 200) -> float | None:
    """The latest time the last ``tail`` ledger records carry (an attempt's
    ``ended``, an event's ``at``), as epoch seconds; None when none does.
    Records are appended as they happen, so the tail holds the latest; a few
    writers' chunks may interleave, hence more than the last one."""
    latest: float | None = None
    for record in records[-tail:]:
        for key in ("ended", "at"):
            value = record.get(key)
            if isinstance(value, str):
                try:
                    when = datetime.fromisoformat(value).timestamp()
                except ValueError:
                    continue
                latest = when if latest is None else max(latest, when)
    return latest


def latest(*times: float | None) -> float | None:
    """The latest of ``times`` that are known."""
    known = [t for t in times if t is not None]
    return max(known) if known else None


def utc(when: float) -> str:
    """How a stall's moment is said: ``2025-06-01 14:03:07 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))
