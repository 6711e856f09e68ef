"""A loaded definition, kept so the next load of the same bytes needs no pydantic.

Checking a definition imports pydantic and builds its validators (~110 ms
before the first task of a ``start``, and in every ``next`` and ``collect``
of an orchestrating session). What the check makes is plain frozen
dataclasses (:mod:`gitrun.settings`), so a load that succeeded writes the
values it made to ``.git/gitrun/RUN/definition.json``: a header line, then
the values::

    {"v": 2, "key": "<view key>", "schema": "<sha256>", "run": "...",
     "sha256": "<of the next line>"}
    {"packet": {...}, "tasks": [{...}, ...]}

and a later load of the same run makes the same objects from it without
checking them again, when:

- ``key`` is the :func:`gitrun.runview.view_key` of the definition's bytes
  as they are now and of the ``GITRUN_*`` overrides (what the run view is
  keyed by: an edit, an override or a linked file is another key);
- ``schema`` is the fingerprint of what checked them (:func:`fingerprint`):
  this gitrun's version, the source of every module a load runs (the
  schema, its patterns and defaults, the readers of TOML, the rules of a
  load, this format), pydantic's version and Python's, so another version,
  or an edited checkout, checks the definition again;
- ``sha256`` is the digest of the values as written: a file damaged or
  edited since is never made into objects. The values are not checked
  again: sealed, they are what a check made. (Whoever can write a sealed
  file there can as well rewrite the repository's git hooks and gitrun's
  hook rules beside it: ``.git`` is not defended against its own user.)

Each table holds only the fields that differ from their defaults. Only a
cache: missing, stale or damaged, the definition is loaded and checked as
always, and written again. Task tables of more than :data:`MAX_TASKS` tasks
are not kept: writing them costs more than their check saves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import typing
from typing import Any

from gitrun.settings import is_table, table_fields, union_members, unwrap

if typing.TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from gitrun.settings import Packet, Task

VERSION = 2
# What a load runs, besides pydantic: a change to any of them may change what
# a load makes of the same bytes.
_SOURCES = ("settings", "runview", "runs", "tomlfile", "tasktoml", "snapshot")
MAX_TASKS = 10_000


def fingerprint() -> str:
    """What checked a kept definition: gitrun's version, the source of the
    modules a load runs, pydantic's version (its source, found without
    importing it) and Python's; "" when a source cannot be read, and then
    nothing is kept."""
    global _fingerprint
    if _fingerprint is None:
        import importlib.util
        import sys

        from gitrun import __version__

        digest = hashlib.sha256(f"gitrun {__version__}\0{sys.version}\0".encode())
        try:
            here = os.path.dirname(os.path.abspath(__file__))
            files = [os.path.join(here, f"{name}.py") for name in _SOURCES]
            pydantic = importlib.util.find_spec("pydantic")
            if pydantic is None or pydantic.origin is None:
                raise OSError("pydantic is not installed")
            files.append(os.path.join(os.path.dirname(pydantic.origin), "version.py"))
            for name in files:
                with open(name, "rb") as source:
                    digest.update(source.read() + b"\0")
            _fingerprint = digest.hexdigest()
        except (OSError, ImportError, ValueError):
            _fingerprint = ""
    return _fingerprint


_fingerprint: str | None = None


def path_of(repo: Path, run_id: str) -> Path | None:
    """Where ``run_id``'s snapshot is kept; None in a linked worktree, whose
    ``.git`` is a file (as the task table's cache)."""
    from gitrun.local import LocalPaths

    git_dir = repo / ".git"
    if not git_dir.is_dir():
        return None
    return LocalPaths.under(git_dir, run_id).definition


def read(path: Path, key: str, run_id: str) -> tuple[Packet, list[Task]] | None:
    """The packet and tasks kept at ``path`` under ``key``; None when there
    are none, or they are stale or damaged."""
    from gitrun.regular import read_regular
    from gitrun.settings import Packet, Task

    schema = fingerprint()
    if not schema:
        return None
    try:
        head, _, body = read_regular(str(path), follow=False).partition(b"\n")
        header = json.loads(head)
    except (OSError, ValueError, RecursionError):
        return None  # missing, not a regular file, or damaged
    if not (
        isinstance(header, dict)
        and header.get("v") == VERSION
        and header.get("key") == key
        and header.get("schema") == schema
        and header.get("run") == run_id
        and header.get("sha256") == hashlib.sha256(body).hexdigest()
    ):
        return None  # another definition, another gitrun, or damaged
    try:
        data = json.loads(body, parse_constant=_no_constant)
        packet = builder(Packet)(data["packet"])
        build_task = builder(Task)
        tasks = [build_task(task) for task in data["tasks"]]
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None  # written by a gitrun that made other values: checked again
    if not isinstance(packet, Packet) or packet.run.id != run_id:
        return None
    return packet, tasks


def _no_constant(name: str) -> None:
    """NaN and Infinity: JSON has neither, and the schema refuses both."""
    raise ValueError(f"{name} is not a value a check makes")


def write(path: Path, key: str, packet: Packet, tasks: list[Task]) -> None:
    """Keep a definition that loaded (only a cache: a failure leaves it to the
    next load)."""
    import contextlib

    from gitrun.tomlfile import write_atomic

    schema = fingerprint()
    if not schema or len(tasks) > MAX_TASKS:
        return
    with contextlib.suppress(OSError, ValueError, RecursionError):
        values = {"packet": dump(packet), "tasks": [dump(task) for task in tasks]}
        body = json.dumps(values, separators=(",", ":"), allow_nan=False).encode()
        header = {
            "v": VERSION,
            "key": key,
            "schema": schema,
            "run": packet.run.id,
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        write_atomic(path, json.dumps(header).encode() + b"\n" + body, durable=False)


def dump(value: Any) -> Any:
    """``value`` as JSON values; of a table, only the fields that differ from
    their defaults."""
    return _table_dumper(type(value))(value) if is_table(type(value)) else value


_DUMPERS: dict[Any, Callable[[Any], Any] | None] = {}


def dumper(annotation: Any) -> Callable[[Any], Any] | None:
    """A function that makes JSON values of a value of ``annotation``; None
    where the value is one already (text, numbers, lists of text, ...)."""
    if annotation not in _DUMPERS:
        _DUMPERS[annotation] = _make_dumper(annotation)
    return _DUMPERS[annotation]


def _make_dumper(annotation: Any) -> Callable[[Any], Any] | None:
    annotation = unwrap(annotation)
    members = union_members(annotation)
    if members:
        if not any(is_table(m) for m in members):
            return None
        return dump
    if is_table(annotation):
        return _table_dumper(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    item = dumper(args[0] if origin is list else args[1]) if origin in (list, dict) else None
    if item is None:
        return None
    each = item
    if origin is list:
        return lambda value: [each(x) for x in value]
    return lambda value: {k: each(v) for k, v in value.items()}


_NO_DEFAULT = object()


def _differs(value: Any, default: Any) -> bool:
    """Not the default as a check makes it: -0.0 equals 0.0, and is kept."""
    if type(value) is float and type(default) is float and value == default:
        return math.copysign(1.0, value) != math.copysign(1.0, default)
    return bool(value != default)


_TABLE_DUMPERS: dict[type[Any], Callable[[Any], Any]] = {}


def _table_dumper(model: type[Any]) -> Callable[[Any], Any]:
    found = _TABLE_DUMPERS.get(model)
    if found is None:
        found = _TABLE_DUMPERS[model] = _make_table_dumper(model)
    return found


def _make_table_dumper(model: type[Any]) -> Callable[[Any], Any]:
    plan = []
    for f in dataclasses.fields(model):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _NO_DEFAULT
        inner = dumper(table_fields(model)[f.name])
        if inner is not None and default is not _NO_DEFAULT and default is not None:
            default = inner(default)  # compared as dumped: a table by what differs in it
        plan.append((f.name, default, inner))

    def dump_table(value: Any) -> dict[str, Any]:
        out = {}
        for name, default, inner in plan:
            field_value = getattr(value, name)
            if inner is not None and field_value is not None:
                field_value = inner(field_value)
            if default is _NO_DEFAULT or _differs(field_value, default):
                out[name] = field_value
        return out

    return dump_table


def _same(value: Any) -> Any:
    return value


_BUILDERS: dict[Any, Callable[[Any], Any]] = {}


def builder(annotation: Any) -> Callable[[Any], Any]:
    """A function that makes a value of ``annotation`` from what :func:`dump`
    made of one: tables from dicts (a union of tables by its ``kind``), the
    rest as it is."""
    key = annotation
    found = _BUILDERS.get(key)
    if found is None:
        found = _BUILDERS[key] = _make_builder(annotation)
    return found


def _make_builder(annotation: Any) -> Callable[[Any], Any]:
    annotation = unwrap(annotation)
    members = union_members(annotation)
    if members:
        tables = {m: builder(m) for m in members if is_table(m)}
        if not tables:
            return _same
        if len(tables) > 1:  # a tagged union: told apart by the kind it holds
            by_kind = {typing.get_args(table_fields(m)["kind"])[0]: b for m, b in tables.items()}

            def build_tagged(value: Any) -> Any:
                return by_kind[value["kind"]](value) if isinstance(value, dict) else value

            return build_tagged
        (build_one,) = tables.values()
        return lambda value: build_one(value) if isinstance(value, dict) else value
    if is_table(annotation):
        return _table_builder(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list:
        item = builder(args[0])
        return _same if item is _same else lambda value: [item(x) for x in value]
    if origin is dict:
        item = builder(args[1])
        return _same if item is _same else lambda value: {k: item(v) for k, v in value.items()}
    return _same


def _table_builder(model: type[Any]) -> Callable[[Any], Any]:
    fields = {name: builder(a) for name, a in table_fields(model).items()}
    converted = {name: b for name, b in fields.items() if b is not _same}

    def build(value: dict[str, Any]) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"{model.__name__}: expected a table")
        for name in converted.keys() & value.keys():
            if value[name] is not None:
                value[name] = converted[name](value[name])
        return model(**value)

    return build
