"""A run's definition as the engine and ``status`` read it, without pydantic (issue 14).

Loading a run (:func:`gitrun.runs.load_run`) checks every field with
pydantic, whose import and models cost ~130 ms before the first line of a
command's work. The engine and ``status`` need little of it: the task ids,
stages and output paths, the executor's kind and the ``[limits]``. This
module is that shape (:class:`RunShape`; :class:`gitrun.runs.RunDef` has
it, and so has :class:`RunView`), the limits as plain values
(:class:`RunLimits`), and a cache of the view of every run that loaded,
``.git/gitrun/RUN/run-view.jsonl``::

    {"v": 1, "key": "<sha256>", "run": "...", "stages": [...], "kind": "...",
     "limits": {...}, "tasks_sha256": "<sha256 of the next line>"}
    [["t0001", null, ["out/t0001.json"]], ...]
    # end of the run view

keyed by the SHA-256 of what loading read: the repository's config.toml,
the run's packet.toml and tasks.toml (:func:`source_key`, which the write
hooks' rules are keyed by too) and the ``GITRUN_*`` variables that override
the packet (:func:`view_key`). A view is written only from a definition
that loaded, under the key of the bytes it was loaded from, so a definition
that does not load never has one and loading it again gives the same
one-sentence error.

Nothing here imports more than json, os, re, hashlib and gitrun.regular.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from gitrun.errors import GitrunError
from gitrun.regular import NotRegular, read_regular

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import Protocol

    from gitrun.local import LocalPaths

    class OutputShape(Protocol):
        @property
        def path(self) -> str: ...

    class TaskShape(Protocol):
        """What the engine reads of a task."""

        @property
        def id(self) -> str: ...
        @property
        def stage(self) -> str | None: ...
        @property
        def outputs(self) -> Sequence[str | OutputShape]: ...

    class _Named(Protocol):
        @property
        def id(self) -> str: ...
        @property
        def stage_names(self) -> list[str]: ...

    class RunShape(Protocol):
        """What the engine and ``status`` read of a run."""

        @property
        def repo(self) -> Path: ...
        @property
        def id(self) -> str: ...
        @property
        def dir(self) -> str: ...
        @property
        def tasks(self) -> Sequence[TaskShape]: ...
        @property
        def tasks_by_id(self) -> Mapping[str, TaskShape]: ...
        @property
        def stage_names(self) -> list[str]: ...
        @property
        def limits(self) -> RunLimits: ...
        @property
        def executor_kind(self) -> str: ...
        def stage_of(self, task: TaskShape) -> str: ...
        def output_paths(self, task: TaskShape) -> list[str]: ...


GITRUN_DIR = ".gitrun"
RUNS_DIR = ".gitrun/runs"
CONFIG_FILE = ".gitrun/config.toml"
PACKET_NAME = "packet.toml"
TASKS_NAME = "tasks.toml"
LEDGER_NAME = "ledger.jsonl"
ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
BRANCH_PREFIX = "gitrun/"
HALT_POLICY = re.compile(r"fail=([0-9]{1,18})(%?)")  # matched whole (fullmatch)
# How a GITRUN_* variable writes a number (matched whole): loading reads them
# so (gitrun.settings), and so does a cold status's guess (gitrun.viewload).
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
# The environment variables that override a packet's fields
# (gitrun.settings.ENV_OVERRIDES; a test holds the two equal).
DEFINITION_VARS = (
    "GITRUN_MODEL",
    "GITRUN_CONCURRENCY",
    "GITRUN_CANARY",
    "GITRUN_MAX_ATTEMPTS",
    "GITRUN_MAX_SPAWNS",
    "GITRUN_TIMEOUT",
    "GITRUN_MAX_LOAD",
    "GITRUN_PAYLOAD_BUDGET",
    "GITRUN_HALT",
    "GITRUN_MAX_COST_USD",
    "GITRUN_MAX_TOKENS",
)


def check_run_id(run_id: str) -> None:
    if not re.fullmatch(ID_PATTERN, run_id):  # match() would let "r\n" through
        raise GitrunError(
            f"{run_id!r} is not a valid run id; use 1-64 lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


def run_ids(root: str) -> list[str]:
    """The runs defined in the work tree at ``root``: directories of
    ``.gitrun/runs`` holding a packet.toml."""
    runs = os.path.join(root, RUNS_DIR)
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    return sorted(n for n in names if os.path.isfile(os.path.join(runs, n, PACKET_NAME)))


def branch_ref(run_id: str) -> str:
    return f"refs/heads/{BRANCH_PREFIX}{run_id}"


class RunLimits:
    """A run's ``[limits]``, checked (by :class:`gitrun.settings.Limits`), as
    plain values; the rules the governor derives from them."""

    concurrency: int
    canary: int
    max_attempts: int
    max_spawns: int
    timeout: float
    kill_grace: float
    max_load: float | None
    payload_budget: int
    max_output_bytes: int
    throttle_patterns: list[str]
    backoff_base: float
    backoff_cap: float
    grow_after: int
    breaker_window: int
    breaker_fast: float
    halt: str | None
    max_cost_usd: float | None
    max_tokens: int | None
    max_projection: float

    def __init__(self, values: Mapping[str, object]) -> None:
        """From a checked Limits' values; raises KeyError when one is missing
        and TypeError when one is not of its field's type (a cached view
        written by another version, or edited)."""
        for name, annotation in self.__annotations__.items():
            value = values[name]
            if not _of_type(value, annotation):
                raise TypeError(f"limits.{name}: {value!r} is not {annotation}")
            setattr(self, name, value)
        if self.halt is not None and not HALT_POLICY.fullmatch(self.halt.replace(" ", "")):
            raise TypeError(f"limits.halt: {self.halt!r} is not a halt policy")

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__annotations__}

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
        found = HALT_POLICY.fullmatch(self.halt.replace(" ", ""))
        assert found is not None
        number = int(found[1])
        if found[2]:
            return max(1, -(-number * tasks // 100))
        return max(1, number)


def _of_type(value: object, annotation: str) -> bool:
    """``value`` is of the type a RunLimits annotation names (JSON's kinds:
    an int is a float too, a bool is neither)."""
    if value is None:
        return annotation.endswith("| None")
    kind = annotation.removesuffix(" | None")
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, int | float)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    raise AssertionError(f"no check for {annotation}")  # a field added without one


class RunRules:
    """What a run's shape derives from its id, stages and tasks: shared by
    :class:`gitrun.runs.RunDef` and :class:`RunView`."""

    __slots__ = ()

    @property
    def dir(self: _Named) -> str:
        return f"{RUNS_DIR}/{self.id}"

    def stage_of(self: _Named, task: TaskShape) -> str:
        return task.stage or self.stage_names[0]

    def output_paths(self, task: TaskShape) -> list[str]:
        """The paths of the task's outputs."""
        return [o if isinstance(o, str) else o.path for o in task.outputs]


class TaskView:
    """A task as the engine reads it."""

    __slots__ = ("id", "outputs", "stage")

    def __init__(self, task_id: str, stage: str | None, outputs: list[str]) -> None:
        self.id = task_id
        self.stage = stage
        self.outputs = outputs


class RunView(RunRules):
    """A run that loaded, as :data:`RunShape`, read from the cache."""

    __slots__ = ("_by_id", "executor_kind", "id", "limits", "repo", "stage_names", "tasks")

    def __init__(
        self,
        repo: Path,
        run_id: str,
        stage_names: list[str],
        executor_kind: str,
        limits: RunLimits,
        tasks: list[TaskView],
    ) -> None:
        self.repo = repo
        self.id = run_id
        self.stage_names = stage_names
        self.executor_kind = executor_kind
        self.limits = limits
        self.tasks = tasks
        self._by_id: dict[str, TaskView] | None = None

    @property
    def tasks_by_id(self) -> dict[str, TaskView]:
        if self._by_id is None:
            self._by_id = {task.id: task for task in self.tasks}
        return self._by_id


# -- the cache ---------------------------------------------------------------------------

VERSION = 1
_END = b"\n# end of the run view\n"  # a file cut short does not end so


_SOURCES = (CONFIG_FILE, PACKET_NAME, TASKS_NAME)


def source_key(root: str, run_id: str, read: Mapping[str, bytes] | None = None) -> str:
    """The SHA-256 of the files a run's definition comes from (a missing one
    counts as absent, anything but a regular file by its kind, and a symbolic
    link by its target: loading refuses a linked packet or task table, and
    reads config.toml through its link, so that is hashed by its content
    too), and of whether the directories holding them are symbolic links
    (loading refuses those too). ``read`` gives the bytes a load read, by
    path, to hash instead of reading the files again."""
    digest = hashlib.sha256(b"gitrun definition 1\0")
    run_dir = os.path.join(root, RUNS_DIR, run_id)
    for directory in (GITRUN_DIR, RUNS_DIR, f"{RUNS_DIR}/{run_id}"):
        digest.update(b"L" if os.path.islink(os.path.join(root, directory)) else b"D")
    for index, name in enumerate(_SOURCES):
        path = os.path.join(root, name) if index == 0 else os.path.join(run_dir, name)
        try:
            if os.path.islink(path):
                digest.update(b"link\0" + os.readlink(path).encode("utf-8", "surrogateescape"))
                if index:
                    continue
            data = read[path] if read and path in read else read_regular(path)
        except (FileNotFoundError, NotADirectoryError):
            digest.update(b"absent\0")
            continue
        except NotRegular:
            digest.update(b"not a file\0")  # loading refuses it
            continue
        except OSError as exc:  # unreadable: loading says why
            digest.update(b"error %d\0" % (exc.errno or 0))
            continue
        digest.update(b"%d\0" % len(data))
        digest.update(data)
    return digest.hexdigest()


def view_key(source: str, environ: Mapping[str, str]) -> str:
    """What a run's view depends on: its definition's :func:`source_key` and
    the overrides in ``environ`` (see the module's docstring)."""
    digest = hashlib.sha256(f"gitrun run view {VERSION}\0{source}\0".encode())
    for var in DEFINITION_VARS:
        value = environ.get(var)
        digest.update(b"-\0" if value is None else f"={value}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def view_path(git_dir: str, run_id: str) -> str:
    from gitrun.local import RUN_VIEW, run_home

    return os.path.join(run_home(git_dir, run_id), RUN_VIEW)


def write_view(path: str, key: str, run: RunShape) -> None:
    """Write ``run``'s view (only a cache: a failure leaves it to the next call)."""
    import contextlib
    from pathlib import Path

    from gitrun.tomlfile import write_atomic

    header, tasks = view_parts(key, run)
    body = f"{json.dumps(header)}\n{tasks}".encode() + _END
    with contextlib.suppress(OSError, ValueError):
        write_atomic(Path(path), body, durable=False)


def view_parts(key: str, run: RunShape) -> tuple[dict[str, object], str]:
    """The header and the task line of ``run``'s view under ``key``."""
    tasks = json.dumps(
        [[t.id, t.stage, run.output_paths(t)] for t in run.tasks], separators=(",", ":")
    )
    header = {
        "v": VERSION,
        "key": key,
        "run": run.id,
        "stages": run.stage_names,
        "kind": run.executor_kind,
        "limits": run.limits.to_json(),
        "tasks_sha256": hashlib.sha256(tasks.encode()).hexdigest(),
    }
    return header, tasks


def view_holds(path: str, expected: dict[str, object]) -> bool:
    """The view cached at ``path`` is whole and its header is ``expected``
    (:func:`view_parts` of a run under a key): what :func:`read_view` would
    read there is that run.

    The header is compared as the text :func:`write_view` writes, never as
    decoded values: 5 == 5.0 == True and 0.0 == -0.0 in Python, but a
    ``max_cost_usd`` of 5 is shown as 5 and one of 5.0 as 5.0."""
    try:
        data = read_regular(path, follow=False)
    except OSError:
        return False
    if not data.endswith(_END):
        return False
    head, _, body = data[: -len(_END)].partition(b"\n")
    try:
        text = json.dumps(expected).encode()
    except (TypeError, ValueError):
        return False
    return head == text and hashlib.sha256(body).hexdigest() == expected["tasks_sha256"]


def refresh_view(local: LocalPaths, run: RunShape, key: str) -> None:
    """Write ``run``'s view unless the cache holds it (``start``, ``resume``
    and ``next`` call it, so the first ``status`` after them is fast too).
    ``key`` is what ``run`` was loaded from (``RunDef.keys``), never the
    files as they are now: an edit since the load is seen by the next
    ``status``; "" (a run not loaded from files) writes nothing."""
    path = str(local.run_view)
    if key and read_view(path, key, run.repo) is None:
        write_view(path, key, run)


def read_view(path: str, key: str, repo: Path) -> RunView | None:
    """The view cached at ``path`` when it holds ``key``; None when it is
    missing, stale, cut short or damaged (it is then written again)."""
    try:
        data = read_regular(path, follow=False)
    except OSError:  # missing, or not a regular file: written again
        return None
    if not data.endswith(_END):
        return None  # cut short: it proves nothing
    head, _, body = data[: -len(_END)].partition(b"\n")
    try:
        header = json.loads(head)
        if not isinstance(header, dict) or header.get("v") != VERSION or header.get("key") != key:
            return None
        if header.get("tasks_sha256") != hashlib.sha256(body).hexdigest():
            return None  # damaged
        run_id, stages, kind = header["run"], header["stages"], header["kind"]
        limits = RunLimits(header["limits"])
        tasks = [TaskView(tid, stage, outputs) for tid, stage, outputs in json.loads(body)]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # damaged or edited: loaded again and written again
    if not (
        isinstance(run_id, str)
        and isinstance(kind, str)
        and isinstance(stages, list)
        and stages
        and all(isinstance(s, str) for s in stages)
        and all(_whole(task, stages) for task in tasks)
    ):
        return None
    return RunView(repo, run_id, stages, kind, limits, tasks)


def _whole(task: TaskView, stages: list[str]) -> bool:
    return (
        isinstance(task.id, str)
        and (task.stage is None or task.stage in stages)
        and isinstance(task.outputs, list)
        and bool(task.outputs)
        and all(isinstance(path, str) for path in task.outputs)
    )
