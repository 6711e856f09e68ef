"""Which subagent works on which task: the lead's Agent calls, recorded.

In an external run the lead dispatches each pointer with its Agent tool.
Claude Code gives the lead's PreToolUse hook that call's ``tool_use_id``,
and writes the same id into the subagent's ``meta.json`` (``toolUseId``),
which the subagent's own hooks find through their ``agent_id``. So the lead's
hook records ``tool_use_id -> (task, attempt, throttles)`` here, for a task that is
leased right now, and the subagent's hooks look it up: no agent file per
task, nothing the model writes, and the canary goes the same way.

One versioned record per run (:attr:`gitrun.store.local.LocalPaths.dispatches`),
written under the run's lock, like the leases it is checked against; a
dispatch of a task that is no longer leased with that try counts for
nothing, and the next dispatch drops it from the record.
"""

from __future__ import annotations

import time

from gitrun.store.leases import read_leases
from gitrun.store.records import VERSION, Fields, RecordInvalid, load_record, write_record

# The write hooks read dispatches (a subagent's every write): no dataclasses here.
TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from gitrun.store.local import LocalPaths
    from gitrun.store.records import Warn

DISPATCHED = 0  # what record_dispatch says of an attempt another subagent has (attempts are 1+)
LOCK_PATIENCE = 30.0  # seconds a hook waits for next/collect (or another hook) to finish


def description_of(run_id: str, task_id: str) -> str:
    """The canonical description of a task's subagent: what the user sees in the session."""
    return f"gitrun {run_id} {task_id}"


class Dispatch:
    """One Agent call of the lead: which task's attempt it dispatched, and when."""

    __slots__ = ("at", "attempt", "task", "throttles", "tool_use_id")

    def __init__(
        self, tool_use_id: str, task: str, attempt: int, at: float, throttles: int = 0
    ) -> None:
        self.tool_use_id = tool_use_id
        self.task = task
        self.attempt = attempt
        self.at = at
        # The lease's try: the tries of its attempt number the API throttled before it.
        self.throttles = throttles

    @property
    def try_of(self) -> tuple[int, int]:
        return self.attempt, self.throttles

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dispatch) and other.to_json() == self.to_json()

    def __hash__(self) -> int:
        return hash(self.tool_use_id)

    def __repr__(self) -> str:
        return f"Dispatch({self.to_json()!r})"

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_use_id": self.tool_use_id,
            "task": self.task,
            "attempt": self.attempt,
            "at": self.at,
            **({"throttles": self.throttles} if self.throttles else {}),
        }

    @classmethod
    def from_json(cls, data: Fields) -> Dispatch:
        return cls(
            data.string("tool_use_id"),
            data.string("task"),
            data.integer("attempt"),
            data.number("at"),
            data.integer("throttles") if "throttles" in data.data else 0,
        )


class DispatchFile:
    """The record on disk: dispatches by tool_use_id, and how many were skipped."""

    __slots__ = ("dispatches", "skipped")

    def __init__(self, dispatches: dict[str, Dispatch], skipped: int = 0) -> None:
        self.dispatches = dispatches
        self.skipped = skipped

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DispatchFile) and (other.dispatches, other.skipped) == (
            self.dispatches,
            self.skipped,
        )

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "dispatches": [d.to_json() for d in self.dispatches.values()]}

    @classmethod
    def from_json(cls, data: Fields) -> DispatchFile:
        found = cls({})
        for number, item in enumerate(data.array("dispatches"), 1):
            try:
                if not isinstance(item, dict):
                    raise RecordInvalid("dispatches", f"entry {number} is not a JSON object")
                dispatch = Dispatch.from_json(Fields(item))
            except RecordInvalid:
                found.skipped += 1
                continue
            found.dispatches[dispatch.tool_use_id] = dispatch
        return found


def read_dispatches(local: LocalPaths, warn: Warn) -> dict[str, Dispatch]:
    return read_dispatches_at(local.dispatches, warn)


def read_dispatches_at(path: Path | str, warn: Warn) -> dict[str, Dispatch]:
    """The dispatches in the file at ``path``; a damaged file or entry is a warning."""
    found = load_record(
        path,
        DispatchFile.from_json,
        what="dispatch record",
        fix="its subagents cannot be identified; dispatch their pointers again",
        warn=warn,
    )
    if found is None:
        return {}
    if found.skipped:
        warn(
            f"{path}: skipped {found.skipped} damaged dispatch(es); their subagents "
            "cannot be identified"
        )
    return found.dispatches


def write_dispatches(local: LocalPaths, dispatches: dict[str, Dispatch]) -> None:
    write_record(local.dispatches, DispatchFile(dispatches))


def record_dispatch(local: LocalPaths, run_id: str, task_id: str, tool_use_id: str) -> int | None:
    """Record that ``tool_use_id`` dispatches ``task_id``, if it is leased now
    and no other Agent call dispatched this try of it: the attempt number;
    None when the task is not leased, :data:`DISPATCHED` when another
    subagent has it."""
    # deferred: the write hook (<= 3x `python -c pass`) reads dispatches, and takes no lock
    from gitrun.store.lock import RunBusy, run_locked

    deadline = time.monotonic() + LOCK_PATIENCE
    while True:
        try:
            with run_locked(local, run_id):
                leases = read_leases(local, warn=_quiet)
                lease = leases.get(task_id)
                if lease is None:
                    return None
                dispatches = _current(read_dispatches(local, warn=_quiet), leases)
                if any(
                    d.task == task_id and d.try_of == lease.try_of and d.tool_use_id != tool_use_id
                    for d in dispatches.values()
                ):
                    return DISPATCHED
                dispatches[tool_use_id] = Dispatch(
                    tool_use_id, task_id, lease.attempt, time.time(), lease.throttles
                )
                write_dispatches(local, dispatches)
                return lease.attempt
        except RunBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def subagent_of(local: LocalPaths, task_id: str, try_of: tuple[int, int]) -> str:
    """The id of the subagent that took the dispatch of ``task_id``'s try
    ``try_of`` (its hooks bound it, :func:`gitrun.guard.subagents.bind`);
    ``""`` when none did, or the record cannot tell."""
    for d in read_dispatches(local, warn=_quiet).values():
        if d.task == task_id and d.try_of == try_of:
            try:
                said = (local.bound / d.tool_use_id).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return ""
            return said if said.isprintable() and 0 < len(said) <= 128 else ""
    return ""


def _current(dispatches: dict[str, Dispatch], leases: dict[str, Any]) -> dict[str, Dispatch]:
    """The dispatches of attempts still leased: the others were collected
    (their subagents are told so until the next dispatch drops them)."""
    return {
        key: d
        for key, d in dispatches.items()
        if d.task in leases and leases[d.task].try_of == d.try_of
    }


def _quiet(_line: str) -> None:
    """Hooks print nothing but their decision; a damaged record only identifies less."""
