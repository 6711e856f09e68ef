"""A landing's journal (``land.jsonl``) and its lock (``land.lock``): who runs
the landing, what it lands where, and the step it has begun.

Each step appends the landing's whole state as one line, so the last whole
line is where a killed landing got to. The ``flock`` on ``land.lock`` is held
for the whole landing, so a second ``land`` knows a live one from a dead
one's journal.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from gitrun.errors import GitrunError
from gitrun.processes import reaper
from gitrun.store.flocks import Held, hold
from gitrun.store.jsonlines import MAX_LINES_BYTES, LineWriter, file_error
from gitrun.store.local import LocalPaths
from gitrun.store.records import VERSION, Fields, RecordInvalid
from gitrun.store.regular import read_regular


@dataclass(frozen=True)
class Landing:
    """One line of a landing's journal (``land.jsonl``): who runs it, what
    it lands where, and the step it begins (``begun``, ``built``,
    ``moving``, ``moved``, ``indexing``) with the time it began it."""

    run: str
    pid: int
    create_time: float | None
    cmdline: list[str] | None
    started: float
    head_ref: str  # refs/heads/<branch>, or HEAD when it is detached
    old: str  # the commit the branch held
    tip: str  # the run's tip being landed
    squash: bool
    step: str
    at: float
    commit: str | None = None  # the landing's commit, from step "built" on
    claim: tuple[int, int] | None = None  # device and inode of its index.lock, when indexing

    def to_json(self) -> dict[str, Any]:
        return {
            "v": 1,
            "run": self.run,
            "pid": self.pid,
            "create_time": self.create_time,
            "cmdline": self.cmdline,
            "started": self.started,
            "head_ref": self.head_ref,
            "old": self.old,
            "tip": self.tip,
            "squash": self.squash,
            "step": self.step,
            "at": self.at,
            "commit": self.commit,
            "claim": list(self.claim) if self.claim is not None else None,
        }

    @classmethod
    def from_json(cls, data: Fields) -> Landing:
        cmdline, squash, claim = (data.data.get(k) for k in ("cmdline", "squash", "claim"))
        if not isinstance(squash, bool):
            raise ValueError("field 'squash' is not true or false")
        if claim is not None and not (
            isinstance(claim, list) and len(claim) == 2 and all(type(n) is int for n in claim)
        ):
            raise ValueError("field 'claim' is not a device and an inode number")
        return cls(
            data.string("run"),
            data.integer("pid"),
            data.optional_number("create_time"),
            data.strings("cmdline") if cmdline is not None else None,
            data.number("started"),
            data.string("head_ref"),
            data.string("old"),
            data.string("tip"),
            squash,
            data.string("step"),
            data.number("at"),
            data.optional_string("commit"),
            (claim[0], claim[1]) if claim is not None else None,
        )

    def identity(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time, "cmdline": self.cmdline}


@contextlib.contextmanager
def landing_lock(local: LocalPaths, run_id: str) -> Iterator[None]:
    """Hold the run's landing lock, or refuse naming the ``land`` that holds it."""
    with contextlib.ExitStack() as stack:
        try:
            local.root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(hold(local.land_lock, wait=False))
        except Held:
            raise _busy(local, run_id) from None
        except OSError as exc:
            raise GitrunError(
                f"cannot write {local.root}: {exc.strerror or exc}; make it writable, then land "
                "again"
            ) from None
        yield


def _busy(local: LocalPaths, run_id: str) -> GitrunError:
    journal = read_journal(local)
    who = ""
    if journal is not None and reaper.is_recorded_process(journal.identity()):
        who = f" (pid {journal.pid}, for {time.time() - journal.started:.0f} s)"
    return GitrunError(
        f"a `gitrun land {run_id}` is running already{who}; wait for it to finish, then land "
        "again if it did not"
    )


def read_journal(local: LocalPaths) -> Landing | None:
    """The journal's last whole record: each step appends the landing's
    whole state as one line, written by one ``write`` (which a kill does not
    cut), so the last line that reads is where the landing got to. Appending
    costs no rename: on ext4 a rename over a file waits for that file's data
    to reach the disk."""
    try:
        text = read_regular(local.land_journal, limit=MAX_LINES_BYTES).decode(errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise file_error(local.land_journal, exc, "read") from None
    for line in reversed(text.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        version = data.get("v", VERSION)
        if version != VERSION:
            raise GitrunError(
                f"{local.land_journal} has format version {version!r}, which this gitrun does "
                "not read: a landing another gitrun version began and did not finish; finish "
                "it with that version (`gitrun land` again)"
            )
        try:
            return Landing.from_json(Fields(data))
        except (RecordInvalid, ValueError, TypeError):
            continue
    return None


def record(local: LocalPaths, journal: Landing, fresh: bool = False) -> None:
    """Append the landing's state to its journal (``fresh``: as its first line)."""
    if fresh:
        local.land_journal.unlink(missing_ok=True)
    writer = LineWriter(local.land_journal)
    try:
        writer.write(journal.to_json())
    finally:
        writer.close()


def record_step(
    local: LocalPaths,
    journal: Landing,
    step: str,
    commit: str | None = None,
    claim: tuple[int, int] | None = None,
) -> Landing:
    journal = replace(
        journal, step=step, at=time.time(), commit=commit or journal.commit, claim=claim
    )
    record(local, journal)
    return journal


def drop_journal(local: LocalPaths) -> None:
    """Remove the journal, then what it names (the claim last of all)."""
    local.land_journal.unlink(missing_ok=True)
    shutil.rmtree(local.land_staging, ignore_errors=True)
    for leftover in (local.land_index, local.land_claim):
        leftover.unlink(missing_ok=True)
