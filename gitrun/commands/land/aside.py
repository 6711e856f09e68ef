"""Copies of outputs that an earlier gitrun's ``land`` moved aside
(``land-aside/``) to make room for ``git merge``: put back, or dropped when
git holds their bytes; only a copy that differs from its place and from
every commit is kept, and said so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from gitrun.commands.land.look import Where, shown_paths
from gitrun.definition.outputs import blob_id, blob_on_disk, linked_parent
from gitrun.errors import GitrunError
from gitrun.layout import branch_ref
from gitrun.store import git
from gitrun.store.local import LocalPaths


def restore_aside(repo: Path, run_id: str, then: str) -> None:
    """Before a run's local state goes (``gitrun rm``): refuse while a landing
    of it stopped half way (its journal is there), and settle the copies an
    earlier land set aside; one kept is a sentence, ending with ``then``."""
    local = LocalPaths.of(repo, run_id)
    if os.path.lexists(local.land_journal):
        raise GitrunError(
            f"a `gitrun land {run_id}` stopped half way ({local.land_journal} records it); "
            f"run `gitrun land {run_id}` to finish it, then {then}"
        )
    tip = git.rev_parse(repo, branch_ref(run_id)) or "HEAD"
    notes = settle_aside(Where.of(repo), local.land_aside, tip)
    if notes:
        raise GitrunError(f"{notes[0]}; then {then}")


def settle_aside(where: Where, aside_dir: Path, tip: str) -> list[str]:
    """Copies an earlier gitrun's ``land`` moved out of ``git merge``'s way
    (untracked files identical to the run's outputs): each goes back to its
    place when that is empty, and is dropped when its place holds the same
    bytes or git holds them (the run's branch or the current one has them
    at that path). Only a copy whose bytes exist nowhere else and whose
    place holds something different is kept; the note says which."""
    if not aside_dir.is_dir():
        return []
    repo = where.repo
    copies = sorted(p for p in aside_dir.rglob("*") if p.is_file() or p.is_symlink())
    rels = [c.relative_to(aside_dir).as_posix() for c in copies]
    in_git: dict[str, set[str]] = {rel: set() for rel in rels}
    for commit in (tip, "HEAD"):
        for start in range(0, len(rels), 500):  # command lines have limits
            for rel, (_mode, sha) in git.ls_tree(repo, commit, rels[start : start + 500]).items():
                in_git.setdefault(rel, set()).add(sha)
    kept: list[str] = []
    for source, rel in zip(copies, rels, strict=True):
        target = repo / rel
        if linked_parent(repo, rel) is None and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
                continue
        copy = _blob_of(source, where.fmt)
        if copy is not None and (copy == _blob_of(target, where.fmt) or copy in in_git[rel]):
            with contextlib.suppress(OSError):
                source.unlink()
                continue
        kept.append(rel)
    if not kept:
        shutil.rmtree(aside_dir, ignore_errors=True)
        return []
    one = len(kept) == 1
    return [
        f"kept {shown_paths(kept)} in {aside_dir}: an earlier `gitrun land` set "
        f"{'it' if one else 'them'} aside, and {'it differs' if one else 'they differ'} from "
        f"what stands in {'its' if one else 'their'} place now and from every commit of the run "
        "and of this branch; compare and keep what you want"
    ]


def _blob_of(path: Path, fmt: str) -> str | None:
    try:
        if path.is_symlink():
            return blob_id(os.fsencode(os.readlink(path)), fmt)
    except OSError:
        return None
    return blob_on_disk(path, fmt)
