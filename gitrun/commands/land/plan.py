"""The plan for the work tree: what each changed path holds now, and so what
the landing writes, re-modes or deletes there, or the one sentence saying
what is in its way.

One ``git status`` (contents, not just stat data; no lock taken) says which
tracked paths differ from HEAD; each changed path is then read only as far
as it must be: a file whose size is none of the run's is not hashed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.commands.land.look import SYMLINK, Change, Entry, Where, shown_paths
from gitrun.commands.land.sparse import sparse_cone
from gitrun.definition.outputs import blob_id, blob_on_disk, linked_parent
from gitrun.errors import GitrunError
from gitrun.store import git

GITLINK = "160000"


@dataclass(frozen=True)
class Tracked:
    """What ``git status`` says of a tracked path that is not as HEAD has it."""

    index: Entry | None  # None: not in the index
    clean: bool  # the work tree matches the index (through git's own filters)
    unmerged: bool = False


def _status(repo: Path) -> dict[str, Tracked]:
    """Tracked paths whose index or work tree differs from HEAD, with their
    index entries: one ``git status`` (which compares contents, not just
    stat data), taking no lock."""
    out = git.git(
        repo,
        "--no-optional-locks",
        "status",
        "--porcelain=v2",
        "-z",
        "--untracked-files=no",
        "--no-renames",
        "--ignore-submodules=none",
    )
    found: dict[str, Tracked] = {}
    for line in out.decode(errors="surrogateescape").split("\0"):
        if line.startswith("1 "):
            _kind, xy, _sub, _m_head, m_index, _m_tree, _h_head, h_index, path = line.split(" ", 8)
            entry = None if m_index == "000000" else (m_index, h_index)
            found[path] = Tracked(entry, xy[1] == ".")
        elif line.startswith("u "):
            path = line.split(" ", 10)[10]
            found[path] = Tracked(None, False, unmerged=True)
    return found


def _on_disk(where: Where, path: str, wanted: set[str]) -> str | None:
    """The blob id of what stands at ``path`` when it may be one of ``wanted``
    (read only when its size is one of theirs); None when nothing does,
    ``"other"`` for anything else (a directory, another content)."""
    full = f"{where.repo}/{path}"
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return None
    except OSError:
        return "other"
    if stat.S_ISLNK(st.st_mode):
        try:
            found = blob_id(os.fsencode(os.readlink(full)), where.fmt)
        except OSError:
            return "other"
        return found if found in wanted else "other"
    if not stat.S_ISREG(st.st_mode):
        return "other"
    if st.st_size not in {where.sizes.get(sha) for sha in wanted}:
        return "other"
    found_id = blob_on_disk(full, where.fmt)
    return found_id if found_id in wanted else "other"


@dataclass
class Plan:
    """What the work tree needs for the landing: files to write (and modes
    to set), paths to delete, and paths a sparse checkout keeps out (their
    index entries get the skip-worktree bit, as ``git merge`` gives them)."""

    write: list[Change] = field(default_factory=list)
    chmod: list[Change] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)


@dataclass
class InTheWay:
    staged: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # a directory, a symlink on the way
    unmerged: list[str] = field(default_factory=list)


def _look(
    where: Where, changes: list[Change], head: dict[str, Entry | None]
) -> tuple[Plan, InTheWay]:
    """What each changed path holds now, and so what the landing does to it
    or why it cannot. ``head`` maps each path to HEAD's entry (the old one
    before the branch moved, the new one after)."""
    tracked = _status(where.repo)
    cone = sparse_cone(where.repo)
    shas = {e[1] for c in changes for e in (c.old, c.new) if e is not None and e[0] != GITLINK}
    where.sizes.update(git.blob_sizes(where.repo, sorted(shas - where.sizes.keys())))
    plan, way = Plan(), InTheWay()
    for change in changes:
        path = change.path
        said = tracked.get(path)
        if said is not None and said.unmerged:
            way.unmerged.append(path)
            continue
        index = said.index if said is not None else head.get(path)
        clean = said.clean if said is not None else True
        if index not in (change.old, change.new):
            way.staged.append(path)
            continue
        wanted = {e[1] for e in (change.old, change.new) if e is not None}
        if change.new is None:  # the landing deletes the path
            if index is None:
                continue  # only an untracked file of the user's stands there: left alone
            disk = _on_disk(where, path, wanted)
            if disk is None:
                continue
            if (clean and index == change.old) or (change.old and disk == change.old[1]):
                plan.delete.append(path)
            else:
                way.edited.append(path)
            continue
        if change.new[0] == GITLINK:
            continue  # a submodule's commit: its checkout is the user's business
        if (
            cone is not None
            and cone.is_outside(path)
            and not os.path.lexists(f"{where.repo}/{path}")
        ):
            plan.skip.append(path)  # outside the sparse checkout: committed, not written
            continue
        if linked_parent(where.repo, path) is not None or not _parents_are_directories(where, path):
            way.blocked.append(path)
            continue
        disk = _on_disk(where, path, wanted)
        if disk == change.new[1] or (clean and index == change.new and disk is not None):
            if disk == change.new[1] and not _mode_matches(where, path, change.new[0]):
                plan.chmod.append(change)
            continue  # the run's content is there already
        if disk is None or (change.old is not None and disk == change.old[1]):
            plan.write.append(change)
        elif change.old is not None and index == change.old and clean and index is not None:
            plan.write.append(change)  # the old content, as git's filters see it
        elif _is_directory(where, path):
            way.blocked.append(path)
        elif index is None:
            way.untracked.append(path)
        else:
            way.edited.append(path)
    return plan, way


def _parents_are_directories(where: Where, path: str) -> bool:
    """No file stands where the path needs a directory."""
    current = str(where.repo)
    for name in path.split("/")[:-1]:
        current = f"{current}/{name}"
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True
        except OSError:
            return False
    return True


def _is_directory(where: Where, path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(f"{where.repo}/{path}").st_mode)
    except OSError:
        return False


def _mode_matches(where: Where, path: str, mode: str) -> bool:
    if mode == SYMLINK:
        return True
    try:
        executable = bool(os.lstat(f"{where.repo}/{path}").st_mode & stat.S_IXUSR)
    except OSError:
        return False
    return executable == (mode == "100755")


def refuse_what_is_in_the_way(
    where: Where, changes: list[Change], run_id: str, finishing: bool = False
) -> Plan:
    """The plan for the work tree, or one sentence saying what stops the
    landing (before anything changed; when ``finishing``, what a user
    changed since a ``land`` stopped half way)."""
    # HEAD's entries: the new ones once the branch holds the landing.
    head = {c.path: c.new if finishing else c.old for c in changes}
    plan, way = _look(where, changes, head)
    then = (
        f"then `gitrun land {run_id}` finishes the landing a stopped land had begun"
        if finishing
        else "then land again"
    )
    if way.unmerged:
        raise GitrunError(
            f"{shown_paths(way.unmerged)} {_is(way.unmerged)} unmerged in the index; finish or "
            f"abort that merge first, {then}"
        )
    if way.staged:
        raise GitrunError(
            f"{shown_paths(way.staged)} {_has(way.staged)} staged changes the landing of run "
            f"{run_id!r} would overwrite; commit them or unstage them (`git restore --staged`), "
            f"{then}"
        )
    if way.edited:
        raise GitrunError(
            f"your uncommitted changes to {shown_paths(way.edited)} would be overwritten by the "
            f"landing of run {run_id!r}; commit or stash them, {then}"
        )
    if way.untracked:
        them = "it" if len(way.untracked) == 1 else "them"
        raise GitrunError(
            f"untracked {shown_paths(way.untracked)} would be overwritten by the run's different "
            f"version; move {them} away or delete {them}, {then}"
        )
    if way.blocked:
        raise GitrunError(
            f"{shown_paths(way.blocked)} cannot be written: a directory, a file or a symlink "
            f"stands where the run's file or its folder goes; move it away, {then}"
        )
    return plan


def _is(paths: list[str]) -> str:
    return "is" if len(paths) == 1 else "are"


def _has(paths: list[str]) -> str:
    return "has" if len(paths) == 1 else "have"
