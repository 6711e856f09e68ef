"""The schema of a run's definition: ``packet.toml``, ``tasks.toml`` and ``.gitrun/config.toml``.

Each TOML table is a pydantic model (:class:`Table`): no field it does not
know, a value is what it says (no "4" for 4, no 1 for true), no nan or inf.
Each field is declared once, here: its type, default and bounds, and, for the
fields the environment may override, the variable (:class:`Env`). Everything
that reads a definition gets its values from these models.

The kinds of value and their rules are :mod:`gitrun.definition.values`; the
sentences a broken field gets are :mod:`gitrun.definition.messages`; how the
environment, the packet and the repository's config merge is
:mod:`gitrun.definition.layers`.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    field_validator,
)

from gitrun.definition.values import (
    HALT_POLICY,
    ArgText,
    Duration,
    HaltPolicy,
    Identifier,
    Regex,
    Size,
)
from gitrun.definition.values import ModelName as ModelName
from gitrun.definition.values import parse_bytes as parse_bytes
from gitrun.definition.values import parse_duration as parse_duration
from gitrun.store.usage import MAX_TOKENS, MAX_USD


class Env:
    """The ``GITRUN_*`` variable that overrides a field (read by
    :func:`gitrun.definition.layers.env_overrides`)."""

    def __init__(self, name: str) -> None:
        self.name = name


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


class Table(BaseModel):
    """The base of every table: unknown fields are refused, values are not
    coerced (strict), floats are finite, and a loaded table never changes."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class RunSection(Table):
    id: Identifier
    description: str = ""


class Rules(Table):
    text: str = ""
    acceptance: list[str] = Field(default_factory=list)


class Limits(Table):
    concurrency: Annotated[PositiveInt, Env("GITRUN_CONCURRENCY")] = 4
    canary: Annotated[NonNegativeInt, Env("GITRUN_CANARY")] = 1
    max_attempts: Annotated[PositiveInt, Env("GITRUN_MAX_ATTEMPTS")] = 3
    # 0 means 3 x the number of tasks
    max_spawns: Annotated[NonNegativeInt, Env("GITRUN_MAX_SPAWNS")] = 0
    timeout: Annotated[Duration, Env("GITRUN_TIMEOUT")] = 1200.0
    kill_grace: Duration = 5.0  # SIGTERM, then SIGKILL this much later
    # None means 2 x CPU count
    max_load: Annotated[Annotated[float, Gt(0)] | None, Env("GITRUN_MAX_LOAD")] = None
    payload_budget: Annotated[PositiveInt, Env("GITRUN_PAYLOAD_BUDGET")] = 65536
    # An output bigger than this is invalid: it is read whole to validate and
    # commit the exact bytes, so a runaway worker must not exhaust memory.
    max_output_bytes: PositiveInt = 256 * 1024 * 1024
    # Throttles: exit status 75 or output matching one of these (case-insensitive).
    throttle_patterns: list[Regex] = Field(default_factory=lambda: [*DEFAULT_THROTTLE_PATTERNS])
    # A usage limit with a reset time: the run parks until the reset (no
    # attempt used); a billing refusal or spend cap: it halts at once.
    quota_patterns: list[Regex] = Field(default_factory=lambda: [*DEFAULT_QUOTA_PATTERNS])
    billing_patterns: list[Regex] = Field(default_factory=lambda: [*DEFAULT_BILLING_PATTERNS])
    park_default: Duration = 1800.0  # how long to park when the reset cannot be read
    backoff_base: Duration = 2.0
    backoff_cap: Duration = 300.0
    grow_after: PositiveInt = 3  # valid completions before concurrency grows by one
    # Environment-fault breaker: this many attempts in a row (0: max(3, concurrency))
    # ending faster than breaker_fast with no output and one diagnostic halt the run.
    breaker_window: NonNegativeInt = 0
    breaker_fast: Duration = 3.0
    # "fail=N" or "fail=P%"
    halt: Annotated[HaltPolicy | None, Env("GITRUN_HALT")] = None
    # The spend budget: no attempt starts when what the run spent plus what
    # its running attempts are expected to cost would pass it (None: none).
    # Each at most what gitrun holds (gitrun.store.usage): more is a typo, not a budget.
    max_cost_usd: Annotated[
        Annotated[float, Gt(0), Le(MAX_USD)] | None, Env("GITRUN_MAX_COST_USD")
    ] = None
    max_tokens: Annotated[
        Annotated[int, Gt(0), Le(MAX_TOKENS)] | None, Env("GITRUN_MAX_TOKENS")
    ] = None
    # The canary's projection of the whole run may pass the budget by this
    # factor; more halts the run before the fan-out widens.
    max_projection: Annotated[float, Ge(1)] = 1.5

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


class ModelSection(Table):
    # "" (not set) only as the default, never written
    default: Annotated[ModelName, Env("GITRUN_MODEL")] = ""
    stages: dict[str, ModelName] = Field(default_factory=dict)
    # The governor keeps one adaptive concurrency per model bucket
    # (gitrun.engine.congestion): a bucket is the executor's client and the
    # model. Models named here to one bucket share it (one account's limit).
    buckets: dict[ModelName, Identifier] = Field(default_factory=dict)


class StageResources(Table):
    """What one attempt of a stage asks of a Ray node; unset fields take the
    ``[executor.resources]`` value."""

    num_cpus: NonNegativeFloat | None = None
    num_gpus: NonNegativeFloat | None = None
    memory: Size | None = None  # bytes of memory Ray reserves for the attempt
    custom: dict[str, NonNegativeFloat] = Field(default_factory=dict)  # e.g. {"big_disk" = 1}


class Resources(Table):
    """``[executor.resources]``: what every attempt asks of a Ray node, and
    per stage (``[executor.resources.stages.<stage>]``) what differs."""

    num_cpus: NonNegativeFloat = 1.0
    num_gpus: NonNegativeFloat = 0.0
    memory: Size = 0
    custom: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    stages: dict[str, StageResources] = Field(default_factory=dict)

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
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Executor(Table):
    kind: Literal["command", "external", "ray"] = "command"
    # kind = "ray" (gitrun.workers.ray.executor): where the cluster is, what each attempt
    # asks of a node, and whether the repository is at the same path on every
    # node (shared_fs) or each attempt gets its inputs shipped to a scratch
    # directory and sends its outputs back.
    address: str = "auto"
    resources: Resources = Field(default_factory=Resources)
    shared_fs: bool = False
    preset: str | None = None
    command: list[ArgText] | None = None
    shell: ArgText | None = None  # the command line of the "shell" preset
    # appended to the preset's (or command's) arguments
    args: list[ArgText] = Field(default_factory=list)
    env: dict[str, ArgText] = Field(default_factory=dict)
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
    # Whether a try after a cut-off attempt (a throttle after its first turn,
    # a usage limit, a timeout, a killed driver) continues that attempt's
    # conversation, where its preset's client can (docs/agent-clients.md).
    resume: bool = True

    @field_validator("address")
    @classmethod
    def _ray_address(cls, value: str) -> str:
        if not _RAY_ADDRESS.fullmatch(value):
            raise ValueError(
                f'{value!r} is not a Ray address; write "auto" (the cluster this machine belongs '
                'to), "local" (a private Ray for this run), "host:port" or "ray://host:port"'
            )
        return value

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError(
                'is empty; give the program and its arguments, e.g. ["sh", "-c", "..."]'
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(
                    f"{key!r} is not an environment variable name; use letters, digits and '_'"
                )
        return value


class Ownership(Table):
    protected: list[str] = Field(default_factory=list)
    strict: bool = False


class Stage(Table):
    name: Identifier
    description: str = ""


class Outputs(Table):
    validators: list[str] = Field(default_factory=lambda: ["auto"])


class NonemptyValidator(Table):
    kind: Literal["nonempty"]


class JsonValidator(Table):
    kind: Literal["json"]


class JsonlValidator(Table):
    kind: Literal["jsonl"]


class TomlValidator(Table):
    kind: Literal["toml"]


class RegexValidator(Table):
    kind: Literal["regex"]
    pattern: Regex


with warnings.catch_warnings():
    # The TOML key is "schema", which names BaseModel's deprecated schema()
    # too: pydantic warns that the field hides it, which is what it should do.
    warnings.filterwarnings("ignore", 'Field name "schema"', UserWarning)

    class JsonSchemaValidator(Table):
        kind: Literal["json_schema"]
        schema: str  # type: ignore[assignment]  # the schema file's path in the repository


class MinBytesValidator(Table):
    kind: Literal["min_bytes"]
    min: PositiveInt


class CommandValidator(Table):
    kind: Literal["command"]
    command: Annotated[list[ArgText], Field(min_length=1)]


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


class Packet(Table):
    """A run's ``packet.toml``: what every task of the run shares."""

    run: RunSection
    rules: Rules = Field(default_factory=Rules)
    limits: Limits = Field(default_factory=Limits)
    model: ModelSection = Field(default_factory=ModelSection)
    executor: Executor = Field(default_factory=Executor)
    ownership: Ownership = Field(default_factory=Ownership)
    stages: Annotated[list[Stage], Field(min_length=1)] = Field(
        default_factory=lambda: [Stage(name="work")]
    )
    validators: dict[str, Validator] = Field(default_factory=dict)
    outputs: Outputs = Field(default_factory=Outputs)

    @property
    def protected(self) -> list[str]:
        return list(dict.fromkeys([*DEFAULT_PROTECTED, *self.ownership.protected]))

    def model_for(self, stage: str) -> str:
        return self.model.stages.get(stage) or self.model.default

    def bucket_for(self, stage: str) -> str:
        """The key of the governor's bucket ``stage``'s attempts call: the
        executor's client (its preset, else its kind) and the model, or the
        bucket ``[model.buckets]`` names for that model (``claude/haiku``,
        ``claude/team``)."""
        client = self.executor.preset or self.executor.kind
        model = self.model_for(stage)
        return f"{client}/{self.model.buckets.get(model) or model or 'default'}"


class OutputSpec(Table):
    path: str
    validators: list[str] | None = None
    # The task changes this file in place (it exists before and is edited):
    # done only when its content changed, not when it was merely rewritten.
    edits: bool = False


class Task(Table):
    """A ``[[task]]`` of a run's ``tasks.toml``."""

    id: Identifier
    outputs: Annotated[list[str | OutputSpec], Field(min_length=1)]
    stage: str | None = None
    inputs: list[str] = Field(default_factory=list)
    owns: list[str] | None = None  # None: the task owns exactly its outputs
    note: ArgText | None = None  # reaches workers in their prompt: never a NUL
    bundle: str | None = None  # a file listing the inputs, for tasks with many
    edits: bool = False  # every output is edited in place: see OutputSpec.edits


class TaskFile(Table):
    task: list[Task] = Field(default_factory=list)


class RepoConfig(Table):
    """What ``.gitrun/config.toml`` may set: defaults for every run."""

    limits: Limits = Field(default_factory=Limits)
    model: ModelSection = Field(default_factory=ModelSection)
    executor: Executor = Field(default_factory=Executor)
    ownership: Ownership = Field(default_factory=Ownership)
    validators: dict[str, Validator] = Field(default_factory=dict)
    outputs: Outputs = Field(default_factory=Outputs)
