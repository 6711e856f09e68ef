"""The packet's schema, and the layers that configure it.

Precedence, highest first: the environment (``GITRUN_MODEL``,
``GITRUN_CONCURRENCY``, ...), the run's ``packet.toml``, the repository's
``.gitrun/config.toml``, the built-in defaults below. Every layer is checked
on its own first, so an error names the file (or variable) it came from.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
)

from gitrun.errors import DefinitionError
from gitrun.tomlfile import find_line

M = TypeVar("M", bound=BaseModel)

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# Shared tracking files, and files that change how git or the agents behave
# (a task rewriting .claude/ could rewrite the hooks that confine it).
DEFAULT_PROTECTED = ("PROGRESS.md", "TODO.md", ".claude/", ".gitattributes", ".gitmodules")
BUILTIN_VALIDATORS = ("auto", "nonempty", "json", "jsonl", "toml")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds from "90s", "20m", "1h30m", "1.5h" or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError('expected a duration such as "20m" or "90s"')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif text and _DURATION.sub("", text) == "":
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
        else:
            raise ValueError(f'{value!r} is not a duration; write it like "20m", "90s" or "1h30m"')
    else:
        raise ValueError('expected a duration such as "20m" or "90s"')
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
Identifier = Annotated[str, Field(pattern=ID_PATTERN)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(Strict):
    id: Identifier
    description: str = ""


class Rules(Strict):
    text: str = ""
    acceptance: list[str] = []


DEFAULT_THROTTLE_PATTERNS = [
    r"rate.?limit",
    r"temporarily limiting requests",
    r"\b429\b",
    r"overloaded",
    r"\b529\b",
]
_HALT = re.compile(r"^fail=(\d+)(%?)$")


def _check_halt(value: str | None) -> str | None:
    if value is not None and not _HALT.match(value.replace(" ", "")):
        raise ValueError(f'{value!r} is not a halt policy; write "fail=5" or "fail=10%"')
    return value


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression ({exc})") from exc
    return pattern


def _check_patterns(value: list[str]) -> list[str]:
    return [_check_regex(pattern) for pattern in value]


class Limits(Strict):
    concurrency: PositiveInt = 4
    canary: Annotated[int, Field(ge=0)] = 1
    max_attempts: PositiveInt = 3
    max_spawns: Annotated[int, Field(ge=0)] = 0  # 0 means 3 x the number of tasks
    timeout: Duration = 1200.0
    kill_grace: Duration = 5.0  # SIGTERM, then SIGKILL this much later
    max_load: Annotated[float, Field(gt=0)] | None = None  # None means 2 x CPU count
    payload_budget: PositiveInt = 65536
    # Throttles: exit status 75 or output matching one of these (case-insensitive).
    throttle_patterns: Annotated[list[str], AfterValidator(_check_patterns)] = Field(
        default_factory=lambda: list(DEFAULT_THROTTLE_PATTERNS)
    )
    backoff_base: Duration = 2.0
    backoff_cap: Duration = 300.0
    grow_after: PositiveInt = 3  # valid completions before concurrency grows by one
    # Environment-fault breaker: this many attempts in a row (0: max(3, concurrency))
    # ending faster than breaker_fast with no output and one diagnostic halt the run.
    breaker_window: Annotated[int, Field(ge=0)] = 0
    breaker_fast: Duration = 3.0
    halt: Annotated[str | None, AfterValidator(_check_halt)] = None  # "fail=N" or "fail=P%"

    @property
    def breaker_size(self) -> int:
        return self.breaker_window or max(3, self.concurrency)

    def spawn_budget(self, tasks: int) -> int:
        return self.max_spawns or 3 * tasks

    def load_bound(self) -> float:
        return self.max_load or 2.0 * (os.cpu_count() or 1)

    def halt_after(self, tasks: int) -> int | None:
        """Failed-for-good tasks that stop new starts, from ``halt``."""
        if self.halt is None:
            return None
        found = _HALT.match(self.halt.replace(" ", ""))
        assert found is not None
        number = int(found[1])
        if found[2]:
            return max(1, -(-number * tasks // 100))
        return max(1, number)


class ModelSection(Strict):
    default: str = ""
    stages: dict[str, str] = {}


class Executor(Strict):
    kind: Literal["command", "external"] = "command"
    preset: str | None = None
    command: list[str] | None = None
    shell: str | None = None  # the command line of the "shell" preset
    args: list[str] = []  # appended to the preset's (or command's) arguments
    env: dict[str, str] = {}

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError(
                'is empty; give the program and its arguments, e.g. ["sh", "-c", "..."]'
            )
        return value


class Ownership(Strict):
    protected: list[str] = []
    strict: bool = False


class Stage(Strict):
    name: Identifier
    description: str = ""


class Outputs(Strict):
    validators: list[str] = ["auto"]


class NonemptyValidator(Strict):
    kind: Literal["nonempty"]


class JsonValidator(Strict):
    kind: Literal["json"]


class JsonlValidator(Strict):
    kind: Literal["jsonl"]


class TomlValidator(Strict):
    kind: Literal["toml"]


class RegexValidator(Strict):
    kind: Literal["regex"]
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _check_regex(value)


class JsonSchemaValidator(Strict):
    kind: Literal["json_schema"]
    schema_path: str = Field(alias="schema")


class MinBytesValidator(Strict):
    kind: Literal["min_bytes"]
    min: PositiveInt


class CommandValidator(Strict):
    kind: Literal["command"]
    command: list[str] = Field(min_length=1)


Validator = Annotated[
    NonemptyValidator
    | JsonValidator
    | JsonlValidator
    | TomlValidator
    | RegexValidator
    | JsonSchemaValidator
    | MinBytesValidator
    | CommandValidator,
    Field(discriminator="kind"),
]


class Packet(Strict):
    run: RunSection
    rules: Rules = Rules()
    limits: Limits = Limits()
    model: ModelSection = ModelSection()
    executor: Executor = Executor()
    ownership: Ownership = Ownership()
    stages: list[Stage] = Field(default=[Stage(name="work")], min_length=1)
    validators: dict[str, Validator] = {}
    outputs: Outputs = Outputs()

    @property
    def protected(self) -> list[str]:
        return list(dict.fromkeys([*DEFAULT_PROTECTED, *self.ownership.protected]))

    def model_for(self, stage: str) -> str:
        return self.model.stages.get(stage) or self.model.default


class RepoConfig(Strict):
    """What ``.gitrun/config.toml`` may set: defaults for every run."""

    limits: Limits = Limits()
    model: ModelSection = ModelSection()
    executor: Executor = Executor()
    ownership: Ownership = Ownership()
    validators: dict[str, Validator] = {}
    outputs: Outputs = Outputs()


# Environment variable -> (table, field) in the packet.
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "GITRUN_MODEL": ("model", "default"),
    "GITRUN_CONCURRENCY": ("limits", "concurrency"),
    "GITRUN_CANARY": ("limits", "canary"),
    "GITRUN_MAX_ATTEMPTS": ("limits", "max_attempts"),
    "GITRUN_MAX_SPAWNS": ("limits", "max_spawns"),
    "GITRUN_TIMEOUT": ("limits", "timeout"),
    "GITRUN_MAX_LOAD": ("limits", "max_load"),
    "GITRUN_PAYLOAD_BUDGET": ("limits", "payload_budget"),
    "GITRUN_HALT": ("limits", "halt"),
}


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
    """Check each layer, then merge them in order of precedence."""
    validate_layer(RepoConfig, config_raw, config_name, config_text)
    validate_layer(Packet, packet_raw, packet_name, packet_text)
    env_raw = _env_layer(os.environ if environ is None else environ)
    merged = _merge(_merge(config_raw, packet_raw), env_raw)
    protected = [
        *config_raw.get("ownership", {}).get("protected", []),
        *packet_raw.get("ownership", {}).get("protected", []),
    ]
    if protected:
        merged.setdefault("ownership", {})["protected"] = protected
    return validate_layer(Packet, merged, packet_name, packet_text)


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    errors: list[str] = []
    for var, (table, key) in ENV_OVERRIDES.items():
        value = environ.get(var)
        if value is None or value == "":
            continue
        section = Limits if table == "limits" else ModelSection
        try:
            section.model_validate({key: value})
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"]
            errors.append(f"environment variable {var}={value!r}: {_lower(msg)}; fix or unset it")
            continue
        layer.setdefault(table, {})[key] = value
    if errors:
        raise DefinitionError(errors)
    return layer


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def validate_layer(
    model: type[M], raw: dict[str, Any], name: str, text: str, array_table: str | None = None
) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise DefinitionError(
            describe_errors(exc, model, name, text, array_table, raw), path=name
        ) from exc


def describe_errors(
    exc: ValidationError,
    model: type[BaseModel],
    name: str,
    text: str,
    array_table: str | None,
    raw: dict[str, Any],
) -> list[str]:
    """One sentence per broken field: ``file:line: field.path: what is wrong; the fix``."""
    lines: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # Drop the union tag pydantic inserts for discriminated unions.
        loc = tuple(
            p for i, p in enumerate(loc) if not (i > 0 and loc[0] == "validators" and i == 2)
        )
        line = find_line(text, loc, array_table)
        where = f"{name}:{line}" if line else name
        field = _dotted(loc, raw, array_table)
        lines.append(f"{where}: {field}: {_explain(err, loc, model)}")
    return lines


def _dotted(loc: tuple[Any, ...], raw: dict[str, Any], array_table: str | None) -> str:
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            label = f"[{part}]"
            if i == 1 and array_table and loc[0] == array_table:
                entries = raw.get(array_table)
                ident = None
                if (
                    isinstance(entries, list)
                    and part < len(entries)
                    and isinstance(entries[part], dict)
                ):
                    ident = entries[part].get("id")
                label = f"[{part}]" + (f" (id {ident!r})" if isinstance(ident, str) else "")
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "(top level)"


def _explain(err: Any, loc: tuple[Any, ...], model: type[BaseModel]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
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
            f"{err['input']!r} is not a valid id; use 1-64 lowercase letters, digits, '.', "
            "'_' or '-', starting with a letter or digit"
        )
    if kind == "union_tag_invalid":
        return (
            f"unknown validator kind {err['input'].get('kind')!r}; use one of nonempty, json, "
            "jsonl, toml, regex, json_schema, min_bytes, command"
            if isinstance(err.get("input"), dict)
            else _lower(err["msg"])
        )
    if kind == "union_tag_not_found":
        return (
            "needs a `kind` (nonempty, json, jsonl, toml, regex, json_schema, min_bytes, command)"
        )
    return f"{_lower(err['msg'])} (got {_short(err.get('input'))})"


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", {})
        info = fields.get(part)
        if info is None:
            return []
        current = _model_of(info.annotation)
    fields = getattr(current, "model_fields", None)
    if not fields:
        return []
    return [info.alias or key for key, info in fields.items()]


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _lower(msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
