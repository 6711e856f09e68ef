"""Reading TOML with errors that point at file:line:column, and atomic writes."""

from __future__ import annotations

import bisect
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from gitrun.errors import DefinitionError
from gitrun.store.regular import NotRegular, read_regular

_WHERE = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def read_toml(path: Path, shown: str | None = None) -> dict[str, Any]:
    """Parse ``path``; ``shown`` is how the file is named in errors."""
    return read_toml_text(path, shown)[1]


def read_toml_text(path: Path, shown: str | None = None) -> tuple[str, dict[str, Any]]:
    """The text of ``path`` and its parsed TOML; ``shown`` names the file in errors."""
    name = shown or str(path)

    try:
        data = read_regular(path)  # a FIFO there is refused, not waited on
    except FileNotFoundError as exc:
        raise DefinitionError([f"{name}: file not found"], path=name) from exc
    except NotRegular as exc:
        raise DefinitionError(
            [f"{name}: is {exc.kind}, not a file; replace it with the TOML file"], path=name
        ) from exc
    except OSError as exc:
        raise DefinitionError([f"{name}: cannot read it ({exc.strerror})"], path=name) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DefinitionError(
            [f"{name}:{line}: is not UTF-8 text; save the file as UTF-8"], path=name
        ) from exc
    if text.startswith("\ufeff"):
        raise DefinitionError(
            [f"{name}:1: starts with a byte order mark (BOM); save the file as UTF-8 without one"],
            path=name,
        )

    try:
        return text, tomllib.loads(text)
    except RecursionError as exc:
        raise DefinitionError(
            [f"{name}: arrays or tables nested too deeply to read; flatten them"], path=name
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        found = _WHERE.match(str(exc))
        if found:
            where = f"{name}:{found['line']}:{found['col']}"
            msg = found["msg"]
        else:
            where, msg = name, str(exc)
        raise DefinitionError(
            [f"{where}: invalid TOML ({msg}); fix the syntax there"], path=name
        ) from exc


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    ``durable=False`` skips the fsync, for machine-local records that only
    need to survive the process, not the machine.
    """
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except IsADirectoryError as exc:  # a directory in the file's place: said, never removed
        Path(tmp).unlink(missing_ok=True)
        raise NotRegular(str(path), "a directory") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_toml(path: Path, value: dict[str, Any]) -> None:
    write_atomic(path, tomli_w.dumps(value).encode())


def find_line(text: str, loc: tuple[str | int, ...], array_table: str | None = None) -> int | None:
    """Best-effort line number of the field at ``loc`` in TOML ``text``."""
    return LineIndex(text).find(loc, array_table)


_KEY = re.compile(
    r'^\s*((?:[\w-]+|"[^"]*"|\'[^\']*\')(?:\s*\.\s*(?:[\w-]+|"[^"]*"|\'[^\']*\'))*)\s*='
)


_PART = re.compile(r'[\w-]+|"[^"]*"|\'[^\']*\'')


class LineIndex:
    """The lines of a TOML text, indexed once so that finding the line of
    each of many errors costs no scan of the file per error."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers: dict[str, list[int]] = {}  # "[limits]" or "[[task]]" -> line indices
        self.tables: list[int] = []  # every line that starts a table
        for n, line in enumerate(self.lines):
            stripped = line.strip()
            if stripped.startswith("["):
                self.tables.append(n)
                self.headers.setdefault(stripped.split("#", 1)[0].strip(), []).append(n)
        self._keys: dict[tuple[int, int], dict[str, int]] = {}

    def find(self, loc: tuple[str | int, ...], array_table: str | None = None) -> int | None:
        """Line number (1-based) of the field at ``loc``, or None.

        ``loc`` is a pydantic location such as ("limits", "concurrency") or, for
        an array of tables named ``array_table``, ("task", 3, "owns").
        """
        start, end = 0, len(self.lines)
        keys = list(loc)
        if array_table is not None and len(keys) >= 2 and keys[0] == array_table:
            index = keys[1]
            if not isinstance(index, int):
                return None
            headers = self.headers.get(f"[[{array_table}]]", [])
            if index >= len(headers):
                return None
            start = headers[index]
            end = headers[index + 1] if index + 1 < len(headers) else len(self.lines)
            keys = keys[2:]
            if not keys:
                return start + 1
        elif keys and isinstance(keys[0], str):
            # A table header such as [limits], [validators.json] or the n-th [[stages]].
            for depth in range(len(keys), 0, -1):
                prefix = keys[:depth]
                if not all(isinstance(k, str) for k in prefix):
                    continue
                dotted = ".".join(str(k) for k in prefix)
                found = self.headers.get(f"[{dotted}]")
                used = depth
                if depth < len(keys) and isinstance(keys[depth], int):
                    array = self.headers.get(f"[[{dotted}]]", [])
                    index = keys[depth]
                    assert isinstance(index, int)
                    if index < len(array):
                        found, used = [array[index]], depth + 1
                if found:
                    start = found[0]
                    after = bisect.bisect_right(self.tables, start)
                    end = self.tables[after] if after < len(self.tables) else len(self.lines)
                    keys = keys[used:]
                    if not keys:
                        return start + 1
                    break
            else:
                # A root key: before the first table, or (an inline table) anywhere.
                root = str(keys[0])
                head = self.tables[0] if self.tables else len(self.lines)
                at = self._keys_in(0, head).get(root)
                if at is None:
                    at = self._keys_in(0, len(self.lines)).get(root)
                return at + 1 if at is not None else None
        # Without the key itself (a missing field), the table's header is the place.
        fallback = start + 1 if len(keys) != len(loc) else None
        key = next((k for k in keys if isinstance(k, str)), None)
        if key is None:
            return fallback
        line = self._keys_in(start, end).get(key)
        return line + 1 if line is not None else fallback

    def _keys_in(self, start: int, end: int) -> dict[str, int]:
        """The first line of each key (its last dotted part) between two lines."""
        span = (start, end)
        if span not in self._keys:
            keys: dict[str, int] = {}
            for n in range(start, end):
                found = _KEY.match(self.lines[n])
                if found:
                    last = _PART.findall(found[1])[-1]
                    keys.setdefault(last.strip("\"'"), n)
            self._keys[span] = keys
        return self._keys[span]
