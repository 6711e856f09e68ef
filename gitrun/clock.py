"""The two clocks: monotonic for durations, the wall clock for what is recorded.

Every deadline, grace, backoff, hold and wait is measured on
``time.monotonic()``, which no step of the system's clock moves: a clock set
an hour forward must not time a healthy attempt out, nor one set an hour
back stretch a 2 s timeout into an hour. What is written down stays on the
wall clock: the ledger's timestamps, and every time another process reads
(the lock's heartbeat and live state, the journal, leases, the external
governor's state), since a monotonic clock means nothing outside its own
boot. The two meet only here, at the moment a value crosses from one to the
other.
"""

from __future__ import annotations

import time


def to_wall(instant: float) -> float:
    """The wall-clock time of the monotonic ``instant`` (for a record another
    process reads), as the wall clock stands now."""
    return time.time() + (instant - time.monotonic())


def to_monotonic(wall: float) -> float:
    """The monotonic instant of the wall-clock time ``wall`` (a usage limit's
    announced reset), as the wall clock stands now: converted once, a later
    step of the wall clock moves it no more."""
    return time.monotonic() + (wall - time.time())
