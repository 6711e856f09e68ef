"""A run's three pieces: ``gitrun rm`` removes what is there.

A run is its run directory ``.gitrun/runs/<run>/`` in the work tree, its
branch ``gitrun/<run>`` and its machine-local state ``.git/gitrun/<run>/``;
any of them may be gone already (a branch deleted by hand, say).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitrun.layout import RUNS_DIR, is_run_id
from gitrun.store.branches import RunBranch, run_branches
from gitrun.store.local import local_runs_under


@dataclass(frozen=True)
class Pieces:
    run: str
    run_dir: bool  # .gitrun/runs/<run>/ is in the work tree
    branch: RunBranch | None
    local: bool  # .git/gitrun/<run>/ exists


def run_dirs(repo: Path) -> list[str]:
    """Every directory of ``.gitrun/runs/`` named as a run, packet or not."""
    try:
        entries = os.scandir(repo / RUNS_DIR)
    except OSError:
        return []
    with entries:
        return sorted(e.name for e in entries if is_run_id(e.name) and e.is_dir())


def run_pieces(repo: Path, git_dir: Path) -> dict[str, Pieces]:
    """Each run that has any piece here, by id (sorted)."""
    dirs = set(run_dirs(repo))
    branches = run_branches(repo)
    local = set(local_runs_under(git_dir))
    found = {}
    for run_id in sorted(dirs | branches.keys() | local):
        found[run_id] = Pieces(
            run_id,
            run_id in dirs,
            branches.get(run_id),
            run_id in local,
        )
    return found


def shown_path(repo: Path, path: Path) -> str:
    """``path`` relative to the work tree when it is inside it (``.git/gitrun/r``)."""
    try:
        return path.relative_to(repo).as_posix()
    except ValueError:
        return str(path)
