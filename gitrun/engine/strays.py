"""Every write of a run's workers that went, or tried to go, where it must not, as the ledger keeps it.

Four records say so, each written where the fact is found:

- ``violation``: the audit saw a path change outside every owned path
  (:mod:`gitrun.engine.audit`), with the tasks running then;
- ``stray``: a confined attempt wrote paths its task does not own (another
  task's output, as a rule), kept out of the work tree
  (:func:`gitrun.engine.recovery.bring_back`);
- ``suspect``: a task's output appeared while other tasks ran, not by an
  attempt of its own, and was set aside at its dispatch (the driver);
- ``denied``: the write hook (or the git pre-commit hook) denied an attempt a
  write; the hook keeps it beside the attempt's log and :func:`fold_denials`
  moves it to the ledger when the attempt ends.

The ledger is committed with the run, so ``status``, ``status --json`` and
the report name them after the run as during it, on any clone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gitrun.errors import GitrunError
from gitrun.store import ledger
from gitrun.store.events import Denied, Event, Record, Stray, Suspect, Violation, iso
from gitrun.store.jsonlines import read_lines
from gitrun.store.local import LocalPaths
from gitrun.visible import visible


class Recorder(Protocol):
    """What :func:`fold_denials` needs of the engine (:class:`gitrun.engine.states.Engine`)."""

    local: LocalPaths
    records: list[dict[str, Any]]

    def write(self, writer: ledger.LedgerWriter, record: Record) -> None: ...


VIOLATION, STRAY, SUSPECT, DENIED = Event.VIOLATION, Event.STRAY, Event.SUSPECT, Event.DENIED
KINDS = (VIOLATION, STRAY, SUSPECT, DENIED)
WRITTEN = (VIOLATION, STRAY, SUSPECT)  # writes that happened (a denied one did not)
MAX_DENIED = 20  # distinct paths of one attempt's denied writes the ledger keeps


@dataclass(frozen=True)
class StrayWrite:
    """One path written (or, ``denied``, tried) where its writer must not write."""

    kind: str  # one of KINDS: the ledger event that says so
    path: str
    task: str | None = None  # the writer (stray, denied) or the task whose output it is (suspect)
    attempt: int | None = None
    tasks: Sequence[str] = ()  # the tasks running when it appeared (violation, suspect)
    at: str = ""
    tool: str = ""  # denied: what was asked (Write, Edit, git commit, ...)
    reason: str = ""  # denied: what the hook answered
    times: int = 1  # denied: how often that attempt asked
    kept_as: int | None = None  # suspect: the attempt number its bytes were set aside under
    aside: str | None = None  # suspect: where they are, on this machine (status finds it)

    def describe(self) -> str:
        """One sentence, the path made visible (a worker chose it)."""
        path = visible(self.path)
        running = ", ".join(self.tasks) or "no task"
        who = f"{self.task} attempt {self.attempt}" if self.attempt else str(self.task)
        if self.kind == STRAY:
            return f"{path} written by {who}, which does not own it: kept out of the work tree"
        if self.kind == SUSPECT:
            where = f" in {self.aside}" if self.aside else ""
            return (
                f"{path}, an output of {self.task}, appeared while other tasks ran ({running}), "
                f"not by an attempt of {self.task}: set aside{where}"
            )
        if self.kind == DENIED:
            times = f", {self.times} times" if self.times > 1 else ""
            return f"{path}: the hook denied {who} this write ({self.tool}{times}): {visible(self.reason)}"
        return f"{path} changed outside every owned path (running: {running})"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": self.kind, "path": self.path}  # status --json
        if self.task is not None:
            data["task"] = self.task
        if self.attempt is not None:
            data["attempt"] = self.attempt
        data["tasks"] = list(self.tasks)
        data["at"] = self.at
        if self.kind == DENIED:
            data.update(tool=self.tool, reason=self.reason, times=self.times)
        if self.aside:
            data["quarantine"] = self.aside
        return data


def stray_writes(records: list[dict[str, Any]]) -> list[StrayWrite]:
    """The stray and denied writes among a ledger's records, in order."""
    found: list[StrayWrite] = []
    for record in ledger.typed(records):
        if isinstance(record, Violation):
            found.append(StrayWrite(VIOLATION, record.path, tasks=record.tasks, at=record.at))
        elif isinstance(record, Stray | Suspect):
            task = record.task or None
            number = record.attempt if isinstance(record, Stray) else None
            kept_as = record.aside if isinstance(record, Suspect) else None
            tasks = record.tasks if isinstance(record, Suspect) else []
            for path in record.paths:
                if isinstance(path, str):
                    found.append(
                        StrayWrite(
                            record.event, path, task, number, tasks, record.at, kept_as=kept_as
                        )
                    )
        elif isinstance(record, Denied):
            found.append(
                StrayWrite(
                    DENIED,
                    record.path,
                    record.task or None,
                    record.attempt,
                    [],
                    record.at,
                    tool=record.tool,
                    reason=record.reason,
                    times=record.times or 1,
                )
            )
    return found


def kept_denials(where: Path) -> list[Denied]:
    """The denied writes kept at ``where``, beside an attempt's log. The logs
    folder is writable to a confined worker: what it put there in place of
    the file (a directory, a FIFO) holds no denials and stops nothing."""
    try:
        lines = read_lines(where)
    except GitrunError:
        return []
    return [line for line in ledger.typed(lines) if isinstance(line, Denied)]


def fold_denials(engine: Recorder, writer: ledger.LedgerWriter, task: str, attempt: int) -> None:
    """Move the writes the hooks denied an ended attempt of ``task`` from beside
    its log to the ledger: one ``denied`` record a path (the first
    :data:`MAX_DENIED` paths), each once, however often the driver that does
    it is killed before it removes the file."""
    where = engine.local.denials_of(task, attempt)
    kept = kept_denials(where)
    if not kept:
        return
    known = {
        (w.task, w.attempt, w.path)
        for w in stray_writes(engine.records)
        if w.kind == DENIED and w.task == task
    }
    asked: dict[str, list[Denied]] = {}
    for line in kept:
        asked.setdefault(line.path, []).append(line)
    for path, lines in list(asked.items())[:MAX_DENIED]:
        if (task, attempt, path) in known:
            continue
        first = lines[0]
        denied = Denied(
            task, attempt, path, first.tool, first.reason, first.at or iso(0), len(lines)
        )
        engine.write(writer, denied)
    with contextlib.suppress(OSError):
        os.unlink(where)
