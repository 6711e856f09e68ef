"""Deciding from disk whether a task is done, and quarantining what is not.

An output counts only when it is a regular file inside the repository (not
a symlink, not a directory), non-empty, written by the attempt, and accepted
by every validator. A worker's exit status plays no part: workers lie about
it, and the files are the facts.

*Written by the attempt* is read from the file's mark at launch
(:func:`prepare_outputs`): for an output that did not exist, any file there
now; for one that did, a file replaced or rewritten since (a new inode, or
another size, mtime or ctime), whatever its bytes, so that a deterministic
worker regenerating the same file is done; and for an output its task edits
in place (``edits = true``), content other than at launch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.definition.load import OutputSpec, RunDef, Task
from gitrun.definition.schema import (
    CommandValidator,
    JsonSchemaValidator,
    MinBytesValidator,
    RegexValidator,
    Validator,
)
from gitrun.processes.proc import clean_env
from gitrun.store.events import Outcome
from gitrun.store.regular import read_regular
from gitrun.visible import visible

COMMAND_VALIDATOR_TIMEOUT = 120.0
# A schema failure names this many errors, then counts the rest; each at most
# this long (an error quotes the value it rejects).
SCHEMA_ERRORS_SHOWN = 5
SCHEMA_MESSAGE_CHARS = 300
# A JSON schema larger than this is not one a person wrote.
MAX_SCHEMA_BYTES = 16 << 20


@dataclass(frozen=True)
class OutputCheck:
    path: str
    state: str  # Outcome.VALID, MISSING or INVALID
    reason: str = ""
    data: bytes | None = None  # the exact bytes validated (valid outputs)
    mode: str = "100644"
    blob: str = ""  # git's id of ``data`` (valid outputs)


@dataclass(frozen=True)
class TaskCheck:
    outputs: list[OutputCheck]

    @property
    def outcome(self) -> str:
        states = {o.state for o in self.outputs}
        if states == {Outcome.VALID}:
            return Outcome.VALID
        return Outcome.INVALID if Outcome.INVALID in states else Outcome.MISSING

    @property
    def reason(self) -> str:
        return "; ".join(f"{o.path}: {o.reason}" for o in self.outputs if o.state != Outcome.VALID)

    @property
    def made(self) -> dict[str, str] | None:
        """Each output's blob id when every output is valid, else None."""
        if self.outcome != Outcome.VALID:
            return None
        return {o.path: o.blob for o in self.outputs}


def blob_id(data: bytes, object_format: str = "sha1") -> str:
    """The id git gives these bytes as a blob."""
    header = f"blob {len(data)}\0".encode()
    return hashlib.new(object_format, header + data).hexdigest()


def blob_on_disk(path: str | Path, object_format: str = "sha1", follow: bool = False) -> str | None:
    """The blob id of a regular file's content now, or None when there is none
    (read in chunks: the file may be of any size); through a symlink only
    when ``follow``."""
    try:
        with open(path, "rb", opener=None if follow else _no_follow) as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            digest = hashlib.new(object_format, f"blob {info.st_size}\0".encode())
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
            return digest.hexdigest()
    except OSError:
        return None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def open_parent(repo: Path, path: str) -> int:
    """A descriptor of ``path``'s directory, reached from the repository root
    one name at a time without following a symlink (O_NOFOLLOW on each), so a
    directory swapped for a link between a check and a use is refused
    (OSError), never followed. The caller closes it."""
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in path.split("/")[:-1]:
            step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def linked_parent(repo: Path, path: str) -> str | None:
    """The first directory of ``path`` (below the repository root) that is a
    symlink, or None. A write through it lands somewhere else: in another
    task's file, an ignored secret, a user's untracked file."""
    return _parents(repo, path)[0]


def _parents(repo: Path, path: str) -> tuple[str | None, bool]:
    """(:func:`linked_parent`, whether every directory on the way to ``path``
    exists as one), from one ``lstat`` per directory."""
    names = path.split("/")
    current = str(repo)
    for n, name in enumerate(names[:-1], start=1):
        current = f"{current}/{name}"
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None, False
        if stat.S_ISLNK(mode):
            return "/".join(names[:n]), False
        if not stat.S_ISDIR(mode):
            return None, False
    return None, True


def regular_files_beneath(repo: Path, paths: list[str]) -> list[str]:
    """Those of ``paths`` that are regular files reached from the root without
    a symlink on the way (nor at the end): one ``lstat`` per file, and one
    per directory however many files it holds."""
    verdicts: dict[str, bool] = {}  # directory -> reached without a link
    found = []
    for path in paths:
        directory = path.rpartition("/")[0]
        clear = verdicts.get(directory)
        if clear is None:
            link, whole = _parents(repo, path)
            clear = verdicts[directory] = link is None and whole
        if not clear:
            continue
        try:
            if stat.S_ISREG(os.lstat(f"{repo}/{path}").st_mode):
                found.append(path)
        except OSError:
            continue
    return found


_STAT_MARK = "stat:"


def stat_mark(info: os.stat_result) -> str:
    """A file's identity and last change, as a launch mark: the same string
    after an attempt means nobody replaced or wrote the file meanwhile."""
    return f"{_STAT_MARK}{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


def prior_in_tree(
    run: RunDef, task: Task, tree: Mapping[str, tuple[str, str]]
) -> dict[str, str | None]:
    """Each output's blob id in ``tree`` (a ``git.ls_tree`` listing), None where
    absent: as launch marks, content other than the tree's counts as written."""
    return {o.path: tree[o.path][1] if o.path in tree else None for o in run.outputs_of(task)}


def prepare_outputs(
    run: RunDef,
    task: Task,
    object_format: str = "sha1",
    aside: Callable[[], Path] | None = None,
) -> dict[str, str | None]:
    """Before an attempt: create the outputs' directories (workers should not
    have to) and return each output's mark at launch, to tell later whether
    the attempt wrote it: None where no regular file is there; the blob id of
    an output its task edits in place; else the file's :func:`stat_mark`.

    A symlink standing at an output path (another task, or a worker of an
    earlier attempt, put it there) is moved to the path ``aside`` gives
    (asked only then): the worker's write must make a file there, not
    land in the file the link names."""
    before: dict[str, str | None] = {}
    root = str(run.repo)
    for output in run.outputs_of(task):
        link, whole = _parents(run.repo, output.path)
        if link is not None:
            before[output.path] = None  # never followed; the output will be invalid
            continue
        path = f"{root}/{output.path}"
        if not whole:  # nothing stands at the path yet: its directory is missing
            before[output.path] = None
            os.makedirs(os.path.dirname(path), exist_ok=True)
            continue
        try:
            mode: int | None = os.lstat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and stat.S_ISLNK(mode) and aside is not None:
            quarantine(run.repo, aside(), [OutputCheck(output.path, Outcome.INVALID, "a symlink")])
        # One stat answers the usual case, an output not there yet.
        before[output.path] = (
            _mark_of(path, run.edits_in_place(task, output), object_format)
            if mode is not None
            else None
        )
    return before


def _mark_of(path: str, edits: bool, object_format: str) -> str | None:
    """The launch mark of the file at ``path`` (None: no regular file there)."""
    if edits:
        return blob_on_disk(path, object_format)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return stat_mark(info) if stat.S_ISREG(info.st_mode) else None


def check_task(
    run: RunDef,
    task: Task,
    before: Mapping[str, str | None] | None = None,
    object_format: str = "sha1",
) -> TaskCheck:
    """Check every output of ``task``. ``before`` maps each output to its mark
    at launch (:func:`prepare_outputs`; None when it did not exist)."""
    checks = []
    for output in run.outputs_of(task):
        prior = (before or {}).get(output.path)
        checks.append(check_output(run, output, prior, object_format))
    return TaskCheck(checks)


def check_output(
    run: RunDef, output: OutputSpec, prior: str | None, object_format: str = "sha1"
) -> OutputCheck:
    path = output.path
    name = path.rsplit("/", 1)[-1]
    try:
        # One walk from the root without following a link (open_parent) both
        # proves no directory on the way is a symlink and gives the directory
        # to look in: never followed, never committed, never moved.
        parent = open_parent(run.repo, path)
    except OSError as exc:
        return _unreachable(run.repo, path, exc)
    try:
        return _check_in(run, output, prior, object_format, parent, name)
    finally:
        os.close(parent)


def _check_in(
    run: RunDef,
    output: OutputSpec,
    prior: str | None,
    object_format: str,
    parent: int,
    name: str,
) -> OutputCheck:
    """Check ``output``, the entry ``name`` of the directory open as ``parent``."""
    path = output.path
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return OutputCheck(path, Outcome.MISSING, "does not exist")
    except OSError as exc:
        return OutputCheck(path, Outcome.INVALID, f"cannot be read ({exc.strerror})")
    if stat.S_ISLNK(info.st_mode):
        return OutputCheck(path, Outcome.INVALID, "is a symlink, not a regular file")
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        return OutputCheck(path, Outcome.INVALID, f"is {kind}")
    cap = run.packet.limits.max_output_bytes
    if info.st_size > cap:
        return OutputCheck(
            path,
            Outcome.INVALID,
            f"is {info.st_size:,} bytes, over limits.max_output_bytes = {cap:,}; raise that "
            "limit in the packet if an output is meant to be this big",
        )
    try:
        # O_NONBLOCK: a FIFO swapped in since the look above is refused below,
        # never waited on.
        fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except OSError as exc:
        # Since the look above, it became a symlink or went: never followed.
        return OutputCheck(path, Outcome.INVALID, f"cannot be read safely ({exc.strerror})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return OutputCheck(path, Outcome.INVALID, "is not a regular file")
        data = _read_at_most(fd, cap + 1, info.st_size)
    except OSError as exc:
        return OutputCheck(path, Outcome.INVALID, f"cannot be read safely ({exc.strerror})")
    finally:
        os.close(fd)
    if len(data) > cap:  # it grew since the stat
        return OutputCheck(path, Outcome.INVALID, f"is over limits.max_output_bytes = {cap:,}")
    if not data:
        return OutputCheck(path, Outcome.INVALID, "is empty")
    if prior is not None and prior.startswith(_STAT_MARK) and stat_mark(info) == prior:
        return OutputCheck(
            path,
            Outcome.MISSING,
            "was not written: it is the file that was there at launch, untouched",
        )
    blob = blob_id(data, object_format)
    if blob == prior:
        return OutputCheck(path, Outcome.MISSING, "is unchanged since launch")
    for validator in run.validators_of(output):
        problem = run_validator(run, validator, path, data)
        if problem:
            return OutputCheck(path, Outcome.INVALID, problem)
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return OutputCheck(path, Outcome.VALID, data=data, mode=mode, blob=blob)


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _read_at_most(fd: int, limit: int, size: int) -> bytes:
    """Up to ``limit`` bytes of an open file whose size was ``size``, in as
    few reads as its size allows (never a buffer of ``limit`` bytes: that is
    limits.max_output_bytes, 256 MiB by default)."""
    chunks = []
    want = min(limit, size + 1)  # one byte more than its size: did it grow?
    got = 0
    while got < limit:
        chunk = os.read(fd, max(1, min(want, limit - got)))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        want = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unreachable(repo: Path, path: str, walk: OSError) -> OutputCheck:
    """Why the directory of ``path`` cannot be walked to without following a
    link (``walk``: what the walk met)."""
    link = linked_parent(repo, path)
    if link is not None:
        return OutputCheck(
            path, Outcome.INVALID, f"{link} is a symlink; an output is never written through one"
        )
    try:
        os.lstat(repo / path)
    except FileNotFoundError:
        return OutputCheck(path, Outcome.MISSING, "does not exist")
    except NotADirectoryError:
        return OutputCheck(path, Outcome.MISSING, "a parent is not a directory")
    except OSError as exc:
        return OutputCheck(path, Outcome.INVALID, f"cannot be read ({exc.strerror})")
    # It is there, yet the walk failed: a directory on the way changed
    # meanwhile, or cannot be opened.
    return OutputCheck(path, Outcome.INVALID, f"cannot be read safely ({walk.strerror})")


def run_validator(run: RunDef, name: str, path: str, data: bytes) -> str | None:
    """None when ``data`` passes validator ``name``, else the reason."""
    declared = run.packet.validators.get(name)
    if declared is not None:
        return _run_declared(run, declared, path, data)
    kind = _auto_kind(path) if name == "auto" else name
    return _run_builtin(kind, data)


def _auto_kind(path: str) -> str:
    name = path.rpartition("/")[2]
    dot = name.rfind(".")
    suffix = name[dot:].lower() if 0 < dot < len(name) - 1 else ""  # PurePath.suffix
    return {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".toml": "toml"}.get(
        suffix, "nonempty"
    )


def _run_builtin(kind: str, data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None if kind == "nonempty" else "is not UTF-8 text"
    if kind == "json":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            return f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    elif kind == "jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as exc:
                    return f"line {number} is not valid JSON ({exc.msg})"
    elif kind == "toml":
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            return f"is not valid TOML ({exc})"
    return None


def _run_declared(run: RunDef, validator: Validator, path: str, data: bytes) -> str | None:
    if isinstance(validator, MinBytesValidator):
        if len(data) < validator.min:
            return f"has {len(data)} bytes, fewer than {validator.min}"
        return None
    if isinstance(validator, RegexValidator):
        text = data.decode("utf-8", errors="replace")
        if re.search(validator.pattern, text) is None:
            return f"does not match /{validator.pattern}/"
        return None
    if isinstance(validator, JsonSchemaValidator):
        return _check_schema(run, validator, data)
    if isinstance(validator, CommandValidator):
        return _check_command(run, validator, path)
    return _run_builtin(validator.kind, data)


def _check_schema(run: RunDef, validator: JsonSchemaValidator, data: bytes) -> str | None:
    import jsonschema  # deferred: 75 ms to import, only runs that use schemas pay

    problem = _run_builtin("json", data)
    if problem:
        return problem
    try:
        schema = json.loads(read_regular(run.repo / validator.schema, limit=MAX_SCHEMA_BYTES))
    except (OSError, json.JSONDecodeError) as exc:
        return f"cannot be checked: schema {validator.schema} is unreadable ({exc})"
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(json.loads(data)),
        key=_error_order,
    )
    if not errors:
        return None
    said = [
        f"at {'/'.join(str(p) for p in e.path) or '(root)'}: {_clipped(e.message)}"
        for e in errors[:SCHEMA_ERRORS_SHOWN]
    ]
    if len(errors) > SCHEMA_ERRORS_SHOWN:
        said.append(f"and {len(errors) - SCHEMA_ERRORS_SHOWN:,} more")
    return visible(f"fails schema {validator.schema} " + "; ".join(said))


def _error_order(error: Any) -> tuple[list[tuple[bool, Any]], str]:
    """Where in the document, then what: the same order on every run. (A
    key is a string, an index a number; a place orders before its insides.)"""
    return [(isinstance(p, str), p) for p in error.path], error.message


def _clipped(message: str) -> str:
    """A schema error quotes the value it rejects, which may be the whole document."""
    if len(message) <= SCHEMA_MESSAGE_CHARS:
        return message
    return message[: SCHEMA_MESSAGE_CHARS - 3] + "..."


def _check_command(run: RunDef, validator: CommandValidator, path: str) -> str | None:
    argv = [*validator.command, path]
    try:
        proc = subprocess.run(
            argv,
            cwd=run.repo,
            env=clean_env(),
            capture_output=True,
            timeout=COMMAND_VALIDATOR_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        return f"cannot be checked: validator command {validator.command[0]!r} not found"
    except subprocess.TimeoutExpired:
        return f"validator command timed out after {COMMAND_VALIDATOR_TIMEOUT:.0f} s"
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        # What it says may quote the worker's output: shown, never obeyed.
        detail = f": {visible(said[-1])}" if said else ""
        return f"rejected by `{' '.join(argv)}` (status {proc.returncode}){detail}"
    return None


def quarantine(
    repo: Path, quarantine_dir: Path, checks: list[OutputCheck], suspect: bool = False
) -> list[str]:
    """Move invalid outputs (``suspect``: every output checked, valid ones
    too) under ``quarantine_dir``, keeping their paths; returns them.

    Only a regular file or a symlink (the link itself, never its target) is
    moved: an output that turned out to be a directory stays where it is, so a
    user's tree is never carried off (``gitrun check`` refuses such outputs).
    """
    moved: list[str] = []
    for check in checks:
        if check.state != Outcome.INVALID and not suspect:
            continue
        name = check.path.rsplit("/", 1)[-1]
        try:
            # Behind a symlink lies someone else's file: the walk refuses it.
            parent = open_parent(repo, check.path)
        except OSError:
            continue
        try:
            mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                continue
            target = quarantine_dir / check.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(name, target, src_dir_fd=parent)
        except OSError:
            continue  # gone or moved meanwhile: nothing of it is taken
        finally:
            os.close(parent)
        moved.append(check.path)
    return moved
