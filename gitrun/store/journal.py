"""The running journal: attempts a driver started and ended (``.git/gitrun/<run>/running.jsonl``).

Machine-local, one JSON line per step of an attempt, written before the step
it announces where a crash could otherwise lose it:

1. ``ahead``: before the worker is spawned, with the attempt id its
   processes inherit (``GITRUN_ATTEMPT_ID``), so a resume finds a worker
   it has no pid for;
2. ``spawned``: pid, create time and command line, as psutil saw them at
   once (a later driver signals the worker only while all three match);
3. ``end``: after the attempt's ledger record was written.

A new driver reads the journal of a dead one to stop its workers and record
their attempts (the ledger refuses a second record of one attempt), then
starts a fresh journal. Lines that are not well-typed records are skipped
with no effect: they say nothing about any task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gitrun.store.jsonlines import LineWriter, read_lines
from gitrun.store.local import LocalPaths

JOURNAL_FORMAT = 1


@dataclass(frozen=True)
class JournalEntry:
    task: str
    attempt: int
    run: str = ""
    attempt_id: str = ""
    started: float | None = None
    before: dict[str, str | None] = field(default_factory=dict)
    pid: int | None = None
    create_time: float | None = None
    cmdline: list[str] | None = None
    deadline: float | None = None
    end: bool = False
    # What the attempt makes its outputs from (gitrun.definition.provenance),
    # as the launch found it; None when unknown.
    made_from: dict[str, str] | None = None
    throttles: int = 0  # the tries of this attempt number the API throttled before it
    # Its conversation when known at launch, and the try it continues
    # (attempt, throttles), for a later driver that records it.
    conversation: str = ""
    resumed_from: tuple[int, int] | None = None
    resumed_turns: int = 0  # the turns that conversation held

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"v": JOURNAL_FORMAT, "task": self.task, "attempt": self.attempt}
        if self.throttles:
            data["throttles"] = self.throttles
        if self.end:
            data["end"] = True
            return data
        data.update(run=self.run, attempt_id=self.attempt_id, before=self.before)
        optional = {
            "started": self.started,
            "pid": self.pid,
            "create_time": self.create_time,
            "cmdline": self.cmdline,
            "deadline": self.deadline,
            "made_from": self.made_from,
            "conversation": self.conversation or None,
            "resumed_from": list(self.resumed_from) if self.resumed_from else None,
            "resumed_turns": self.resumed_turns or None,
        }
        data.update({k: v for k, v in optional.items() if v is not None})
        return data

    @classmethod
    def from_json(cls, item: object) -> JournalEntry | None:
        """The entry ``item`` is, or None when it is not a well-typed one (of a
        version this gitrun knows; records without ``v`` are version 1)."""
        if not isinstance(item, dict) or item.get("v", JOURNAL_FORMAT) != JOURNAL_FORMAT:
            return None
        task, attempt = item.get("task"), item.get("attempt")
        if not isinstance(task, str) or type(attempt) is not int or attempt < 1:
            return None
        throttles = item.get("throttles", 0)
        if type(throttles) is not int or throttles < 0:
            return None
        if item.get("end"):
            return cls(task, attempt, end=True, throttles=throttles)
        run, attempt_id, before = (
            item.get("run", ""),
            item.get("attempt_id", ""),
            item.get("before"),
        )
        if not isinstance(run, str) or not isinstance(attempt_id, str):
            return None
        if not isinstance(before, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in before.items()
        ):
            before = {}  # a damaged inventory: judged against the fork point instead
        pid, cmdline = item.get("pid"), item.get("cmdline")
        if type(pid) is not int:
            pid = None
        if not isinstance(cmdline, list) or not all(isinstance(a, str) for a in cmdline):
            cmdline = None
        return cls(
            task,
            attempt,
            run,
            attempt_id,
            _time(item.get("started")),
            before,
            pid,
            _time(item.get("create_time")),
            cmdline,
            _time(item.get("deadline")),
            made_from=_strings(item.get("made_from")),
            throttles=throttles,
            conversation=_text(item.get("conversation")),
            resumed_from=_try(item.get("resumed_from")),
            resumed_turns=_count(item.get("resumed_turns")),
        )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _try(value: object) -> tuple[int, int] | None:
    """A try's (attempt, throttles), as a journal entry names it."""
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
        return value[0], value[1]
    return None


def _time(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def read_journal(local: LocalPaths) -> list[JournalEntry]:
    """The journal's well-typed entries, in order."""
    entries = (JournalEntry.from_json(r) for r in read_lines(local.running))
    return [e for e in entries if e is not None]


def running_records(local: LocalPaths) -> dict[str, JournalEntry]:
    """Attempts the journal shows started and not ended, by task (the latest
    step of each)."""
    running: dict[str, JournalEntry] = {}
    for entry in read_journal(local):
        if entry.end:
            held = running.get(entry.task)
            if held is not None and (held.attempt, held.throttles) == (
                entry.attempt,
                entry.throttles,
            ):
                del running[entry.task]
        else:
            running[entry.task] = entry
    return running


class Journal:
    """A driver's journal, started afresh once a dead driver's is dealt with."""

    def __init__(self, local: LocalPaths) -> None:
        local.running.unlink(missing_ok=True)
        self._path = local.running
        self._writer = LineWriter(local.running)

    def write(self, entry: JournalEntry) -> None:
        self._writer.write(entry.to_json())

    def close(self, discard: bool = False) -> None:
        """Close the journal; ``discard``: every attempt in it ended and is
        recorded, so it goes (a later driver would read it all for nothing)."""
        self._writer.close()
        if discard:
            self._path.unlink(missing_ok=True)


def _strings(value: object) -> dict[str, str] | None:
    """A JSON object of strings, or None for anything else."""
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return value
    return None
