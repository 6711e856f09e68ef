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
the ref's lock a killed ``update-ref`` left, made after the journal said
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
``git merge`` (``land-aside/``) are put back, or dropped when git holds
their bytes; only a copy that differs from its place and from every commit
is kept, and said so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gitrun.definition.outputs import blob_id, blob_on_disk, linked_parent
from gitrun.engine.crashpoints import crash_point
from gitrun.errors import CommandError, GitrunError
from gitrun.layout import branch_ref
from gitrun.processes import reaper
from gitrun.processes.proc import clean_env, run_cmd
from gitrun.store import git
from gitrun.store.flocks import Held, hold
from gitrun.store.jsonlines import LineWriter, file_error
from gitrun.store.local import LocalPaths, local_runs_under
from gitrun.store.records import VERSION, Fields, RecordInvalid

Entry = tuple[str, str]  # (mode, object id) of a path in a tree or the index
GITLINK = "160000"
SYMLINK = "120000"
LOCK_PATIENCE = 2.0  # seconds to wait for a live git command to let go of a lock
LOCK_CLOCK_SLACK = 1.0  # seconds: file times come from a coarser clock than time.time()
REF_LOCK_PATIENCE = 0.5  # seconds: a live `git update-ref` holds a ref's lock for milliseconds


@dataclass(frozen=True)
class Landing:
    """One line of a landing's journal (``land.jsonl``): who runs it, what
    it lands where, and the step it begins (``begun``, ``built``,
    ``moving``, ``moved``, ``indexing``) with the time it began it."""

    run: str
    pid: int
    create_time: float | None
    cmdline: list[str] | None
    started: float
    head_ref: str  # refs/heads/<branch>, or HEAD when it is detached
    old: str  # the commit the branch held
    tip: str  # the run's tip being landed
    squash: bool
    step: str
    at: float
    commit: str | None = None  # the landing's commit, from step "built" on
    claim: tuple[int, int] | None = None  # device and inode of its index.lock, when indexing

    def to_json(self) -> dict[str, Any]:
        return {
            "v": 1,
            "run": self.run,
            "pid": self.pid,
            "create_time": self.create_time,
            "cmdline": self.cmdline,
            "started": self.started,
            "head_ref": self.head_ref,
            "old": self.old,
            "tip": self.tip,
            "squash": self.squash,
            "step": self.step,
            "at": self.at,
            "commit": self.commit,
            "claim": list(self.claim) if self.claim is not None else None,
        }

    @classmethod
    def from_json(cls, data: Fields) -> Landing:
        cmdline, squash, claim = (data.data.get(k) for k in ("cmdline", "squash", "claim"))
        if not isinstance(squash, bool):
            raise ValueError("field 'squash' is not true or false")
        if claim is not None and not (
            isinstance(claim, list) and len(claim) == 2 and all(type(n) is int for n in claim)
        ):
            raise ValueError("field 'claim' is not a device and an inode number")
        return cls(
            data.string("run"),
            data.integer("pid"),
            data.optional_number("create_time"),
            data.strings("cmdline") if cmdline is not None else None,
            data.number("started"),
            data.string("head_ref"),
            data.string("old"),
            data.string("tip"),
            squash,
            data.string("step"),
            data.number("at"),
            data.optional_string("commit"),
            (claim[0], claim[1]) if claim is not None else None,
        )

    def identity(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time, "cmdline": self.cmdline}


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

    def ref_lock(self, head_ref: str) -> Path:
        """The lock file git makes while it updates ``head_ref``."""
        return (self.git_dir if head_ref == "HEAD" else self.common_dir) / f"{head_ref}.lock"

    @property
    def index_lock(self) -> Path:
        return self.git_dir / "index.lock"


def land_run(repo: Path, run_id: str, squash: bool = False, partial: bool = False) -> str:
    """Merge (or squash) ``gitrun/<run>`` into the current branch; returns a summary.

    A landing a killed ``land`` had begun is finished first. A run with
    tasks not done is refused, with its counts, unless ``partial`` (then the
    summary says what it leaves out): landing half a run must be asked for,
    never happen by a word not said."""
    ref = branch_ref(run_id)
    tip = git.rev_parse(repo, ref)
    if tip is None:
        raise GitrunError(f"run {run_id!r} has no branch gitrun/{run_id}; nothing to land")
    git.prepare_writes()
    where = _where(repo)
    local = LocalPaths.under(where.git_dir, run_id)
    with _landing_lock(local, run_id):
        notes = _finish_other_runs(where, run_id)
        finished = _resume(where, local)
        notes += _settle_aside(where, local.land_aside, tip)
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
    if git.is_ancestor(repo, tip, head):
        return f"run {run_id!r} is already landed in the current branch"
    left_out = _not_done(repo, run_id, partial)
    _refuse_an_operation_in_progress(where)
    tree = _merged_tree(repo, run_id, head, tip)
    changes = _changes(repo, head, tree)
    if squash and not changes:
        return f"run {run_id!r} is already landed in the current branch (its files are all here)"
    plan = _refuse_what_is_in_the_way(where, changes, run_id)
    head_ref = _head_ref(repo)
    for lock in (where.index_lock, where.ref_lock(head_ref)):
        _wait_for_lock(lock)
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
    _record(local, journal, fresh=True)
    crash_point("land.journaled")
    message = f"gitrun: land run {run_id}\n\nGitrun-Run: {run_id}\n"
    commit = git.commit_tree(repo, tree, [head] if squash else [head, tip], message)
    journal = _step(local, journal, "built", commit=commit)
    crash_point("land.built")
    journal = _step(local, journal, "moving")
    crash_point("land.moving")
    _move_branch(where, local, journal)
    crash_point("land.moved")
    journal = _step(local, journal, "moved")
    _bring(where, local, journal, changes, plan)
    how = "squashed into one commit" if squash else "merged"
    return f"run {run_id!r} {how} into the current branch ({len(changes)} files){left_out}"


# -- the journal and the lock --------------------------------------------------


@contextlib.contextmanager
def _landing_lock(local: LocalPaths, run_id: str) -> Iterator[None]:
    """Hold the run's landing lock, or refuse naming the ``land`` that holds it."""
    with contextlib.ExitStack() as stack:
        try:
            local.root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(hold(local.land_lock, wait=False))
        except Held:
            raise _busy(local, run_id) from None
        except OSError as exc:
            raise GitrunError(
                f"cannot write {local.root}: {exc.strerror or exc}; make it writable, then land "
                "again"
            ) from None
        yield


def _busy(local: LocalPaths, run_id: str) -> GitrunError:
    journal = _read_journal(local)
    who = ""
    if journal is not None and reaper.is_recorded_process(journal.identity()):
        who = f" (pid {journal.pid}, for {time.time() - journal.started:.0f} s)"
    return GitrunError(
        f"a `gitrun land {run_id}` is running already{who}; wait for it to finish, then land "
        "again if it did not"
    )


def _read_journal(local: LocalPaths) -> Landing | None:
    """The journal's last whole record: each step appends the landing's
    whole state as one line, written by one ``write`` (which a kill does not
    cut), so the last line that reads is where the landing got to. Appending
    costs no rename: on ext4 a rename over a file waits for that file's data
    to reach the disk."""
    try:
        text = local.land_journal.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise file_error(local.land_journal, exc, "read") from None
    for line in reversed(text.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        version = data.get("v", VERSION)
        if version != VERSION:
            raise GitrunError(
                f"{local.land_journal} has format version {version!r}, which this gitrun does "
                "not read: a landing another gitrun version began and did not finish; finish "
                "it with that version (`gitrun land` again)"
            )
        try:
            return Landing.from_json(Fields(data))
        except (RecordInvalid, ValueError, TypeError):
            continue
    return None


def _record(local: LocalPaths, journal: Landing, fresh: bool = False) -> None:
    """Append the landing's state to its journal (``fresh``: as its first line)."""
    if fresh:
        local.land_journal.unlink(missing_ok=True)
    writer = LineWriter(local.land_journal)
    try:
        writer.write(journal.to_json())
    finally:
        writer.close()


def _step(
    local: LocalPaths,
    journal: Landing,
    step: str,
    commit: str | None = None,
    claim: tuple[int, int] | None = None,
) -> Landing:
    journal = replace(
        journal, step=step, at=time.time(), commit=commit or journal.commit, claim=claim
    )
    _record(local, journal)
    return journal


def _drop(local: LocalPaths) -> None:
    """Remove the journal, then what it names (the claim last of all)."""
    local.land_journal.unlink(missing_ok=True)
    shutil.rmtree(local.land_staging, ignore_errors=True)
    for leftover in (local.land_index, local.land_claim):
        leftover.unlink(missing_ok=True)


def _finish_other_runs(where: Where, run_id: str) -> list[str]:
    """Finish what a killed ``land`` of another run left half done: the
    branch, the index and the work tree are shared by every run's landing."""
    notes = []
    for other in local_runs_under(where.git_dir):
        local = LocalPaths.under(where.git_dir, other)
        if other == run_id or not local.land_journal.exists():
            continue
        with _landing_lock(local, other):
            said = _resume(where, local)
        if said is not None:
            notes.append(f"first finished a stopped landing: {said}")
    return notes


def _resume(where: Where, local: LocalPaths) -> str | None:
    """Finish the landing a killed ``land`` journaled, or drop its journal
    when it had changed nothing anyone sees; a summary when it finished one."""
    journal = _read_journal(local)
    if journal is None:
        _drop(local)  # not even its first line was whole: it had changed nothing
        return None
    if reaper.is_recorded_process(journal.identity()):
        raise GitrunError(
            f"the `gitrun land {journal.run}` of pid {journal.pid} still runs but does not hold "
            f"{local.land_lock}; stop that process, then land again"
        )
    repo = where.repo
    if journal.commit is None:
        _drop(local)  # it had not even made its commit
        return None
    if journal.step == "moving":  # its update-ref may have died holding the ref's lock
        _clear_a_dead_ref_lock(where.ref_lock(journal.head_ref), journal.at)
    now = git.rev_parse(repo, journal.head_ref)
    if now == journal.old:
        _drop(local)  # the branch never moved: land afresh
        return None
    if now != journal.commit:
        _drop(local)  # the branch has moved on since, by someone else's hand
        return None
    head_ref = _head_ref(repo)
    if head_ref != journal.head_ref:
        shown = journal.head_ref.removeprefix("refs/heads/")
        raise GitrunError(
            f"a stopped `gitrun land {journal.run}` moved {shown} to its commit "
            f"{journal.commit[:10]} before it brought the files and the index along, and "
            f"{shown} is not checked out now; check it out, then land again to finish"
        )
    changes = _changes(repo, journal.old, journal.commit)
    plan = _refuse_what_is_in_the_way(where, changes, journal.run, finishing=True)
    me = reaper.identity(os.getpid())
    journal = replace(
        journal, pid=os.getpid(), create_time=me.get("create_time"), cmdline=me.get("cmdline")
    )
    _record(local, journal)  # this land carries it on now (its step and claim stay)
    _bring(where, local, journal, changes, plan)
    how = "squashed into one commit" if journal.squash else "merged"
    return (
        f"run {journal.run!r} {how} into the current branch ({len(changes)} files), finishing "
        "what a stopped `gitrun land` had begun"
    )


# -- looking -------------------------------------------------------------------


def _where(repo: Path) -> Where:
    out = git.git(
        repo, "rev-parse", "--path-format=absolute", "--absolute-git-dir", "--git-common-dir"
    )
    git_dir, common_dir = out.decode(errors="surrogateescape").splitlines()[:2]
    return Where(repo, Path(git_dir), Path(common_dir), git.object_format(repo))


def _head_ref(repo: Path) -> str:
    proc = run_cmd([*git.GIT, "-C", str(repo), "symbolic-ref", "-q", "HEAD"], check=False)
    return proc.stdout.decode(errors="surrogateescape").strip() or "HEAD"


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


def _refuse_an_operation_in_progress(where: Where) -> None:
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


def _merged_tree(repo: Path, run_id: str, head: str, tip: str) -> str:
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
            f"landing run {run_id!r} stopped and changed nothing: {_shown(conflicted)} changed "
            f"both in the current branch and in the run (a conflict); merge by hand with "
            f"`git merge gitrun/{run_id}` and resolve it there"
        )
    if proc.returncode == 129:  # usage: a git without --write-tree
        version = run_cmd([*git.GIT, "--version"], check=False).stdout.decode().strip()
        raise GitrunError(
            f"`gitrun land` needs git 2.38 or newer (for `git merge-tree --write-tree`), and "
            f"this is {version or 'an older git'}; upgrade git, then land again"
        )
    said = proc.stderr.decode(errors="replace").strip().splitlines()
    raise GitrunError(
        f"landing run {run_id!r} stopped and changed nothing: git merge-tree failed "
        f"({said[-1] if said else f'exit status {proc.returncode}'})"
    )


def _changes(repo: Path, old: str, new: str) -> list[Change]:
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
    to set), paths to delete."""

    write: list[Change] = field(default_factory=list)
    chmod: list[Change] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


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


def _refuse_what_is_in_the_way(
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
            f"{_shown(way.unmerged)} {_is(way.unmerged)} unmerged in the index; finish or abort "
            f"that merge first, {then}"
        )
    if way.staged:
        raise GitrunError(
            f"{_shown(way.staged)} {_has(way.staged)} staged changes the landing of run "
            f"{run_id!r} would overwrite; commit them or unstage them (`git restore --staged`), "
            f"{then}"
        )
    if way.edited:
        raise GitrunError(
            f"your uncommitted changes to {_shown(way.edited)} would be overwritten by the "
            f"landing of run {run_id!r}; commit or stash them, {then}"
        )
    if way.untracked:
        them = "it" if len(way.untracked) == 1 else "them"
        raise GitrunError(
            f"untracked {_shown(way.untracked)} would be overwritten by the run's different "
            f"version; move {them} away or delete {them}, {then}"
        )
    if way.blocked:
        raise GitrunError(
            f"{_shown(way.blocked)} cannot be written: a directory, a file or a symlink stands "
            f"where the run's file or its folder goes; move it away, {then}"
        )
    return plan


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _is(paths: list[str]) -> str:
    return "is" if len(paths) == 1 else "are"


def _has(paths: list[str]) -> str:
    return "has" if len(paths) == 1 else "have"


# -- git's lock files ----------------------------------------------------------


def _wait_for_lock(lock: Path) -> None:
    """Return once ``lock`` is gone; one that stays (held by a live git, or
    left by a dead one that was not a landing) is named, never removed."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while os.path.lexists(lock):
        if time.monotonic() >= deadline:
            raise _held(lock, reaper.openers(lock))
        time.sleep(0.02)


def _clear_a_dead_ref_lock(lock: Path, since: float) -> None:
    """The ref's lock a landing's ``git update-ref`` left when it was killed
    with it: one made after the landing said it was moving the branch
    (``since``) and still there after a live ``update-ref`` would have
    finished (it takes milliseconds)."""
    deadline = time.monotonic() + REF_LOCK_PATIENCE
    while os.path.lexists(lock) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(OSError):
        if os.lstat(lock).st_mtime >= since - LOCK_CLOCK_SLACK and not reaper.openers(lock):
            os.unlink(lock)


def _held(lock: Path, holders: set[int] | None) -> GitrunError:
    if holders:
        named = ", ".join(f"pid {pid}{_command(pid)}" for pid in sorted(holders))
        return GitrunError(
            f"{lock} is held open by {named}; wait for that git command to finish, then land again"
        )
    return GitrunError(
        f"{lock} exists, and no `gitrun land` made it: another git command is running (on "
        "another machine, or as another user), or one was killed while it held it; if no git "
        "command is running, remove that file, then land again"
    )


def _command(pid: int) -> str:
    """`` (`git add`)``: the program and its first argument, to name a process."""
    cmdline = reaper.identity(pid).get("cmdline") or []
    if not cmdline:
        return ""
    words = [os.path.basename(cmdline[0]), *cmdline[1:2]]
    return f" (`{' '.join(words)[:60]}`)"


# -- changing ------------------------------------------------------------------


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
        _drop(local)
        shown = journal.head_ref.removeprefix("refs/heads/")
        if now != journal.old:
            raise GitrunError(
                f"{shown} moved while run {journal.run!r} was being landed; nothing was changed, "
                "land again"
            ) from exc
        lock = where.ref_lock(journal.head_ref)
        if os.path.lexists(lock):
            raise _held(lock, reaper.openers(lock)) from exc
        raise GitrunError(
            f"landing run {journal.run!r} stopped and changed nothing: git could not move "
            f"{shown} ({_git_says(exc)})"
        ) from exc


def _bring(
    where: Where, local: LocalPaths, journal: Landing, changes: list[Change], plan: Plan
) -> None:
    """Steps 5 and 6: the work tree and the index get the landing's entries
    of the changed paths (``plan`` says which files to write or delete);
    then the journal goes. ``journal`` is as last recorded (by a dead
    ``land``, when this one finishes it)."""
    try:
        _bring_along(where, local, journal, changes, plan)
    except OSError as exc:
        shown = journal.head_ref.removeprefix("refs/heads/")
        raise GitrunError(
            f"run {journal.run!r} is committed on {shown}, but {exc.filename or 'a file'} could "
            f"not be written ({exc.strerror or exc}) while its files and the index were brought "
            "along; fix that (free space, make it writable), then land again to finish"
        ) from None


def _bring_along(
    where: Where, local: LocalPaths, journal: Landing, changes: list[Change], plan: Plan
) -> None:
    shutil.rmtree(local.land_staging, ignore_errors=True)
    if plan.write:
        _stage(where, local.land_staging, plan.write)
        crash_point("land.staged")
        for n, change in enumerate(plan.write):
            _place(where.repo, local.land_staging / str(n), change.path)
            crash_point("land.file")
    for change in plan.chmod:
        assert change.new is not None
        _set_mode(f"{where.repo}/{change.path}", change.new[0])
    for path in plan.delete:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{where.repo}/{path}")
        _prune(where.repo, path)
    shutil.rmtree(local.land_staging, ignore_errors=True)
    _update_index(where, local, journal, changes)
    crash_point("land.indexed")
    _drop(local)


def _stage(where: Where, staging: Path, changes: list[Change]) -> None:
    """Write the blobs of ``changes`` to ``staging/<n>``, streamed from one
    ``git cat-file --batch`` (a blob may be of any size)."""
    staging.mkdir(parents=True)
    argv = [*git.GIT, "-C", str(where.repo), "cat-file", "--batch"]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=clean_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    ids = "".join(f"{c.new[1]}\n" for c in changes if c.new is not None).encode()
    stdin = proc.stdin

    def feed() -> None:  # in a thread: git answers while it reads, and pipes fill up
        with contextlib.suppress(BrokenPipeError), stdin:
            stdin.write(ids)

    feeder = threading.Thread(target=feed, name="gitrun-land-feed", daemon=True)
    feeder.start()
    try:
        for n, change in enumerate(changes):
            assert change.new is not None
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise GitrunError(
                    f"the run's {change.path} (object {change.new[1][:10]}) is missing from the "
                    "repository; fetch the run's branch again (`git fetch`), then land again"
                )
            _write_staged(staging / str(n), proc.stdout, int(header[2]), change.new[0])
            proc.stdout.read(1)  # the newline after each object
    finally:
        proc.stdout.close()
        proc.wait()
        feeder.join()


def _write_staged(target: Path, source: Any, size: int, mode: str) -> None:
    if mode == SYMLINK:
        os.symlink(os.fsdecode(source.read(size)), target)
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if mode == "100755" else 0o666)
    with os.fdopen(fd, "wb") as handle:
        left = size
        while left:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                raise GitrunError(f"git cat-file stopped short while writing {target}; land again")
            handle.write(chunk)
            left -= len(chunk)


def _place(repo: Path, staged: Path, path: str) -> None:
    """Rename ``staged`` to ``path`` in the work tree: atomic, so the file is
    the old one or the run's, never half of one. Directories on the way are
    made as needed, one name at a time, never through a symlink."""
    names = path.split("/")
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=fd)
            step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = step
        try:
            os.replace(staged, names[-1], dst_dir_fd=fd)
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # the work tree is on another file system than .git
                raise
            _copy_beside(staged, names[-1], fd)
    finally:
        os.close(fd)


def _copy_beside(staged: Path, name: str, dir_fd: int) -> None:
    """Where ``.git`` is on another file system: copy the staged file next
    to its place, then rename it there."""
    temp = f".{name}.gitrun-land"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp, dir_fd=dir_fd)
    if staged.is_symlink():
        os.symlink(os.readlink(staged), temp, dir_fd=dir_fd)
    else:
        mode = os.lstat(staged).st_mode & 0o777
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, dir_fd=dir_fd)
        with os.fdopen(out, "wb") as handle, open(staged, "rb") as data:
            shutil.copyfileobj(data, handle)
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    staged.unlink()


def _set_mode(full: str, mode: str) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(full, (0o777 if mode == "100755" else 0o666) & ~umask, follow_symlinks=False)


def _prune(repo: Path, path: str) -> None:
    """Remove the directories a deleted file leaves empty, as git does."""
    parts = path.split("/")[:-1]
    while parts:
        try:
            os.rmdir(f"{repo}/{'/'.join(parts)}")
        except OSError:
            return
        parts.pop()


def _update_index(where: Where, local: LocalPaths, journal: Landing, changes: list[Change]) -> None:
    """The landing's entries of the changed paths into the user's index
    (nothing else of it changes), with their stat data, under git's own
    ``index.lock``, which this landing takes and can later prove its own.

    The lock is made as git makes it, exclusively, but as a hard link to a
    claim file whose device and inode the journal recorded first: whoever
    finds an ``index.lock`` with that inode after this process died knows
    it for this landing's, and anything else for someone else's. The claim
    file stays until the journal is gone, so no other file can get its
    inode meanwhile. Under the lock, git updates a copy of the index
    (``GIT_INDEX_FILE``), which is renamed over the index; then the lock goes."""
    if journal.step == "indexing" and journal.claim is not None:
        _drop_own_lock(where.index_lock, local.land_claim, journal.claim)  # a dead land's
    private, claim = local.land_index, local.land_claim
    for leftover in (private, claim):
        leftover.unlink(missing_ok=True)
    _clear_private_lock(local.land_index_lock)
    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    made = os.fstat(fd)
    os.close(fd)
    journal = _step(local, journal, "indexing", claim=(made.st_dev, made.st_ino))
    crash_point("land.indexing")
    _take(claim, where.index_lock)
    try:
        crash_point("land.holding")
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(where.git_dir / "index", private)
        zero = "0" * len(journal.tip)
        entries = [(*(c.new or ("0", zero)), c.path) for c in changes]
        try:
            git.set_index_entries(where.repo, entries, private)
        except CommandError as exc:
            raise GitrunError(
                f"run {journal.run!r} is committed on the current branch and its files are in "
                f"place, but git could not write its index ({_git_says(exc)}); land again to "
                "finish"
            ) from exc
        os.replace(private, where.git_dir / "index")
    finally:
        where.index_lock.unlink(missing_ok=True)  # ours: the claim, linked by _take


def _clear_private_lock(lock: Path) -> None:
    """git's lock of the landing's private index, left by a git command a
    dead ``land`` started: waited for while a live process holds it open,
    then removed (no one else writes that index)."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while os.path.lexists(lock):
        holders = reaper.openers(lock)
        if not holders:
            lock.unlink(missing_ok=True)
        elif time.monotonic() >= deadline:
            raise _held(lock, holders)
        else:
            time.sleep(0.02)


def _take(claim: Path, lock: Path) -> None:
    """Make ``lock`` a hard link to ``claim``: exclusive, as git's O_EXCL is;
    a lock someone holds is waited for a little, then named."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while True:
        try:
            os.link(claim, lock)
            return
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise _held(lock, reaper.openers(lock)) from None
            time.sleep(0.02)


def _drop_own_lock(lock: Path, claim: Path, journaled: tuple[int, int]) -> None:
    """Remove ``lock`` when it is the very file the journal names: the claim
    file, still there with the journaled device and inode (while it exists,
    no other file can have them)."""
    with contextlib.suppress(OSError):
        found = [(st.st_dev, st.st_ino) for st in (os.lstat(claim), os.lstat(lock))]
        if found == [journaled, journaled]:
            os.unlink(lock)


def _git_says(exc: CommandError) -> str:
    lines = [ln.strip() for ln in exc.output.splitlines() if ln.strip()]
    interesting = [ln for ln in lines if not ln.startswith(("hint:", "Aborting"))]
    return " ".join(interesting[:4]) or str(exc)


# -- copies an earlier gitrun set aside ---------------------------------------


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
    notes = _settle_aside(_where(repo), local.land_aside, tip)
    if notes:
        raise GitrunError(f"{notes[0]}; then {then}")


def _settle_aside(where: Where, aside_dir: Path, tip: str) -> list[str]:
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
        f"kept {_shown(kept)} in {aside_dir}: an earlier `gitrun land` set "
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
