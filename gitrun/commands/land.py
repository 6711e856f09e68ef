"""Bringing a run's results into the current branch: ``gitrun land``.

One merge commit (or one squashed commit). Untracked files that are
byte-identical to what the run committed do not block it (workers leave
exactly those behind); anything else git would overwrite stops it before any
change, and the user's work is left as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gitrun.definition.outputs import blob_on_disk
from gitrun.errors import CommandError, GitrunError
from gitrun.layout import branch_ref
from gitrun.processes.proc import run_cmd
from gitrun.store import git
from gitrun.store.local import LocalPaths


def land_run(repo: Path, run_id: str, squash: bool = False, partial: bool = False) -> str:
    """Merge (or squash) ``gitrun/<run>`` into the current branch; returns a summary.

    A run with tasks not done is refused, with its counts, unless ``partial``
    (then the summary says what it leaves out): landing half a run must be
    asked for, never happen by a word not said."""
    ref = branch_ref(run_id)
    tip = git.rev_parse(repo, ref)
    if tip is None:
        raise GitrunError(f"run {run_id!r} has no branch gitrun/{run_id}; nothing to land")
    head = git.rev_parse(repo, "HEAD")
    if head is None:
        raise GitrunError("the current branch has no commits; check out the branch to land into")
    if git.is_ancestor(repo, tip, head):
        return f"run {run_id!r} is already landed in the current branch"
    left_out = _not_done(repo, run_id, partial)
    if (
        squash
        and run_cmd(
            [*git.GIT, "-C", str(repo), "diff", "--cached", "--quiet"], check=False
        ).returncode
    ):
        raise GitrunError(
            "you have staged changes; commit or unstage them first (a squashed landing would "
            "take them into its commit)"
        )
    base = git.git(repo, "merge-base", head, tip).decode().strip()
    incoming = _incoming_files(repo, base, tip)
    fmt = git.object_format(repo)
    aside_dir = LocalPaths.of(repo, run_id).land_aside
    restore_aside(repo, aside_dir)  # what an earlier land, killed mid-way, had set aside
    identical: list[str] = []
    blocking: list[str] = []
    untracked = _untracked(repo, sorted(incoming))
    sizes = git.blob_sizes(repo, sorted({incoming[p] for p in untracked}))
    for path in untracked:
        try:
            # A file of another size is another file: never read (it may be huge).
            same = os.lstat(repo / path).st_size == sizes.get(incoming[path]) and (
                blob_on_disk(repo / path, fmt) == incoming[path]
            )
        except OSError:
            same = False
        (identical if same else blocking).append(path)
    if blocking:
        shown = ", ".join(blocking[:5]) + (
            f" and {len(blocking) - 5} more" if len(blocking) > 5 else ""
        )
        raise GitrunError(
            f"untracked {shown} would be overwritten by the run's different version; move "
            "them away or delete them, then land again"
        )
    _refuse_a_held_index(repo)
    _reset_run_copies(repo, head, incoming, fmt)
    _move_aside(repo, identical, aside_dir)
    message = f"gitrun: land run {run_id}\n\nGitrun-Run: {run_id}\n"
    try:
        if squash:
            git.git(repo, "merge", "--squash", ref)
            git.git(repo, "commit", "-q", "-m", message)
        else:
            git.git(repo, "merge", "--no-ff", "--no-edit", "-m", message, ref)
    except CommandError as exc:
        _undo_merge(repo, squash)
        restore_aside(repo, aside_dir)
        raise GitrunError(
            f"landing run {run_id!r} stopped and changed nothing: {_git_says(exc)}"
        ) from exc
    # Only now, with the merge committed, are the copies set aside redundant:
    # the same bytes are in the work tree again, tracked.
    shutil.rmtree(aside_dir, ignore_errors=True)
    how = "squashed into one commit" if squash else "merged"
    return f"run {run_id!r} {how} into the current branch ({len(incoming)} files){left_out}"


def _not_done(repo: Path, run_id: str, partial: bool) -> str:
    """What a landing leaves out, as the end of its summary ("" when every task
    is done, as the run's branch holds it); refuses a run not finished unless
    ``partial``, and ``partial`` where every task is done."""
    from gitrun.commands.report.committed import read_committed
    from gitrun.engine.states import COMPLETE, FAILED, PENDING

    counts = read_committed(repo, run_id).counts()
    total, done = sum(counts.values()), sum(counts[s] for s in COMPLETE)
    if done == total:
        if partial:
            raise GitrunError(
                f"every task of run {run_id!r} is done, so --partial means nothing here; "
                f"land it with `gitrun land {run_id}`"
            )
        return ""
    missing = f"{counts[PENDING]} pending and {counts[FAILED]} failed"
    if not partial:
        raise GitrunError(
            f"run {run_id!r} is not finished: {done} of {total} tasks done, {missing}; see "
            f"them with `gitrun status {run_id}`, finish with `gitrun resume {run_id}` (or "
            f"`gitrun retry {run_id}` for failed ones), or land what is done with "
            f"`gitrun land {run_id} --partial`"
        )
    return f"; left out: {missing} of {total} tasks (`gitrun status {run_id}` lists them)"


def _incoming_files(repo: Path, base: str, tip: str) -> dict[str, str]:
    """Files the run added or changed since ``base``: path -> blob id at the tip."""
    out = git.git(repo, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=AM", base, tip)
    paths = [p for p in out.decode(errors="surrogateescape").split("\0") if p]
    tree = git.ls_tree(repo, tip, paths) if paths else {}
    return {p: tree[p][1] for p in paths if p in tree}


def _untracked(repo: Path, paths: list[str]) -> list[str]:
    found = [p for p in paths if os.path.lexists(repo / p)]
    known: set[str] = set()
    for start in range(0, len(found), 500):  # command lines have limits
        chunk = found[start : start + 500]
        tracked = git.git(repo, "ls-files", "-z", "--", *chunk).decode(errors="surrogateescape")
        known.update(filter(None, tracked.split("\0")))
    return [p for p in found if p not in known]


def _reset_run_copies(repo: Path, head: str, incoming: dict[str, str], fmt: str) -> None:
    """Tracked files changed in the work tree to exactly the run's version (a
    worker of a run started again rewrote its output; the run committed the
    definition as edited) would make git refuse the merge: they go back to
    HEAD's version, which the merge then replaces by the very same bytes.
    A change staged to anything else is the user's, and stays (git names it)."""
    paths = sorted(incoming)
    changed: list[str] = []
    staged: dict[str, str] = {}
    for start in range(0, len(paths), 500):  # command lines have limits
        chunk = paths[start : start + 500]
        out = git.git(repo, "diff", "--name-only", "-z", "--no-renames", head, "--", *chunk)
        changed += [p for p in out.decode(errors="surrogateescape").split("\0") if p]
        listed = git.git(repo, "ls-files", "-s", "-z", "--", *chunk)
        for entry in listed.decode(errors="surrogateescape").split("\0"):
            if entry:
                meta, path = entry.split("\t", 1)
                staged[path] = meta.split(" ")[1]
    at_head = git.ls_tree(repo, head, changed) if changed else {}
    copies = [
        path
        for path in changed
        if path in at_head
        and staged.get(path) in (at_head[path][1], incoming[path])
        and blob_on_disk(repo / path, fmt) == incoming[path]
    ]
    for start in range(0, len(copies), 500):
        git.git(repo, "checkout", "-q", head, "--", *copies[start : start + 500])


def _move_aside(repo: Path, paths: list[str], aside_dir: Path) -> None:
    for path in paths:
        target = aside_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(repo / path, target)


def restore_aside(repo: Path, aside_dir: Path, then: str = "land again") -> None:
    """Put every file set aside back where it was; drop a copy only when the
    same bytes are in its place already. A copy that cannot go back (its place
    holds something else now) stays set aside, and the user is told (``then``:
    what to do once they moved it back)."""
    if not aside_dir.is_dir():
        return
    kept: list[str] = []
    for source in sorted(p for p in aside_dir.rglob("*") if p.is_file() or p.is_symlink()):
        rel = source.relative_to(aside_dir).as_posix()
        target = repo / rel
        if not os.path.lexists(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
        elif _same_file_content(target, source):
            source.unlink()
        else:
            kept.append(rel)
    if kept:
        raise GitrunError(
            f"an earlier `gitrun land` set aside {', '.join(kept[:5])}"
            f"{f' and {len(kept) - 5} more' if len(kept) > 5 else ''} and something else is in "
            f"their place now; they are kept in {aside_dir}: move them back by hand, then {then}"
        )
    shutil.rmtree(aside_dir, ignore_errors=True)


def _same_file_content(a: Path, b: Path) -> bool:
    """Two regular files with the same bytes (sizes first: a huge one is not read)."""
    try:
        if os.lstat(a).st_size != os.lstat(b).st_size:
            return False
    except OSError:
        return False
    found = blob_on_disk(a)
    return found is not None and found == blob_on_disk(b)


def _refuse_a_held_index(repo: Path) -> None:
    """git's own index lock: a git command is running, or one was killed
    (a killed `land` leaves it). Name it rather than let git's "stash
    failed" or "Unable to create index.lock" stand for the cause."""
    lock = git.git_dir(repo) / "index.lock"
    if lock.exists():
        raise GitrunError(
            f"{lock} exists: another git command is running, or one was killed while it wrote "
            "the index; wait for it to finish, or, if no git process is running, remove that "
            "file, then land again"
        )


def _undo_merge(repo: Path, squash: bool) -> None:
    merge_head = git.git_dir(repo) / "MERGE_HEAD"
    if merge_head.exists():
        run_cmd([*git.GIT, "-C", str(repo), "merge", "--abort"], check=False)
    elif squash:
        # A squash that stopped on a conflict leaves no MERGE_HEAD; reset the
        # index and files it touched (the index held no staged change before).
        run_cmd([*git.GIT, "-C", str(repo), "reset", "--merge"], check=False)


def _git_says(exc: CommandError) -> str:
    lines = [ln.strip() for ln in exc.output.splitlines() if ln.strip()]
    interesting = [ln for ln in lines if not ln.startswith(("hint:", "Aborting"))]
    return " ".join(interesting[:4]) or str(exc)
