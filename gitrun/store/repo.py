"""Finding the repository that holds a directory, without a git process where
a walk up the directories can (the write hooks run on every write)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Mapping

# Git's own discovery is used instead of the walk when one of these changes it.
_DISCOVERY_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_COMMON_DIR",
)


class Repo:
    """A work tree's top directory and its git directory (both real paths)."""

    __slots__ = ("git_dir", "root")

    def __init__(self, root: str, git_dir: str) -> None:
        self.root = root
        self.git_dir = git_dir

    def __repr__(self) -> str:
        return f"Repo({self.root!r}, {self.git_dir!r})"


def find_repo(cwd: str | None, environ: Mapping[str, str] | None = None) -> Repo | None:
    """The repository whose work tree holds ``cwd`` (default: the current
    directory), as ``git rev-parse --show-toplevel --absolute-git-dir`` finds
    it; None outside every work tree. Walks up looking for ``.git`` (a
    directory, or a worktree's or submodule's ``gitdir:`` file) and asks git
    itself only when the environment changes discovery or a bare repository
    is on the way."""
    env = os.environ if environ is None else environ
    try:
        start = os.path.realpath(cwd or os.getcwd())
    except OSError:
        return None
    if not os.path.isdir(start):
        return None  # git cannot even start there
    if any(var in env for var in _DISCOVERY_VARS):
        return _ask_git(start, env)
    here = start
    while True:
        dot = os.path.join(here, ".git")
        if os.path.isdir(dot):
            return Repo(here, os.path.realpath(dot)) if _is_git_dir(dot) else _ask_git(start, env)
        if os.path.isfile(dot):
            git_dir = _gitdir_file(here, dot)
            return Repo(here, git_dir) if git_dir else _ask_git(start, env)
        if _is_git_dir(here):
            return _ask_git(start, env)  # inside a git directory (or a bare repository)
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def common_git_dir(git_dir: str) -> str:
    """The git directory every work tree of the repository shares: a linked
    work tree's git directory names it in its ``commondir`` file (one read,
    no git process); any other git directory is its own."""
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as handle:
            line = handle.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        return git_dir
    return os.path.realpath(os.path.join(git_dir, line)) if line else git_dir


def _is_git_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "HEAD")) and (
        os.path.isdir(os.path.join(path, "objects"))
        or os.path.isfile(os.path.join(path, "commondir"))
    )


def _gitdir_file(root: str, dot: str) -> str | None:
    try:
        with open(dot, encoding="utf-8") as handle:
            line = handle.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir: "):
        return None
    git_dir = os.path.realpath(os.path.join(root, line[len("gitdir: ") :]))
    return git_dir if _is_git_dir(git_dir) else None


def _ask_git(start: str, env: Mapping[str, str]) -> Repo | None:
    # One path a call: git prints each on a line of its own, and a path may
    # hold a newline (or end in one), so two answers in one would be ambiguous.
    root = _ask_path(start, env, "--show-toplevel")
    git_dir = _ask_path(start, env, "--absolute-git-dir") if root else None
    if not root or not git_dir:
        return None
    return Repo(os.path.realpath(root), os.path.realpath(git_dir))


def _ask_path(start: str, env: Mapping[str, str], option: str) -> str | None:
    """The one path ``git rev-parse <option>`` prints, less its last newline."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "rev-parse", option], cwd=start, env=dict(env), capture_output=True, check=False
        )
    except OSError:
        return None
    if proc.returncode != 0 or not proc.stdout.endswith(b"\n"):
        return None
    return proc.stdout[:-1].decode("utf-8", "surrogateescape") or None
