"""What an attempt on a Ray node takes with it, and what the driver lets back in.

In scratch mode (``[executor] shared_fs = false``) a node has no copy of the
repository. :class:`AttemptFiles` gives each attempt the files it may read:
the run definition (workers read the packet), the task's inputs as the run's
base commit has them (an earlier stage's outputs as they were validated, and
files the base never had from the work tree) and its outputs' content now,
for tasks that edit files in place. What comes back is written into the work
tree only where the task declared an output, never through a symlink; the
driver then checks those files as for a local attempt.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from gitrun.definition.inputs import task_inputs
from gitrun.definition.load import RunDef, Task
from gitrun.definition.outputs import open_parent
from gitrun.definition.runfiles import definition_snapshot, read_blobs
from gitrun.store import git


class AttemptFiles:
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


def write_beneath(repo: Path, path: str, data: bytes) -> None:
    """Write ``path`` whole (a temporary file renamed over it) in a directory
    reached without following a symlink; the directories exist (the driver
    made them before the launch), a link in their place is refused."""
    parent = open_parent(repo, path)
    name = path.rsplit("/", 1)[-1]
    temp = f".{name}.gitrun-{os.getpid()}.tmp"
    try:
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=parent
        )
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    finally:
        os.close(parent)
