"""A run's definition on disk: where it lives, its task table, and loading both."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from gitrun import snapshot
from gitrun.collector import collector_paused
from gitrun.errors import DefinitionError, GitrunError
from gitrun.records import VERSION, Fields, Warn, load_record, warn_stderr, write_record
from gitrun.regular import read_regular
from gitrun.runview import CONFIG_FILE as CONFIG_FILE
from gitrun.runview import GITRUN_DIR as GITRUN_DIR
from gitrun.runview import LEDGER_NAME as LEDGER_NAME
from gitrun.runview import PACKET_NAME as PACKET_NAME
from gitrun.runview import RUNS_DIR as RUNS_DIR
from gitrun.runview import TASKS_NAME as TASKS_NAME
from gitrun.runview import RunLimits, RunRules, run_ids, source_key, view_key
from gitrun.runview import check_run_id as check_run_id
from gitrun.settings import OutputSpec as OutputSpec
from gitrun.settings import (
    Packet,
    SchemaError,
    TaskFile,
    adapter,
    resolve_packet,
    validate_layer,
)
from gitrun.settings import Task as Task
from gitrun.tasktoml import loads_task_table
from gitrun.tomlfile import read_toml_text


@dataclass(frozen=True)
class RunDef(RunRules):
    """A loaded, schema-checked run. Cross-task problems are :mod:`gitrun.check`'s job."""

    repo: Path
    id: str
    packet: Packet
    tasks: list[Task]
    # What was loaded, as the caches key it: (runview.source_key, runview.view_key)
    # of the bytes that were read; ("", "") for a run made otherwise (no cache).
    keys: tuple[str, str] = ("", "")

    @cached_property
    def limits(self) -> RunLimits:
        return self.packet.limits.plain()

    @property
    def executor_kind(self) -> str:
        return self.packet.executor.kind

    @cached_property
    def tasks_by_id(self) -> dict[str, Task]:
        return {task.id: task for task in self.tasks}

    @property
    def packet_path(self) -> str:
        return f"{self.dir}/{PACKET_NAME}"

    @property
    def tasks_path(self) -> str:
        return f"{self.dir}/{TASKS_NAME}"

    @property
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.packet.stages]

    def outputs_of(self, task: Task) -> list[OutputSpec]:
        return [OutputSpec(path=o) if isinstance(o, str) else o for o in task.outputs]

    def owns_of(self, task: Task) -> list[str]:
        """The task's owned patterns; by default exactly its outputs (escaped:
        an output is a file name, not a pattern)."""
        if task.owns is not None:
            return list(task.owns)
        from gitrun.patterns import escape

        return [escape(path) for path in self.output_paths(task)]

    def validators_of(self, output: OutputSpec) -> list[str]:
        if output.validators is not None:
            return list(output.validators)
        return list(self.packet.outputs.validators)


def list_runs(repo: Path) -> list[str]:
    return run_ids(str(repo))


def load_run(
    repo: Path, run_id: str, environ: Mapping[str, str] | None = None, keep: bool = True
) -> RunDef:
    """Load and schema-check a run; raises DefinitionError listing every broken field.

    A definition checked before from the same bytes is made from what that
    check kept (:mod:`gitrun.snapshot`), without checking it again; one
    checked here is kept for the next load, unless ``keep`` is False (a
    caller that reads only its view: writing it would cost it time)."""
    with collector_paused():  # 100,000 tasks are 100,000s of objects, none in a cycle
        return _load_run(repo, run_id, environ, keep)


def _load_run(repo: Path, run_id: str, environ: Mapping[str, str] | None, keep: bool) -> RunDef:
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
    kept_at = snapshot.path_of(repo, run_id)
    # Loaded before from these very bytes: no check again. Only hashed when
    # something is kept (a big table is hashed again below, from what is read).
    if kept_at is not None and kept_at.is_file():
        source = source_key(str(repo), run_id)
        keys = (source, view_key(source, env))
        kept = snapshot.read(kept_at, keys[1], run_id)
        if kept is not None:
            return RunDef(repo=repo, id=run_id, packet=kept[0], tasks=kept[1], keys=keys)
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
        tasks_text, tasks_raw = _read_cached(repo, run_id, run_dir / TASKS_NAME, tasks_name, errors)
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
    keys = (key, view_key(key, env))
    if kept_at is not None and keep:
        snapshot.write(kept_at, keys[1], packet, tasks)
    return RunDef(repo=repo, id=run_id, packet=packet, tasks=tasks, keys=keys)


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
    try:
        return validate_layer(TaskFile, raw, shown, text, "task").task
    except DefinitionError:
        if text is not _FROM_CACHE:
            raise
    # The cache served the table without its text: read it for the errors' lines.
    text = path.read_bytes().decode("utf-8", errors="replace")
    return validate_layer(TaskFile, raw, shown, text, "task").task


def _validate_each(entries: list[Any]) -> list[Task] | None:
    """The tasks of a table, each entry dropped once validated; None when one is
    wrong (``entries`` is then partly gone)."""
    from pydantic import ValidationError

    check = adapter(Task).validate_python
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
    and the bytes each file was read as (what the caches are keyed by)."""

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


CACHE_ABOVE = 64 * 1024  # bytes of TOML worth caching as JSON
# The text of a task table read from the cache: not decoded (megabytes at
# 100,000 tasks) unless an error needs its line numbers. Never empty, never
# equal to a real table's text.
_FROM_CACHE = "\0cached"


@dataclass(frozen=True)
class TasksCache:
    """A parsed task table (:attr:`gitrun.local.LocalPaths.tasks_cache`), valid
    for the file whose content has this SHA-1."""

    sha1: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "sha1": self.sha1, "data": self.data}

    @classmethod
    def from_json(cls, data: Fields) -> TasksCache:
        return cls(data.string("sha1"), data.mapping("data"))


def read_tasks_cache(cache: Path, shown: str, warn: Warn = warn_stderr) -> TasksCache | None:
    """The cache of the task table ``shown``; a damaged one is a warning and None."""
    return load_record(
        cache,
        TasksCache.from_json,
        what="cache of the task table",
        fix=f"ignored: {shown} is parsed again and the cache rewritten",
        warn=warn,
    )


def _read_cached(
    repo: Path, run_id: str, path: Path, shown: str, errors: _Errors
) -> tuple[str, dict[str, Any]]:
    """Like _read, for big task tables: tomllib is pure Python (~15 us a task),
    so the parsed table is kept as JSON in the run's local state, keyed by the
    file's content hash, and parsed again only when the file changes. A cache
    that cannot be read is only a warning: the file is parsed again. The text
    is :data:`_FROM_CACHE` when the cache served the table."""
    try:
        data = read_regular(path)
    except OSError:
        return _read(path, shown, errors)
    if len(data) < CACHE_ABOVE:
        return _read(path, shown, errors)
    git_dir = repo / ".git"  # a worktree's .git is a file: no cache there
    if not git_dir.is_dir():
        return _read_big(path, data, shown, errors)
    from gitrun.local import LocalPaths  # lazy: it imports the git door, only big tables need it

    digest = hashlib.sha1(data).hexdigest()
    cache = LocalPaths.under(git_dir, run_id).tasks_cache
    cached = read_tasks_cache(cache, shown)
    if cached is not None and cached.sha1 == digest:
        errors.read[str(path)] = data
        return _FROM_CACHE, cached.data
    text, raw = _read_big(path, data, shown, errors)
    if raw:
        # only a cache: when it cannot be written, the next load parses the file again
        with contextlib.suppress(OSError, ValueError, RecursionError):
            write_record(cache, TasksCache(digest, raw))
    return text, raw


def _read_big(path: Path, data: bytes, shown: str, errors: _Errors) -> tuple[str, dict[str, Any]]:
    """A big task table: read fast when it is in the plain subset that generated
    tables use (:mod:`gitrun.tasktoml`), else by tomllib, errors and all."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
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
