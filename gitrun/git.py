"""The one door to git. Small named functions over git plumbing."""

from __future__ import annotations

from pathlib import Path

from gitrun.errors import CommandError, GitrunError
from gitrun.proc import run_cmd


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """Run ``git -C repo args...`` and return its stdout."""
    return run_cmd(["git", "-C", str(repo), *args], input=input).stdout


def find_repo_root(start: Path | None = None) -> Path:
    """The top of the work tree containing ``start`` (default: the current directory)."""
    where = (start or Path.cwd()).resolve()
    try:
        out = git(where, "rev-parse", "--show-toplevel")
    except CommandError as exc:
        raise GitrunError(
            f"{where} is not inside a git repository; run `git init` first "
            "or change to your repository"
        ) from exc
    return Path(out.decode().strip())


def git_dir(repo: Path) -> Path:
    """The repository's .git directory (absolute; handles worktrees)."""
    out = git(repo, "rev-parse", "--absolute-git-dir")
    return Path(out.decode().strip())


def changed_paths(repo: Path) -> list[str]:
    """Paths with uncommitted changes or untracked, relative to the root.

    One ``git status -z`` call; renames list both the old and the new path.
    Untracked directories are listed file by file.
    """
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    paths: list[str] = []
    for entry in out.decode(errors="surrogateescape").split("\0"):
        if len(entry) > 3:
            paths.append(entry[3:])
    return paths
