"""The repository a command works in, and the runs a shell completes there."""

from __future__ import annotations

from pathlib import Path

from gitrun.layout import run_ids
from gitrun.store.git import find_repo_root
from gitrun.store.repo import find_repo


def repo_root(directory: Path | None) -> Path:
    """The top of the work tree holding ``directory`` (``-C DIR``; default:
    here); git's own error outside every work tree."""
    found = find_repo(str(directory) if directory else None)
    if found is not None:
        return Path(found.root)

    return find_repo_root(Path(directory) if directory else None)


def run_names(directory: str | None, incomplete: str) -> list[str]:
    """The runs defined in the work tree holding ``directory`` whose names
    begin with ``incomplete``; nothing outside a repository."""
    found = find_repo(str(directory) if directory else None)
    if found is None:
        return []
    return [run_id for run_id in run_ids(found.root) if run_id.startswith(incomplete)]
