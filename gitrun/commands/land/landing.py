"""Bringing a run's results into the current branch: ``gitrun land``.

One merge commit (or one squashed commit), built so that a ``land`` killed
at any instant is finished by the next one with nothing to do by hand.

``git merge`` cannot give that: killed, it leaves a half-written index under
``index.lock``, some files of the merge in the work tree (one of them cut
short), perhaps ``MERGE_HEAD``, and nothing that says which of these it was
doing. So the landing is made of steps each of which either changes nothing
anyone sees or can be finished (or redone) from what is on disk:

1. **Look** (changes nothing). ``git merge-tree --write-tree`` computes the
   merged tree in the object database; a conflict stops here. Every path
   whose entry the merge changes in the current branch is checked: no
   staged change there, no uncommitted edit, no different untracked file,
   no directory or symlink in the way. Untracked files identical to the
   run's (workers leave exactly those) are simply left where they are:
   they already are the merge's files. Staged changes and edits of other
   paths (a README being written) are never looked at again.
2. **Journal.** ``.git/gitrun/<run>/land.jsonl`` names this process (pid,
   start time and command line, read as :mod:`gitrun.processes.reaper`
   reads them) and the branch, its commit and the run's tip, before any
   git command writes anything. A ``land.lock`` ``flock`` next to it is
   held for the whole landing, so a second ``land`` knows a live one from a
   dead one's journal.
3. **Commit.** ``git commit-tree`` makes the merge (parents: the branch and
   the run's tip; with ``--squash`` the branch alone) and the journal
   records it. Still nothing visible: an unreferenced commit.
4. **Move the branch** with a compare-and-swap ``git update-ref`` from the
   commit looked at. This is the one step that publishes; whether it
   happened is read from the ref itself, never trusted from the journal.
5. **Bring the files**: every blob the work tree lacks is streamed from one
   ``git cat-file --batch`` into ``land-new/`` beside the journal, then
   renamed into place, one atomic rename per file, so a file is either the
   old one or the run's, never cut short. Deleted paths are unlinked.
6. **The index**, under git's own ``index.lock``, which the landing takes
   as git does (exclusively) but as a hard link to a claim file whose
   device and inode the journal recorded first: an ``index.lock`` with
   that inode is provably this landing's, anything else someone else's.
   Under the lock, ``git update-index --index-info`` sets the merge's
   entries of exactly the changed paths in a copy of the index (others,
   staged or not, keep theirs), ``--refresh`` fills in their stat data,
   and the copy is renamed over the index.
7. The journal is removed.

The next ``land`` reads the journal first. Before step 4 it drops it (and
the ref's locks a killed ``update-ref`` left (the branch's and HEAD's), made after the journal said
the branch was moving and held by no one) and lands afresh; once the branch
holds the recorded commit it redoes steps 5 and 6, which are idempotent:
each path is again checked to hold the old content, the run's, or nothing,
so an edit made since the kill is never overwritten, and an ``index.lock``
of the journaled inode is removed. Any other lock file is never removed:
held open by a live process, the sentence names its pid; otherwise the file.

The work tree gets the bytes the run committed, as committed (the bytes
its validators passed); no checkout filter runs. Git's merge hooks
(``pre-merge-commit``, ``post-merge``) do not run either: no ``git merge``
runs. Copies of outputs that an earlier gitrun moved aside to make room for
``git merge`` are settled first (:mod:`gitrun.commands.land.aside`).

Each step has its module beside this one: :mod:`~gitrun.commands.land.look`
and :mod:`~gitrun.commands.land.plan` (step 1),
:mod:`~gitrun.commands.land.journal` (step 2 and every record after it),
:mod:`~gitrun.commands.land.bring` (steps 5 and 6) and, for git's own lock
files, :mod:`~gitrun.commands.land.locks`.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from gitrun.commands.land.aside import settle_aside
from gitrun.commands.land.bring import bring
from gitrun.commands.land.journal import (
    Landing,
    drop_journal,
    landing_lock,
    read_journal,
    record,
    record_step,
)
from gitrun.commands.land.locks import clear_a_dead_ref_lock, held, wait_for_lock
from gitrun.commands.land.look import (
    Change,
    Where,
    changes_between,
    checked_out_ref,
    git_says,
    merged_tree,
    refuse_an_operation_in_progress,
)
from gitrun.commands.land.plan import Plan, refuse_what_is_in_the_way
from gitrun.commands.report.committed import read_committed
from gitrun.engine.crashpoints import crash_point
from gitrun.engine.states import COMPLETE, FAILED, PENDING
from gitrun.errors import CommandError, GitrunError
from gitrun.processes import reaper
from gitrun.store import git
from gitrun.store.branches import find_tip
from gitrun.store.local import LocalPaths, local_runs_under
from gitrun.words import counted


def land_run(repo: Path, run_id: str, squash: bool = False, partial: bool = False) -> str:
    """Merge (or squash) ``gitrun/<run>`` into the current branch; returns a summary.

    A landing a killed ``land`` had begun is finished first. A run with
    tasks not done is refused, with its counts, unless ``partial`` (then the
    summary says what it leaves out): landing half a run must be asked for,
    never happen by a word not said."""
    found = find_tip(repo, run_id)
    if found is None:
        raise GitrunError(
            f"run {run_id!r} has no branch gitrun/{run_id} here or on a remote; nothing to land"
        )
    tip = found.tip
    git.prepare_writes()
    where = Where.of(repo)
    local = LocalPaths.under(where.git_dir, run_id)
    with landing_lock(local, run_id):
        notes = _finish_other_runs(where, run_id)
        finished = _resume(where, local)
        notes += settle_aside(where, local.land_aside, tip)
        if finished is not None:
            return _said(finished, notes)
        return _said(_land(where, local, run_id, tip, squash, partial), notes)


def _said(summary: str, notes: list[str]) -> str:
    return "\n".join([summary, *notes])


def _land(
    where: Where, local: LocalPaths, run_id: str, tip: str, squash: bool, partial: bool
) -> str:
    repo = where.repo
    head = git.rev_parse(repo, "HEAD")
    if head is None:
        raise GitrunError("the current branch has no commits; check out the branch to land into")
    head_ref = checked_out_ref(repo)
    into = _into(head_ref)
    if git.is_ancestor(repo, tip, head):
        return f"run {run_id!r} is already landed in {into}"
    left_out = _not_done(repo, run_id, partial)
    refuse_an_operation_in_progress(where)
    tree = merged_tree(repo, run_id, head, tip)
    changes = changes_between(repo, head, tree)
    if squash and not changes:
        return f"run {run_id!r} is already landed in {into} (its files are all here)"
    plan = refuse_what_is_in_the_way(where, changes, run_id)
    for lock in (where.index_lock, *where.ref_locks(head_ref)):
        wait_for_lock(lock)
    me = reaper.identity(os.getpid())
    now = time.time()
    journal = Landing(
        run_id,
        os.getpid(),
        me.get("create_time"),
        me.get("cmdline"),
        now,
        head_ref,
        head,
        tip,
        squash,
        "begun",
        now,
    )
    record(local, journal, fresh=True)
    crash_point("land.journaled")
    message = f"gitrun: land run {run_id}\n\nGitrun-Run: {run_id}\n"
    commit = git.commit_tree(repo, tree, [head] if squash else [head, tip], message)
    journal = record_step(local, journal, "built", commit=commit)
    crash_point("land.built")
    journal = record_step(local, journal, "moving")
    crash_point("land.moving")
    _move_branch(where, local, journal)
    crash_point("land.moved")
    journal = record_step(local, journal, "moved")
    bring(where, local, journal, changes, plan)
    how = "squashed into one commit" if squash else "merged"
    return f"run {run_id!r} {how} into {into} ({_files(changes, plan)}){left_out}{_kept(head_ref)}"


def _into(head_ref: str) -> str:
    """Where a landing goes, as its sentences say it: git merges onto a
    detached HEAD as happily as onto a branch, and so does a landing."""
    return "the detached HEAD" if head_ref == "HEAD" else "the current branch"


def _kept(head_ref: str) -> str:
    """How to keep a landing that no branch holds."""
    if head_ref != "HEAD":
        return ""
    return "; no branch holds it: `git switch -c <branch>` keeps it"


def _files(changes: list[Change], plan: Plan) -> str:
    """How many files the landing changed, and how many of them a sparse
    checkout keeps out of the work tree."""
    said = counted(len(changes), "file")
    if plan.skip:
        said += f", {len(plan.skip)} of them outside the sparse checkout: committed, not written"
    return said


def _not_done(repo: Path, run_id: str, partial: bool) -> str:
    """What a landing leaves out, as the end of its summary ("" when every task
    is done, as the run's branch holds it); refuses a run not finished unless
    ``partial``, and ``partial`` where every task is done."""
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


def _move_branch(where: Where, local: LocalPaths, journal: Landing) -> None:
    """Compare-and-swap the branch from the commit looked at to the landing's."""
    assert journal.commit is not None
    args = ["update-ref", "-m", f"gitrun: land run {journal.run}"]
    if journal.head_ref == "HEAD":
        args.append("--no-deref")
    try:
        git.write_git(where.repo, *args, journal.head_ref, journal.commit, journal.old)
    except CommandError as exc:
        now = git.rev_parse(where.repo, journal.head_ref)
        if now == journal.commit:
            return
        drop_journal(local)
        shown = journal.head_ref.removeprefix("refs/heads/")
        if now != journal.old:
            raise GitrunError(
                f"{shown} moved while run {journal.run!r} was being landed; nothing was changed, "
                "land again"
            ) from exc
        for lock in where.ref_locks(journal.head_ref):
            if os.path.lexists(lock):
                raise held(lock, reaper.openers(lock)) from exc
        raise GitrunError(
            f"landing run {journal.run!r} stopped and changed nothing: git could not move "
            f"{shown} ({git_says(exc)})"
        ) from exc


# -- a landing a killed land began ---------------------------------------------


def _finish_other_runs(where: Where, run_id: str) -> list[str]:
    """Finish what a killed ``land`` of another run left half done: the
    branch, the index and the work tree are shared by every run's landing."""
    notes = []
    for other in local_runs_under(where.git_dir):
        local = LocalPaths.under(where.git_dir, other)
        if other == run_id or not local.land_journal.exists():
            continue
        with landing_lock(local, other):
            said = _resume(where, local)
        if said is not None:
            notes.append(f"first finished a stopped landing: {said}")
    return notes


def _resume(where: Where, local: LocalPaths) -> str | None:
    """Finish the landing a killed ``land`` journaled, or drop its journal
    when it had changed nothing anyone sees; a summary when it finished one."""
    journal = read_journal(local)
    if journal is None:
        drop_journal(local)  # not even its first line was whole: it had changed nothing
        return None
    if reaper.is_recorded_process(journal.identity()):
        raise GitrunError(
            f"the `gitrun land {journal.run}` of pid {journal.pid} still runs but does not hold "
            f"{local.land_lock}; stop that process, then land again"
        )
    repo = where.repo
    if journal.commit is None:
        drop_journal(local)  # it had not even made its commit
        return None
    if journal.step == "moving":  # its update-ref may have died holding the ref's locks
        for lock in where.ref_locks(journal.head_ref):
            clear_a_dead_ref_lock(lock, journal.at)
    now = git.rev_parse(repo, journal.head_ref)
    if now == journal.old:
        drop_journal(local)  # the branch never moved: land afresh
        return None
    if now != journal.commit:
        drop_journal(local)  # the branch has moved on since, by someone else's hand
        return None
    head_ref = checked_out_ref(repo)
    if head_ref != journal.head_ref:
        shown = journal.head_ref.removeprefix("refs/heads/")
        raise GitrunError(
            f"a stopped `gitrun land {journal.run}` moved {shown} to its commit "
            f"{journal.commit[:10]} before it brought the files and the index along, and "
            f"{shown} is not checked out now; check it out, then land again to finish"
        )
    changes = changes_between(repo, journal.old, journal.commit)
    plan = refuse_what_is_in_the_way(where, changes, journal.run, finishing=True)
    me = reaper.identity(os.getpid())
    journal = replace(
        journal, pid=os.getpid(), create_time=me.get("create_time"), cmdline=me.get("cmdline")
    )
    record(local, journal)  # this land carries it on now (its step and claim stay)
    bring(where, local, journal, changes, plan)
    how = "squashed into one commit" if journal.squash else "merged"
    return (
        f"run {journal.run!r} {how} into {_into(head_ref)} ({_files(changes, plan)}), finishing "
        f"what a stopped `gitrun land` had begun{_kept(head_ref)}"
    )
