"""A loaded definition, kept so the next load of the same bytes needs no pydantic.

Checking a definition imports pydantic and builds its validators (~110 ms
before the first task of a ``start``, and in every ``next`` and ``collect``
of an orchestrating session). What the check makes is plain frozen
dataclasses (:mod:`gitrun.settings`), so a load that succeeded writes the
values it made to ``.git/gitrun/RUN/definition.json``::

    {"v": 1, "key": "<view key>", "schema": "<sha256>", "run": "...",
     "packet": {...}, "tasks": [{...}, ...]}

and a later load of the same run makes the same objects from it without
checking them again, when:

- ``key`` is the :func:`gitrun.runview.view_key` of the definition's bytes
  as they are now and of the ``GITRUN_*`` overrides (what the run view is
  keyed by: an edit, an override or a linked file is another key);
- ``schema`` is the fingerprint of the schema that checked them: this
  gitrun's version and the source of :mod:`gitrun.settings`, which declares
  the whole schema, and of :mod:`gitrun.runview`, whose patterns and
  defaults it uses (:func:`fingerprint`), so another version, or an edited
  checkout with other defaults or rules, checks the definition again.

Each table holds only the fields that differ from their defaults. Only a
cache: missing, stale or damaged, the definition is loaded and checked as
always, and written again. Task tables of more than :data:`MAX_TASKS` tasks
are not kept: writing them costs more than their check saves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from typing import Any

from gitrun.settings import _annotations, _is_model, _union_members, _unwrap

if typing.TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from gitrun.settings import Packet, Task

VERSION = 1
MAX_TASKS = 10_000


def fingerprint() -> str:
    """The schema's identity: gitrun's version and the source of the modules
    that declare the schema, its defaults and its rules; "" when the source
    cannot be read, and then nothing is kept."""
    global _fingerprint
    if _fingerprint is None:
        from gitrun import __version__, runview, settings

        digest = hashlib.sha256(f"gitrun {__version__}\0".encode())
        try:
            for module in (settings, runview):
                with open(module.__file__ or "", "rb") as source:
                    digest.update(source.read() + b"\0")
            _fingerprint = digest.hexdigest()
        except OSError:
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
        data = json.loads(read_regular(str(path), follow=False))
    except (OSError, ValueError, RecursionError):
        return None  # missing, not a regular file, cut short or damaged
    if not (
        isinstance(data, dict)
        and data.get("v") == VERSION
        and data.get("key") == key
        and data.get("schema") == schema
        and data.get("run") == run_id
    ):
        return None
    try:
        packet = builder(Packet)(data["packet"])
        build_task = builder(Task)
        tasks = [build_task(task) for task in data["tasks"]]
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None  # damaged or edited: checked and written again
    if not isinstance(packet, Packet) or packet.run.id != run_id:
        return None
    return packet, tasks


def write(path: Path, key: str, packet: Packet, tasks: list[Task]) -> None:
    """Keep a definition that loaded (only a cache: a failure leaves it to the
    next load)."""
    import contextlib

    from gitrun.tomlfile import write_atomic

    schema = fingerprint()
    if not schema or len(tasks) > MAX_TASKS:
        return
    record = {
        "v": VERSION,
        "key": key,
        "schema": schema,
        "run": packet.run.id,
        "packet": dump(packet),
        "tasks": [dump(task) for task in tasks],
    }
    with contextlib.suppress(OSError, ValueError, RecursionError):
        body = json.dumps(record, separators=(",", ":")).encode()
        write_atomic(path, body, durable=False)


def dump(value: Any) -> Any:
    """``value`` as JSON values; of a table, only the fields that differ from
    their defaults."""
    return _table_dumper(type(value))(value) if _is_model(type(value)) else value


_DUMPERS: dict[Any, Callable[[Any], Any] | None] = {}


def dumper(annotation: Any) -> Callable[[Any], Any] | None:
    """A function that makes JSON values of a value of ``annotation``; None
    where the value is one already (text, numbers, lists of text, ...)."""
    if annotation not in _DUMPERS:
        _DUMPERS[annotation] = _make_dumper(annotation)
    return _DUMPERS[annotation]


def _make_dumper(annotation: Any) -> Callable[[Any], Any] | None:
    annotation = _unwrap(annotation)
    members = _union_members(annotation)
    if members:
        if not any(_is_model(m) for m in members):
            return None
        return dump
    if _is_model(annotation):
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
        plan.append((f.name, default, dumper(_annotations(model)[f.name])))

    def dump_table(value: Any) -> dict[str, Any]:
        out = {}
        for name, default, inner in plan:
            field_value = getattr(value, name)
            if default is _NO_DEFAULT or field_value != default:
                out[name] = (
                    field_value if inner is None or field_value is None else inner(field_value)
                )
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
    annotation = _unwrap(annotation)
    members = _union_members(annotation)
    if members:
        tables = {m: builder(m) for m in members if _is_model(m)}
        if not tables:
            return _same
        if len(tables) > 1:  # a tagged union: told apart by the kind it holds
            by_kind = {typing.get_args(_annotations(m)["kind"])[0]: b for m, b in tables.items()}

            def build_tagged(value: Any) -> Any:
                return by_kind[value["kind"]](value) if isinstance(value, dict) else value

            return build_tagged
        (build_one,) = tables.values()
        return lambda value: build_one(value) if isinstance(value, dict) else value
    if _is_model(annotation):
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
    fields = {name: builder(a) for name, a in _annotations(model).items()}
    converted = {name: b for name, b in fields.items() if b is not _same}

    def build(value: dict[str, Any]) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"{model.__name__}: expected a table")
        for name in converted.keys() & value.keys():
            if value[name] is not None:
                value[name] = converted[name](value[name])
        return model(**value)

    return build
