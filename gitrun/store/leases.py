"""Leases of an external run: the tasks handed to an orchestrator and not yet collected.

Machine-local (:attr:`gitrun.store.local.LocalPaths.leases`), written by ``next``
and ``collect`` and read by them and by ``status``. The file is one versioned
record (:mod:`gitrun.store.records`) listing the leases. A lease that is not
well-typed, or a file that cannot be read at all, is skipped with a warning:
it says nothing reliable about any task, and a task whose lease is lost only
counts as not handed out.
"""

from __future__ import annotations

from gitrun.store.records import (
    VERSION,
    Fields,
    RecordInvalid,
    load_record,
    warn_stderr,
    write_record,
)

# The write hooks read leases (a subagent's every write): no dataclasses here.
TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from gitrun.store.local import LocalPaths
    from gitrun.store.records import Warn

SKIPPED = "its tasks count as not handed out"


class Lease:
    """One task handed out: its attempt, when, until when, and its outputs'
    marks at that moment (``before``: see :func:`gitrun.definition.outputs.prepare_outputs`)."""

    __slots__ = (
        "attempt",
        "before",
        "expires",
        "leased",
        "made_from",
        "task",
        "throttles",
    )

    def __init__(
        self,
        task: str,
        attempt: int,
        leased: float,
        expires: float,
        before: dict[str, str | None],
        made_from: dict[str, str] | None = None,
        throttles: int = 0,
    ) -> None:
        self.task = task
        self.attempt = attempt
        # The tries of this attempt number the API throttled before it.
        self.throttles = throttles
        self.leased = leased
        self.expires = expires
        self.before = before
        # What the attempt makes its outputs from (gitrun.definition.provenance).
        self.made_from = made_from

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lease) and other.to_json() == self.to_json()

    def __repr__(self) -> str:
        return f"Lease({self.to_json()!r})"

    @classmethod
    def from_json(cls, data: Fields) -> Lease:
        task, attempt = data.string("task"), data.integer("attempt")
        leased, expires = data.number("leased"), data.number("expires")
        before = data.mapping("before")
        if not all(v is None or isinstance(v, str) for v in before.values()):
            raise RecordInvalid("before", "maps a path to something that is not a launch mark")
        made_from = data.data.get("made_from")
        if made_from is not None and not (
            isinstance(made_from, dict) and all(isinstance(v, str) for v in made_from.values())
        ):
            made_from = None  # damaged: the attempt's provenance is unknown, nothing worse
        throttles = data.integer("throttles") if "throttles" in data.data else 0
        return cls(task, attempt, leased, expires, before, made_from, throttles)

    @property
    def try_of(self) -> tuple[int, int]:
        """Which try of the task it is: its attempt number and throttles."""
        return self.attempt, self.throttles

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = ("task", "attempt", "leased", "expires", "before", "made_from", "throttles")


class LeaseFile:
    """The record on disk: leases by task, plus how many entries were skipped."""

    __slots__ = ("leases", "skipped")

    def __init__(self, leases: dict[str, Lease], skipped: list[str] | None = None) -> None:
        self.leases = leases
        self.skipped = skipped if skipped is not None else []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaseFile) and (other.leases, other.skipped) == (
            self.leases,
            self.skipped,
        )

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "leases": [lease.to_json() for lease in self.leases.values()]}

    @classmethod
    def from_json(cls, data: Fields) -> LeaseFile:
        found = cls({})
        for number, item in enumerate(data.array("leases"), 1):
            try:
                if not isinstance(item, dict):
                    raise RecordInvalid("leases", f"entry {number} is not a JSON object")
                lease = Lease.from_json(Fields(item))
            except RecordInvalid as exc:
                found.skipped.append(f"lease {number}: {exc}")
                continue
            found.leases[lease.task] = lease
        return found


def read_leases(local: LocalPaths, warn: Warn = warn_stderr) -> dict[str, Lease]:
    return read_leases_at(local.leases, warn)


def read_leases_at(path: Path | str, warn: Warn = warn_stderr) -> dict[str, Lease]:
    """The leases in the file at ``path``; a damaged file or entry is a warning."""
    found = load_record(
        path,
        LeaseFile.from_json,
        what="lease file",
        fix=f"ignored: {SKIPPED}",
        warn=warn,
    )
    if found is None:
        return {}
    if found.skipped:
        shown = "; ".join(found.skipped[:3]) + (
            f" and {len(found.skipped) - 3} more" if len(found.skipped) > 3 else ""
        )
        warn(f"{path}: skipped {len(found.skipped)} damaged lease(s) ({shown}); {SKIPPED}")
    return found.leases


def write_leases(local: LocalPaths, leases: dict[str, Lease]) -> None:
    write_record(local.leases, LeaseFile(leases))
