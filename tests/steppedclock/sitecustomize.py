"""A stepped wall clock for a child gitrun (tests/root/test_clock.py).

Python imports ``sitecustomize`` at start from its path, so a child started
with this folder first on ``PYTHONPATH`` gets a ``time.time`` that jumps by
``STEPPED_CLOCK_BY`` seconds the moment the file ``STEPPED_CLOCK_AT`` exists,
as the system's clock does when it is set or stepped. The monotonic clock is
left alone, as the kernel leaves it. (libfaketime would do the same from
outside, but with only the wall clock faked it breaks Python's ``time.sleep``:
its absolute ``clock_nanosleep`` on the monotonic clock fails with EINVAL.)
"""

from __future__ import annotations

import os
import time

_TRIGGER = os.environ.get("STEPPED_CLOCK_AT")
_BY = float(os.environ.get("STEPPED_CLOCK_BY") or 0)
_real_time = time.time
_real_time_ns = time.time_ns
_stepped = False


def _offset() -> float:
    global _stepped
    if not _stepped and _TRIGGER and os.path.exists(_TRIGGER):
        _stepped = True
    return _BY if _stepped else 0.0


def _time() -> float:
    return _real_time() + _offset()


def _time_ns() -> int:
    return _real_time_ns() + int(_offset() * 1e9)


if _TRIGGER:
    time.time = _time
    time.time_ns = _time_ns
