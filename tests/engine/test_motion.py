"""Who moves a run on: the decision of gitrun.engine.motion, as a table."""

from __future__ import annotations

import pytest

from gitrun.engine.motion import (
    AT_REST,
    DRIVEN,
    LEAD_PATIENCE,
    LED,
    STALLED,
    MotionFacts,
    last_record_time,
    motion_of,
)

NOW = 1_750_000_000.0
# A started command-mode run with work left, nobody on it, heard from an hour ago.
BASE = MotionFacts(
    started=True,
    landed=False,
    driver_alive=False,
    external=False,
    leases_out=False,
    open_tasks=3,
    halted=False,
    parked=False,
    last_seen=NOW - 3600,
    now=NOW,
)

CASES = [
    # (what differs from BASE, who moves it on)
    ({}, STALLED),
    ({"last_seen": None}, STALLED),
    ({"driver_alive": True}, DRIVEN),
    ({"driver_alive": True, "halted": True}, DRIVEN),  # it is halting: its driver ends soon
    ({"started": False}, AT_REST),
    ({"landed": True}, AT_REST),
    ({"open_tasks": 0}, AT_REST),  # done, or done but for tasks failed for good
    ({"halted": True}, AT_REST),  # `gitrun retry` first
    ({"parked": True}, AT_REST),  # waits for a usage limit's reset
    ({"external": True}, STALLED),  # its lead went quiet
    ({"external": True, "leases_out": True}, LED),
    ({"external": True, "last_seen": NOW - LEAD_PATIENCE + 5}, LED),  # between batches
    ({"external": True, "last_seen": NOW - LEAD_PATIENCE - 5}, STALLED),
    ({"external": True, "leases_out": True, "started": False}, LED),
    ({"last_seen": NOW - 5}, STALLED),  # a driver needs no patience: its lock says it is gone
]


@pytest.mark.parametrize(("differs", "expected"), CASES)
def test_motion_of(differs: dict[str, object], expected: str) -> None:
    facts = MotionFacts(**{**vars(BASE), **differs})  # type: ignore[arg-type]  # the table's values
    assert motion_of(facts) == expected


def test_last_record_time_is_the_latest_of_the_ledger_s_tail() -> None:
    records: list[dict[str, object]] = [
        {"event": "start", "at": "2025-06-01T10:00:00.000+00:00"},
        {"task": "t1", "attempt": 1, "ended": "2025-06-01T10:05:00.500+00:00"},
        {"task": "t2", "attempt": 1, "ended": "2025-06-01T10:04:00.000+00:00"},
        {"event": "violation", "at": "not a time"},
    ]
    assert last_record_time(records) == 1748772300.5
    assert last_record_time([{"event": "start"}]) is None
