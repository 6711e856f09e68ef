"""What a user reads when a definition breaks the schema: one sentence a broken field.

:func:`validate_layer` checks one TOML file against its model, and on failure
:func:`describe_errors` turns pydantic's ``ValidationError`` into lines of the
form ``file:line: field: what is wrong; the fix``: the field as the file
spells it (``limits.concurrency``, ``task[3] (id 't3').outputs``), its line
found in the text, and a sentence per kind of error in place of pydantic's
(an unknown field gets the known one it is closest to). The sentences the
schema's own validators raise (:mod:`gitrun.definition.values`) pass through.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gitrun.errors import DefinitionError
from gitrun.store.tomlfile import LineIndex

M = TypeVar("M", bound=BaseModel)


class SchemaError(DefinitionError):
    """A DefinitionError whose lines each carry a kind (the error type and the
    field, indices left out), so a long list can be shortened per kind."""

    def __init__(self, lines: Sequence[str], kinds: Sequence[str], path: str | None) -> None:
        super().__init__(lines, path=path)
        self.kinds = list(kinds)


def validate_layer(
    model: type[M], raw: dict[str, Any], name: str, text: str, array_table: str | None = None
) -> M:
    """``raw`` (the TOML of file ``name``, whose text is ``text``) as a ``model``;
    raises SchemaError with a sentence a broken field. ``array_table`` names
    the array of tables whose entries are named by their id (``task``)."""
    if not isinstance(raw, dict):  # pragma: no cover - tomllib always gives a table
        raise DefinitionError([f"{name}: expected a TOML table"], path=name)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        lines, kinds = describe_errors(exc, model, name, text, array_table, raw)
        raise SchemaError(lines, kinds, path=name) from exc


def describe_errors(
    exc: ValidationError,
    model: type[BaseModel],
    name: str,
    text: str,
    array_table: str | None,
    raw: dict[str, Any],
) -> tuple[list[str], list[str]]:
    """One sentence per broken field: ``file:line: field.path: what is wrong; the fix``,
    and each sentence's kind. Linear in the size of the file and the errors."""
    index = LineIndex(text)
    lines: list[str] = []
    kinds: list[str] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        shown, branch, union_fields = _walk(model, loc)
        given = err.get("input")
        # A value that is text or a table (``outputs``): explain the branch it took.
        if branch == "scalar" and isinstance(given, dict):
            continue
        if branch == "model" and not isinstance(given, dict) and err["type"] in _TABLE_TYPES:
            continue
        line = index.find(shown, array_table)
        where = f"{name}:{line}" if line else name
        field = _dotted(shown, raw, array_table)
        if branch == "scalar" and err["type"] == "string_type":
            fields = " and ".join(union_fields or [])
            message = f"expected text in quotes or a table with {fields} (got {_short(given)})"
        else:
            message = explain(err, loc, model)
        sentence = f"{where}: {field}: {message}"
        if sentence in seen:
            continue
        seen.add(sentence)
        lines.append(sentence)
        pattern = "".join(
            "[]" if isinstance(p, int) else ("." if i else "") + str(p) for i, p in enumerate(shown)
        )
        kinds.append(f"{err['type']}: {pattern}")
    return lines, kinds


_TABLE_TYPES = ("model_type", "dict_type", "model_attributes_type")


def _dotted(loc: tuple[Any, ...], raw: dict[str, Any], array_table: str | None) -> str:
    """The field as the file spells it: ``limits.concurrency``, ``executor.args[0]``,
    ``task[3] (id 't3').outputs`` (an entry of ``array_table`` named by its id)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if not isinstance(part, int):
            parts.append(("." if parts else "") + str(part))
            continue
        ident = None
        if i == 1 and array_table and loc[0] == array_table:
            entries = raw.get(array_table)
            if (
                isinstance(entries, list)
                and part < len(entries)
                and isinstance(entries[part], dict)
            ):
                ident = entries[part].get("id")
        parts.append(f"[{part}]" + (f" (id {ident!r})" if isinstance(ident, str) else ""))
    return "".join(parts) or "(top level)"


# What a value of the wrong type should have been, by pydantic's error type.
_EXPECTED = {
    "int_type": "expected a whole number such as 4",
    "int_parsing": "expected a whole number such as 4",
    "int_from_float": "expected a whole number such as 4",
    "float_type": "expected a number such as 2.5",
    "finite_number": "expected a finite number (not nan or inf)",
    "bool_type": "expected true or false",
    "string_type": 'expected text in quotes, such as "..."',
    "list_type": 'expected a list such as ["a", "b"]',
    "dict_type": "expected a table",
    "model_type": "expected a table",  # a table given no table
    "model_attributes_type": "expected a table",  # a union of tables given no table
    "too_short": "needs at least one entry",
}
_VALIDATOR_KINDS = "nonempty, json, jsonl, toml, regex, json_schema, min_bytes, command"


def explain(err: ErrorDetails, loc: tuple[Any, ...], model: type[BaseModel]) -> str:
    """What is wrong with one field and the fix, from one of pydantic's errors
    (``loc`` its location in ``model``)."""
    kind = err["type"]
    if kind == "extra_forbidden":  # a field the table does not know
        key = str(loc[-1])
        known = _known_fields(model, loc[:-1])
        hint = difflib.get_close_matches(key, known, n=1)
        fix = (
            f"did you mean {hint[0]!r}?" if hint else f"known fields: {', '.join(known) or 'none'}"
        )
        return f"unknown field; remove it or fix the spelling ({fix})"
    if kind == "missing":
        return "required field is missing; add it"
    if kind == "string_pattern_mismatch":
        return (
            f"{_short(err['input'])} is not a valid id; use 1-64 lowercase letters, digits, '.', "
            "'_' or '-', starting with a letter or digit"
        )
    if kind == "union_tag_invalid":
        given = err.get("input")
        if isinstance(given, dict):
            return (
                f"unknown validator kind {_short(given.get('kind'))}; use one of {_VALIDATOR_KINDS}"
            )
        return _lower(err["msg"])
    if kind == "union_tag_not_found":
        return f"needs a `kind` ({_VALIDATOR_KINDS})"
    if kind == "value_error":  # our own validators' sentences show the value
        return _lower(err["msg"])
    expected = _EXPECTED.get(kind) or _lower(err["msg"])
    return f"{expected} (got {_short(err.get('input'))})"


def _walk(
    model: type[BaseModel], loc: tuple[Any, ...]
) -> tuple[tuple[Any, ...], str | None, list[str] | None]:
    """Follow a pydantic error location through the schema.

    Returns the location as the user wrote it (without the union member names
    pydantic inserts, such as ``str`` or ``regex``), which member of the last
    union the error is about ("scalar" or "model"), and that union's table fields.
    """
    annotation: Any = model
    shown: list[Any] = []
    branch: str | None = None
    union_fields: list[str] | None = None
    for part in loc:
        annotation = unwrap(annotation)
        members = _union_members(annotation)
        if members:
            chosen = next((m for m in members if part in _tags(m)), None)
            if chosen is not None:
                branch = "model" if _is_table(chosen) else "scalar"
                union_fields = next((list(fields_of(m)) for m in members if _is_table(m)), None)
                annotation = chosen
                continue
            annotation = None
        shown.append(part)
        annotation = _descend(annotation, part)
    return tuple(shown), branch, union_fields


def _descend(annotation: Any, part: Any) -> Any:
    """The annotation of ``part`` inside ``annotation`` (a list item, a dict
    value, a model's field), or None when it cannot be followed."""
    origin = typing.get_origin(annotation)
    if origin is list and isinstance(part, int):
        return typing.get_args(annotation)[0]
    if origin is dict:
        return typing.get_args(annotation)[1]
    if _is_table(annotation):
        return fields_of(annotation).get(part)
    return None


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    annotation: Any = model
    for part in loc:
        annotation = unwrap(annotation)
        members = _union_members(annotation)
        if members:
            annotation = next((m for m in members if part in _tags(m)), None)
            continue
        annotation = _descend(annotation, part)
        if annotation is None:
            return []
    annotation = unwrap(annotation)
    members = _union_members(annotation)
    if members:
        annotation = next((m for m in members if _is_table(m)), None)
    return list(fields_of(annotation)) if _is_table(annotation) else []


def fields_of(model: type[BaseModel]) -> dict[str, Any]:
    """Each field of a table, by its name in the file, and its type."""
    return {name: info.annotation for name, info in model.model_fields.items()}


def unwrap(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` and ``| None``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _union_members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return []
    return [unwrap(a) for a in typing.get_args(annotation) if a is not type(None)]


def _tags(member: Any) -> set[str]:
    """The names pydantic gives a union member in error locations: its type's
    name, and for a table told apart by its ``kind``, that kind."""
    tags = {str(getattr(member, "__name__", member))}
    if _is_table(member) and "kind" in member.model_fields:
        tags.update(str(v) for v in typing.get_args(member.model_fields["kind"].annotation))
    return tags


def _is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _lower(msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = "a value nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."
