"""Versioned JSON records of machine-local state: one way to read and write them.

Every state file under ``.git/gitrun/<run>/`` (:class:`gitrun.store.local.LocalPaths`
names each one) holds one JSON object with a format version, ``"v": 1``, and
is written and read by the same typed record: ``to_json()`` gives the object,
``from_json()`` takes it back. A reader never crashes on what it finds:
:func:`load_record` turns a missing file into None and a corrupt body, a
version it does not know or a field of the wrong type into one sentence
naming the file and what to do. The caller chooses, by what the data is for,
whether that sentence is an error (:class:`RecordDamaged`: the owner record
of a live driver, which the user must hear about) or a warning after which
the file counts as absent (a cache, a lease: losing one costs time, not
correctness).

A new record, in full::

    @dataclass(frozen=True)
    class Governor:
        concurrency: int
        backoff_until: float | None = None

        def to_json(self) -> dict[str, Any]:
            return {"v": 1, "concurrency": self.concurrency, "backoff_until": self.backoff_until}

        @classmethod
        def from_json(cls, data: Fields) -> Governor:
            return cls(data.integer("concurrency"), data.optional_number("backoff_until"))

    saved = load_record(local.governor, Governor.from_json, what="governor state",
                        fix="it is rebuilt from the ledger", warn=warn_stderr)
    write_record(local.governor, Governor(4))

``from_json`` reads fields only through :class:`Fields`, whose getters raise
:class:`RecordInvalid` naming the field; ``load_record`` turns that into the
sentence, as it does for a file without a ``"v"``. Bump ``"v"`` only for a change an
older reader would misread; a new optional field needs no bump (readers
ignore fields they do not know).
"""

from __future__ import annotations

import json
import math
import sys

from gitrun.errors import GitrunError
from gitrun.store.regular import NotRegular, read_regular

# The write hooks read leases and dispatches through these records, so
# importing this module costs no typing, pathlib or dataclasses.
TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any, Protocol, TypeVar

    T = TypeVar("T")
    Warn = Callable[[str], None]

    class Record(Protocol):
        def to_json(self) -> dict[str, Any]: ...


VERSION = 1  # the only format version of every record so far
# The most a record file is read: far above the largest record gitrun writes
# (the leases of 100,000 tasks are 20 MiB), far below what would fill memory.
MAX_RECORD_BYTES = 256 * 2**20


class RecordInvalid(ValueError):
    """A field of a record is missing or has the wrong type."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r} {problem}")


class RecordDamaged(GitrunError):
    """A state file that cannot be read as its record; the sentence names it and the fix."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path} {problem}; {fix}")


class Fields:
    """Typed access to the fields of one JSON object; every getter raises
    :class:`RecordInvalid` naming the field when it is missing or ill-typed."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def _get(self, name: str) -> object:
        if name not in self.data:
            raise RecordInvalid(name, "is missing")
        return self.data[name]

    def string(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise RecordInvalid(name, "is not a string")
        return value

    def integer(self, name: str) -> int:
        value = self._get(name)
        if type(value) is not int:
            raise RecordInvalid(name, "is not a whole number")
        return value

    def number(self, name: str) -> float:
        value = self._get(name)
        if not is_finite(value):
            raise RecordInvalid(name, "is not a finite number")
        return float(value)  # type: ignore[arg-type]  # is_finite checked it

    def optional_string(self, name: str) -> str | None:
        return None if self.data.get(name) is None else self.string(name)

    def optional_number(self, name: str) -> float | None:
        return None if self.data.get(name) is None else self.number(name)

    def strings(self, name: str) -> list[str]:
        value = self._get(name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RecordInvalid(name, "is not a list of strings")
        return list(value)

    def mapping(self, name: str) -> dict[str, Any]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise RecordInvalid(name, "is not a JSON object")
        return value

    def array(self, name: str) -> list[Any]:
        value = self._get(name)
        if not isinstance(value, list):
            raise RecordInvalid(name, "is not a list")
        return value


def is_finite(value: object) -> bool:
    """A JSON number that is a real, finite number (not a bool, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too big for a float
        return False


def warn_stderr(message: str) -> None:
    sys.stderr.write(f"gitrun: warning: {message}\n")


def load_record(
    path: Path | str,
    decode: Callable[[Fields], T],
    *,
    what: str,
    fix: str,
    warn: Warn | None = None,
) -> T | None:
    """The record stored at ``path``, or None when there is no such file.

    ``decode`` builds the record from the object's :class:`Fields`. ``what``
    names the record in sentences ("the driver's owner record"); ``fix`` says
    what to do, or, for a skipped record, what skipping it means. A damaged
    file raises :class:`RecordDamaged` when ``warn`` is None, and otherwise is
    reported through ``warn`` and read as absent.
    """
    try:
        problem, data = _parse(path)
    except FileNotFoundError:
        return None
    if not problem:
        try:
            return decode(Fields(data))
        except RecordInvalid as exc:
            problem = f"is not a valid {what}: {exc}"
        except (KeyError, TypeError, ValueError) as exc:  # a decoder that forgot Fields
            problem = f"is not a valid {what}: {exc}"
    damaged = RecordDamaged(path, problem, fix)
    if warn is None:
        raise damaged
    warn(damaged.message)
    return None


def _parse(path: Path | str) -> tuple[str, dict[str, Any]]:
    """("", the version-1 object) or (what is wrong, {}); FileNotFoundError when absent."""
    try:
        raw = read_regular(path, limit=MAX_RECORD_BYTES + 1)  # a FIFO is refused, not waited on
    except FileNotFoundError:
        raise
    except NotRegular as exc:
        return f"is {exc.kind}, not a regular file", {}
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})", {}
    if len(raw) > MAX_RECORD_BYTES:
        return f"is larger than {MAX_RECORD_BYTES // 2**20} MiB, which no record of gitrun's is", {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text (a damaged file)", {}
    value: object
    try:
        value = json.loads(text)
    except RecursionError:
        return "is nested too deeply to be one of gitrun's records", {}
    except ValueError as exc:
        return f"is not valid JSON ({_json_problem(exc, text)})", {}
    if not isinstance(value, dict):
        return f"holds a JSON {_json_type(value)}, not an object", {}
    if "v" not in value:
        return 'has no format version ("v"), which every record of gitrun\'s has', {}
    version = value["v"]
    if type(version) is not int:
        return f"has a format version that is not a whole number ({version!r})", {}
    if version != VERSION:
        newer = "a newer" if version > VERSION else "another"
        return (
            f"has format version {version}, which this gitrun does not read (it reads "
            f"{VERSION}): it was written by {newer} gitrun",
            {},
        )
    return "", value


def _json_problem(exc: ValueError, text: str) -> str:
    if isinstance(exc, json.JSONDecodeError):
        if not text.strip():
            return "it is empty"
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    return str(exc)


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"


def write_record(path: Path, record: Record, durable: bool = False) -> None:
    """Write ``record`` to ``path`` atomically (a reader sees the old or the new one).

    ``durable`` adds an fsync, for a record that must survive a crash of the
    machine, not only of the process."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from gitrun.store.tomlfile import write_atomic

    write_atomic(path, json.dumps(record.to_json(), allow_nan=False).encode(), durable=durable)
