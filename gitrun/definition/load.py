"""A run's definition on disk: where it lives, its task table, and loading both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gitrun.collector import collector_paused
from gitrun.definition.layers import resolve_packet
from gitrun.definition.messages import SchemaError, validate_layer
from gitrun.definition.schema import Limits, Packet, TaskFile
from gitrun.definition.schema import OutputSpec as OutputSpec
from gitrun.definition.schema import Task as Task
from gitrun.definition.sources import source_key
from gitrun.definition.tasktoml import loads_task_table
from gitrun.errors import DefinitionError, GitrunError
from gitrun.layout import CONFIG_FILE as CONFIG_FILE
from gitrun.layout import GITRUN_DIR as GITRUN_DIR
from gitrun.layout import PACKET_NAME as PACKET_NAME
from gitrun.layout import RUNS_DIR as RUNS_DIR
from gitrun.layout import TASKS_NAME as TASKS_NAME
from gitrun.layout import check_run_id as check_run_id
from gitrun.layout import run_ids
from gitrun.store.regular import read_regular
from gitrun.store.tomlfile import read_toml_text


@dataclass(frozen=True)
class RunDef:
    """A loaded, schema-checked run. Cross-task problems are :mod:`gitrun.proof.check`'s job."""

    repo: Path
    id: str
    packet: Packet
    tasks: list[Task]
    # The :func:`gitrun.definition.sources.source_key` of the bytes that were read (what
    # the hook rules are keyed by); "" for a run made otherwise.
    key: str = ""

    @property
    def limits(self) -> Limits:
        return self.packet.limits

    @property
    def executor_kind(self) -> str:
        return self.packet.executor.kind

    @cached_property
    def tasks_by_id(self) -> dict[str, Task]:
        return {task.id: task for task in self.tasks}

    @property
    def dir(self) -> str:
        return f"{RUNS_DIR}/{self.id}"

    def stage_of(self, task: Task) -> str:
        return task.stage or self.stage_names[0]

    def output_paths(self, task: Task) -> list[str]:
        """The paths of the task's outputs."""
        return [o if isinstance(o, str) else o.path for o in task.outputs]

    @property
    def packet_path(self) -> str:
        return f"{self.dir}/{PACKET_NAME}"

    @property
    def tasks_path(self) -> str:
        return f"{self.dir}/{TASKS_NAME}"

    @cached_property  # asked once a task by status and the engine
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.packet.stages]

    def outputs_of(self, task: Task) -> list[OutputSpec]:
        return [OutputSpec(path=o) if isinstance(o, str) else o for o in task.outputs]

    def edits_in_place(self, task: Task, output: OutputSpec) -> bool:
        """Whether ``task`` edits ``output`` in place, so that only changed
        content proves it written (otherwise a rewrite does)."""
        return task.edits or output.edits

    def owns_of(self, task: Task) -> list[str]:
        """The task's owned patterns; by default exactly its outputs (escaped:
        an output is a file name, not a pattern)."""
        if task.owns is not None:
            return list(task.owns)
        # deferred: status (<= 25x `python -c pass`) needs no pattern compiler
        from gitrun.ownership.patterns import escape

        return [escape(path) for path in self.output_paths(task)]

    def validators_of(self, output: OutputSpec) -> list[str]:
        if output.validators is not None:
            return list(output.validators)
        return list(self.packet.outputs.validators)


def list_runs(repo: Path) -> list[str]:
    return run_ids(str(repo))


def load_run(repo: Path, run_id: str, environ: Mapping[str, str] | None = None) -> RunDef:
    """Load and schema-check a run; raises DefinitionError listing every broken field."""
    with collector_paused():  # 100,000 tasks are 100,000s of objects, none in a cycle
        return _load_run(repo, run_id, environ)


def _load_run(repo: Path, run_id: str, environ: Mapping[str, str] | None) -> RunDef:
    check_run_id(run_id)
    env = os.environ if environ is None else environ
    run_dir = repo / RUNS_DIR / run_id
    packet_name = f"{RUNS_DIR}/{run_id}/{PACKET_NAME}"
    tasks_name = f"{RUNS_DIR}/{run_id}/{TASKS_NAME}"
    if not os.path.lexists(run_dir / PACKET_NAME):
        known = list_runs(repo)
        hint = f" (runs here: {', '.join(known)})" if known else ""
        raise GitrunError(
            f"no run {run_id!r}: {packet_name} does not exist{hint}; "
            f"create it with `gitrun new {run_id}`"
        )
    _check_real_files(repo, run_id)
    errors = _Errors()

    config_raw: dict[str, Any] = {}
    config_text = ""
    config_path = repo / CONFIG_FILE
    if os.path.lexists(config_path):
        config_text, config_raw = _read(config_path, CONFIG_FILE, errors)
    packet_text, packet_raw = _read(run_dir / PACKET_NAME, packet_name, errors)

    packet: Packet | None = None
    if not errors.lines:
        try:
            packet = resolve_packet(
                packet_raw,
                config_raw,
                packet_name=packet_name,
                packet_text=packet_text,
                config_name=CONFIG_FILE,
                config_text=config_text,
                environ=env,
            )
        except DefinitionError as exc:
            errors.add(exc)
    if packet is not None and packet.run.id != run_id:
        errors.line(
            f"{packet_name}: run.id is {packet.run.id!r} but the run directory is {run_id!r}; "
            "make them equal"
        )

    tasks: list[Task] = []
    if not os.path.lexists(run_dir / TASKS_NAME):
        errors.line(
            f"{tasks_name}: file not found; list the tasks there as [[task]] tables "
            f"(or generate them with `gitrun new {run_id} --inputs GLOB --output PATTERN`)"
        )
    else:
        tasks_text, tasks_raw = _read_tasks(run_dir / TASKS_NAME, tasks_name, errors)
        if tasks_text or tasks_raw:
            try:
                tasks = _validate_tasks(tasks_raw, tasks_name, tasks_text, run_dir / TASKS_NAME)
            except DefinitionError as exc:
                errors.add(exc)
    if errors.lines or packet is None:
        if not errors.lines:  # pragma: no cover - a packet that fails says why
            errors.line(f"{packet_name}: could not be loaded")
        raise SchemaError(errors.lines, errors.kinds, path=packet_name)
    # Keyed by the bytes that were read: an edit made while they were read,
    # or since, is a different key and never served from a cache.
    key = source_key(str(repo), run_id, errors.read)
    return RunDef(repo=repo, id=run_id, packet=packet, tasks=tasks, key=key)


# Tasks above which a table is validated one task at a time, each raw task
# dropped as its model is made: a big table is never held twice over (40 MB
# at 100,000 tasks). A table with an error is validated whole for its messages.
VALIDATE_EACH_ABOVE = 10_000


def _validate_tasks(raw: dict[str, Any], shown: str, text: str, path: Path) -> list[Task]:
    entries = raw.get("task")
    if raw.keys() == {"task"} and isinstance(entries, list) and len(entries) > VALIDATE_EACH_ABOVE:
        tasks = _validate_each(entries)
        if tasks is not None:
            return tasks
        text, raw = read_toml_text(path, shown)  # the raw table is gone: read it again
    return validate_layer(TaskFile, raw, shown, text, "task").task


def _validate_each(entries: list[Any]) -> list[Task] | None:
    """The tasks of a table, each entry dropped once validated; None when one is
    wrong (``entries`` is then partly gone)."""
    check = Task.model_validate
    tasks: list[Task] = []
    for index, entry in enumerate(entries):
        try:
            tasks.append(check(entry))
        except ValidationError:
            return None
        entries[index] = None
    return tasks


class _Errors:
    """Sentences from every file of a run, each with its kind (see SchemaError),
    and the bytes each file was read as (what the hook rules are keyed by)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.kinds: list[str] = []
        self.read: dict[str, bytes] = {}

    def add(self, exc: DefinitionError) -> None:
        kinds = getattr(exc, "kinds", None) or exc.lines
        self.lines += exc.lines
        self.kinds += kinds

    def line(self, sentence: str) -> None:
        self.lines.append(sentence)
        self.kinds.append(sentence)


def _check_real_files(repo: Path, run_id: str) -> None:
    """A run's definition lives in real files: a symlink could alias another
    run or a file outside the repository, and gets committed as a link."""
    parts = [GITRUN_DIR, RUNS_DIR, f"{RUNS_DIR}/{run_id}"]
    files = [f"{RUNS_DIR}/{run_id}/{PACKET_NAME}", f"{RUNS_DIR}/{run_id}/{TASKS_NAME}"]
    for rel in parts + files:
        path = repo / rel
        if path.is_symlink():
            raise DefinitionError(
                [
                    f"{rel}: is a symlink; a run's definition must be real files and "
                    "directories: replace the link with what it points to"
                ],
                path=rel,
            )
    for rel in files:
        path = repo / rel
        if os.path.lexists(path) and not path.is_file():
            raise DefinitionError(
                [f"{rel}: is not a regular file (a directory?); replace it with the TOML file"],
                path=rel,
            )


def _read_tasks(path: Path, shown: str, errors: _Errors) -> tuple[str, dict[str, Any]]:
    """Like _read, for task tables: tomllib is pure Python (~15 us a task), so
    a table in the plain subset that generated tables use is read by
    :mod:`gitrun.definition.tasktoml`; any other text by tomllib, errors and all."""
    try:
        data = read_regular(path)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return _read(path, shown, errors)
    raw = None if text.startswith("\ufeff") else loads_task_table(text)
    if raw is None:
        return _read(path, shown, errors)
    errors.read[str(path)] = data
    return text, raw


def _read(path: Path, shown: str, errors: _Errors) -> tuple[str, dict[str, Any]]:
    try:
        text, raw = read_toml_text(path, shown)
    except DefinitionError as exc:
        errors.add(exc)
        return "", {}
    errors.read[str(path)] = text.encode("utf-8")  # decoded strictly: the same bytes
    return text, raw
