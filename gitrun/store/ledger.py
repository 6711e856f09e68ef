"""The run's ledger: one JSON line per attempt, append-only, committed with the run.

Besides attempts it holds ``start`` events (a run started, from which base
commit, with which tasks up to date: the ledger's records from the last one
on are the run's current round), ``retry`` events
(``gitrun retry`` gives a task new attempts), ``halt`` events (a halt that only
a person can lift: a failed canary, an environment fault, a strict ownership
violation) and ``lift`` events (``gitrun retry`` lifted it). Lines a crash cut short are skipped when reading.

Where it lives: ``.gitrun/runs/<run>/ledger/``, in numbered chunks of JSON lines
(``ledger/0000/000001.jsonl``, ``ledger/0000/000002.jsonl``, ... a hundred to a
directory), read back in number order by ``read_ledger`` and written only by a
``LedgerWriter``. The run's branch holds every commit's copy of the ledger; had
it one file, each commit would store the whole file again and the branch would
grow as commits x ledger. A chunk a commit has taken is not rewritten once its
earlier copies outweigh it, so git stores each chunk at most twice over and the
branch holds at most twice the final ledger, however many commits the run makes.
(A hundred chunks to a directory keep small the trees a commit rewrites.)
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gitrun.errors import GitrunError
from gitrun.store.events import COUNTED as COUNTED
from gitrun.store.events import (
    AttemptRecord,
    Halt,
    LedgerRecord,
    Lift,
    Outcome,
    Park,
    Record,
    Retry,
    Start,
    is_attempt,
    read,
)
from gitrun.store.jsonlines import LineWriter as LineWriter  # the local journal's too
from gitrun.store.jsonlines import file_error, line_of, shown
from gitrun.store.jsonlines import read_lines as read_lines
from gitrun.store.regular import read_regular
from gitrun.store.tomlfile import write_atomic
from gitrun.store.usage import UsageTotals

# The outcomes by the names this module gave them before gitrun.store.events
# declared them (scripts and tests read them here).
VALID, MISSING, INVALID = Outcome.VALID, Outcome.MISSING, Outcome.INVALID
INTERRUPTED, ABANDONED, THROTTLED = Outcome.INTERRUPTED, Outcome.ABANDONED, Outcome.THROTTLED
LOST, UNSTARTED = Outcome.LOST, Outcome.UNSTARTED


@dataclass
class TaskHistory:
    attempts: int = 0  # the highest number of an attempt the API did not throttle
    throttles: int = 0  # the tries of the next attempt number the API throttled so far
    used: int = 0  # attempts that count against max_attempts (since the last retry)
    spawns: int = 0
    last_outcome: str | None = None
    last_reason: str | None = None
    # The outputs its latest valid attempt made (path -> blob id), if it said.
    made: dict[str, str] | None = None
    up_to_date: bool = False  # not dispatched this round: its outputs at the base are current
    # Its latest try, for the next one (gitrun.engine.verdict.next_try): the
    # attempt number and throttles naming it, whether it timed out, its
    # conversation's id and whether it was itself a resumed try.
    last_try: tuple[int, int] = (0, 0)
    last_timed_out: bool = False
    conversation: str = ""
    last_resumed: bool = False

    @property
    def upcoming(self) -> tuple[int, int]:
        """The next try's identity: its attempt number and the throttled tries of
        that number before it."""
        return self.attempts + 1, self.throttles

    @property
    def last(self) -> int:
        """The number of its latest try that ended, throttled or not (0: none)."""
        return self.attempts + 1 if self.throttles else self.attempts

    def number(self, attempt: int, outcome: object) -> None:
        """What a record of ``attempt`` ending ``outcome`` changes in the
        numbering: a throttled try leaves the number to the try after it.
        (Older ledgers gave each throttle a number of its own: such a record
        only moves the numbering past it.)"""
        if outcome == Outcome.THROTTLED:
            if attempt > self.attempts + 1:
                self.attempts, self.throttles = attempt - 1, 0
            if attempt == self.attempts + 1:
                self.throttles += 1
        elif attempt > self.attempts:
            self.attempts, self.throttles = attempt, 0


Refused = tuple[int, str]  # attempts the API refused in a row, and what the last said


def refusals(refused: Refused, outcome: object, said: str) -> Refused:
    """The run of refusals after an attempt ended ``outcome``: one more for
    a throttle or usage limit (a limit that does not lift spends the spawn
    budget on them), none after any other ending but an interruption."""
    count, last = refused
    if outcome == Outcome.THROTTLED:
        return count + 1, said or last
    return refused if outcome == Outcome.INTERRUPTED else (0, "")


@dataclass
class LedgerSummary:
    tasks: dict[str, TaskHistory] = field(default_factory=dict)
    # The last halt not lifted since: {"kind": ..., "message": ...}.
    halt: dict[str, str] | None = None
    # The last park (a usage limit): {"until": epoch seconds, "reason": ...}.
    park: dict[str, Any] | None = None
    refused: Refused = (0, "")  # the attempts the API refused last, in a row

    @property
    def spawns(self) -> int:
        return sum(h.spawns for h in self.tasks.values())

    @property
    def made(self) -> dict[str, dict[str, str]]:
        """What each task's latest valid attempt made (path -> blob id), where it said."""
        return {tid: h.made for tid, h in self.tasks.items() if h.made}

    def of(self, task: str) -> TaskHistory:
        return self.tasks.get(task) or TaskHistory()


def summarize(records: list[dict[str, Any]]) -> LedgerSummary:
    summary = LedgerSummary()
    for record in records:
        note(summary, record)
    return summary


def note(summary: LedgerSummary, data: Mapping[str, Any]) -> None:
    """What one more record of the ledger changes in ``summary`` (the one
    reading of a record: a summary kept current as records are written is
    the summary of the ledger read back)."""
    record = read(data)
    if isinstance(record, Halt):
        summary.halt = {"kind": record.kind, "message": record.message}
    elif isinstance(record, Lift):
        summary.halt = None
    elif isinstance(record, Park):
        until = record.until_epoch
        if until is not None:
            summary.park = {"until": until, "reason": record.reason}
    elif isinstance(record, Start):
        for tid in record.up_to_date:
            summary.tasks.setdefault(tid, TaskHistory()).up_to_date = True
    elif isinstance(record, Retry):
        history = summary.tasks.setdefault(record.task, TaskHistory())
        history.used = 0
        history.up_to_date = False  # `gitrun retry RUN TASK` runs it again
    elif isinstance(record, AttemptRecord):
        history = summary.tasks.setdefault(record.task, TaskHistory())
        history.number(record.attempt, record.outcome)
        history.spawns += 1
        if record.outcome in COUNTED:
            history.used += 1
        history.last_outcome = record.outcome or None
        history.last_try = (record.attempt, record.throttles)
        history.last_timed_out = record.timed_out
        history.conversation = record.conversation
        history.last_resumed = record.resumed_from is not None
        history.last_reason = record.reason if isinstance(data.get("reason"), str) else None
        said = record.said[-1] if record.said and isinstance(record.said[-1], str) else ""
        summary.refused = refusals(summary.refused, record.outcome, said)
        if record.outcome == Outcome.VALID:
            history.made = record.made
    # else run-level events (ownership violations, a task's suspect output...)


def note_numbers(summary: LedgerSummary, earlier: list[dict[str, Any]]) -> None:
    """The attempt numbers earlier rounds used, so that the current round's
    attempts go on from them (their logs and quarantine are kept by number)."""
    for data in earlier:
        record = read(data)
        if isinstance(record, AttemptRecord):
            summary.tasks.setdefault(record.task, TaskHistory()).number(
                record.attempt, record.outcome
            )


def try_of(data: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """The try an attempt record is of: task, attempt number and throttled
    tries of that number before it (one record per try); None for events."""
    record = read(data)
    if not isinstance(record, AttemptRecord) or type(data.get("attempt")) is not int:
        return None
    return record.task, record.attempt, record.throttles


def current_round(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the run's current round: from its last ``start`` event
    on (all of them for a run started before rounds)."""
    for at in range(len(records) - 1, -1, -1):
        if isinstance(read(records[at]), Start):
            return records[at:] if at else records
    return records


def typed(records: list[dict[str, Any]]) -> list[LedgerRecord]:
    """The typed records of a ledger's lines, passing over what no kind reads."""
    return [r for r in map(read, records) if r is not None]


def merge_text(local: str, committed: str) -> str:
    """The union of two copies of a ledger, keeping the local order.

    The local copy normally extends the committed one; lines only the
    committed copy has (say, the local file was deleted or is older) are kept.
    A local copy the committed one extends (an older copy, put back by ``git
    stash pop``) gives the committed one, in its order.
    """
    if committed.startswith(local):
        return committed
    local_lines = [ln for ln in local.splitlines() if ln.strip()]
    seen = set(local_lines)
    missing = [ln for ln in committed.splitlines() if ln.strip() and ln not in seen]
    if not missing:
        return local if local.endswith("\n") or not local else local + "\n"
    return "".join(f"{ln}\n" for ln in missing + local_lines)


# -- where the ledger lives ----------------------------------------------------------------

CHUNK_DIR = "ledger"
PER_DIR = 100
_CHUNK_FILE = re.compile(r"([0-9]{6,})\.jsonl")


def chunk_name(number: int) -> str:
    """Chunk ``number``'s path relative to the run directory."""
    return f"{CHUNK_DIR}/{number // PER_DIR:04d}/{number:06d}.jsonl"


def is_ledger_name(name: str) -> bool:
    """Whether ``name`` (relative to the run directory) is a file of the ledger."""
    match = _CHUNK_FILE.fullmatch(name.rsplit("/", 1)[-1])
    return match is not None and chunk_name(int(match[1])) == name


def chunk_number(name: str) -> int:
    """The number of the chunk ``name`` (a name :func:`is_ledger_name` accepts)."""
    return int(name.rsplit("/", 1)[-1].split(".")[0])


def chunk_names(run_dir: Path) -> list[str]:
    """The chunks on disk in number order, relative to the run directory.

    Only canonical names count; anything else in ``ledger/`` is not the ledger's.
    """
    root = run_dir / CHUNK_DIR
    found: list[tuple[int, str]] = []
    if root.is_symlink():
        raise GitrunError(_linked(root))
    for group in _entries(root):
        if group.is_symlink():
            raise GitrunError(_linked(Path(group.path)))
        if not group.is_dir():
            continue
        for entry in _entries(Path(group.path)):
            name = f"{CHUNK_DIR}/{group.name}/{entry.name}"
            if is_ledger_name(name):
                found.append((int(entry.name.split(".")[0]), name))
    return [name for _, name in sorted(found)]


def _linked(directory: Path) -> str:
    return (
        f"{shown(directory)} is a symlink, where gitrun keeps the ledger's chunks in a real "
        "directory; replace the link with the directory it points to"
    )


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except FileNotFoundError:
        return []
    except NotADirectoryError as exc:
        raise GitrunError(
            f"{shown(directory)}: is a file, where gitrun keeps the ledger's chunks; move it "
            "aside and run the command again"
        ) from exc
    except OSError as exc:
        raise file_error(directory, exc, "read") from exc


def read_ledger(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of the run's ledger, in the order they were written."""
    records: list[dict[str, Any]] = []
    for name in chunk_names(run_dir):
        records += read_lines(run_dir / name)
    return records


def attempt_kind(record: Mapping[str, Any]) -> str:
    """What an attempt that ended was, in a word a person reads (:attr:`AttemptRecord.kind`)."""
    return AttemptRecord.from_json(record).kind


def attempt_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempt records among a ledger's lines (not run-level events), in order."""
    return [r for r in records if is_attempt(r)]


def usage_totals(records: list[dict[str, Any]]) -> UsageTotals:
    """What a run's attempts cost together, from its ledger's records: the
    spend, the tokens by model, the attempts whose cost is unknown, and what
    the attempts that did not end valid spent. Records written before
    attempts carried usage count as attempts of unknown cost."""
    totals = UsageTotals()
    for record in attempt_records(records):
        note_usage(totals, record)
    return totals


def note_usage(totals: UsageTotals, record: AttemptRecord | Mapping[str, Any]) -> None:
    """What one attempt record adds to ``totals`` (as read back from the ledger)."""
    if not isinstance(record, AttemptRecord):
        record = AttemptRecord.from_json(record)
    totals.add(record.usage, valid=record.outcome == Outcome.VALID, stage=record.stage)


class LedgerWriter:
    """The one way records enter the ledger.

    Each writer starts a chunk of its own (never appending to a chunk another
    process made), creating it with its first record. It moves on to a new
    chunk when the copies of the current one already handed to commits add up
    to more than the chunk would hold with the next record: every copy git keeps
    of a chunk is then paid for by the chunk's final size, so the branch stores
    at most twice the ledger. Commits take the chunks inside ``held_for_commit``
    so they never see half a record and the writer knows what they took.

    The bytes a writer wrote are the truth of its chunks, not the files in the
    work tree: a user's ``git stash -u`` takes those away, ``git stash pop``
    brings back an older copy, ``git clean`` removes them. So the writer keeps
    what it wrote to each chunk (an append to memory beside the append to the
    file) until a commit holds the chunk at its final size, and commits take
    the chunks from there. ``after`` is the highest chunk number the run's
    branch holds: a new chunk never takes the name of one committed already,
    even when the work tree lost it.
    """

    def __init__(self, run_dir: Path, after: int = 0) -> None:
        self._run_dir = run_dir
        self._lock = threading.Lock()
        self._number = 0
        self._after = after
        # What this writer wrote to each of its chunks, by name, until a
        # commit holds the chunk at its final size (forget_committed).
        self._written: dict[str, bytearray] = {}
        self._files: dict[str, tuple[int, int]] = {}  # name -> the file it made (dev, inode)
        self._handle: IO[bytes] | None = None
        self._size = 0  # bytes in the current chunk
        self._handed = 0  # bytes of the copies of it handed to commits
        self._last_handed = 0  # the size of the newest of those copies
        # Blob ids of the ledger's files by name, with the (size, mtime) they
        # were read at: a commit leaves out the files the branch holds as they are.
        self.blob_ids: dict[str, tuple[tuple[int, int], str]] = {}
        self.object_format: str | None = None

    def write(self, record: Record | Mapping[str, Any]) -> None:
        """Append ``record`` (a typed record; or a line's object as read, written as it is)."""
        fields = record.to_json() if isinstance(record, Record) else dict(record)
        data = line_of(fields).encode("utf-8")
        with self._lock:
            if self._handle is not None and self._handed > self._size + len(data):
                self._handle.close()
                self._handle = None
            if self._handle is None:
                self._handle = self._open_next()
            try:
                self._handle.write(data)
                self._handle.flush()
            except OSError as exc:
                raise file_error(self._run_dir / chunk_name(self._number), exc, "write") from exc
            self._written[chunk_name(self._number)].extend(data)
            self._size += len(data)

    def _open_next(self) -> IO[bytes]:
        names = chunk_names(self._run_dir)
        last = chunk_number(names[-1]) if names else 0
        number = max(last, self._number, self._after) + 1
        while True:
            path = self._run_dir / chunk_name(number)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise file_error(path.parent, exc, "write") from exc
            try:
                handle = path.open("xb")
            except FileExistsError:
                number += 1  # another writer took it: chunks are never shared
                continue
            except OSError as exc:
                raise file_error(path, exc, "write") from exc
            self._number = number
            self._size = self._handed = self._last_handed = 0
            self._written[chunk_name(number)] = bytearray()
            made = os.fstat(handle.fileno())
            self._files[chunk_name(number)] = (made.st_dev, made.st_ino)
            return handle

    @contextmanager
    def held_for_commit(self) -> Iterator[Mapping[str, bytes | bytearray]]:
        """No record is written while a commit takes the ledger; it is given
        this writer's chunks (name -> every byte written there, to be read
        only while held), and what it took of the current chunk counts as
        handed to that commit."""
        with self._lock:
            yield self._written
            if self._handle is not None and self._size > self._last_handed:
                self._handed += self._size
                self._last_handed = self._size

    def forget_committed(self, name: str) -> None:
        """The branch holds chunk ``name`` as this writer wrote it: a chunk it
        writes no more is not kept in memory any longer (call while held)."""
        if name == chunk_name(self._number) and self._handle is not None:
            return
        if self._is_ours(name):  # else kept, for close to put it back
            self._written.pop(name, None)

    def _is_ours(self, name: str) -> bool:
        """Whether the work tree's copy of chunk ``name`` is the file this writer made."""
        try:
            there = os.lstat(self._run_dir / name)
        except OSError:
            return False
        return (there.st_dev, there.st_ino) == self._files.get(name)

    def close(self) -> None:
        """Close the current chunk; a copy of one of this writer's chunks in
        the work tree that is not the file it made (``git stash pop`` put back
        an older copy) becomes what the writer wrote, so readers of the files find every
        record. A copy that is gone stays gone (a stash holds it, and its pop
        would fail on a file put back): the branch has the records."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            for name in list(self._written):
                if os.path.lexists(self._run_dir / name) and not self._is_ours(name):
                    self._put_back(name)

    def _put_back(self, name: str) -> None:
        """Chunk ``name`` in the work tree as this writer wrote it, when the
        copy there is an older one of it (never over anything else)."""
        path = self._run_dir / name
        written = bytes(self._written.get(name, b""))
        try:
            there = read_regular(path, follow=False, limit=len(written) + 1)
            if there != written and written.startswith(there):
                write_atomic(path, written, durable=False)
                made = os.lstat(path)
                self._files[name] = (made.st_dev, made.st_ino)
        except OSError:
            return  # a convenience for readers of the files: the branch has the records
