"""Moving a run's branch by compare-and-swap, and naming what stands in its way.

A ``git update-ref`` with an expected old value fails for two kinds of
reason. It lost a race (the ref moved, appeared or went): the caller reads
it again and builds anew. Or something blocks the ref itself: a ``.lock``
file beside it (a live git process changing it, or a dead one's leftover), or
another branch where its name must go (a branch ``gitrun`` is a file where
``refs/heads/gitrun/`` must be a directory; a branch ``gitrun/<run>/x`` is a
directory where ``gitrun/<run>`` must be a file). Reading again never
helps then, and the user must be told which file or branch, and the fix.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from gitrun.errors import CommandError, GitrunError
from gitrun.store import git

# git's words for a compare-and-swap that lost: the ref is elsewhere, already
# exists, or is gone.
_LOST_RACE = ("but expected", "reference already exists", "unable to resolve reference")
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")
_IN_THE_WAY = re.compile(r"'(refs/[^']+)' exists; cannot create '(refs/[^']+)'")


class RefBlocked(GitrunError):
    """A ref git will not move whatever is read again: ``path`` is the lock
    file or the ref that blocks it."""

    def __init__(self, message: str, path: str, locked: bool) -> None:
        super().__init__(message)
        self.path = path
        self.locked = locked


def update_ref(repo: Path, ref: str, new: str, old: str | None) -> bool:
    """Compare-and-swap ``ref`` from ``old`` (None: must not exist) to ``new``:
    False when it lost a race; :class:`RefBlocked` when a lock file or another
    branch blocks the ref."""
    expected = old or ""  # empty: the ref must not exist yet
    try:
        git.write_git(repo, "update-ref", ref, new, expected)
    except CommandError as exc:
        if any(words in exc.output for words in _LOST_RACE):
            return False
        blocked = _blocked_by(ref, exc.output)
        if blocked is None:
            raise
        raise blocked from None
    return True


def ref_obstacles(repo: Path, ref: str) -> list[RefBlocked]:
    """What would block ``ref`` now, found without writing: a branch where
    its name must go, and a lock file beside it (two git processes)."""
    names = git.git(repo, "for-each-ref", "--format=%(refname)", _parent(ref), ref)
    found = [
        _in_the_way(ref, other)
        for other in names.decode(errors="surrogateescape").split()
        if other == _parent(ref) or other.startswith(ref + "/")
    ]
    lock = common_dir(repo) / f"{ref}.lock"
    if lock.exists():
        found.append(_locked(ref, str(lock)))
    return found


def common_dir(repo: Path) -> Path:
    """The git directory that holds the refs (a linked worktree's is the main one's)."""
    return git.one_path(git.git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def _parent(ref: str) -> str:
    return ref.rsplit("/", 1)[0]


def _blocked_by(ref: str, output: str) -> RefBlocked | None:
    locked = _LOCKED.search(output)
    if locked:
        return _locked(ref, locked.group(1))
    clash = _IN_THE_WAY.search(output)
    if clash:
        return _in_the_way(ref, clash.group(1))
    return None


def _locked(ref: str, path: str) -> RefBlocked:
    try:
        age = f"{max(0, time.time() - Path(path).stat().st_mtime):.0f}s old"
    except OSError:
        age = "gone again"  # a live git process held it, and let go
    branch = ref.removeprefix("refs/heads/")
    return RefBlocked(
        f"branch {branch} is locked: {path} exists ({age}), so git takes another process to "
        "be changing it; remove it if no git process is running, then try again",
        path,
        locked=True,
    )


def _in_the_way(ref: str, other: str) -> RefBlocked:
    branch, name = ref.removeprefix("refs/heads/"), other.removeprefix("refs/heads/")
    return RefBlocked(
        f"branch {name} is in the way of branch {branch} (git cannot keep both: one name "
        f"is a folder of the other); rename it (`git branch -m {name} NEW-NAME`), then try again",
        other,
        locked=False,
    )
