"""Leases of an external run: the tasks handed to an orchestrator and not yet collected.

Machine-local (:attr:`gitrun.local.LocalPaths.leases`), written by ``next``
and ``collect`` and read by them and by ``status``. The file is one versioned
record (:mod:`gitrun.records`) listing the leases. A lease that is not
well-typed, or a file that cannot be read at all, is skipped with a warning:
it says nothing reliable about any task, and a task whose lease is lost only
counts as not handed out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gitrun.local import LocalPaths
from gitrun.records import (
    VERSION,
    Fields,
    RecordInvalid,
    Warn,
    load_record,
    warn_stderr,
    write_record,
)

SKIPPED = "its tasks count as not handed out"


@dataclass
class Lease:
    task: str
    attempt: int
    leased: float
    expires: float
    before: dict[str, str | None]
    agent: str | None = None

    @classmethod
    def from_json(cls, data: Fields) -> Lease:
        task, attempt = data.string("task"), data.integer("attempt")
        leased, expires = data.number("leased"), data.number("expires")
        before = data.mapping("before")
        if not all(v is None or isinstance(v, str) for v in before.values()):
            raise RecordInvalid("before", "maps a path to something that is not a blob id")
        return cls(task, attempt, leased, expires, before, data.optional_string("agent"))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LeaseFile:
    """The record on disk: leases by task, plus how many entries were skipped."""

    leases: dict[str, Lease]
    skipped: list[str] = field(default_factory=list)

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


def _upgrade(value: object) -> object:
    """Before records had a version, the file was a bare list of leases."""
    return {"v": 1, "leases": value} if isinstance(value, list) else value


def read_leases(local: LocalPaths, warn: Warn = warn_stderr) -> dict[str, Lease]:
    found = load_record(
        local.leases,
        LeaseFile.from_json,
        what="lease file",
        fix=f"ignored: {SKIPPED}",
        warn=warn,
        upgrade=_upgrade,
    )
    if found is None:
        return {}
    if found.skipped:
        shown = "; ".join(found.skipped[:3]) + (
            f" and {len(found.skipped) - 3} more" if len(found.skipped) > 3 else ""
        )
        warn(f"{local.leases}: skipped {len(found.skipped)} damaged lease(s) ({shown}); {SKIPPED}")
    return found.leases


def write_leases(local: LocalPaths, leases: dict[str, Lease]) -> None:
    write_record(local.leases, LeaseFile(leases))
