"""The running journal's typed entries: round trip, old lines, junk."""

from __future__ import annotations

import json
from pathlib import Path

from gitrun.store.journal import Journal, JournalEntry, read_journal, running_records
from gitrun.store.local import LocalPaths

AHEAD = JournalEntry("t1", 2, "r", "abc123", 100.5, {"out/a.json": None, "out/b": "f00"})
SPAWNED = JournalEntry(
    "t1", 2, "r", "abc123", 100.6, {}, pid=4242, create_time=99.25, cmdline=["w", "x"], deadline=7e9
)
END = JournalEntry("t1", 2, end=True)


def test_every_kind_of_entry_round_trips() -> None:
    for entry in (AHEAD, SPAWNED, END):
        data = json.loads(json.dumps(entry.to_json()))
        assert data["v"] == 1
        assert JournalEntry.from_json(data) == entry


def test_a_line_without_a_version_is_version_one_and_other_versions_are_skipped() -> None:
    old = {"run": "r", "task": "t1", "attempt": 1, "attempt_id": "x", "started": 1.0}
    assert JournalEntry.from_json(old) == JournalEntry("t1", 1, "r", "x", 1.0)
    assert JournalEntry.from_json({**old, "v": 2}) is None


def test_damaged_fields_are_dropped_or_the_entry_skipped() -> None:
    assert JournalEntry.from_json({"task": "t1", "attempt": 0}) is None
    assert JournalEntry.from_json({"task": "t1", "attempt": True}) is None
    assert JournalEntry.from_json({"task": 1, "attempt": 1}) is None
    damaged = {"task": "t1", "attempt": 1, "pid": "7", "started": float("nan"), "before": [1]}
    entry = JournalEntry.from_json(damaged)
    assert entry == JournalEntry("t1", 1)  # nothing in it proves a process is the attempt's


def test_running_records_pair_each_start_with_its_end(tmp_path: Path) -> None:
    local = LocalPaths(tmp_path)
    journal = Journal(local)
    journal.write(AHEAD)
    journal.write(SPAWNED)
    journal.write(JournalEntry("t2", 1, "r", "def"))
    journal.write(JournalEntry("t2", 1, end=True))
    journal.write(JournalEntry("t3", 1, end=True))  # an end for an attempt never started
    journal.close()
    with local.running.open("a") as handle:
        handle.write('{"task": "t4", "attempt": 1, "v": 9}\n{"task": "t5", "att')  # cut short
    assert len(read_journal(local)) == 5
    assert running_records(local) == {"t1": SPAWNED}
    Journal(local).close()  # a new driver starts afresh
    assert running_records(local) == {}
