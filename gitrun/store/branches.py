"""The runs' branches as the current branch sees them: which exist, which
landed and by which commit, and what deleting one would lose."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.errors import GitrunError
from gitrun.layout import BRANCH_PREFIX, RUNS_DIR, branch_ref, is_run_id
from gitrun.processes.proc import run_cmd
from gitrun.store import git
from gitrun.store.jsonlines import parse_lines
from gitrun.store.ledger import CHUNK_DIR, chunk_number, is_ledger_name

_FIELD = "\x1f"
_LIST = "\x1d"


@dataclass(frozen=True)
class RunBranch:
    tip: str  # the object the branch names (whole or not)
    worktree: str | None  # where it is checked out, if anywhere


def run_branches(repo: Path) -> dict[str, RunBranch]:
    """Every branch ``gitrun/<run>`` (one ``for-each-ref`` call), by run id."""
    # NUL-separated: a work tree's path may hold a newline (a ref name cannot).
    fmt = "%(refname)%00%(objectname)%00%(worktreepath)%00"
    out = git.git(repo, "for-each-ref", f"--format={fmt}", f"refs/heads/{BRANCH_PREFIX}")
    fields = out.decode(errors="surrogateescape").split("\0")
    found: dict[str, RunBranch] = {}
    for ref, tip, worktree in zip(fields[0::3], fields[1::3], fields[2::3], strict=False):
        ref = ref.removeprefix("\n")  # the newline ending the record before
        run_id = ref.removeprefix(f"refs/heads/{BRANCH_PREFIX}")
        if is_run_id(run_id):  # a branch gitrun/a/b of the user's is no run's
            found[run_id] = RunBranch(tip, worktree or None)
    return found


@dataclass(frozen=True)
class RunTip:
    """Where a run's branch is read from: ``ref`` names ``tip``."""

    ref: str  # refs/heads/gitrun/<run>, or a remote's refs/remotes/<remote>/gitrun/<run>
    tip: str

    @property
    def is_remote(self) -> bool:
        return self.ref.startswith("refs/remotes/")

    @property
    def shown(self) -> str:
        """``gitrun/r`` or ``origin/gitrun/r``, as a user names it."""
        return self.ref.removeprefix("refs/heads/").removeprefix("refs/remotes/")


def find_tip(repo: Path, run_id: str) -> RunTip | None:
    """The one answer to "where is this run's branch": the local branch
    ``gitrun/<run>`` when it names a commit, else a remote-tracking copy of
    it (``origin``'s first, then by remote name), None when neither exists.

    The local branch, when there is one, is the run, whatever a remote's
    copy holds: gitrun commits only there, and ``resume`` takes a remote's
    copy only when there is no local branch. So every command (status,
    log, retry, land, report, start, resume) tells the story of the same tip.
    """
    ref = branch_ref(run_id)
    tip = git.rev_parse(repo, ref)
    if tip is not None:
        return RunTip(ref, tip)
    remotes = git.remote_refs(repo, ref.removeprefix("refs/heads/"))
    for remote in sorted(remotes, key=lambda r: (not r.startswith("refs/remotes/origin/"), r)):
        tip = git.rev_parse(repo, remote)
        if tip is not None:
            return RunTip(remote, tip)
    return None


def committed_records(repo: Path, run_id: str, tip: str) -> list[dict[str, Any]]:
    """Every ledger record committed at ``tip``, in the order the ledger is
    read: the chunks in number order."""
    run_dir = f"{RUNS_DIR}/{run_id}"
    tree = git.ls_tree(repo, tip, [f"{run_dir}/{CHUNK_DIR}"])
    names = [p[len(run_dir) + 1 :] for p in tree]
    order = sorted((n for n in names if is_ledger_name(n)), key=chunk_number)
    shas = [tree[f"{run_dir}/{n}"][1] for n in order]
    blobs = git.read_blobs(repo, list(dict.fromkeys(shas)))
    records: list[dict[str, Any]] = []
    for sha in shas:
        records += parse_lines(blobs[sha].decode("utf-8", errors="replace"))
    return records


@dataclass(frozen=True)
class Landed:
    """A run whose branch is in the current branch."""

    commit: str | None  # the merge that brought it in, or a squash; None for a fast-forward
    branch: str | None  # the current branch's name; None on a detached HEAD
    squashed: bool = False

    def describe(self) -> str:
        """``landed in main as 1a2b3c4d5e``, for a status line."""
        where = self.branch or "HEAD"
        if self.commit is None:
            return f"landed in {where}"
        return f"landed in {where} as {self.commit[:10]}{' (squashed)' if self.squashed else ''}"


def landed(repo: Path, run_id: str, tip: str, git_dir: Path) -> Landed | None:
    """Whether the run's branch, at ``tip``, is in the current branch: ``tip``
    is an ancestor of HEAD, or a squashed ``gitrun land`` of it is in HEAD's
    history; None when it is not (or HEAD has no commits).

    One ``git log`` call over HEAD's commits that the tip's parents do not
    reach: those made since the run forked, however long HEAD's history is
    before it. The tip itself is among them exactly when it is an ancestor of
    HEAD, and the commit that brought it in is the merge naming it as a
    parent (none for a fast-forward). A squashed landing is a commit of one
    parent, other than the tip, with the run's trailer (``Gitrun-Run:
    <run>``): the run's other commits are all below the tip's parents. It is
    no ancestor, so one more call tells whether it landed the tip: it holds
    the tip's ledger (every commit of the run adds to it).
    """
    proc = run_cmd(
        [
            *git.GIT,
            "-C",
            str(repo),
            "log",
            f"--format=%H{_FIELD}%P{_FIELD}%(trailers:key=Gitrun-Run,valueonly,separator=%x1d)",
            "HEAD",
            f"^{tip}^@",
            "--",
        ],
        check=False,
    )
    if proc.returncode != 0:
        return None  # HEAD has no commits, or the tip's objects are gone
    ancestor = False
    merge = squash = None
    for line in proc.stdout.decode(errors="replace").splitlines():
        fields = line.split(_FIELD)
        if len(fields) != 3:
            continue
        commit, parents, runs = fields[0], fields[1].split(), fields[2].split(_LIST)
        if commit == tip:
            ancestor = True
        elif tip in parents[1:]:
            merge = commit  # the oldest such merge is the one that brought it in
        elif squash is None and len(parents) == 1 and run_id in runs:
            squash = commit
    branch = current_branch(git_dir)
    if ancestor:
        return Landed(merge, branch)
    if squash is not None and _same_ledger(repo, run_id, squash, tip):
        return Landed(squash, branch, squashed=True)
    return None


def _same_ledger(repo: Path, run_id: str, commit: str, tip: str) -> bool:
    chunks = f"{RUNS_DIR}/{run_id}/{CHUNK_DIR}"
    proc = run_cmd(
        [*git.GIT, "-C", str(repo), "diff-tree", "--quiet", "-r", commit, tip, "--", chunks],
        check=False,
    )
    return proc.returncode == 0


def current_branch(git_dir: Path) -> str | None:
    """The name of the branch HEAD is on, read from the HEAD file (no git
    process); None on a detached HEAD or when it cannot be read."""
    try:
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096).strip()
    except OSError:
        return None
    name = head.removeprefix("ref: refs/heads/")
    return name if name != head else None


def lost_commits(repo: Path, run_id: str, tip: str) -> int:
    """How many commits deleting the run's branch would leave without a ref:
    those of ``tip`` that no other ref reaches (HEAD, branches, tags,
    remote-tracking branches)."""
    out = git.git(
        repo, "rev-list", "--count", tip, "--not", f"--exclude={branch_ref(run_id)}", "--all"
    )
    return int(out.decode().strip() or 0)


def checked_out_in(common_dir: Path, branch: str) -> Path | None:
    """The work tree whose HEAD is on ``branch``, read from the HEAD files of
    the main work tree and of every linked one (no git process: the committer
    asks before each move of the run's branch); None when none is."""
    heads = [(common_dir / "HEAD", common_dir.parent)]
    try:
        linked = sorted(os.listdir(common_dir / "worktrees"))
    except OSError:
        linked = []
    for name in linked:
        here = common_dir / "worktrees" / name
        try:
            tree = Path((here / "gitdir").read_text(errors="replace").strip()).parent
        except OSError:
            tree = here
        heads.append((here / "HEAD", tree))
    for head, tree in heads:
        if current_branch(head.parent) == branch:
            return tree
    return None


def refuse_checked_out(common_dir: Path, run_id: str) -> None:
    """Raise the sentence for a run's branch a work tree has checked out:
    moving it would move that work tree's HEAD under its index and files."""
    branch = f"{BRANCH_PREFIX}{run_id}"
    tree = checked_out_in(common_dir, branch)
    if tree is not None:
        raise GitrunError(
            f"branch {branch} is checked out in the work tree {tree}, and gitrun will not move "
            f"it under that checkout; switch away there (`git -C {tree} switch -`), then run "
            "the command again"
        )
