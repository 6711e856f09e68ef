"""Where owned paths land on disk: symlinks, directories and ignored files.

The overlap proof reasons about path *strings*; these checks make sure the
strings mean what they say on this disk and in the commit the run forks
from:

- No owned, output or protected path passes through a symlink, or is one.
  With a committed ``alias -> .``, ``alias/out/x.json`` and ``out/x.json`` are
  two strings and one file: two tasks would write it, and ``alias/TODO.md``
  would write a protected file. Symlinks are taken from the base commit (mode
  120000), from the work tree's changes, from the untracked files git
  ignores, and from the chain of every owned path's literal directories.
- No output names a directory, or lies beneath a file: quarantining a
  "directory output" once moved a user's whole tree aside.
- No output is ignored by git: gitrun never commits an ignored path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gitrun.definition.load import RunDef
from gitrun.ownership.claims import OWNS, Claim, find_meetings
from gitrun.ownership.patterns import Pattern, escape, parse
from gitrun.problem import Problem
from gitrun.store import git
from gitrun.store.branches import find_tip, landed
from gitrun.store.history import find_base

SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"  # a submodule: a commit of another repository
_LINK = "\0symlink"  # the task of a claim standing for a symlink
_PROTECTED = "\0protected"  # the task of a claim standing for a protected entry


@dataclass(frozen=True)
class BaseTree:
    """What the commit a run forks from holds: its symlinks, directories and
    files, and its submodules (gitlinks: among the files, as git lists them)."""

    symlinks: frozenset[str]
    directories: frozenset[str]
    files: frozenset[str]
    submodules: frozenset[str] = frozenset()

    @classmethod
    def of(cls, repo: Path, commit: str | None) -> BaseTree:
        if commit is None:
            return cls(frozenset(), frozenset(), frozenset())
        listing = git.ls_tree(repo, commit)
        directories: set[str] = set()
        for path in listing:
            parts = path.split("/")
            directories.update("/".join(parts[:n]) for n in range(1, len(parts)))
        links = frozenset(p for p, (mode, _) in listing.items() if mode == SYMLINK_MODE)
        gitlinks = frozenset(p for p, (mode, _) in listing.items() if mode == GITLINK_MODE)
        return cls(links, frozenset(directories), frozenset(listing), gitlinks)


def base_commit(run: RunDef) -> str | None:
    """The run's fork point once it started, else HEAD (where start will fork,
    as it will for a run landed in HEAD, which starts again)."""
    head = git.rev_parse(run.repo, "HEAD")
    branch = find_tip(run.repo, run.id)
    if branch and not (head and landed(run.repo, run.id, branch.tip, git.git_dir(run.repo))):
        found = find_base(run.repo, run.id, branch.ref)
        if found:
            return found
    return head


def symlink_problems(
    run: RunDef,
    owned: list[Claim],
    protected: list[tuple[str, Pattern]],
    base: BaseTree,
    changed: Iterable[str],
    outputs: set[str],
) -> list[Problem]:
    """Owned and protected paths that are, or pass through, a symlink.

    ``protected`` holds the packet's protected entries, parsed. A new
    symlink exactly at an output path is left out: that is an invalid output
    (quarantined after an attempt; a dirty owned path before the run), and
    it must not stop ``resume``.
    """
    links = {p for p in [*changed, *git.ignored_entries(run.repo)] if _is_link(run.repo / p)}
    modes: dict[str, int | None] = {}
    for claim in owned:
        links.update(_links_on_chain(run.repo, claim.pattern.literal_prefix, modes))
    links = {p for p in links if p not in outputs} | base.symlinks
    if not links:
        return []
    claims = list(owned)
    claims += [Claim(_PROTECTED, text, pattern, OWNS) for text, pattern in protected]
    claims += [Claim(_LINK, link, parse(escape(link)), OWNS) for link in sorted(links)]

    def conflicts(a: Claim, b: Claim) -> bool:
        return (a.task == _LINK) != (b.task == _LINK)

    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for meeting in find_meetings(claims, conflicts):
        link, claim = meeting.first, meeting.second
        if claim.task == _LINK:
            link, claim = claim, link
        if (claim.task, claim.text) in seen:
            continue
        seen.add((claim.task, claim.text))
        where = _describe_link(run.repo, link.text, base)
        how = "is" if meeting.witness == link.text else "passes through"
        if claim.task == _PROTECTED:
            out.append(
                Problem(
                    "symlink",
                    f"{run.packet_path}: [ownership] protected {claim.text!r} {how} {where}, so "
                    "the file it protects has another name; protect the real path instead",
                    path=link.text,
                )
            )
            continue
        out.append(
            Problem(
                "symlink",
                f"{run.tasks_path}: task {claim.task} owns {claim.text!r}, which {how} {where} "
                f"(at {meeting.witness}); a path written through a symlink is another path's "
                "file — own the real path, or remove the symlink",
                (claim.task,),
                meeting.witness,
            )
        )
    return out


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _links_on_chain(repo: Path, names: tuple[str, ...], seen: dict[str, int | None]) -> list[str]:
    """Symlinks among the literal directories of an owned path (ignored ones too);
    ``seen`` caches each directory's mode across claims."""
    root = str(repo)
    rel = ""
    for name in names:
        rel = f"{rel}/{name}" if rel else name
        if rel not in seen:
            try:
                seen[rel] = os.lstat(os.path.join(root, rel)).st_mode
            except OSError:
                seen[rel] = None
        mode = seen[rel]
        if mode is None:
            break
        if stat.S_ISLNK(mode):
            return [rel]
        if not stat.S_ISDIR(mode):
            break
    return []


def _describe_link(repo: Path, link: str, base: BaseTree) -> str:
    try:
        target = os.readlink(repo / link)
    except OSError:
        return f"the symlink {link} (committed)" if link in base.symlinks else f"the symlink {link}"
    resolved = (repo / link).resolve()
    outside = "" if resolved.is_relative_to(repo.resolve()) else ", outside the repository"
    return f"the symlink {link} -> {target}{outside}"


def output_place_problems(
    run: RunDef, outputs: list[tuple[str, str]], base: BaseTree
) -> list[Problem]:
    """Outputs (task, path) that name a directory or lie beneath a file."""
    out: list[Problem] = []
    root = str(run.repo)
    modes: dict[str, int | None] = {}  # parents are shared by many outputs: one lstat each

    def mode_of(rel: str) -> int | None:
        if rel not in modes:
            try:
                modes[rel] = os.lstat(os.path.join(root, rel)).st_mode
            except OSError:
                modes[rel] = None
        return modes[rel]

    @cache  # outputs share their directories: each is decided once
    def file_at(directory: str) -> str | None:
        """The first of ``directory`` and the directories above it, top first,
        that is a file (in the base commit or on disk), or None."""
        up = directory.rpartition("/")[0]
        found = file_at(up) if up else None
        if found is not None:
            return found
        in_base = directory in base.files and directory not in base.symlinks
        mode = mode_of(directory)
        return directory if in_base or (mode is not None and stat.S_ISREG(mode)) else None

    for task, path in outputs:
        parent = path.rpartition("/")[0]
        module = _submodule_of(path, base) if base.submodules else None
        if module is not None:
            where = (
                f"is the submodule {module}"
                if module == path
                else f"lies inside the submodule {module}"
            )
            out.append(
                Problem(
                    "output-in-submodule",
                    f"{run.tasks_path}: task {task}: output {path} {where}, another repository, "
                    "where gitrun commits nothing; choose a path outside it (or run gitrun in "
                    "the submodule's own repository)",
                    (task,),
                    path,
                )
            )
            continue
        # Nothing lies beneath a directory that is missing (the common case
        # before a run: 100,000 outputs in an out/ not made yet): no lstat each.
        mode = mode_of(path) if not parent or mode_of(parent) is not None else None
        if (mode is not None and stat.S_ISDIR(mode)) or path in base.directories:
            out.append(
                Problem(
                    "output-is-directory",
                    f"{run.tasks_path}: task {task}: output {path} is a directory; an output is "
                    "one file the task writes — name a file inside it (and own the directory "
                    "in owns if the task writes more)",
                    (task,),
                    path,
                )
            )
            continue
        above = file_at(parent) if parent else None
        if above is not None:
            out.append(
                Problem(
                    "output-under-file",
                    f"{run.tasks_path}: task {task}: output {path} lies beneath {above}, "
                    "which is a file; choose a path in a directory",
                    (task,),
                    path,
                )
            )
    return out


def _submodule_of(path: str, base: BaseTree) -> str | None:
    """The submodule ``path`` is, or lies inside, in the base commit."""
    parts = path.split("/")
    return next(
        (
            p
            for p in ("/".join(parts[:n]) for n in range(1, len(parts) + 1))
            if p in base.submodules
        ),
        None,
    )


def ignored_problems(run: RunDef, outputs: list[tuple[str, str]]) -> list[Problem]:
    """Outputs git ignores (gitrun never commits an ignored path)."""
    if not outputs:
        return []
    rules = git.ignored_by(run.repo, sorted({path for _, path in outputs}))
    out: list[Problem] = []
    for task, path in outputs:
        rule = rules.get(path)
        if rule is not None:
            out.append(
                Problem(
                    "ignored-output",
                    f"{run.tasks_path}: task {task}: output {path} is ignored by git ({rule}); "
                    "gitrun never commits an ignored path — change the output's path or stop "
                    "ignoring it",
                    (task,),
                    path,
                )
            )
    return out


def refused_name_problems(run: RunDef, outputs: list[tuple[str, str]]) -> list[Problem]:
    """Outputs git itself refuses to record (asked of git, not guessed)."""
    refused = git.refused_paths(run.repo, sorted({path for _, path in outputs}))
    return [
        Problem(
            "reserved-path",
            f"{run.tasks_path}: task {task}: output {path!r} is a name git refuses to record "
            "(it reads as .git on some file system); rename it",
            (task,),
            path,
        )
        for task, path in outputs
        if path in refused
    ]


def file_dir_clash_problems(run: RunDef, outputs: list[tuple[str, str]]) -> list[Problem]:
    """An output that is a directory of another output: both cannot exist."""
    files = {path: task for task, path in outputs}
    out: list[Problem] = []

    @cache  # outputs share their directories: each is decided once
    def output_at(directory: str) -> str | None:
        """The first of ``directory`` and those above it, top first, that is an output."""
        up = directory.rpartition("/")[0]
        found = output_at(up) if up else None
        return found if found is not None else directory if directory in files else None

    for task, path in outputs:
        up = path.rpartition("/")[0]
        parent = output_at(up) if up else None
        if parent is not None:
            out.append(
                Problem(
                    "output-under-file",
                    f"{run.tasks_path}: task {task}: output {path} lies beneath {parent}, "
                    f"which task {files[parent]} writes as a file; both cannot exist — "
                    "rename one of them",
                    (files[parent], task),
                    path,
                )
            )
    return out
