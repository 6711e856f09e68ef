"""Where a run's settings come from, highest first: the environment, the run's
``packet.toml``, the repository's ``.gitrun/config.toml``, the schema's defaults.

Every layer is checked on its own first, so an error names the file (or the
variable) it came from; then the tables merge key by key and the result is
checked once more. The ``GITRUN_*`` variables are those the schema marks
(:class:`gitrun.definition.schema.Env`), each read as its field's type.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from gitrun.definition.messages import explain, fields_of, unwrap, validate_layer
from gitrun.definition.schema import Env, Packet, RepoConfig
from gitrun.errors import DefinitionError

Reader = Callable[[str], object]

# How a GITRUN_* variable writes a number (matched whole).
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")
DECIMAL_NUMBER = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?")


def resolve_packet(
    packet_raw: dict[str, Any],
    config_raw: dict[str, Any],
    *,
    packet_name: str,
    packet_text: str,
    config_name: str,
    config_text: str,
    environ: Mapping[str, str] | None = None,
) -> Packet:
    """Check each layer, then merge them in order of precedence. The protected
    paths of both files add up: the packet cannot unprotect what the repository
    protects."""
    if config_raw:  # an empty table (no file, or only comments) has nothing to check
        validate_layer(RepoConfig, config_raw, config_name, config_text)
    validate_layer(Packet, packet_raw, packet_name, packet_text)
    env_raw = _env_layer(os.environ if environ is None else environ)
    merged = merge(merge(config_raw, packet_raw), env_raw)
    protected = [
        *config_raw.get("ownership", {}).get("protected", []),
        *packet_raw.get("ownership", {}).get("protected", []),
    ]
    if protected:
        merged.setdefault("ownership", {})["protected"] = protected
    return validate_layer(Packet, merged, packet_name, packet_text)


def merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``, table by table, key by key."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def env_overrides() -> dict[str, tuple[str, str, Reader]]:
    """Each ``GITRUN_*`` variable that overrides a packet field: its table,
    its field, and how its text is read (by the field's type: a duration as
    a duration, a whole number in decimal digits, a number, or text). Made
    from the :class:`Env` markers of the schema, the one place each is named."""
    if not _ENV_OVERRIDES:
        for table, annotation in fields_of(Packet).items():
            section = unwrap(annotation)
            if not (isinstance(section, type) and issubclass(section, BaseModel)):
                continue
            for key, info in section.model_fields.items():
                for mark in info.metadata:
                    if isinstance(mark, Env):
                        _ENV_OVERRIDES[mark.name] = (
                            table,
                            key,
                            _reader(info.annotation, info.metadata),
                        )
    return _ENV_OVERRIDES


_ENV_OVERRIDES: dict[str, tuple[str, str, Reader]] = {}


def _reader(annotation: Any, marks: list[Any]) -> Reader:
    for mark in marks:
        if isinstance(mark, BeforeValidator):  # reads text itself (a duration)
            func: Reader = mark.func  # type: ignore[assignment]  # a one-argument validator
            return func
    kind = unwrap(annotation)
    if kind is int:
        return _env_int
    if kind is float:
        return _env_number
    assert kind is str, f"no reader of {kind!r} for an Env field"
    return _env_text


def _env_text(text: str) -> str:
    return text


def _env_int(text: str) -> int:
    if not WHOLE_NUMBER.fullmatch(text):
        raise ValueError("expected a whole number written in decimal digits, such as 4")
    return int(text)


def _env_number(text: str) -> float:
    if not DECIMAL_NUMBER.fullmatch(text):
        raise ValueError("expected a number written in decimal digits, such as 4 or 2.5")
    return float(text)


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``GITRUN_*`` overrides, each read as its field's type: the
    environment holds text, and "4" is only 4 because the variable says so."""
    layer: dict[str, Any] = {}
    errors: list[str] = []
    sections = fields_of(Packet)
    for var, (table, key, read) in env_overrides().items():
        value = environ.get(var)
        if value is None:
            continue
        section = unwrap(sections[table])
        try:
            if not value.strip():
                raise ValueError("is set but blank")
            if value != value.strip():
                raise ValueError("has spaces around the value; remove them")
            parsed = read(value)
            section.model_validate({key: parsed})
        except ValidationError as exc:
            msg = explain(exc.errors()[0], (key,), section).split(" (got ")[0]
            errors.append(f"environment variable {var}={value!r}: {msg}; fix or unset it")
            continue
        except ValueError as exc:
            errors.append(f"environment variable {var}={value!r}: {exc}; fix or unset it")
            continue
        layer.setdefault(table, {})[key] = parsed
    if errors:
        raise DefinitionError(errors)
    return layer
