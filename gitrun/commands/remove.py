"""Ending a run: ``gitrun rm`` removes its branch, its local state and its
run directory, after naming each.

It commits nothing: the run's files leave the work tree only, and those the
current branch tracks then show as deleted in ``git status``, for the user to
commit (or restore). Unless ``--force``, it refuses what would lose work that
nothing else keeps: commits only the run's branch holds (a run landed as a
squash keeps its results in the current branch, so only its history goes),
run files edited or added and committed nowhere, tasks an external run handed
out and has not collected. A run never started and committed nowhere is only
a definition ``gitrun new`` wrote: removing it needs no ``--force``. A run being driven, or whose dead driver left
workers running, is refused whatever the flag: the driver would fail at its
next commit and the workers would go on writing for a run that is gone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.commands.land.aside import restore_aside
from gitrun.commands.leftovers import Pieces, run_pieces, shown_path
from gitrun.definition.outputs import blob_on_disk
from gitrun.errors import CommandError, GitrunError
from gitrun.layout import GITRUN_DIR, RUNS_DIR, branch_ref, check_run_id
from gitrun.processes.reaper import is_recorded_worker
from gitrun.store import git
from gitrun.store.branches import Landed, landed, lost_commits
from gitrun.store.journal import running_records
from gitrun.store.leases import read_leases
from gitrun.store.ledger import is_ledger_name
from gitrun.store.local import LocalPaths
from gitrun.store.lock import RunBusy, lock_damage, run_locked

Say = Callable[[str], None]


class RemoveRefused(GitrunError):
    """``gitrun rm`` would lose work: one sentence per reason, each with its fix."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        super().__init__("; ".join(lines))

    @property
    def lines(self) -> list[str]:
        return list(self._lines)


@dataclass
class _RunFiles:
    """What the run directory holds in the work tree."""

    files: list[Path] = field(default_factory=list)  # anything that is not a directory
    dirs: list[Path] = field(default_factory=list)
    tracked: int = 0  # files the current branch tracks
    unkept: list[str] = field(default_factory=list)  # bytes committed nowhere
    ledger: bool = False  # it holds a ledger: the run was started


def remove_run(repo: Path, run_id: str, force: bool, say: Say) -> None:
    """Remove ``run_id``'s branch, local state and run directory, saying what
    goes before it goes and what is left to do after."""
    check_run_id(run_id)
    git_dir = git.git_dir(repo)
    if run_id not in run_pieces(repo, git_dir):
        raise GitrunError(_unknown(repo, run_id, git_dir))
    _refuse_links(repo)
    local = LocalPaths.under(git_dir, run_id)
    damage = lock_damage(local)
    if damage:
        raise GitrunError(
            f"{damage}: gitrun removes no local state it cannot trust; look at "
            f"{local.root} and remove it by hand"
        )
    created = not os.path.lexists(local.root)
    try:
        with run_locked(local, run_id):
            try:
                _remove_locked(repo, run_id, force, say, git_dir, local, had_local=not created)
            except BaseException:
                if created:  # the lock's own directory: a refusal leaves nothing behind
                    shutil.rmtree(local.root, ignore_errors=True)
                raise
    except RunBusy as exc:
        who = f"pid {exc.owner.pid} on host {exc.owner.host}" if exc.owner else "another process"
        raise GitrunError(
            f"run {run_id!r} is being driven now by {who}; `gitrun rm` never removes a live "
            "run, even with --force (its driver would fail at its next commit): stop it first "
            f"(Ctrl-C in its terminal, or `gitrun stop {run_id}`), then `gitrun rm {run_id}`"
        ) from None


def _remove_locked(
    repo: Path,
    run_id: str,
    force: bool,
    say: Say,
    git_dir: Path,
    local: LocalPaths,
    *,
    had_local: bool,
) -> None:
    pieces = run_pieces(repo, git_dir).get(run_id)  # again, now that no driver can start
    if pieces is None:
        raise GitrunError(_unknown(repo, run_id, git_dir))
    _refuse_live_workers(run_id, local)
    branch = pieces.branch
    if branch is not None and branch.worktree is not None:
        raise GitrunError(
            f"branch gitrun/{run_id} is checked out in {branch.worktree}; check out another "
            f"branch there, then `gitrun rm {run_id}`"
        )
    tip = git.rev_parse(repo, branch_ref(run_id)) if branch else None
    landing = landed(repo, run_id, tip, git_dir) if tip else None
    problems: list[str] = []
    lost = _lost(repo, run_id, pieces, tip, landing, problems)
    files = _run_files(repo, run_id, tip) if pieces.run_dir else _RunFiles()
    if files.unkept and _never_started(repo, run_id, pieces, files):
        files.unkept = []  # loses no work: it undoes `gitrun new`
    if files.unkept:
        shown = ", ".join(files.unkept[:5])
        more = f" and {len(files.unkept) - 5} more" if len(files.unkept) > 5 else ""
        problems.append(
            f"{shown}{more} in the run directory {'hold' if len(files.unkept) > 1 else 'holds'} "
            "bytes committed nowhere (edited or added since); copy what you want to keep "
            f"elsewhere, or remove the run anyway with `gitrun rm {run_id} --force`"
        )
    problems += _leases(run_id, local)
    if problems and not force:
        raise RemoveRefused(problems)
    restore_aside(repo, run_id, then=f"`gitrun rm {run_id}`")

    say(f"removing run {run_id!r}:")
    if branch is not None:
        about = f" ({landing.describe()})" if landing else ""
        commits = f"{lost} commit{'s' if lost != 1 else ''}"
        if lost and landing:
            about = f" ({landing.describe()}; its {commits} of history go with it)"
        elif lost:
            about = f" (with {commits} no other ref holds: --force)"
        elif tip is None:
            about = " (naming a commit whose objects are missing: --force)"
        say(f"  branch gitrun/{run_id} at {(tip or branch.tip)[:10]}{about}")
    if had_local:  # not the directory of the lock this command took
        say(f"  local state {shown_path(repo, local.root)}/")
    if pieces.run_dir:
        count = len(files.files)
        tracked = (
            f", {files.tracked} of them tracked in the current branch" if files.tracked else ""
        )
        forced = f"; {len(files.unkept)} committed nowhere: --force" if files.unkept else ""
        say(
            f"  run directory {RUNS_DIR}/{run_id}/ from the work tree "
            f"({count} file{'s' if count != 1 else ''}{tracked}{forced})"
        )

    _remove_files(files)
    if branch is not None:
        _delete_branch(repo, run_id, tip or branch.tip)
    _remove_local(local)

    say(f"removed run {run_id!r}")
    if files.tracked:
        say(
            f"  the {files.tracked} tracked file{'s' if files.tracked != 1 else ''} of "
            f"{RUNS_DIR}/{run_id}/ now show as deleted in `git status`: `git commit` records "
            f"the removal, `git restore {RUNS_DIR}/{run_id}` brings them back"
        )
    if lost and not landing and tip is not None:
        say(
            f"  until git collects its garbage, `git branch gitrun/{run_id} {tip[:10]}` brings "
            "the branch back"
        )
    for ref in git.remote_refs(repo, f"gitrun/{run_id}"):
        remote = ref.removeprefix("refs/remotes/").removesuffix(f"/gitrun/{run_id}")
        say(
            f"  {remote}/gitrun/{run_id} stays: `git push {remote} --delete gitrun/{run_id}` "
            f"removes it there (until then `gitrun start {run_id}` refuses the id)"
        )


def _unknown(repo: Path, run_id: str, git_dir: Path) -> str:
    known = list(run_pieces(repo, git_dir))
    runs = f"the runs here are {', '.join(known)}" if known else "there are no runs here"
    return (
        f"no run {run_id!r} here (no {RUNS_DIR}/{run_id}/, no branch gitrun/{run_id}, no local "
        f"state); {runs}"
    )


def _refuse_links(repo: Path) -> None:
    """What lies behind a symlink is someone else's: never remove through one."""
    for name in (GITRUN_DIR, RUNS_DIR):
        if os.path.islink(repo / name):
            raise GitrunError(
                f"{name} is a symlink; gitrun removes nothing through one: make it a directory "
                "or remove the run's files by hand"
            )


def _refuse_live_workers(run_id: str, local: LocalPaths) -> None:
    live = [
        f"{task}#{entry.attempt} (pid {entry.pid})"
        for task, entry in running_records(local).items()
        if is_recorded_worker(entry.to_json())
    ]
    if live:
        raise GitrunError(
            f"run {run_id!r} has workers a dead driver left running ({', '.join(live)}); "
            "`gitrun rm` never removes a live run, even with --force: stop them with "
            f"`gitrun resume {run_id}` (then Ctrl-C) or `gitrun watchdog --kill`, then "
            f"`gitrun rm {run_id}`"
        )


def _lost(
    repo: Path,
    run_id: str,
    pieces: Pieces,
    tip: str | None,
    landing: Landed | None,
    problems: list[str],
) -> int:
    """How many commits deleting the branch leaves without a ref; a sentence in
    ``problems`` when that loses work."""
    if pieces.branch is None:
        return 0
    if tip is None:
        problems.append(
            f"branch gitrun/{run_id} names a commit whose objects are missing, so what it "
            f"holds cannot be told; `gitrun resume {run_id}` repairs it, or remove it anyway "
            f"with `gitrun rm {run_id} --force`"
        )
        return 0
    lost = lost_commits(repo, run_id, tip)
    if lost and not (landing and landing.squashed):
        problems.append(
            f"run {run_id!r} is not landed: {lost} commit{'s' if lost != 1 else ''} of branch "
            f"gitrun/{run_id} would be lost (no other branch, tag or remote-tracking branch "
            f"holds {'them' if lost != 1 else 'it'}); land the run with `gitrun land {run_id}`, "
            f"keep the branch under another name with `git branch <name> gitrun/{run_id}`, or "
            f"remove it anyway with `gitrun rm {run_id} --force`"
        )
    return lost


def _never_started(repo: Path, run_id: str, pieces: Pieces, files: _RunFiles) -> bool:
    """Whether the run directory is all there is of a run nobody started and
    nothing committed: no branch here or on a remote, no ledger, no commit
    that holds its directory. Its files are a definition `gitrun new` wrote
    (and maybe you edited): removing them undoes `new`, with no --force."""
    run_dir = f"{RUNS_DIR}/{run_id}"
    return (
        pieces.branch is None
        and not files.ledger
        and (repo / run_dir).is_dir()
        and not os.path.islink(repo / run_dir)
        and not git.remote_refs(repo, f"gitrun/{run_id}")
        and not git.ever_committed(repo, run_dir)
    )


def _run_files(repo: Path, run_id: str, tip: str | None) -> _RunFiles:
    """The run directory's contents, each file judged against the current
    branch and the run's branch: bytes either holds are kept elsewhere; the
    ledger is gitrun's own record, never the user's edit."""
    run_dir = f"{RUNS_DIR}/{run_id}"
    root = repo / run_dir
    found = _RunFiles()
    if os.path.islink(root) or not root.is_dir():
        found.files.append(root)
        found.unkept.append(run_dir)
        return found
    head = git.rev_parse(repo, "HEAD")
    at_head = git.ls_tree(repo, head, [run_dir]) if head else {}
    at_tip = git.ls_tree(repo, tip, [run_dir]) if tip else {}
    fmt = git.object_format(repo)
    todo = [root]
    while todo:
        directory = todo.pop()
        found.dirs.append(directory)
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    todo.append(path)
                    continue
                found.files.append(path)
                rel = path.relative_to(repo).as_posix()
                found.tracked += rel in at_head
                if is_ledger_name(rel[len(run_dir) + 1 :]):
                    found.ledger = True
                    continue
                blob = blob_on_disk(path, fmt)
                kept = {entry[1] for entry in (at_head.get(rel), at_tip.get(rel)) if entry}
                if blob is None or blob not in kept:
                    found.unkept.append(rel)
    found.unkept.sort()
    return found


def _leases(run_id: str, local: LocalPaths) -> list[str]:
    leases = read_leases(local) if local.leases.exists() else {}
    if not leases:
        return []
    tasks = sorted(leases)
    shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
    return [
        f"run {run_id!r} has {len(tasks)} task{'s' if len(tasks) != 1 else ''} handed out by "
        f"`gitrun next` and not collected ({shown}); judge them with `gitrun collect {run_id}` "
        f"first, or remove the run anyway with `gitrun rm {run_id} --force`"
    ]


def _remove_files(files: _RunFiles) -> None:
    try:
        for path in files.files:
            path.unlink()
        for directory in sorted(files.dirs, key=lambda p: len(p.parts), reverse=True):
            directory.rmdir()
    except OSError as exc:
        raise GitrunError(
            f"cannot remove {exc.filename}: {exc.strerror or exc}; remove it by hand, then "
            "`gitrun rm` the run again"
        ) from None


def _delete_branch(repo: Path, run_id: str, tip: str) -> None:
    try:
        git.write_git(repo, "update-ref", "-d", branch_ref(run_id), tip)
    except CommandError as exc:
        raise GitrunError(
            f"branch gitrun/{run_id} could not be deleted ({exc.output.strip() or exc}); "
            f"`gitrun rm {run_id}` again removes what is left"
        ) from None


def _remove_local(local: LocalPaths) -> None:
    try:
        shutil.rmtree(local.root)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise GitrunError(
            f"cannot remove {exc.filename or local.root}: {exc.strerror or exc}; remove it by "
            f"hand, then `gitrun rm {local.root.name}` again"
        ) from None
