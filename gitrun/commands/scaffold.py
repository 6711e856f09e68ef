"""Creating files for the user: ``gitrun init`` and ``gitrun new``.

``new`` with ``--inputs`` is the mechanical pre-pass of a fan-out: it expands
a glob (sorted, so the same tree always gives the same tasks), groups the
inputs, and writes one task per group that owns exactly its outputs.
"""

from __future__ import annotations

import glob
import os
import string
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gitrun.definition.load import (
    CONFIG_FILE,
    GITRUN_DIR,
    PACKET_NAME,
    RUNS_DIR,
    TASKS_NAME,
    check_run_id,
)
from gitrun.errors import GitrunError, UsageError
from gitrun.ownership.patterns import escape
from gitrun.resources import template_text
from gitrun.store.tomlfile import write_atomic, write_toml
from gitrun.workers.clients import DEFAULT_MODELS

OUTPUT_PLACEHOLDERS = ("task", "stem", "name", "n")
# The shell preset's script in a new packet: a stand-in to replace.
SHELL_SAMPLE = 'my-agent --task "$GITRUN_TASK" "$GITRUN_POINTER"'


@dataclass(frozen=True)
class Created:
    paths: list[str]
    tasks: int
    message: str


def init_repo(repo: Path) -> Created:
    target = repo / CONFIG_FILE
    if target.exists():
        return Created([], 0, f"{CONFIG_FILE} already exists; left it unchanged")
    try:
        write_atomic(target, template_text("config.toml").encode())
    except OSError as exc:
        raise _write_error(repo, exc, GITRUN_DIR) from exc
    return Created([CONFIG_FILE], 0, f"created {CONFIG_FILE} with commented defaults")


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
) -> Created:
    """Scaffold run ``run_id``; ``preset`` (command runs) picks the agent CLI
    and, from its family, the packet's default model."""
    check_run_id(run_id)
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
    preset = preset or "claude"
    if preset not in DEFAULT_MODELS:
        raise UsageError(f"--preset must be one of {', '.join(DEFAULT_MODELS)}, not {preset!r}")
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
    else:
        executor_block = f'kind = "command"\npreset = {_toml_value(preset)}'
        executor_block += " " * (17 - len(preset)) + "# claude, codex, gemini, aider or shell"
        if preset == "shell":
            executor_block += f"\nshell = {_toml_value(SHELL_SAMPLE)}"
    model = DEFAULT_MODELS["claude" if executor == "external" else preset]
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
    }
    expected: dict[str, Any] = {"run": {"id": run_id, "description": description}}
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
    return Created(created, count, f"created run {run_id!r} with {count} task{'s' * (count != 1)}")


def _write_error(repo: Path, exc: OSError, folder: str) -> GitrunError:
    where = os.path.relpath(exc.filename, repo) if isinstance(exc.filename, str) else folder
    return GitrunError(
        f"cannot write {where} ({exc.strerror}); make {folder}/ a writable directory and try again"
    )


def _toml_value(value: str) -> str:
    """``value`` as a TOML string literal, escaped by tomli-w."""
    import tomli_w

    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def _render(template: str, values: dict[str, str], expected: dict[str, Any]) -> str:
    """A template with its values filled in, checked to read back as ``expected``."""
    import tomllib

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
