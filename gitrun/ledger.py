"""The run's ledger: one JSON line per attempt, append-only, committed with the run.

It lives at ``.gitrun/runs/<run>/ledger.jsonl``. Besides attempts it holds
``retry`` events (``gitrun retry`` gives a task new attempts), ``halt``
events (a halt that only a person can lift: a failed canary, an environment
fault, a strict ownership violation) and ``lift`` events (``gitrun retry``
lifted it). Lines a crash cut short are skipped when reading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitrun.errors import GitrunError

# Outcomes decided from disk after an attempt.
VALID = "valid"
MISSING = "missing"
INVALID = "invalid"
# The attempt was stopped by gitrun (Ctrl-C, SIGTERM) or lost with a dead driver;
# neither uses up one of the task's attempts.
INTERRUPTED = "interrupted"
ABANDONED = "abandoned"
# The worker was throttled by its API (exit 75 or a throttle message) and its
# outputs did not validate: it backs off and does not use up an attempt.
THROTTLED = "throttled"
COUNTED = (MISSING, INVALID)
# Run-level events.
HALT = "halt"
LIFT = "lift"


@dataclass
class TaskHistory:
    attempts: int = 0  # the highest attempt number used so far
    used: int = 0  # attempts that count against max_attempts (since the last retry)
    spawns: int = 0
    last_outcome: str | None = None
    last_reason: str | None = None


@dataclass
class LedgerSummary:
    tasks: dict[str, TaskHistory] = field(default_factory=dict)
    # The last halt not lifted since: {"kind": ..., "message": ...}.
    halt: dict[str, str] | None = None

    @property
    def spawns(self) -> int:
        return sum(h.spawns for h in self.tasks.values())

    def of(self, task: str) -> TaskHistory:
        return self.tasks.get(task) or TaskHistory()


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; lines that are not records are skipped
    (a crash cut them short, or bytes that are not UTF-8 replaced them)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _file_error(path, exc, "read") from exc
    return parse_lines(text)


def _shown(path: Path) -> str:
    """The path from the repository's .gitrun/ or .git/ on, as users know it."""
    parts = path.parts
    for top in (".gitrun", ".git"):
        if top in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(top) - 1 :])
    return str(path)


def _file_error(path: Path, exc: OSError, verb: str) -> GitrunError:
    shown = _shown(path)
    if isinstance(exc, IsADirectoryError):
        return GitrunError(
            f"{shown}: is a directory, where gitrun keeps a file of JSON lines; move it "
            "aside and run the command again"
        )
    if isinstance(exc, NotADirectoryError):
        return GitrunError(
            f"{shown}: cannot {verb} it: a directory on its path is a file; move that file "
            "aside and run the command again"
        )
    return GitrunError(
        f"{shown}: cannot {verb} it ({exc.strerror or exc}); make it a writable regular file "
        "(or free disk space) and run the command again"
    )


def parse_lines(text: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and (
            isinstance(record.get("task"), str) or isinstance(record.get("event"), str)
        ):
            records.append(record)
    return records


def summarize(records: list[dict[str, Any]]) -> LedgerSummary:
    summary = LedgerSummary()
    for record in records:
        event = record.get("event")
        if event == HALT and isinstance(record.get("kind"), str):
            message = record.get("message")
            summary.halt = {"kind": record["kind"], "message": str(message or record["kind"])}
            continue
        if event == LIFT:
            summary.halt = None
            continue
        if not isinstance(record.get("task"), str):
            continue  # run-level events, such as ownership violations
        history = summary.tasks.setdefault(record["task"], TaskHistory())
        if record.get("event") == "retry":
            history.used = 0
            continue
        number = record.get("attempt")
        if isinstance(number, int):
            history.attempts = max(history.attempts, number)
        history.spawns += 1
        outcome = record.get("outcome")
        if outcome in COUNTED:
            history.used += 1
        history.last_outcome = outcome if isinstance(outcome, str) else None
        reason = record.get("reason")
        history.last_reason = reason if isinstance(reason, str) else None
    return summary


def iso(ts: float) -> str:
    """A ledger timestamp: UTC, milliseconds."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line (opening the file for it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(_line(record))
    except OSError as exc:
        raise _file_error(path, exc, "write") from exc


class LineWriter:
    """Appends JSON lines to a file it keeps open, each line flushed at once
    (the page cache keeps it when the process is killed)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise _file_error(path, exc, "write") from exc

    def write(self, record: dict[str, Any]) -> None:
        try:
            self._handle.write(_line(record))
            self._handle.flush()
        except OSError as exc:
            raise _file_error(self._path, exc, "write") from exc

    def close(self) -> None:
        self._handle.close()


def merge_text(local: str, committed: str) -> str:
    """The union of two copies of a ledger, keeping the local order.

    The local copy normally extends the committed one; lines only the
    committed copy has (say, the local file was deleted or is older) are kept.
    """
    local_lines = [ln for ln in local.splitlines() if ln.strip()]
    seen = set(local_lines)
    missing = [ln for ln in committed.splitlines() if ln.strip() and ln not in seen]
    if not missing:
        return local if local.endswith("\n") or not local else local + "\n"
    return "".join(f"{ln}\n" for ln in missing + local_lines)


def repair_tail(path: Path) -> None:
    """End a line a crash cut short, so the next record starts on its own line."""
    try:
        with path.open("rb+") as handle:
            handle.seek(0, 2)
            if handle.tell() == 0:
                return
            handle.seek(-1, 2)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _file_error(path, exc, "repair") from exc
