"""A run's three pieces, and the runs that lack some: ``gitrun ls --all``
lists those leftovers, ``gitrun rm`` removes what is there.

A run is its run directory ``.gitrun/runs/<run>/`` in the work tree, its
branch ``gitrun/<run>`` and its machine-local state ``.git/gitrun/<run>/``.
``gitrun ls`` lists the runs that have a packet; a branch whose run
directory is gone, or local state whose run and branch are, is a leftover.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.engine.status import BRANCH_GONE, DRIVING, LANDED, NOT_STARTED, STARTED
from gitrun.layout import PACKET_NAME, RUNS_DIR, is_run_id
from gitrun.store.branches import Landed, RunBranch, landed, run_branches
from gitrun.store.local import LocalPaths, local_runs_under
from gitrun.store.lock import is_locked


@dataclass(frozen=True)
class Pieces:
    run: str
    run_dir: bool  # .gitrun/runs/<run>/ is in the work tree
    defined: bool  # ... and holds a packet.toml
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
            os.path.isfile(repo / RUNS_DIR / run_id / PACKET_NAME),
            branches.get(run_id),
            run_id in local,
        )
    return found


@dataclass(frozen=True)
class Leftover:
    """A run without a packet in the work tree: what is left of it."""

    pieces: Pieces
    landed: Landed | None
    driving: bool

    @property
    def state(self) -> str:
        if self.driving:
            return DRIVING
        if self.landed:
            return LANDED
        if self.pieces.branch:
            return STARTED
        return BRANCH_GONE if self.pieces.local else NOT_STARTED

    def to_json(self) -> dict[str, Any]:
        branch = self.pieces.branch
        return {
            "run": self.pieces.run,
            "state": self.state,
            "landed_in": self.landed.commit if self.landed else None,
            "landed_branch": self.landed.branch if self.landed else None,
            "branch": branch.tip if branch else None,
            "run_dir": self.pieces.run_dir,
            "local_state": self.pieces.local,
        }

    def describe(self, local_root: str) -> str:
        """One line: the state, what is left, and the command that removes it."""
        run, pieces = self.pieces.run, self.pieces
        left = []
        if pieces.run_dir:
            left.append(f"{RUNS_DIR}/{run}/ without a {PACKET_NAME}")
        if pieces.branch:
            left.append(f"branch gitrun/{run}")
        if pieces.local:
            left.append(f"local state {local_root}/")
        state = self.landed.describe() if self.landed else self.state
        line = f"{run}: {state}; left: {', '.join(left)}; `gitrun rm {run}` removes "
        line += "it" if len(left) == 1 else "them"
        if pieces.branch and not self.landed and not pieces.run_dir:
            line += f" (`gitrun resume {run}` restores the run directory from the branch)"
        return line


def leftovers(repo: Path, git_dir: Path, pieces: dict[str, Pieces]) -> list[Leftover]:
    """The runs of ``pieces`` without a packet, each with its landing looked up."""
    found = []
    for run_id, piece in pieces.items():
        if piece.defined:
            continue
        tip = piece.branch.tip if piece.branch else None
        found.append(
            Leftover(
                piece,
                landed(repo, run_id, tip, git_dir) if tip else None,
                piece.local and is_locked(LocalPaths.under(git_dir, run_id)),
            )
        )
    return found


def shown_path(repo: Path, path: Path) -> str:
    """``path`` relative to the work tree when it is inside it (``.git/gitrun/r``)."""
    try:
        return path.relative_to(repo).as_posix()
    except ValueError:
        return str(path)
