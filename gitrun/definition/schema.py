"""The packet's schema, and the layers that configure it.

Precedence, highest first: the environment (``GITRUN_MODEL``,
``GITRUN_CONCURRENCY``, ...), the run's ``packet.toml``, the repository's
``.gitrun/config.toml``, the built-in defaults below. Every layer is checked
on its own first, so an error names the file (or variable) it came from.

The schema is frozen dataclasses, checked by pydantic: each table is a
:class:`Strict` dataclass whose annotations carry what pydantic enforces
(:class:`Bounds`, :class:`Before`, :class:`After`, :class:`Tagged`). Each of
those markers builds its part of the schema through pydantic's
``__get_pydantic_core_schema__`` hook, which imports pydantic only when a
schema is built: importing this module costs no pydantic.

Each field is declared once, here: its type, default and bounds, and, for
the fields the environment may override, the variable (:class:`Env`).
Everything that reads a definition gets its values from these tables.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from gitrun.errors import DefinitionError
from gitrun.layout import ID_PATTERN as ID_PATTERN
from gitrun.store.tomlfile import LineIndex
from gitrun.store.usage import MAX_TOKENS, MAX_USD

if typing.TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, TypeAdapter, ValidationError

M = TypeVar("M")


class Bounds:
    """A constraint pydantic enforces: ``Bounds(gt=0)``, ``Bounds(ge=0)``,
    ``Bounds(min_length=1)``, ``Bounds(pattern=...)`` (the keys of its core schema)."""

    def __init__(self, **limits: object) -> None:
        self.limits = limits

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return {**handler(source), **self.limits}


class Before:
    """A function that reads the raw value first (pydantic's BeforeValidator)."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.check, handler(source))


class After:
    """A function that checks the value once its type is (pydantic's AfterValidator)."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))


class Tagged:
    """A union of tables told apart by one field (pydantic's discriminator)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        from pydantic import Discriminator

        return handler.generate_schema(Annotated[source, Discriminator(self.tag)])


class Env:
    """The ``GITRUN_*`` variable that overrides a field (see :func:`env_overrides`)."""

    def __init__(self, name: str) -> None:
        self.name = name


PositiveInt = Annotated[int, Bounds(gt=0)]

HALT_POLICY = re.compile(r"fail=([0-9]{1,18})(%?)")  # matched whole (fullmatch)
# How a GITRUN_* variable writes a number (matched whole).
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")
DECIMAL_NUMBER = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?")
# limits.throttle_patterns when the packet sets none.
DEFAULT_THROTTLE_PATTERNS = (
    r"rate.?limit",
    r"temporarily limiting requests",
    r"\b429\b",
    r"overloaded",
    r"\b529\b",
)
# limits.quota_patterns and limits.billing_patterns (gitrun.workers.refusals):
# what Claude Code, codex, gemini and the APIs say of a usage limit with a
# reset, and of a billing refusal or spend cap.
DEFAULT_QUOTA_PATTERNS = (
    r"usage_limit_reached",
    r"you['\u2019]?ve hit your (\S+ )?(usage )?limit",
    r"you have (hit|reached) your (\S+ )?(usage )?limit",
    r"usage limit reached",
    r"\bquota exceeded\b",
    r'"rate_limit_info"\s*:\s*\{[^}]*"status"\s*:\s*"rejected"',  # claude's rate_limit_event
)
DEFAULT_BILLING_PATTERNS = (
    r"credit balance is too low",
    r"insufficient_quota",
    r"exceeded your current quota",
    r"billing (details|hard limit)",
    r"spend(ing)? (cap|limit) (reached|exceeded)",
)

# Shared tracking files, and files that change how git or the agents behave
# (a task rewriting .claude/ could rewrite the hooks that confine it).
DEFAULT_PROTECTED = ("PROGRESS.md", "TODO.md", ".claude/", ".gitattributes", ".gitmodules")
BUILTIN_VALIDATORS = ("auto", "nonempty", "json", "jsonl", "toml")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Longer than any sane attempt, and far from what clocks and timers overflow on.
MAX_DURATION = 30 * 86400.0


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
    if not math.isfinite(seconds):
        raise ValueError(f'{value!r} is not a finite duration; write it like "20m" or "90s"')
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than 30 days; write a shorter duration")
    return seconds


Duration = Annotated[float, Before(parse_duration)]
Identifier = Annotated[str, Bounds(pattern=ID_PATTERN)]


def _check_model_name(value: str) -> str:
    if not value.strip():
        raise ValueError('the model name is blank; write one such as "sonnet"')
    if _has_control(value):
        raise ValueError(f"{value!r} contains a control character; write the model name alone")
    if value != value.strip():
        raise ValueError(f"{value!r} has spaces around it; write the model name alone")
    return value


def _has_control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{value!r} contains a NUL character, which no command line can carry")
    return value


ModelName = Annotated[str, After(_check_model_name)]
# Text that reaches a command line or an environment variable: never a NUL.
ArgText = Annotated[str, After(_no_nul)]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_names(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(
                f"{key!r} is not an environment variable name; use letters, digits and '_'"
            )
    return value


class Strict:
    """The base of every table: no field it does not know; a value is what it
    says (no "4" for 4, no 1 for true); no nan or inf. Each subclass is a
    frozen dataclass; pydantic makes it from a TOML table (a dict)."""

    __slots__ = ()
    __pydantic_config__: ClassVar[dict[str, object]] = {
        "extra": "forbid",
        "strict": True,
        "allow_inf_nan": False,
    }

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        schema = handler(source)
        # Strict everywhere but here: a strict dataclass takes only its own
        # instances, and a table arrives as a dict. Its fields stay strict.
        assert schema["type"] == "dataclass", schema["type"]
        return {**schema, "strict": False}


@dataclass(frozen=True, slots=True)
class RunSection(Strict):
    id: Identifier
    description: str = ""


@dataclass(frozen=True, slots=True)
class Rules(Strict):
    text: str = ""
    acceptance: list[str] = field(default_factory=list)


def _check_halt(value: str | None) -> str | None:
    if value is not None and not HALT_POLICY.fullmatch(value.replace(" ", "")):
        raise ValueError(f'{value!r} is not a halt policy; write "fail=5" or "fail=10%"')
    return value


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression ({exc})") from exc
    return pattern


def _check_patterns(value: list[str]) -> list[str]:
    return [_check_regex(pattern) for pattern in value]


@dataclass(frozen=True, slots=True)
class Limits(Strict):
    concurrency: Annotated[PositiveInt, Env("GITRUN_CONCURRENCY")] = 4
    canary: Annotated[int, Bounds(ge=0), Env("GITRUN_CANARY")] = 1
    max_attempts: Annotated[PositiveInt, Env("GITRUN_MAX_ATTEMPTS")] = 3
    # 0 means 3 x the number of tasks
    max_spawns: Annotated[int, Bounds(ge=0), Env("GITRUN_MAX_SPAWNS")] = 0
    timeout: Annotated[Duration, Env("GITRUN_TIMEOUT")] = 1200.0
    kill_grace: Duration = 5.0  # SIGTERM, then SIGKILL this much later
    # None means 2 x CPU count
    max_load: Annotated[Annotated[float, Bounds(gt=0)] | None, Env("GITRUN_MAX_LOAD")] = None
    payload_budget: Annotated[PositiveInt, Env("GITRUN_PAYLOAD_BUDGET")] = 65536
    # An output bigger than this is invalid: it is read whole to validate and
    # commit the exact bytes, so a runaway worker must not exhaust memory.
    max_output_bytes: PositiveInt = 256 * 1024 * 1024
    # Throttles: exit status 75 or output matching one of these (case-insensitive).
    throttle_patterns: Annotated[list[str], After(_check_patterns)] = field(
        default_factory=lambda: list(DEFAULT_THROTTLE_PATTERNS)
    )
    # A usage limit with a reset time: the run parks until the reset (no
    # attempt used); a billing refusal or spend cap: it halts at once.
    quota_patterns: Annotated[list[str], After(_check_patterns)] = field(
        default_factory=lambda: list(DEFAULT_QUOTA_PATTERNS)
    )
    billing_patterns: Annotated[list[str], After(_check_patterns)] = field(
        default_factory=lambda: list(DEFAULT_BILLING_PATTERNS)
    )
    park_default: Duration = 1800.0  # how long to park when the reset cannot be read
    backoff_base: Duration = 2.0
    backoff_cap: Duration = 300.0
    grow_after: PositiveInt = 3  # valid completions before concurrency grows by one
    # Environment-fault breaker: this many attempts in a row (0: max(3, concurrency))
    # ending faster than breaker_fast with no output and one diagnostic halt the run.
    breaker_window: Annotated[int, Bounds(ge=0)] = 0
    breaker_fast: Duration = 3.0
    # "fail=N" or "fail=P%"
    halt: Annotated[str | None, After(_check_halt), Env("GITRUN_HALT")] = None
    # The spend budget: no attempt starts when what the run spent plus what
    # its running attempts are expected to cost would pass it (None: none).
    # Each at most what gitrun holds (gitrun.store.usage): more is a typo, not a budget.
    max_cost_usd: Annotated[
        Annotated[float, Bounds(gt=0, le=MAX_USD)] | None, Env("GITRUN_MAX_COST_USD")
    ] = None
    max_tokens: Annotated[
        Annotated[int, Bounds(gt=0, le=MAX_TOKENS)] | None, Env("GITRUN_MAX_TOKENS")
    ] = None
    # The canary's projection of the whole run may pass the budget by this
    # factor; more halts the run before the fan-out widens.
    max_projection: Annotated[float, Bounds(ge=1)] = 1.5

    @property
    def breaker_size(self) -> int:
        return self.breaker_window or max(3, self.concurrency)

    def spawn_budget(self, tasks: int) -> int:
        return self.max_spawns or 3 * tasks

    def load_bound(self) -> float:
        return self.max_load or 2.0 * (os.cpu_count() or 1)

    def load_bound_text(self) -> str:
        """The load gate's bound as its lines say it, with the setting that changes
        it: ``max_load 4 (2 x 2 CPUs, the default; [limits] max_load or
        GITRUN_MAX_LOAD changes it)``."""
        bound = self.load_bound()
        if self.max_load is None:
            cpus = os.cpu_count() or 1
            made = f"2 x {cpus} CPU{'s' if cpus != 1 else ''}, the default; "
        else:
            made = ""
        return f"max_load {bound:g} ({made}[limits] max_load or GITRUN_MAX_LOAD changes it)"

    def halt_after(self, tasks: int) -> int | None:
        """Failed-for-good tasks that stop new starts, from ``halt``."""
        if self.halt is None:
            return None
        found = HALT_POLICY.fullmatch(self.halt.replace(" ", ""))
        assert found is not None
        number = int(found[1])
        if found[2]:
            return max(1, -(-number * tasks // 100))
        return max(1, number)


@dataclass(frozen=True, slots=True)
class ModelSection(Strict):
    # "" (not set) only as the default, never written
    default: Annotated[ModelName, Env("GITRUN_MODEL")] = ""
    stages: dict[str, ModelName] = field(default_factory=dict)


def parse_bytes(value: object) -> int:
    """Bytes from 4294967296, "4GiB", "512MiB", "2GB" or "100k"."""
    if isinstance(value, bool):
        raise ValueError('expected a size such as "4GiB" or 4294967296')
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (found := _SIZE.fullmatch(value.strip().replace(" ", ""))):
        size = int(float(found[1]) * _SIZE_UNITS[(found[2] or "").lower()])
    else:
        raise ValueError(f'{value!r} is not a size; write it like "4GiB", "512MiB" or 4294967296')
    if size < 0:
        raise ValueError("must not be negative")
    return size


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgt]i?b?|b)?", re.IGNORECASE)
# "4G" and "4GiB" are binary (what Ray and Kubernetes users mean); "4GB" decimal.
_SIZE_UNITS = {"": 1, "b": 1} | {
    f"{unit}{suffix}": (1000 if suffix == "b" else 1024) ** power
    for power, unit in enumerate("kmgt", start=1)
    for suffix in ("", "ib", "b")
}

Size = Annotated[int, Before(parse_bytes)]
Amount = Annotated[float, Bounds(ge=0)]


@dataclass(frozen=True, slots=True)
class StageResources(Strict):
    """What one attempt of a stage asks of a Ray node; unset fields take the
    ``[executor.resources]`` value."""

    num_cpus: Amount | None = None
    num_gpus: Amount | None = None
    memory: Size | None = None  # bytes of memory Ray reserves for the attempt
    custom: dict[str, Amount] = field(default_factory=dict)  # e.g. {"big_disk" = 1}


@dataclass(frozen=True, slots=True)
class Resources(Strict):
    """``[executor.resources]``: what every attempt asks of a Ray node, and
    per stage (``[executor.resources.stages.<stage>]``) what differs."""

    num_cpus: Amount = 1.0
    num_gpus: Amount = 0.0
    memory: Size = 0
    custom: dict[str, Amount] = field(default_factory=dict)
    stages: dict[str, StageResources] = field(default_factory=dict)

    def for_stage(self, stage: str) -> StageResources:
        """The resources of one attempt of ``stage``, every field set."""
        own = self.stages.get(stage, StageResources())
        return StageResources(
            num_cpus=self.num_cpus if own.num_cpus is None else own.num_cpus,
            num_gpus=self.num_gpus if own.num_gpus is None else own.num_gpus,
            memory=self.memory if own.memory is None else own.memory,
            custom={**self.custom, **own.custom},
        )


_RAY_ADDRESS = re.compile(r"auto|local|(?:ray://)?[A-Za-z0-9.\[\]:_-]+:\d{1,5}")


def _check_ray_address(value: str) -> str:
    if not _RAY_ADDRESS.fullmatch(value):
        raise ValueError(
            f'{value!r} is not a Ray address; write "auto" (the cluster this machine belongs '
            'to), "local" (a private Ray for this run), "host:port" or "ray://host:port"'
        )
    return value


def _command_not_empty(value: list[str] | None) -> list[str] | None:
    if value is not None and not value:
        raise ValueError('is empty; give the program and its arguments, e.g. ["sh", "-c", "..."]')
    return value


@dataclass(frozen=True, slots=True)
class Executor(Strict):
    kind: Literal["command", "external", "ray"] = "command"
    # kind = "ray" (gitrun.workers.ray.executor): where the cluster is, what each attempt
    # asks of a node, and whether the repository is at the same path on every
    # node (shared_fs) or each attempt gets its inputs shipped to a scratch
    # directory and sends its outputs back.
    address: Annotated[str, After(_check_ray_address)] = "auto"
    resources: Resources = field(default_factory=Resources)
    shared_fs: bool = False
    preset: str | None = None
    command: Annotated[list[ArgText] | None, After(_command_not_empty)] = None
    shell: ArgText | None = None  # the command line of the "shell" preset
    # appended to the preset's (or command's) arguments
    args: list[ArgText] = field(default_factory=list)
    env: Annotated[dict[str, ArgText], After(_check_env_names)] = field(default_factory=dict)
    # How a Claude Code worker's shell is kept from writing around ownership,
    # which no write hook sees: "sandbox" runs Bash in the client's sandbox with the
    # repository read-only (Linux needs bubblewrap and socat), "deny" takes
    # Bash away, "detect" leaves it and relies on the stray-write audit.
    bash: Literal["sandbox", "deny", "detect"] = "sandbox"
    # How a command-mode attempt is confined (gitrun.workers.sandbox): "sandbox"
    # under bubblewrap, the repository read-only but the task's own paths;
    # "scratch" in a directory of its own holding its inputs, only its outputs
    # brought back (gitrun.workers.scratch); "none" as it is, with the
    # stray-write audit; "auto" sandbox where it works.
    isolation: Literal["auto", "sandbox", "scratch", "none"] = "auto"


@dataclass(frozen=True, slots=True)
class Ownership(Strict):
    protected: list[str] = field(default_factory=list)
    strict: bool = False


@dataclass(frozen=True, slots=True)
class Stage(Strict):
    name: Identifier
    description: str = ""


@dataclass(frozen=True, slots=True)
class Outputs(Strict):
    validators: list[str] = field(default_factory=lambda: ["auto"])


@dataclass(frozen=True, slots=True)
class NonemptyValidator(Strict):
    kind: Literal["nonempty"]


@dataclass(frozen=True, slots=True)
class JsonValidator(Strict):
    kind: Literal["json"]


@dataclass(frozen=True, slots=True)
class JsonlValidator(Strict):
    kind: Literal["jsonl"]


@dataclass(frozen=True, slots=True)
class TomlValidator(Strict):
    kind: Literal["toml"]


@dataclass(frozen=True, slots=True)
class RegexValidator(Strict):
    kind: Literal["regex"]
    pattern: Annotated[str, After(_check_regex)]


@dataclass(frozen=True, slots=True)
class JsonSchemaValidator(Strict):
    kind: Literal["json_schema"]
    schema: str  # the schema file's path in the repository


@dataclass(frozen=True, slots=True)
class MinBytesValidator(Strict):
    kind: Literal["min_bytes"]
    min: PositiveInt


@dataclass(frozen=True, slots=True)
class CommandValidator(Strict):
    kind: Literal["command"]
    command: Annotated[list[ArgText], Bounds(min_length=1)]


Validator = Annotated[
    NonemptyValidator
    | JsonValidator
    | JsonlValidator
    | TomlValidator
    | RegexValidator
    | JsonSchemaValidator
    | MinBytesValidator
    | CommandValidator,
    Tagged("kind"),
]


@dataclass(frozen=True, slots=True)
class Packet(Strict):
    run: RunSection
    rules: Rules = field(default_factory=Rules)
    limits: Limits = field(default_factory=Limits)
    model: ModelSection = field(default_factory=ModelSection)
    executor: Executor = field(default_factory=Executor)
    ownership: Ownership = field(default_factory=Ownership)
    stages: Annotated[list[Stage], Bounds(min_length=1)] = field(
        default_factory=lambda: [Stage(name="work")]
    )
    validators: dict[str, Validator] = field(default_factory=dict)
    outputs: Outputs = field(default_factory=Outputs)

    @property
    def protected(self) -> list[str]:
        return list(dict.fromkeys([*DEFAULT_PROTECTED, *self.ownership.protected]))

    def model_for(self, stage: str) -> str:
        return self.model.stages.get(stage) or self.model.default


@dataclass(frozen=True, slots=True)
class OutputSpec(Strict):
    path: str
    validators: list[str] | None = None
    # The task changes this file in place (it exists before and is edited):
    # done only when its content changed, not when it was merely rewritten.
    edits: bool = False


@dataclass(frozen=True, slots=True)
class Task(Strict):
    """A ``[[task]]`` of a run's ``tasks.toml``."""

    id: Identifier
    outputs: Annotated[list[str | OutputSpec], Bounds(min_length=1)]
    stage: str | None = None
    inputs: list[str] = field(default_factory=list)
    owns: list[str] | None = None  # None: the task owns exactly its outputs
    note: ArgText | None = None  # reaches workers in their prompt: never a NUL
    bundle: str | None = None  # a file listing the inputs, for tasks with many
    edits: bool = False  # every output is edited in place: see OutputSpec.edits


@dataclass(frozen=True, slots=True)
class TaskFile(Strict):
    task: list[Task] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RepoConfig(Strict):
    """What ``.gitrun/config.toml`` may set: defaults for every run."""

    limits: Limits = field(default_factory=Limits)
    model: ModelSection = field(default_factory=ModelSection)
    executor: Executor = field(default_factory=Executor)
    ownership: Ownership = field(default_factory=Ownership)
    validators: dict[str, Validator] = field(default_factory=dict)
    outputs: Outputs = field(default_factory=Outputs)


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


def env_overrides() -> dict[str, tuple[str, str, Callable[[str], object]]]:
    """Each ``GITRUN_*`` variable that overrides a packet field: its table,
    its field, and how its text is read (by the field's type: a duration as
    a duration, a whole number in decimal digits, a number, or text). Made
    from the :class:`Env` markers of the schema, the one place each is named."""
    if not _ENV_OVERRIDES:
        for table, annotation in table_fields(Packet).items():
            section = unwrap(annotation)
            if not is_table(section):
                continue
            for key, field_type in table_fields(section).items():
                marks = _peel(field_type)[1]
                for mark in marks:
                    if isinstance(mark, Env):
                        _ENV_OVERRIDES[mark.name] = (table, key, _env_reader(field_type, marks))
    return _ENV_OVERRIDES


_ENV_OVERRIDES: dict[str, tuple[str, str, Callable[[str], object]]] = {}


def _env_reader(annotation: Any, marks: list[Any]) -> Callable[[str], object]:
    for mark in marks:
        if isinstance(mark, Before):
            return typing.cast("Callable[[str], object]", mark.check)  # reads text itself
    kind = unwrap(annotation)
    if kind is int:
        return _env_int
    if kind is float:
        return _env_number
    assert kind is str, f"no reader of {kind!r} for an Env field"
    return _env_text


class SchemaError(DefinitionError):
    """A DefinitionError whose lines each carry a kind (the error type and the
    field, indices left out), so a long list can be shortened per kind."""

    def __init__(self, lines: Sequence[str], kinds: Sequence[str], path: str | None) -> None:
        super().__init__(lines, path=path)
        self.kinds = list(kinds)


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
    if config_raw:  # an empty table (no file, or only comments) has nothing to check
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
    """The ``GITRUN_*`` overrides, each read as its field's type: the
    environment holds text, and "4" is only 4 because the variable says so."""
    layer: dict[str, Any] = {}
    errors: list[str] = []
    for var, (table, key, read) in env_overrides().items():
        value = environ.get(var)
        if value is None:
            continue
        section = unwrap(table_fields(Packet)[table])
        try:
            if not value.strip():
                raise ValueError("is set but blank")
            if value != value.strip():
                raise ValueError("has spaces around the value; remove them")
            parsed = read(value)
            adapter(section).validate_python({key: parsed})
        except ValueError as exc:  # ValidationError is a ValueError
            errors_of = getattr(exc, "errors", None)  # a ValidationError's
            if errors_of is not None:
                err = errors_of()[0]
                msg = _explain(err, (key,), section).split(" (got ")[0]
            else:
                msg = _lower(str(exc))
            errors.append(f"environment variable {var}={value!r}: {msg}; fix or unset it")
            continue
        layer.setdefault(table, {})[key] = parsed
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


_adapters: dict[type[Any], Any] = {}


def adapter(model: type[M]) -> TypeAdapter[M]:
    """pydantic's validator of ``model``, built (and pydantic imported) on first use."""
    found = _adapters.get(model)
    if found is None:
        from pydantic import TypeAdapter

        found = _adapters[model] = TypeAdapter(model)
    return typing.cast("TypeAdapter[M]", found)


def validate_layer(
    model: type[M], raw: dict[str, Any], name: str, text: str, array_table: str | None = None
) -> M:
    from pydantic import ValidationError

    if not isinstance(raw, dict):  # pragma: no cover - tomllib always gives a table
        raise DefinitionError([f"{name}: expected a TOML table"], path=name)
    try:
        return adapter(model).validate_python(raw)
    except ValidationError as exc:
        lines, kinds = describe_errors(exc, model, name, text, array_table, raw)
        raise SchemaError(lines, kinds, path=name) from exc


def describe_errors(
    exc: ValidationError,
    model: type[Any],
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
            message = _explain(err, loc, model)
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


_TABLE_TYPES = ("dataclass_type", "dict_type", "model_attributes_type")


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
    "dataclass_type": "expected a table",
    "model_attributes_type": "expected a table",  # a union of tables given no table
    "too_short": "needs at least one entry",
}


def _explain(err: Any, loc: tuple[Any, ...], model: type[Any]) -> str:
    kind = err["type"]
    if kind == "unexpected_keyword_argument":  # a field the table does not know
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
        return (
            f"unknown validator kind {_short(err['input'].get('kind'))}; use one of nonempty, "
            "json, jsonl, toml, regex, json_schema, min_bytes, command"
            if isinstance(err.get("input"), dict)
            else _lower(err["msg"])
        )
    if kind == "union_tag_not_found":
        return (
            "needs a `kind` (nonempty, json, jsonl, toml, regex, json_schema, min_bytes, command)"
        )
    if kind == "value_error":  # our own validators' sentences show the value
        return _lower(err["msg"])
    expected = _EXPECTED.get(kind) or _lower(err["msg"])
    return f"{expected} (got {_short(err.get('input'))})"


def _walk(
    model: type[Any], loc: tuple[Any, ...]
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
        members = union_members(annotation)
        if members:
            chosen = next((m for m in members if part in _tags(m)), None)
            if chosen is not None:
                branch = "model" if is_table(chosen) else "scalar"
                union_fields = next((_fields(m) for m in members if is_table(m)), None)
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
    if is_table(annotation):
        return table_fields(annotation).get(part)
    return None


def _known_fields(model: type[Any], loc: tuple[Any, ...]) -> list[str]:
    annotation: Any = model
    for part in loc:
        annotation = unwrap(annotation)
        members = union_members(annotation)
        if members:
            annotation = next((m for m in members if part in _tags(m)), None)
            continue
        annotation = _descend(annotation, part)
        if annotation is None:
            return []
    annotation = unwrap(annotation)
    members = union_members(annotation)
    if members:
        annotation = next((m for m in members if is_table(m)), None)
    return _fields(annotation) if is_table(annotation) else []


def unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``| None``."""
    return _peel(annotation)[0]


def _peel(annotation: Any) -> tuple[Any, list[Any]]:
    """``annotation`` without ``Annotated`` and ``| None``, and every marker
    that was on it on the way."""
    marks: list[Any] = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            marks += annotation.__metadata__
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, marks


def union_members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return []
    return [unwrap(a) for a in typing.get_args(annotation) if a is not type(None)]


def _tags(member: Any) -> set[str]:
    """The names pydantic gives a union member in error locations."""
    tags = {str(getattr(member, "__name__", member))}
    if is_table(member) and "kind" in table_fields(member):
        tags.update(str(v) for v in typing.get_args(table_fields(member)["kind"]))
    return tags


def is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _fields(model: type[Any]) -> list[str]:
    return list(table_fields(model))


def table_fields(model: type[Any]) -> dict[str, Any]:
    """Each field of a table, and its annotation (markers and all)."""
    found = _TABLE_FIELDS.get(model)
    if found is None:
        hints = typing.get_type_hints(model, include_extras=True)
        found = _TABLE_FIELDS[model] = {f.name: hints[f.name] for f in dataclasses.fields(model)}
    return found


_TABLE_FIELDS: dict[type[Any], dict[str, Any]] = {}


def _lower(msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = "a value nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."
