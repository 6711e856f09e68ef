"""The paths an MCP tool takes, confined as a worker's writes are.

A tool's caller is a model that reads task data, so a path it passes is
untrusted input: joined to the repository as it came, ``report`` replaced
``.git/config``, a file outside the repository and a tracked file with an
uncommitted edit. A path is taken only when it is canonical (the spelling
a run definition must use, :mod:`gitrun.ownership.paths`: relative, no
``..``, no name that is or aliases ``.git``), lies outside git's and
gitrun's own files (the names ``check`` reserves), is reached without a
symlink on the way (:func:`gitrun.definition.outputs.linked_parent`),
names nothing git tracks, and names no existing file unless it is the
tool's own earlier product. Anything else is one sentence naming the path
and the fix, and nothing is written. The write goes through directories
opened one name at a time without following a link and never replaces a
file that appeared since the check (:func:`gitrun.workers.scratch.write_beneath`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gitrun.definition.outputs import linked_parent
from gitrun.errors import GitrunError
from gitrun.ownership.paths import canonical_problem
from gitrun.proof.check import RESERVED
from gitrun.store.git import tracked_paths
from gitrun.store.regular import kind_of, read_regular
from gitrun.workers.scratch import write_beneath

_SAID = {
    "outside-repo": "lies outside the repository",
    "reserved-path": "is inside .git/, git's own files",
}
MARK_BYTES = 4096  # read from an existing file to tell whether it is the tool's own


@dataclass(frozen=True)
class Target:
    """A path a tool may write: canonical, and whether its own earlier file is there."""

    path: str
    replaces: bool


def confined_target(
    repo: Path, text: str, *, own: str, is_own: Callable[[bytes], bool], fix: str
) -> Target:
    """The place ``text`` names, when a tool may write there; else a
    :class:`GitrunError` whose sentence names ``text`` and ends with ``fix``.
    ``own`` names what the tool writes ("a report of run 'r'"), and
    ``is_own`` tells one from an existing file's first bytes."""

    def refused(why: str) -> GitrunError:
        return GitrunError(f"{text!r}: {why}; {fix}")

    wrong = canonical_problem(text, is_file=True)
    if wrong is not None:  # its own fix speaks of a run definition: the reason alone
        raise refused(_SAID.get(wrong.code, wrong.reason.split("; ")[0]))
    top = text.split("/", 1)[0]
    reserved = next((name for name in RESERVED if name.casefold() == top.casefold()), None)
    if reserved is not None:
        raise refused(f"is inside {reserved}/, git's or gitrun's own files")
    link = linked_parent(repo, text)
    if link is not None:
        raise refused(f"passes through {link}, a symbolic link")
    folder = text.rpartition("/")[0]
    if folder and not (repo / folder).is_dir():
        raise refused(f"{folder} is not a folder of the repository")
    if tracked_paths(repo, [text]):
        raise refused("is a file git tracks")
    try:
        mode = os.lstat(repo / text).st_mode
    except FileNotFoundError:
        return Target(text, replaces=False)
    except OSError as exc:
        raise refused(f"cannot be examined ({exc.strerror or exc})") from exc
    if stat.S_ISLNK(mode):
        raise refused("is a symbolic link")
    if not stat.S_ISREG(mode):
        raise refused(f"is {kind_of(repo / text) or 'not a regular file'}")
    try:
        head = read_regular(repo / text, follow=False, limit=MARK_BYTES)
    except OSError as exc:
        raise refused(f"cannot be read ({exc.strerror or exc})") from exc
    if not is_own(head):
        raise refused(f"exists and is not {own}")
    return Target(text, replaces=True)


def write_target(repo: Path, target: Target, data: bytes, fix: str) -> Path:
    """Write ``data`` at ``target`` whole; the path written."""
    try:
        write_beneath(repo, target.path, data, replace=target.replaces)
    except FileExistsError as exc:
        raise GitrunError(
            f"{target.path!r}: a file appeared there while gitrun wrote; {fix}"
        ) from exc
    except OSError as exc:
        raise GitrunError(
            f"{target.path!r}: cannot be written ({exc.strerror or exc}); {fix}"
        ) from exc
    return repo / target.path
