"""Starting and resuming a run: the branch, the definition, then the driver.

``start`` checks the run, creates ``gitrun/<run>`` at HEAD with a commit
holding the run definition and the round's ``start`` record (which tasks are
up to date, so not dispatched), and drives it. A run landed in HEAD starts
again as a new round: its branch moves to a new first commit on HEAD (HEAD
holds every commit it had), and its ledger goes on. ``resume`` takes the branch from
a remote when only that exists, restores run files missing on disk, stops
the workers a dead driver left behind, reconciles with what is committed
and on disk, and drives on.

Both are set up here once, for every executor and every caller: the command
line's ``start`` and ``resume`` and the MCP server's tools all begin with
:func:`open_run`, and every start or resume holds the run's lock through
``_session``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gitrun.definition.load import (
    PACKET_NAME,
    RUNS_DIR,
    RunDef,
    check_run_id,
    load_run,
)
from gitrun.definition.runfiles import (
    definition_files,
    merge_committed_ledger,
    open_ledger,
    refuse_rewritten_definition,
)
from gitrun.engine.committer import Committer, read_tip, trailers
from gitrun.engine.driver import Driver, Progress, Reporter, RunOutcome
from gitrun.errors import GitrunError
from gitrun.guard import rules
from gitrun.layout import branch_ref
from gitrun.problem import Problem
from gitrun.proof.check import check_run
from gitrun.store import git, ledger, refs
from gitrun.store.branches import find_tip, landed, refuse_checked_out
from gitrun.store.events import Start, iso
from gitrun.store.ledger import CHUNK_DIR
from gitrun.store.local import LocalPaths
from gitrun.store.lock import RunLock, run_locked
from gitrun.store.tomlfile import write_atomic


class CheckFailed(GitrunError):
    def __init__(self, run_id: str, problems: list[Problem]) -> None:
        self.problems = problems
        lines = [f"run {run_id!r} did not pass `gitrun check` ({len(problems)} problems):"]
        lines += [f"  [{p.code}] {p.message}" for p in problems]
        super().__init__("\n".join(lines))


def open_run(repo: Path, run_id: str, resume: bool, report: Reporter) -> RunDef:
    """The first step of ``start`` and ``resume``, from the command line or
    the MCP server: the run's definition, loaded (on resume, brought first
    from the run's branch where only that holds it, as on a fresh clone)."""
    if resume:
        bring_definition(repo, run_id, report)
    return load_run(repo, run_id)


@dataclass(frozen=True)
class _Session:
    """A run set up to be driven, its lock held."""

    run: RunDef
    local: LocalPaths
    lock: RunLock
    committer: Committer


@contextmanager
def _session(
    repo: Path,
    run_id: str,
    report: Reporter,
    resume: bool,
    loaded: RunDef | None = None,
    rerun_all: bool = False,
    take_edits: bool = False,
) -> Iterator[_Session]:
    """What ``start`` and ``resume`` do before a run is driven or leased, of
    every executor, under the run's lock (held while the caller's block runs).

    ``start`` checks the run (``loaded``: as the caller just loaded it) and
    gives it its branch with the definition and the round's ``start`` record
    (``rerun_all``: no task is up to date). ``resume`` takes the branch (from
    a remote where only that has it, or back to its newest whole commit),
    restores the run files it holds, and checks the definition again
    (``take_edits``: take one edited while the run was driven). Then the
    hooks' rules are written for the run."""
    fresh = None
    if not resume:  # loaded before the lock, as a check without a start is
        fresh = loaded if loaded is not None and loaded.id == run_id else load_run(repo, run_id)
    local = LocalPaths.of(repo, run_id)
    refuse_checked_out(local.common_git_dir, run_id)
    with run_locked(local, run_id) as lock:
        if fresh is not None:
            run = fresh
            committer = _create_branch(repo, run, local, report, rerun_all)
        else:
            tip = _ensure_branch(repo, run_id, report)
            _restore_definition(repo, run_id, tip, report)
            run = load_run(repo, run_id)
            refuse_rewritten_definition(run, tip, take_edits)
            problems = check_run(run, check_dirty=False, freshness=False).problems
            if problems:
                raise CheckFailed(run_id, problems)
            committer = Committer(repo, run_id, local)
        rules.refresh(local, run)
        yield _Session(run, local, lock, committer)


def prepare_external(
    repo: Path,
    run_id: str,
    report: Reporter,
    resume: bool,
    rerun_all: bool = False,
    take_edits: bool = False,
) -> None:
    """The branch for an external run: created by start, taken over by resume."""
    with _session(repo, run_id, report, resume, None, rerun_all, take_edits):
        pass


def _create_branch(
    repo: Path, run: RunDef, local: LocalPaths, report: Reporter, rerun_all: bool = False
) -> Committer:
    """Check the run and give it its branch, at HEAD, with the definition and
    the round's ``start`` record (``rerun_all``: no task is up to date)."""
    run_id = run.id
    # Read once: the proof is of the very commit the branch starts at, even
    # when a commit lands on HEAD meanwhile.
    head = git.rev_parse(repo, "HEAD")
    landed = _landed_tip(repo, run_id, head)
    checked = check_run(run, fork=head)
    if checked.problems:
        raise CheckFailed(run_id, checked.problems)
    if head is None:
        raise GitrunError(
            "the repository has no commits yet; commit something first so the run has a "
            "point to fork from"
        )
    if rerun_all and not checked.up_to_date:
        raise GitrunError(
            f"no task of run {run_id!r} is up to date, so --all means nothing here; every task "
            f"runs with `gitrun start {run_id}`"
        )
    fresh = [] if rerun_all else checked.up_to_date
    if landed is None:
        _retire_stale_ledger(run, local, head)
    else:
        _forget_round(local)
    writer = open_ledger(run, landed)
    try:
        writer.write(Start(head, fresh, iso(time.time())))
    finally:
        writer.close()
    committer = Committer(repo, run_id, local)
    files = definition_files(run)
    message = f"gitrun({run_id}): start run\n\n{trailers(run_id, [], {'Gitrun-Base': head})}\n"
    committer.start_branch(head, files, message, replacing=landed)
    again = " again (it was landed)" if landed else ""
    said = f"run {run_id}: started{again} on branch gitrun/{run_id} from {head[:10]}"
    if fresh:
        verb = "is" if len(fresh) == 1 else "are"
        said += f"; {len(fresh):,} of {len(run.tasks):,} tasks {verb} up to date, not run"
    report(said)
    return committer


def _landed_tip(repo: Path, run_id: str, head: str | None) -> str | None:
    """The tip of the run's branch when HEAD holds it (the run was landed and
    may start again), None when it has no branch; refuses a run whose branch
    holds work HEAD does not."""
    found = find_tip(repo, run_id)
    if found is None:
        return None
    tip = found.tip
    if not found.is_remote and head is not None and landed(repo, run_id, tip, git.git_dir(repo)):
        return tip  # HEAD holds it: merged, or squashed into one commit
    raise GitrunError(
        f"run {run_id!r} has already started (branch {found.shown} exists); continue it "
        f"with `gitrun resume {run_id}`, or land it (`gitrun land {run_id}`) to start it again"
    )


def _forget_round(local: LocalPaths) -> None:
    """A new round owes nothing to the last one's machine-local state: its
    leases, dispatches, governor and budget warnings go (logs and quarantine
    stay, under attempt numbers the new round does not reuse)."""
    for path in (local.leases, local.dispatches, local.governor, local.budget_warnings):
        if path.is_file() or path.is_symlink():
            path.unlink()


def start_run(
    repo: Path,
    run_id: str,
    report: Reporter,
    progress: Callable[[Progress], None] | None = None,
    loaded: RunDef | None = None,
    rerun_all: bool = False,
) -> RunOutcome:
    """Check the run, create its branch with the definition, and drive it
    (``loaded``: the run as the caller just loaded it, not loaded again;
    ``rerun_all``: run every task, up to date or not)."""
    git.prepare_writes()
    with _session(repo, run_id, report, False, loaded, rerun_all) as session:
        driver = Driver(
            session.run, session.local, session.lock, session.committer, report, progress
        )
        driver.recover()  # workers of an earlier life of this run id
        return driver.drive()


def resume_run(
    repo: Path,
    run_id: str,
    report: Reporter,
    progress: Callable[[Progress], None] | None = None,
    take_edits: bool = False,
) -> RunOutcome:
    """Reconcile a run with what is committed and on disk, then drive it on
    (``take_edits``: take a definition edited while it was driven)."""
    git.prepare_writes()
    with _session(repo, run_id, report, True, take_edits=take_edits) as session:
        driver = Driver(
            session.run, session.local, session.lock, session.committer, report, progress
        )
        driver.recover()
        driver.reconcile()
        return driver.drive()


def bring_definition(repo: Path, run_id: str, report: Reporter) -> None:
    """On a fresh clone the run directory may exist only on the run's branch
    (here or on a remote): restore it before anything loads the run."""
    check_run_id(run_id)
    if (repo / RUNS_DIR / run_id / PACKET_NAME).is_file():
        return
    local = LocalPaths.of(repo, run_id)
    refuse_checked_out(local.common_git_dir, run_id)
    with run_locked(local, run_id):
        try:
            tip = _ensure_branch(repo, run_id, report)
        except GitrunError:
            return  # started nowhere: loading the run says what is missing
        _restore_definition(repo, run_id, tip, report)


def take_remote_branch(repo: Path, run_id: str, report: Reporter) -> None:
    """On a fresh clone, before a command writes the ledger (``retry``): the
    run's branch from a remote's copy, with the run files and committed
    ledger it holds, as ``resume`` takes them; the caller holds the run's
    lock. Nothing when the branch is here, or nowhere."""
    found = find_tip(repo, run_id)
    if found is not None and found.is_remote:
        tip = _ensure_branch(repo, run_id, report)
        _restore_definition(repo, run_id, tip, report)


def _retire_stale_ledger(run: RunDef, local: LocalPaths, head: str) -> None:
    """A ledger without a branch is left from a run whose branch was deleted:
    its chunks move aside, kept for inspection. A ledger HEAD holds as it is
    (the run landed, and its branch went since) stays: the new round goes on
    with it."""
    where = [f"{run.dir}/{CHUNK_DIR}"]
    held = {path: blob for path, (_mode, blob) in git.ls_tree(run.repo, head, where).items()}
    paths = [f"{run.dir}/{name}" for name in ledger.chunk_names(run.repo / run.dir)]
    plain = all(os.path.isfile(p) and not os.path.islink(p) for p in (run.repo / q for q in paths))
    # Compared as git stores them: a clone checking text out with CRLF holds the same ledger.
    if (
        paths
        and plain
        and set(paths) <= set(held)
        and git.stored_blob_ids(run.repo, paths) == {path: held[path] for path in paths}
    ):
        return
    stale = run.repo / run.dir / CHUNK_DIR
    if os.path.lexists(stale):
        local.root.mkdir(parents=True, exist_ok=True)
        os.replace(stale, local.retired(CHUNK_DIR, int(time.time())))


def _ensure_branch(repo: Path, run_id: str, report: Reporter) -> str:
    ref = branch_ref(run_id)
    tip = git.rev_parse(repo, ref)
    if tip and git.is_intact(repo, tip):
        return tip
    broken = tip or git.ref_target(repo, ref)
    if broken:
        return _repair_branch(repo, run_id, broken, report)
    found = find_tip(repo, run_id)  # no local branch: a remote's copy, if any
    if found is None:
        raise GitrunError(
            f"run {run_id!r} has not started (no branch gitrun/{run_id} here or on a remote); "
            f"start it with `gitrun start {run_id}`"
        )
    if not refs.update_ref(repo, ref, found.tip, None):
        raise GitrunError(
            f"branch gitrun/{run_id} appeared while taking it from {found.shown}; run "
            f"`gitrun resume {run_id}` again"
        )
    report(f"run {run_id}: branch gitrun/{run_id} created from {found.shown}")
    return found.tip


def _repair_branch(repo: Path, run_id: str, broken: str, report: Reporter) -> str:
    """The run's branch points at objects that are gone (``git gc --prune=now``
    during a run is documented as unsafe with concurrent writers). Move it back
    to the newest commit it held that is whole; resume then commits again,
    from the disk, the valid outputs the lost commits held."""
    ref = branch_ref(run_id)
    local = LocalPaths.of(repo, run_id)
    candidates = git.reflog_targets(repo, ref)
    candidates += filter(None, [read_tip(local)])
    for commit in candidates:
        if commit == broken or git.rev_parse(repo, commit) is None:
            continue
        if git.is_intact(repo, commit) and refs.update_ref(repo, ref, commit, broken):
            report(
                f"run {run_id}: branch gitrun/{run_id} pointed at {broken[:10]}, whose objects "
                f"are missing (a `git gc --prune` during the run?); moved it back to "
                f"{commit[:10]}, the newest whole commit it held; outputs committed after it "
                "are committed again from the disk"
            )
            return commit
    raise GitrunError(
        f"branch gitrun/{run_id} points at {broken[:10]}, whose objects are missing, and no "
        f"earlier whole commit of the run is known (its reflog and {local.tip} name none); "
        f"delete the branch (`git update-ref -d {ref}`) and start the run again"
    )


def _restore_definition(repo: Path, run_id: str, tip: str, report: Reporter) -> None:
    """Bring back run files that exist on the branch but not on disk (a fresh
    clone, say), and merge the committed ledger into the local one."""
    run_dir = f".gitrun/runs/{run_id}"
    tree = git.ls_tree(repo, tip, [run_dir])
    restored = 0
    ledger_blobs: dict[str, str] = {}
    for path, (_mode, sha) in tree.items():
        target = repo / path
        if ledger.is_ledger_name(path[len(run_dir) + 1 :]):
            ledger_blobs[path] = sha
        elif not target.exists():
            write_atomic(target, git.cat_blob(repo, sha))
            restored += 1
    merge_committed_ledger(repo, ledger_blobs)
    if restored:
        report(f"run {run_id}: restored {restored} run files from the branch")
