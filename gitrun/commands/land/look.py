"""What a landing looks at before it changes anything: the repository's
places, the merged tree and the paths whose entries it changes.

``git merge-tree --write-tree`` computes the merged tree in the object
database, so a conflict stops the landing with nothing changed; ``git
diff-tree`` between the branch and that tree names every path the landing
changes. The few words the steps' sentences share (a list of paths, what git
said) are here too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.errors import CommandError, GitrunError
from gitrun.processes.proc import run_cmd
from gitrun.store import git, refs

Entry = tuple[str, str]  # (mode, object id) of a path in a tree or the index
SYMLINK = "120000"


@dataclass(frozen=True)
class Change:
    """A path whose entry the landing changes in the current branch."""

    path: str
    old: Entry | None
    new: Entry | None


@dataclass
class Where:
    """The repository's places a landing touches."""

    repo: Path
    git_dir: Path
    common_dir: Path
    fmt: str
    sizes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, repo: Path) -> Where:
        # One path a call: git prints each on a line, and a path may hold a newline.
        return cls(repo, git.git_dir(repo), refs.common_dir(repo), git.object_format(repo))

    def ref_locks(self, head_ref: str) -> list[Path]:
        """The lock files git makes while it updates ``head_ref``, the ref
        HEAD names: the ref's own and, for a branch, ``HEAD.lock`` too (git
        logs the update in HEAD's reflog under it: an ``update-ref`` killed
        with SIGKILL leaves both)."""
        if head_ref == "HEAD":
            return [self.git_dir / "HEAD.lock"]
        return [self.common_dir / f"{head_ref}.lock", self.git_dir / "HEAD.lock"]

    @property
    def index_lock(self) -> Path:
        return self.git_dir / "index.lock"


def checked_out_ref(repo: Path) -> str:
    proc = run_cmd([*git.GIT, "-C", str(repo), "symbolic-ref", "-q", "HEAD"], check=False)
    return proc.stdout.decode(errors="surrogateescape").strip() or "HEAD"


def refuse_an_operation_in_progress(where: Where) -> None:
    """A merge, cherry-pick, revert or rebase the user has not concluded: a
    landing in its middle would mix the two."""
    for name, what in (
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ("REVERT_HEAD", "a revert"),
        ("rebase-merge", "a rebase"),
        ("rebase-apply", "a rebase"),
    ):
        if os.path.lexists(where.git_dir / name):
            raise GitrunError(
                f"{what} is in progress ({where.git_dir / name} exists); conclude or abort it, "
                "then land again"
            )


def merged_tree(repo: Path, run_id: str, head: str, tip: str) -> str:
    """The tree of the merge, written to the object database by git's own
    merge machinery; a conflict stops the landing with nothing changed."""
    argv = [*git.GIT, "-C", str(repo), "merge-tree", "--write-tree", "--name-only", "-z"]
    proc = run_cmd([*argv, "--no-messages", head, tip], check=False)
    fields = proc.stdout.decode(errors="surrogateescape").split("\0")
    if proc.returncode == 0 and fields[0].strip():
        return fields[0].strip()
    if proc.returncode == 1:
        conflicted = sorted({f for f in fields[1:] if f})
        raise GitrunError(
            f"landing run {run_id!r} stopped and changed nothing: {shown_paths(conflicted)} "
            f"changed both in the current branch and in the run (a conflict); merge by hand with "
            f"`git merge gitrun/{run_id}` and resolve it there"
        )
    if proc.returncode == 129:  # usage: a git without --write-tree
        version = run_cmd([*git.GIT, "--version"], check=False).stdout.decode().strip()
        raise GitrunError(
            f"`gitrun land` needs git 2.38 or newer (for `git merge-tree --write-tree`), and "
            f"this is {version or 'an older git'}; upgrade git, then land again"
        )
    if git.is_shallow(repo):  # the commit where the two histories meet is cut off
        raise GitrunError(
            f"landing run {run_id!r} stopped and changed nothing: this clone's history is "
            f"shallow (cloned with --depth), so git cannot find where gitrun/{run_id} and the "
            "current branch meet; run `git fetch --unshallow`, then land again"
        )
    said = proc.stderr.decode(errors="replace").strip().splitlines()
    raise GitrunError(
        f"landing run {run_id!r} stopped and changed nothing: git merge-tree failed "
        f"({said[-1] if said else f'exit status {proc.returncode}'})"
    )


def changes_between(repo: Path, old: str, new: str) -> list[Change]:
    """Every path whose entry differs between ``old`` and ``new`` (trees or commits)."""
    out = git.git(
        repo, "diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none", old, new
    )
    fields = out.decode(errors="surrogateescape").split("\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        old_mode, new_mode, old_id, new_id, _status = meta.lstrip(":").split(" ")
        changes.append(
            Change(
                path,
                None if old_mode == "000000" else (old_mode, old_id),
                None if new_mode == "000000" else (new_mode, new_id),
            )
        )
    return changes


def shown_paths(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def git_says(exc: CommandError) -> str:
    lines = [ln.strip() for ln in exc.output.splitlines() if ln.strip()]
    interesting = [ln for ln in lines if not ln.startswith(("hint:", "Aborting"))]
    return " ".join(interesting[:4]) or str(exc)
