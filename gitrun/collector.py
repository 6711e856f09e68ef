"""Pausing Python's cycle collector while a big run is loaded or checked.

Loading, checking or summing up a run of 100,000 tasks makes a million small
objects (models, patterns, claims, trie nodes) that form no reference cycles.
The cycle collector, triggered by the allocations alone, walks all of them
again and again as they pile up: 40% of ``gitrun check``'s time at that size.
Pausing it for those builds loses nothing (reference counting frees what they
drop) and keeps the rest of the process as it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Objects made inside a pause above which they are frozen at its end.
FREEZE_ABOVE = 200_000


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cycle collection inside; nested uses are fine.

    When the pause made many objects, they are frozen at its end (moved where
    the collector never looks): else the first collection after it walks all
    of them at once, 0.4 s for a loaded run of 100,000 tasks. What a big load
    leaves lives as long as the process anyway; small pauses (tests, small
    runs) freeze nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] > FREEZE_ABOVE:
            gc.freeze()
        gc.enable()
