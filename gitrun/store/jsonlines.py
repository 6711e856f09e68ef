"""Files of JSON lines that gitrun appends to: the ledger's chunks and the local journal.

One record per line, each line written whole and flushed at once; a line a crash
cut short (or bytes that are not UTF-8) is skipped when reading, never an error.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitrun.errors import GitrunError
from gitrun.store.events import is_record
from gitrun.store.regular import NotRegular, explained, read_regular

# The most a file of JSON lines is read (a ledger chunk or the journal is a
# few MiB at most): a file larger is not gitrun's, and would fill memory.
MAX_LINES_BYTES = 2**30


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; lines that are not records are skipped
    (a crash cut them short, or bytes that are not UTF-8 replaced them)."""
    try:
        data = read_regular(path, limit=MAX_LINES_BYTES + 1)  # a FIFO is refused, not waited on
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise file_error(path, exc, "read") from exc
    if len(data) > MAX_LINES_BYTES:
        raise GitrunError(
            f"{shown(path)}: is larger than {MAX_LINES_BYTES // 2**30} GiB, which no file of "
            "gitrun's is; move it aside and run the command again"
        )
    return parse_lines(data.decode("utf-8", errors="replace"))


def parse_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        # One call for the whole file when every line is whole (the usual
        # case): the C decoder keeps one copy of each key for the whole call,
        # and a 100,000-record ledger parses in about half the time.
        values = json.loads("[" + ",".join(lines) + "]")
    except json.JSONDecodeError:
        values = None
    if values is None or len(values) != len(lines):
        values = []  # a line a crash cut short: each line on its own, skipping it
        for line in lines:
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    records: list[dict[str, Any]] = []
    texts: dict[str, str] = {}
    for record in values:
        if isinstance(record, dict) and is_record(record):
            # One copy of each short text value per file too: a big run's ledger
            # is 50,000 records of the same few outcomes, stages and models.
            for key, value in record.items():
                if type(value) is str and len(value) <= 16:
                    record[key] = texts.setdefault(value, value)
            records.append(record)
    return records


def line_of(record: dict[str, Any]) -> str:
    """``record`` as one line: keys sorted, no spaces (``json.dumps`` with
    those options, from an encoder made once: a driver writes a few lines
    per attempt, and making the encoder cost a third of each)."""
    return _encode(record) + "\n"


def _encoder() -> Callable[[Any], str]:
    options = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), check_circular=False, allow_nan=False
    )
    # json's own C encoder (what json.dumps makes afresh on every call).
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - a Python without the C accelerator
        return options.encode
    try:
        encode = make(
            None,  # no circular check: a record is a tree of plain values
            options.default,
            json.encoder.encode_basestring_ascii,
            None,
            options.key_separator,
            options.item_separator,
            options.sort_keys,
            options.skipkeys,
            options.allow_nan,
        )
        sample = {"b": [1, 2.5, None, True], "a": "\u00e9\n"}
        if "".join(encode(sample, 0)) != options.encode(sample):  # pragma: no cover
            return options.encode
    except TypeError:  # pragma: no cover - a Python whose C encoder takes other arguments
        return options.encode

    def text(value: Any) -> str:
        return "".join(encode(value, 0))

    return text


_encode = _encoder()


class LineWriter:
    """Appends JSON lines to a file it keeps open, each line written whole
    by one ``write`` at once (the page cache keeps it when the process is
    killed; nothing waits in a buffer of this process)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Non-blocking: a FIFO there must not stall the driver until a reader comes.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
            self._fd: int | None = os.open(path, flags, 0o666)
        except OSError as exc:
            raise file_error(path, explained(path, exc), "write") from exc
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            kind = explained(path, OSError(errno.EINVAL, "not a regular file"))
            self.close()
            raise file_error(path, kind, "write")
        os.set_blocking(self._fd, True)

    def write(self, record: dict[str, Any]) -> None:
        data = line_of(record).encode("utf-8")
        if self._fd is None:
            raise file_error(self._path, OSError(errno.EBADF, "closed"), "write")
        try:
            written = os.write(self._fd, data)
            while written < len(data):  # a disk that filled up part-way, or a signal
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            raise file_error(self._path, exc, "write") from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def shown(path: Path) -> str:
    """The path from the repository's .gitrun/ or .git/ on, as users know it."""
    parts = path.parts
    for top in (".gitrun", ".git"):
        if top in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(top) - 1 :])
    return str(path)


def file_error(path: Path, exc: OSError, verb: str) -> GitrunError:
    where = shown(path)
    if isinstance(exc, NotRegular):
        return GitrunError(
            f"{where}: is {exc.kind}, where gitrun keeps a file of JSON lines; move it aside "
            "and run the command again"
        )
    if isinstance(exc, IsADirectoryError):
        return GitrunError(
            f"{where}: is a directory, where gitrun keeps a file of JSON lines; move it "
            "aside and run the command again"
        )
    if isinstance(exc, NotADirectoryError):
        return GitrunError(
            f"{where}: cannot {verb} it: a directory on its path is a file; move that file "
            "aside and run the command again"
        )
    return GitrunError(
        f"{where}: cannot {verb} it ({exc.strerror or exc}); make it a writable regular file "
        "(or free disk space) and run the command again"
    )
