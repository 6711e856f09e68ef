"""The run's own files: the only files gitrun commits besides validated outputs.

They are the run definition in ``.gitrun/runs/<run>/``: ``packet.toml``,
``tasks.toml``, the ledger, and the bundle and schema files the definition
names inside that directory. Nothing else is committed: not the repository's
``.gitrun/config.toml`` (it may hold secrets and stays where the user keeps
it), not dot-files or dot-directories, not files the definition does not
name, and never a path git ignores. Each is committed as a regular file: a
symlink there is refused, so its target's content is never committed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gitrun import git
from gitrun.errors import GitrunError
from gitrun.problem import Problem
from gitrun.runs import LEDGER_NAME, PACKET_NAME, TASKS_NAME, RunDef


def own_paths(run: RunDef) -> list[str]:
    """Repository-relative paths of the run's own files (whether they exist or not)."""
    paths = [f"{run.dir}/{PACKET_NAME}", f"{run.dir}/{TASKS_NAME}", f"{run.dir}/{LEDGER_NAME}"]
    named = [task.bundle for task in run.tasks if task.bundle]
    named += [
        getattr(validator, "schema_path", None) or ""
        for validator in run.packet.validators.values()
    ]
    inside = sorted({p for p in named if p.startswith(run.dir + "/") and _is_plain(p, run.dir)})
    return paths + inside


def _is_plain(path: str, run_dir: str) -> bool:
    """Below the run directory, with no dot-names (``.private/creds``) and no ``..``."""
    rest = path[len(run_dir) + 1 :].split("/")
    return all(part and not part.startswith(".") for part in rest)


def definition_files(run: RunDef) -> dict[str, bytes]:
    """The run's own files that exist, by path, read as regular files.

    Raises GitrunError for one that is a symlink or not a regular file
    (``gitrun check`` reports the same before launch).
    """
    files: dict[str, bytes] = {}
    _refuse_linked_dirs(run)
    for path in own_paths(run):
        full = run.repo / path
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise GitrunError(_not_regular(path, info.st_mode))
        files[path] = full.read_bytes()
    return files


def _not_regular(path: str, mode: int) -> str:
    kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
    return (
        f"{path} is {kind}; gitrun commits the run's own files only as regular files — "
        "replace it with the file itself"
    )


def _refuse_linked_dirs(run: RunDef) -> None:
    link = _linked_dir(run.repo, run.dir)
    if link is not None:
        raise GitrunError(
            f"{link} is a symlink; the run directory {run.dir} must be a real directory in the "
            "repository — replace the link with the directory"
        )


def _linked_dir(repo: Path, run_dir: str) -> str | None:
    parts = run_dir.split("/")
    for n in range(1, len(parts) + 1):
        current = "/".join(parts[:n])
        try:
            if stat.S_ISLNK(os.lstat(repo / current).st_mode):
                return current
        except OSError:
            return None
    return None


def run_file_problems(run: RunDef) -> list[Problem]:
    """The run's own files must be committable: regular files, not ignored by git."""
    out: list[Problem] = []
    link = _linked_dir(run.repo, run.dir)
    if link is not None:
        out.append(
            Problem(
                "run-file",
                f"{link} is a symlink; the run directory {run.dir} must be a real directory in "
                "the repository — replace the link with the directory",
                path=link,
            )
        )
        return out
    paths = own_paths(run)
    for path in paths:
        try:
            info = os.lstat(run.repo / path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            out.append(Problem("run-file", _not_regular(path, info.st_mode), path=path))
    for path, rule in sorted(git.ignored_by(run.repo, paths).items()):
        out.append(
            Problem(
                "run-file",
                f"{path} is ignored by git ({rule}); gitrun commits the run definition on the "
                f"run's branch and never commits an ignored path — change that rule so git "
                f"stops ignoring {run.dir}/",
                path=path,
            )
        )
    return out
