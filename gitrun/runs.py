"""A run's definition on disk: where it lives, its task table, and loading both."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from gitrun.errors import DefinitionError, GitrunError
from gitrun.settings import ID_PATTERN, Identifier, Packet, Strict, resolve_packet, validate_layer
from gitrun.tomlfile import read_toml

GITRUN_DIR = ".gitrun"
RUNS_DIR = ".gitrun/runs"
CONFIG_FILE = ".gitrun/config.toml"
PACKET_NAME = "packet.toml"
TASKS_NAME = "tasks.toml"
LEDGER_NAME = "ledger.jsonl"


class OutputSpec(Strict):
    path: str
    validators: list[str] | None = None


class Task(Strict):
    id: Identifier
    stage: str | None = None
    inputs: list[str] = []
    owns: list[str] | None = None  # None: the task owns exactly its outputs
    outputs: list[str | OutputSpec] = Field(min_length=1)
    note: str | None = None
    bundle: str | None = None  # a file listing the inputs, for tasks with many


class TaskFile(Strict):
    task: list[Task] = []


@dataclass(frozen=True)
class RunDef:
    """A loaded, schema-checked run. Cross-task problems are :mod:`gitrun.check`'s job."""

    repo: Path
    id: str
    packet: Packet
    tasks: list[Task]

    @property
    def dir(self) -> str:
        return f"{RUNS_DIR}/{self.id}"

    @property
    def packet_path(self) -> str:
        return f"{self.dir}/{PACKET_NAME}"

    @property
    def tasks_path(self) -> str:
        return f"{self.dir}/{TASKS_NAME}"

    @property
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.packet.stages]

    def stage_of(self, task: Task) -> str:
        return task.stage or self.stage_names[0]

    def outputs_of(self, task: Task) -> list[OutputSpec]:
        return [OutputSpec(path=o) if isinstance(o, str) else o for o in task.outputs]

    def owns_of(self, task: Task) -> list[str]:
        """The task's owned patterns; by default exactly its outputs (escaped:
        an output is a file name, not a pattern)."""
        if task.owns is not None:
            return list(task.owns)
        from gitrun.patterns import escape

        return [escape(o.path) for o in self.outputs_of(task)]

    def validators_of(self, output: OutputSpec) -> list[str]:
        if output.validators is not None:
            return list(output.validators)
        return list(self.packet.outputs.validators)


def check_run_id(run_id: str) -> None:
    if not re.match(ID_PATTERN, run_id):
        raise GitrunError(
            f"{run_id!r} is not a valid run id; use 1-64 lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


def list_runs(repo: Path) -> list[str]:
    runs = repo / RUNS_DIR
    if not runs.is_dir():
        return []
    return sorted(p.name for p in runs.iterdir() if (p / PACKET_NAME).is_file())


def load_run(repo: Path, run_id: str, environ: Mapping[str, str] | None = None) -> RunDef:
    """Load and schema-check a run; raises DefinitionError listing every broken field."""
    check_run_id(run_id)
    run_dir = repo / RUNS_DIR / run_id
    if not (run_dir / PACKET_NAME).is_file():
        known = list_runs(repo)
        hint = f" (runs here: {', '.join(known)})" if known else ""
        raise GitrunError(
            f"no run {run_id!r}: {RUNS_DIR}/{run_id}/{PACKET_NAME} does not exist{hint}; "
            f"create it with `gitrun new {run_id}`"
        )
    packet_name = f"{RUNS_DIR}/{run_id}/{PACKET_NAME}"
    tasks_name = f"{RUNS_DIR}/{run_id}/{TASKS_NAME}"
    errors: list[str] = []

    config_raw: dict[str, Any] = {}
    config_text = ""
    config_path = repo / CONFIG_FILE
    if config_path.is_file():
        config_text, config_raw = _read(config_path, CONFIG_FILE, errors)
    packet_text, packet_raw = _read(run_dir / PACKET_NAME, packet_name, errors)

    packet: Packet | None = None
    if not errors:
        try:
            packet = resolve_packet(
                packet_raw,
                config_raw,
                packet_name=packet_name,
                packet_text=packet_text,
                config_name=CONFIG_FILE,
                config_text=config_text,
                environ=environ if environ is not None else os.environ,
            )
        except DefinitionError as exc:
            errors += exc.lines
    if packet is not None and packet.run.id != run_id:
        errors.append(
            f"{packet_name}: run.id is {packet.run.id!r} but the run directory is {run_id!r}; "
            "make them equal"
        )

    tasks: list[Task] = []
    if not (run_dir / TASKS_NAME).is_file():
        errors.append(
            f"{tasks_name}: file not found; list the tasks there as [[task]] tables "
            f"(or generate them with `gitrun new {run_id} --inputs GLOB --output PATTERN`)"
        )
    else:
        tasks_text, tasks_raw = _read_cached(repo, run_id, run_dir / TASKS_NAME, tasks_name, errors)
        if tasks_text or tasks_raw:
            try:
                table = validate_layer(TaskFile, tasks_raw, tasks_name, tasks_text, "task")
                tasks = table.task
            except DefinitionError as exc:
                errors += exc.lines
    if errors or packet is None:
        raise DefinitionError(errors or [f"{packet_name}: could not be loaded"], path=packet_name)
    return RunDef(repo=repo, id=run_id, packet=packet, tasks=tasks)


CACHE_ABOVE = 64 * 1024  # bytes of TOML worth caching as JSON


def _read_cached(
    repo: Path, run_id: str, path: Path, shown: str, errors: list[str]
) -> tuple[str, dict[str, Any]]:
    """Like _read, for big task tables: tomllib is pure Python (~15 us a task),
    so the parsed table is kept as JSON under .git/gitrun/<run>/, keyed by the
    file's content hash, and parsed again only when the file changes."""
    try:
        data = path.read_bytes()
    except OSError:
        return _read(path, shown, errors)
    git_dir = repo / ".git"
    if len(data) < CACHE_ABOVE or not git_dir.is_dir():
        return _read(path, shown, errors)
    digest = hashlib.sha1(data).hexdigest()
    cache = git_dir / "gitrun" / run_id / "tasks.cache.json"
    try:
        cached = json.loads(cache.read_bytes())
        if cached.get("sha1") == digest and isinstance(cached.get("data"), dict):
            return data.decode("utf-8", errors="replace"), cached["data"]
    except (OSError, ValueError):
        pass
    text, raw = _read(path, shown, errors)
    if raw:
        from gitrun.tomlfile import write_atomic

        write_atomic(cache, json.dumps({"sha1": digest, "data": raw}).encode(), durable=False)
    return text, raw


def _read(path: Path, shown: str, errors: list[str]) -> tuple[str, dict[str, Any]]:
    try:
        raw = read_toml(path, shown)
    except DefinitionError as exc:
        errors += exc.lines
        return "", {}
    return path.read_text(encoding="utf-8"), raw
