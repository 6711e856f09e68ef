"""An attempt in a scratch directory: the packet and its inputs in, its declared outputs out.

A Ray node has no copy of the repository (``[executor] shared_fs = false``),
and ``[executor] isolation = "scratch"`` gives a local attempt none either:
one mechanism for both. :class:`AttemptFiles` says what an attempt takes
with it: the run definition (workers read the packet), the task's inputs as
the run's base commit has them (an earlier stage's outputs as they were
validated, and files the base never had from the work tree) and its
outputs' content now, for tasks that edit files in place. What comes back
(:func:`gitrun.workers.carry.collect`) is written into the work tree only
where the task declared an output, never through a symlink
(:func:`write_beneath`); the driver then checks those files as for any
attempt.

A local scratch attempt (:class:`Scratch`) runs in a directory of its own
outside the repository, under the system's temporary directory.

It needs no namespaces, so it is the choice where bubblewrap cannot run (a
container without user namespaces): a careless worker's writes inside its
working directory (its neighbour's output, a protected file, ``.git/config``)
land in the scratch directory and are named, never brought back. A worker
that writes the repository by its absolute path is not stopped; the
stray-write audit judges that, as without isolation.

As for a sandboxed attempt, the attempt's folder in the git directory holds
what finishing it needs (``state.json``), so that a resume after its driver
died brings its outputs back (:func:`gitrun.workers.sandbox.left_by`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.definition.inputs import task_inputs
from gitrun.definition.load import RunDef, Task
from gitrun.definition.outputs import open_parent
from gitrun.definition.runfiles import definition_snapshot, read_blobs
from gitrun.store import git
from gitrun.workers.carry import collect, materialize

PREFIX = "gitrun-attempt-"  # as a Ray node's scratch directories are named
KIND = "scratch"  # in state.json, beside a sandbox's


class AttemptFiles:
    """What the attempts of one run take with them into a scratch directory."""

    def __init__(self, run: RunDef, base: str | None) -> None:
        self.run = run
        self.repo = run.repo
        self._base = git.ls_tree(self.repo, base) if base else {}
        self._definition = definition_snapshot(run)
        self._outputs = {path for task in run.tasks for path in run.output_paths(task)}

    def files_of(self, task: Task) -> dict[str, bytes]:
        """What the node materializes for one attempt of ``task``, by path."""
        files = dict(self._definition)
        wanted: dict[str, str] = {}  # path -> blob id at the base commit
        for path in task_inputs(self.run, task):
            found = self._from_base(path)
            if path in self._outputs or not found:
                # An earlier stage's output, as it was validated (the commit
                # may still be on its way), or a file the base never had.
                data = read_regular(self.repo, path)
                if data is not None:
                    files[path] = data
                    continue
            wanted.update(found)
        blobs = read_blobs(self.repo, sorted(set(wanted.values())))
        files.update({path: blobs[sha] for path, sha in wanted.items()})
        for path in self.run.output_paths(task):
            data = read_regular(self.repo, path)
            if data is not None:
                files[path] = data
        return files

    def _from_base(self, path: str) -> dict[str, str]:
        """The base commit's files at ``path`` (a file, or a directory's files)."""
        path = path.rstrip("/")
        if path in self._base:
            return {path: self._base[path][1]}
        prefix = path + "/"
        return {p: sha for p, (_mode, sha) in self._base.items() if p.startswith(prefix)}

    def write_outputs(self, task: Task, outputs: dict[str, bytes]) -> str:
        """Write what the node brought back, the task's declared outputs and
        nothing else, into the work tree; a sentence about any that could not
        be written ("" when all were)."""
        allowed = set(self.run.output_paths(task))
        problems = []
        for path, data in outputs.items():
            if path not in allowed:
                continue
            try:
                write_beneath(self.repo, path, data)
            except OSError as exc:
                problems.append(f"{path}: cannot be written here ({exc.strerror})")
        return "; ".join(problems)


def read_regular(repo: Path, path: str) -> bytes | None:
    """A regular file's bytes in the work tree, reached without a symlink; None otherwise."""
    try:
        parent = open_parent(repo, path)
    except OSError:
        return None
    try:
        fd = os.open(path.rsplit("/", 1)[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as handle:
        if not _is_regular(handle.fileno()):
            return None
        return handle.read()


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def write_beneath(repo: Path, path: str, data: bytes, replace: bool = True) -> None:
    """Write ``path`` whole (a temporary file renamed over it) in a directory
    reached without following a symlink; the directories exist (the driver
    made them before the launch), a link in their place is refused. Without
    ``replace`` the file must not exist (FileExistsError): the temporary file
    is linked to its name, which never replaces anything."""
    parent = open_parent(repo, path)
    name = path.rsplit("/", 1)[-1]
    # A name nobody can guess, made anew (O_EXCL): a link planted at a
    # predictable one would carry the write to the file it names.
    temp = f".{name}.gitrun-{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=parent
        )
    except BaseException:
        os.close(parent)
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if replace:
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        else:
            os.link(temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            os.unlink(temp, dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    finally:
        os.close(parent)


@dataclass
class Scratch:
    """One attempt's scratch directory, and what comes back from it."""

    repo: Path
    folder: Path  # the attempt's own folder in the git directory (state.json)
    outputs: tuple[str, ...]  # the task's declared outputs
    max_output_bytes: int
    place: Path | None = None  # the scratch directory, once made
    # What went in, by path: (size, mtime) as written, to tell what the worker
    # wrote; and the outputs that went in (edited in place) by their digest.
    given: dict[str, tuple[int, int]] = field(default_factory=dict)
    given_outputs: dict[str, str] = field(default_factory=dict)
    unmoved: list[str] = field(default_factory=list)  # outputs that could not come back
    displaced: list[str] = field(default_factory=list)  # (never: nothing is bound)
    refused: str = ""  # why a written output was not brought back (too big, a link)

    def start(self, files: dict[str, bytes]) -> Path:
        """Make the scratch directory holding ``files`` (and the outputs'
        directories, as in the work tree); named in the attempt's folder
        before anything goes in, so a driver killed now leaves nothing unnamed."""
        self.folder.mkdir(parents=True)
        self.place = Path(tempfile.mkdtemp(prefix=PREFIX))
        self._save()
        materialize(str(self.place), files, list(self.outputs))
        self.given = {path: _mark(self.place / path) for path in files}
        self.given_outputs = {p: _digest(files[p]) for p in self.outputs if p in files}
        self._save()
        return self.place

    def _save(self) -> None:
        state = {
            "kind": KIND,
            "place": str(self.place),
            "outputs": self.outputs,
            "max_output_bytes": self.max_output_bytes,
            "given": self.given,
            "given_outputs": self.given_outputs,
        }
        draft = self.folder / "state.json.new"
        draft.write_text(json.dumps(state, allow_nan=False))
        os.replace(draft, self.folder / "state.json")

    @classmethod
    def of_state(cls, state: dict[str, object], repo: Path, folder: Path) -> Scratch:
        """The scratch attempt ``state`` (a ``state.json``) describes."""
        outputs = state["outputs"]
        given = state["given"]
        given_outputs = state["given_outputs"]
        cap = state["max_output_bytes"]
        if not (
            isinstance(outputs, list)
            and isinstance(given, dict)
            and isinstance(given_outputs, dict)
        ):
            raise TypeError("not a scratch attempt's state")
        place = Path(str(state["place"]))
        if not (place.is_absolute() and place.name.startswith(PREFIX)):
            # Only a directory gitrun made is emptied and removed, whatever the state says.
            raise TypeError(f"{place} is not a scratch directory")
        scratch = cls(repo, folder, tuple(str(p) for p in outputs), int(str(cap)))
        scratch.place = place
        scratch.given = {str(p): (int(s), int(m)) for p, (s, m) in given.items()}
        scratch.given_outputs = {str(p): str(d) for p, d in given_outputs.items()}
        return scratch

    def finish(self) -> list[str]:
        """The attempt ended: write its declared outputs into the work tree
        and return the other paths it wrote (left out). Its directories go."""
        try:
            if self.place is None or not self.place.is_dir():
                return []
            spec = {"outputs": self.outputs, "max_output_bytes": self.max_output_bytes}
            outputs, refused = collect(str(self.place), spec)
            self.refused = "; ".join(f"{path}: {why}" for path, why in refused.items())
            for path, data in outputs.items():
                if self.given_outputs.get(path) == _digest(data):
                    continue  # as it went in: not written by the attempt
                try:
                    write_beneath(self.repo, path, data)
                except OSError as exc:
                    self.unmoved.append(f"{path} ({exc.strerror or exc})")
            return self._strays()
        finally:
            self.discard()

    def _strays(self) -> list[str]:
        assert self.place is not None
        strays = []
        own = set(self.outputs)
        for top, dirs, files in os.walk(self.place):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                rel = os.path.relpath(os.path.join(top, name), self.place)
                if rel not in own and self.given.get(rel) != _mark(self.place / rel):
                    strays.append(rel)
        return sorted(strays)

    def discard(self) -> None:
        """Remove the scratch directory and the attempt's folder."""
        if self.place is not None:
            shutil.rmtree(self.place, ignore_errors=True)
        shutil.rmtree(self.folder, ignore_errors=True)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mark(path: Path) -> tuple[int, int]:
    try:
        st = os.lstat(path)
    except OSError:
        return -1, -1
    return st.st_size, st.st_mtime_ns
