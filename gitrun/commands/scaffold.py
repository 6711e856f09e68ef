"""Creating files for the user: ``gitrun init`` and ``gitrun new``.

``new`` with ``--inputs`` is the mechanical pre-pass of a fan-out: it expands
a glob (sorted, so the same tree always gives the same tasks), groups the
inputs, and writes one task per group that owns exactly its outputs.
"""

from __future__ import annotations

import glob
import os
import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import tomli_w
from pydantic import TypeAdapter, ValidationError

from gitrun.definition.load import (
    CONFIG_FILE,
    GITRUN_DIR,
    PACKET_NAME,
    RUNS_DIR,
    TASKS_NAME,
    check_run_id,
)
from gitrun.definition.schema import ModelName
from gitrun.errors import GitrunError, UsageError
from gitrun.ownership.patterns import escape
from gitrun.resources import template_text
from gitrun.store.tomlfile import write_atomic, write_toml
from gitrun.workers.executor import literal_models, template_problems, uses_model
from gitrun.workers.presets import DEFAULT, LEAD, PRESETS

OUTPUT_PLACEHOLDERS = ("task", "stem", "name", "n")
# The shell preset's script in a new packet: a stand-in to replace.
SHELL_SAMPLE = 'my-agent --task "$GITRUN_TASK" "$GITRUN_POINTER"'
# The packet's rules when `new` is given none.
DEFAULT_RULES = """\
Read the inputs your pointer names and write only the outputs it names.
Do not edit PROGRESS.md, TODO.md or any file outside your outputs.
Write each output in one go; a half-written file does not count as done.
"""
# What `--validate` takes besides a schema file: a kind of built-in validator.
VALIDATE_KINDS = ("json", "jsonl", "toml")
SCHEMA_VALIDATOR = "schema"  # the name `--validate FILE.json` gives its validator
NAMED_SAMPLE = '# [validators.summary]\n# kind = "json_schema"\n# schema = "schemas/summary.json"'


@dataclass(frozen=True)
class Created:
    paths: list[str]
    tasks: int
    message: str
    # The packet needs no edit before `gitrun start`: it was given its worker's
    # command or its rules.
    ready: bool = False


def init_repo(repo: Path) -> Created:
    target = repo / CONFIG_FILE
    if target.exists():
        return Created([], 0, f"{CONFIG_FILE} already exists; left it unchanged")
    try:
        write_atomic(target, template_text("config.toml").encode())
    except OSError as exc:
        raise _write_error(repo, exc, GITRUN_DIR) from exc
    return Created([CONFIG_FILE], 0, f"created {CONFIG_FILE} with commented defaults")


def told_new(created: Created, run_id: str, executor: str) -> list[str]:
    """What ``gitrun new`` prints: what it wrote (the first five paths), and
    what comes next for a run of this executor."""
    lines = [created.message, *(f"  {path}" for path in created.paths[:5])]
    if len(created.paths) > 5:
        lines.append(f"  ... and {len(created.paths) - 5} more")
    if created.ready and executor != "external":
        lines.append(f"next: `gitrun start {run_id}` (it runs `gitrun check {run_id}` first)")
    elif created.ready:
        lines.append(f"next: `gitrun check {run_id}`")
    else:
        lines.append(
            f"next: edit the packet's [rules] (or give --rules), then `gitrun check {run_id}`"
        )
    if executor == "external":
        lines.append(
            f"then lead it from Claude Code: `gitrun plugin install` once, and `/gitrun:lead "
            f"{run_id}` in a session started after it (or `gitrun hooks install` to keep the "
            "hooks and the worker agent in the repository); any other lead: `gitrun next --help`"
        )
    return lines


def new_run(
    repo: Path,
    run_id: str,
    *,
    inputs: str | None = None,
    output: str | None = None,
    per_task: int = 1,
    executor: str = "command",
    preset: str | None = None,
    description: str = "",
    command: Sequence[str] | None = None,
    rules: str | None = None,
    rules_file: Path | None = None,
    validate: str | None = None,
    model: str | None = None,
) -> Created:
    """Scaffold run ``run_id``; ``preset`` (command runs) picks the agent CLI
    and, from its family, the packet's default model; ``command`` is the
    worker's own argv instead; ``rules`` (or the text of ``rules_file``) goes
    into ``[rules]``; ``validate`` is a kind or a schema file every output must
    pass; ``model`` replaces the preset's. Every option is checked before
    anything is written."""
    check_run_id(run_id)
    if command is not None:
        _check_command(list(command), executor, preset, model)
    rules_text = _rules_text(rules, rules_file)
    validators, named = _validators(repo, validate)
    if model is not None:
        _check_model(model)
    if (inputs is None) != (output is None):
        raise UsageError("--inputs and --output go together; give both or neither")
    if per_task < 1:
        raise UsageError("--per-task must be 1 or more")
    if executor not in ("command", "external"):
        raise UsageError(f"--executor must be command or external, not {executor!r}")
    if preset is not None and executor == "external":
        raise UsageError(
            "--preset picks the CLI gitrun launches, which an external run does not; drop "
            "--preset or use --executor command"
        )
    record = PRESETS.get(preset or DEFAULT.name)
    if record is None:
        raise UsageError(f"--preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    preset = record.name
    run_dir = repo / RUNS_DIR / run_id
    if run_dir.exists():
        raise GitrunError(
            f"run {run_id!r} already exists at {RUNS_DIR}/{run_id}; pick another id or delete "
            "that directory"
        )
    tasks: list[dict[str, Any]] | None = None
    bundles: dict[str, list[str]] = {}
    if inputs is not None and output is not None:
        tasks, bundles = _generate(repo, run_id, inputs, output, per_task)

    if executor == "external":
        executor_block = (
            'kind = "external"          # an orchestrating session dispatches the pointers'
        )
    elif command is not None:
        executor_block = (
            "# each attempt runs this from the repository root; a placeholder such as {task},\n"
            "# {inputs} or {outputs} becomes that value, and every value is a GITRUN_* variable\n"
            f'kind = "command"\ncommand = [{", ".join(_toml_value(arg) for arg in command)}]'
        )
    else:
        executor_block = f'kind = "command"\npreset = {_toml_value(preset)}'
        executor_block += " " * (17 - len(preset)) + f"# {_or(list(PRESETS))}"
        if record.script:
            executor_block += f"\nshell = {_toml_value(SHELL_SAMPLE)}"
    if model is None and command is None:
        model = (LEAD if executor == "external" else record).default_model
    if model is None:  # a script: it names its model itself, if it takes one
        model_line = '# default = "..."      # if your script takes one, as "$GITRUN_MODEL"'
    else:
        model_line = f"default = {_toml_value(model)}       # or GITRUN_MODEL; per stage: "
        model_line += '[model.stages] review = "..."'

    # The templates keep their comments; every value in them is written by
    # tomli-w, so any text (quotes, backslashes, newlines) reads back exactly.
    values = {
        "run": run_id,
        "run_value": _toml_value(run_id),
        "description": _toml_value(description),
        "first_output": _toml_value(f"out/{run_id}/t0001.json"),
        "executor": executor_block,
        "model_line": model_line,
        "rules_text": _toml_value(rules_text),
        "validators": f"[{_toml_value(validators)}]"
        + ("    # auto: json, jsonl or toml by extension, else non-empty" * (validators == "auto")),
        "named_validators": NAMED_SAMPLE if named is None else _named_table(named),
    }
    expected: dict[str, Any] = {
        "run": {"id": run_id, "description": description},
        "rules": {"text": rules_text},
        "outputs": {"validators": [validators]},
    }
    if command is not None:
        expected["executor"] = {"command": list(command)}
    if model is not None:
        expected["model"] = {"default": model}
    packet = _render("packet.toml", values, expected)
    created = [f"{RUNS_DIR}/{run_id}/{PACKET_NAME}", f"{RUNS_DIR}/{run_id}/{TASKS_NAME}"]
    try:
        for path, lines in bundles.items():
            write_atomic(repo / path, "".join(f"{line}\n" for line in lines).encode())
        write_atomic(run_dir / PACKET_NAME, packet.encode())
        if tasks is None:
            write_atomic(run_dir / TASKS_NAME, _render("tasks.toml", values, {}).encode())
            count = 1
        else:
            write_toml(run_dir / TASKS_NAME, {"task": tasks})
            count = len(tasks)
    except OSError as exc:
        raise _write_error(repo, exc, RUNS_DIR) from exc
    created += sorted(bundles)
    message = f"created run {run_id!r} with {count} task{'s' * (count != 1)}"
    return Created(
        created, count, message, ready=command is not None or rules_text != DEFAULT_RULES
    )


def _or(names: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _check_command(
    command: list[str], executor: str, preset: str | None, model: str | None
) -> None:
    """Refuse a worker's command that conflicts with the other options or that
    ``gitrun check`` would refuse for what it is (not for what is installed)."""
    if preset is not None:
        raise UsageError(
            "--preset and a command after -- both name the program gitrun launches; give one "
            "or the other"
        )
    if executor != "command":
        raise UsageError(
            "a command after -- is what gitrun launches, and with --executor external a "
            "session dispatches the workers instead; drop one or the other"
        )
    if not command:
        raise UsageError("nothing follows --; give the worker's program and its arguments")
    problems = template_problems(command)
    if problems:
        raise UsageError(f"the command after -- cannot be a worker's: {problems[0]}")
    if named := literal_models(command):
        raise UsageError(
            f"the command after -- names the model {named[0]!r}; write {{model}} there and "
            f"give --model {named[0]}, so the model stays configuration"
        )
    if model is None and uses_model(command):
        raise UsageError("the command after -- passes {model}; name the model with --model M")


def _rules_text(rules: str | None, rules_file: Path | None) -> str:
    """The rules every worker reads: ``rules``, the text of ``rules_file``, or the default."""
    if rules is not None and rules_file is not None:
        raise UsageError("--rules and --rules-file both give the rules; give one of them")
    if rules_file is not None:
        try:
            rules = rules_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise UsageError(
                f"--rules-file {rules_file} cannot be read ({why}); name a text file"
            ) from exc
    if rules is None:
        return DEFAULT_RULES
    if not rules.strip():
        where = f"--rules-file {rules_file}" if rules_file is not None else "--rules"
        raise UsageError(f"{where} is blank; write what every worker must do")
    return rules


def _validators(repo: Path, validate: str | None) -> tuple[str, str | None]:
    """The ``[outputs] validators`` entry for ``--validate``, and the schema
    file a named validator checks against (None: no named validator)."""
    if validate is None:
        return "auto", None
    if validate in VALIDATE_KINDS:
        return validate, None
    parts = PurePosixPath(validate).parts
    inside = not validate.startswith("/") and ".." not in parts and parts[:1] != (".git",)
    if inside and validate.lower().endswith(".json") and (repo / validate).is_file():
        return SCHEMA_VALIDATOR, PurePosixPath(validate).as_posix()
    raise UsageError(
        f"--validate {validate!r} is not {', '.join(VALIDATE_KINDS)} or a JSON schema file in "
        "the repository; give one of those kinds, or the schema's path from the repository "
        "root (ending in .json)"
    )


def _named_table(schema: str) -> str:
    return f'[validators.{SCHEMA_VALIDATOR}]\nkind = "json_schema"\nschema = {_toml_value(schema)}'


def _check_model(model: str) -> None:
    try:
        TypeAdapter(ModelName).validate_python(model)
    except ValidationError as exc:
        why = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise UsageError(f"--model {model!r}: {why}") from exc


def _write_error(repo: Path, exc: OSError, folder: str) -> GitrunError:
    where = os.path.relpath(exc.filename, repo) if isinstance(exc.filename, str) else folder
    return GitrunError(
        f"cannot write {where} ({exc.strerror}); make {folder}/ a writable directory and try again"
    )


def _toml_value(value: str) -> str:
    """``value`` as a TOML string literal, escaped by tomli-w (a text of
    several lines as one ``\"\"\"`` string, to read as it was written; a
    carriage return stays escaped on one line, as a parser reads a raw CRLF
    in a multi-line string as LF)."""
    text = tomli_w.dumps({"v": value}, multiline_strings="\r" not in value)
    return text.removeprefix("v = ").removesuffix("\n")


def _render(template: str, values: dict[str, str], expected: dict[str, Any]) -> str:
    """A template with its values filled in, checked to read back as ``expected``."""
    text = string.Template(template_text(template)).substitute(values)
    data = tomllib.loads(text)
    for table, fields in expected.items():
        for key, value in fields.items():
            if data[table][key] != value:  # pragma: no cover - a broken template
                raise AssertionError(f"{template}: {table}.{key} does not read back")
    return text


def _generate(
    repo: Path, run_id: str, pattern: str, output: str, per_task: int
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    if pattern.startswith("/") or ".." in PurePosixPath(pattern).parts:
        raise UsageError(f"--inputs {pattern!r} must be relative to the repository root, inside it")
    found = sorted(
        p
        for p in glob.glob(pattern, root_dir=repo, recursive=True)
        if (repo / p).is_file() and PurePosixPath(p).parts[0] not in (".git", GITRUN_DIR)
    )
    if not found:
        raise GitrunError(
            f"--inputs {pattern!r} matches no files under the repository root; check the pattern "
            "(quote it so the shell does not expand it)"
        )
    groups = [found[i : i + per_task] for i in range(0, len(found), per_task)]
    width = max(4, len(str(len(groups))))
    tasks: list[dict[str, Any]] = []
    bundles: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for n, group in enumerate(groups, start=1):
        task_id = f"t{n:0{width}d}"
        first = PurePosixPath(group[0])
        values = {"task": task_id, "stem": first.stem, "name": first.name, "n": f"{n:0{width}d}"}
        try:
            out_path = output.format_map(values)
        except (KeyError, ValueError, IndexError, AttributeError, TypeError) as exc:
            raise UsageError(
                f"--output {output!r} uses an unknown placeholder ({exc}); use "
                + ", ".join("{" + p + "}" for p in OUTPUT_PLACEHOLDERS)
            ) from exc
        if any(ch in out_path for ch in "*?"):
            raise UsageError(
                f"--output {output!r} gives {out_path!r} for {group[0]}, a file name with a "
                "wildcard character ('*' or '?'), which an output cannot have; rename that "
                "input, or use {task} or {n} in --output"
            )
        if out_path in seen:
            raise UsageError(
                f"--output {output!r} gives {out_path} for both {seen[out_path]} and {task_id}; "
                "include {task} or {n} in the pattern"
            )
        seen[out_path] = task_id
        # Inputs and owns are patterns: a file named docs/[x].md is written
        # escaped, so it means that file and nothing else.
        task: dict[str, Any] = {"id": task_id, "inputs": [escape(p) for p in group]}
        if per_task > 1:
            bundle = f"{RUNS_DIR}/{run_id}/bundles/{task_id}.txt"
            bundles[bundle] = group
            task["bundle"] = bundle
        task["outputs"] = [out_path]
        task["owns"] = [escape(out_path)]
        tasks.append(task)
    return tasks, bundles
