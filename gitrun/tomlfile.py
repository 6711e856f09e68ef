"""Reading TOML with errors that point at file:line:column, and atomic writes."""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from gitrun.errors import DefinitionError

_WHERE = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def read_toml(path: Path, shown: str | None = None) -> dict[str, Any]:
    """Parse ``path``; ``shown`` is how the file is named in errors."""
    name = shown or str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise DefinitionError([f"{name}: file not found"], path=name) from exc
    except OSError as exc:
        raise DefinitionError([f"{name}: cannot read it ({exc.strerror})"], path=name) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DefinitionError(
            [f"{name}:{line}: is not UTF-8 text; save the file as UTF-8"], path=name
        ) from exc
    try:
        return tomllib.loads(text)
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_toml(path: Path, value: dict[str, Any]) -> None:
    import tomli_w

    write_atomic(path, tomli_w.dumps(value).encode())


def find_line(text: str, loc: tuple[str | int, ...], array_table: str | None = None) -> int | None:
    """Best-effort line number of the field at ``loc`` in TOML ``text``.

    ``loc`` is a pydantic location such as ("limits", "concurrency") or, for
    an array of tables named ``array_table``, ("task", 3, "owns").
    """
    lines = text.splitlines()
    start, end = 0, len(lines)
    keys = list(loc)
    if array_table is not None and len(keys) >= 2 and keys[0] == array_table:
        index = keys[1]
        if not isinstance(index, int):
            return None
        headers = [n for n, ln in enumerate(lines) if ln.strip() == f"[[{array_table}]]"]
        if index >= len(headers):
            return None
        start = headers[index]
        end = headers[index + 1] if index + 1 < len(headers) else len(lines)
        keys = keys[2:]
        if not keys:
            return start + 1
    elif keys and isinstance(keys[0], str):
        # A table header such as [limits] or [validators.json]; else a root key.
        for depth in range(len(keys), 0, -1):
            header = "[" + ".".join(str(k) for k in keys[:depth]) + "]"
            found = [n for n, ln in enumerate(lines) if ln.strip() == header]
            if found:
                start = found[0]
                nxt = [n for n, ln in enumerate(lines) if n > start and ln.lstrip().startswith("[")]
                end = nxt[0] if nxt else len(lines)
                keys = keys[depth:]
                if not keys:
                    return start + 1
                break
    # Without the key itself (a missing field), the table's header is the place.
    fallback = start + 1 if len(keys) != len(loc) else None
    key = next((k for k in keys if isinstance(k, str)), None)
    if key is None:
        return fallback
    pattern = re.compile(rf"^\s*(?:[\w.-]+\.)?\"?{re.escape(key)}\"?\s*=")
    for n in range(start, end):
        if pattern.match(lines[n]):
            return n + 1
    return fallback
