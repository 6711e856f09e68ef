"""Committing validated outputs to the run's branch with git plumbing.

A commit is built from the exact bytes that were validated (their blob ids
are compared with git's), on a tree derived from the branch's tree in a
private index file, and published with ``update-ref <new> <old>``: a
compare-and-swap that, when another process moved the branch meanwhile, is
retried on top of the new tip. The user's HEAD, index and work tree are never
touched. ``git commit --only`` is avoided on purpose: it rewrites the user's
index and can drop entries staged at the same moment. A driver's landings
reach it through the background queue of :mod:`gitrun.engine.commitqueue`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitrun.definition.outputs import OutputCheck, blob_id, regular_files_beneath
from gitrun.engine.crashpoints import crash_point
from gitrun.errors import CommandError, GitrunError
from gitrun.layout import branch_ref
from gitrun.store import git, refs
from gitrun.store.branches import refuse_checked_out
from gitrun.store.flocks import hold
from gitrun.store.local import LocalPaths
from gitrun.store.records import (
    VERSION,
    Fields,
    RecordInvalid,
    load_record,
    warn_stderr,
    write_record,
)
from gitrun.store.regular import remove_file

if TYPE_CHECKING:
    from gitrun.store.records import Warn

MAX_RACES = 50
LOCK_PATIENCE = 2.0  # seconds a ref lock may stay before it is reported


# A batch of this many new blobs or more is written as one pack by
# ``git fast-import`` (from the validated bytes themselves) instead of as loose
# objects, one file each: several times cheaper where creating files is dear,
# as at a fan-out's final flush. It is git's own threshold: fast-import keeps
# fewer objects than transfer.unpackLimit (100 unless configured) loose
# anyway, so small batches never leave a pack of their own behind.
PACK_AT = 100
PACK_MAX_BYTES = 64 << 20  # a bigger batch is hashed from the disk, never copied in memory


@dataclass(frozen=True)
class Landing:
    """A validated task ready to commit."""

    task: str
    attempt: int
    files: list[OutputCheck]
    # What the attempt made its outputs from (gitrun.definition.provenance),
    # when it is known: the commit's trailers say it beside the ledger.
    made_from: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Tip:
    """The record of the last commit gitrun published on a run's branch
    (:attr:`gitrun.store.local.LocalPaths.tip`)."""

    commit: str

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "commit": self.commit}

    @classmethod
    def from_json(cls, data: Fields) -> Tip:
        commit = data.string("commit")
        if not _HEX.fullmatch(commit):
            raise RecordInvalid("commit", "is not a commit id")
        return cls(commit)


_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def read_tip(local: LocalPaths, warn: Warn = warn_stderr) -> str | None:
    """The run's last published commit as recorded here, or None (a damaged
    record is only a warning: it serves recovery and advice, never correctness)."""
    tip = load_record(
        local.tip,
        Tip.from_json,
        what="record of the run branch's last commit",
        fix="ignored: recovery falls back on the branch's reflog",
        warn=warn,
    )
    return tip.commit if tip is not None else None


def note_tip(local: LocalPaths, commit: str) -> None:
    """Record ``commit`` as the run's tip; a convenience for recovery, never a failure."""
    with contextlib.suppress(OSError):
        write_record(local.tip, Tip(commit))


def trailers(run_id: str, landings: list[Landing], extra: dict[str, str] | None = None) -> str:
    lines = [f"Gitrun-Run: {run_id}"]
    lines += [f"{key}: {value}" for key, value in (extra or {}).items()]
    lines += [f"Gitrun-Task: {landing.task}" for landing in landings]
    lines += [f"Gitrun-Attempt: {landing.task}={landing.attempt}" for landing in landings]
    lines += [
        f"Gitrun-Made-From: {landing.task} definition={made['definition'][:16]} "
        f"inputs={made['inputs'][:16]}"
        for landing in landings
        if (made := landing.made_from) and {"definition", "inputs"} <= made.keys()
    ]
    return "\n".join(lines)


def landing_message(run_id: str, landings: list[Landing]) -> str:
    ids = [landing.task for landing in landings]
    if not ids:
        subject = f"gitrun({run_id}): update the ledger"
    else:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        subject = f"gitrun({run_id}): {shown} done"
    return f"{subject}\n\n{trailers(run_id, landings)}\n"


class Committer:
    """Publishes commits on ``refs/heads/gitrun/<run>``; safe across processes."""

    def __init__(self, repo: Path, run_id: str, local: LocalPaths) -> None:
        self.repo = repo
        self.run_id = run_id
        self.local = local
        self.ref = branch_ref(run_id)
        self.object_format = git.object_format(repo)
        # What this committer last saw, so that a commit on top of its own
        # last one costs no process to look it up: the branch's tip (the
        # compare-and-swap proves it, and a failed one reads it again), the
        # private index's state when it held that tip's tree (its stat and
        # checksum, so that another process's use of the index is noticed), the blob
        # ids of gitrun's own files there. Only ever a shortcut: none of it
        # outlives the process, and a miss costs what every commit once did.
        self._tip: str | None = None
        self._index_holds: tuple[str, tuple[object, ...]] | None = None
        self._own_blobs: dict[str, str] = {}
        # The landings a commit left out: task -> the sentence (take_left_out).
        self._left_out: dict[str, str] = {}

    def commit(
        self,
        landings: list[Landing],
        own_files: dict[str, bytes],
        message: str,
        parent_required: bool = True,
    ) -> str:
        """Commit the landings' files and gitrun's own files; returns the new tip.

        Six git processes when the branch is where this committer left it:
        ``check-ignore`` for the landings' outputs, ``hash-object``,
        ``update-index`` and ``write-tree`` on the index kept from the last
        commit, ``commit-tree``, and ``update-ref``.

        A landing with an output git ignores now (a rule added during the
        run) is left out, ``message`` made again for the rest; the sentence
        saying so waits in :meth:`take_left_out`.
        """
        kept = self._not_ignored(landings)
        if len(kept) < len(landings):
            landings, message = kept, landing_message(self.run_id, kept)
        entries = self._blobs(landings, own_files)
        self.local.root.mkdir(parents=True, exist_ok=True)
        with hold(self.local.commit_lock):
            self._clear_dead_index_lock()
            old = self._tip or git.rev_parse(self.repo, self.ref)
            locked_since: float | None = None
            blocked: refs.RefBlocked | None = None
            for _ in range(MAX_RACES):
                if old is None and parent_required:
                    raise GitrunError(self._gone())
                tree = self._tree(old, entries)
                new = git.commit_tree(self.repo, tree, [old] if old else [], message)
                crash_point("commit.made")
                refuse_checked_out(self.local.common_git_dir, self.run_id)
                try:
                    moved = refs.update_ref(self.repo, self.ref, new, old)
                except refs.RefBlocked as error:
                    # A live git process (`git pack-refs`, say) holds the lock
                    # for milliseconds; a lock that stays is a dead one's.
                    blocked = error
                    locked_since = locked_since or time.monotonic()
                    if not error.locked or time.monotonic() - locked_since > LOCK_PATIENCE:
                        raise
                    time.sleep(0.05)
                    continue
                blocked = None
                if moved:
                    crash_point("commit.published")
                    self._published(old, new, entries, own_files)
                    note_tip(self.local, new)
                    return new
                # Moved by someone else (or gone): build again on what is there now.
                self._tip = None
                old = git.rev_parse(self.repo, self.ref)
        if blocked is not None:
            raise blocked  # locked to the last try: no race, a lock
        raise GitrunError(
            f"could not publish a commit on gitrun/{self.run_id}: the branch kept moving "
            f"({MAX_RACES} tries); is another program rewriting it?"
        )

    def start_branch(
        self, base: str, own_files: dict[str, bytes], message: str, replacing: str | None = None
    ) -> str:
        """The run's first commit: ``base`` plus the run definition (``replacing``:
        the branch's tip now, for a run started again; else it has none)."""
        entries = self._blobs([], own_files)
        self.local.root.mkdir(parents=True, exist_ok=True)
        with hold(self.local.commit_lock):
            self._clear_dead_index_lock()
            self._index_holds = None
            git.read_tree(self.repo, base, self.local.index)
            tree = git.write_tree(self.repo, entries, self.local.index)
            new = git.commit_tree(self.repo, tree, [base], message)
            refuse_checked_out(self.local.common_git_dir, self.run_id)
            if refs.update_ref(self.repo, self.ref, new, replacing):
                self._published(None, new, entries, own_files)
                note_tip(self.local, new)
            else:
                raise GitrunError(
                    f"branch gitrun/{self.run_id} appeared while starting the run; continue it "
                    f"with `gitrun resume {self.run_id}`"
                )
            return new

    def _not_ignored(self, landings: list[Landing]) -> list[Landing]:
        """The landings none of whose outputs git ignores, asked at commit time
        (one ``check-ignore`` for the batch): gitrun never commits an ignored path."""
        paths = [check.path for landing in landings for check in landing.files]
        rules = git.ignored_by(self.repo, paths) if paths else {}
        if not rules:
            return landings
        kept = []
        for landing in landings:
            ignored = [check.path for check in landing.files if check.path in rules]
            if not ignored:
                kept.append(landing)
                continue
            path = ignored[0]
            self._left_out[landing.task] = (
                f"{landing.task}: {path} is ignored by git ({rules[path]}), so gitrun did not "
                "commit it and the task is not done; stop ignoring it and "
                f"`gitrun resume {self.run_id}` commits it from the disk"
            )
        return kept

    def take_left_out(self) -> dict[str, str]:
        """The landings the commits since the last call left out: task -> why."""
        said, self._left_out = self._left_out, {}
        return said

    @property
    def last_tip(self) -> str | None:
        """The commit this committer last published or found at the branch's
        tip, or None before its first look (a first guess: the next
        compare-and-swap proves or refutes it)."""
        return self._tip

    def own_blobs_at(self, tip: str) -> Mapping[str, str] | None:
        """Blob ids of gitrun's own files at ``tip`` as this committer wrote
        them there, or None when it does not know that commit."""
        return self._own_blobs if tip == self._tip else None

    def own_blobs_at_tip(self) -> Mapping[str, str] | None:
        """Blob ids of gitrun's own files at the commit this committer last
        published (what the branch holds unless someone else moved it, which
        the next compare-and-swap finds out), or None before its first."""
        return self._own_blobs if self._tip is not None else None

    def _tree(self, old: str | None, entries: list[tuple[str, str, str]]) -> str:
        """``old``'s tree with ``entries``, in the private index; ``read-tree``
        only when the index does not hold ``old``'s tree already."""
        holds, self._index_holds = self._index_holds, None
        if holds is None or old is None or holds != (old, self._index_state()):
            git.read_tree(self.repo, old, self.local.index)
        return git.write_tree(self.repo, entries, self.local.index)

    def _published(
        self,
        old: str | None,
        new: str,
        entries: list[tuple[str, str, str]],
        own_files: dict[str, bytes],
    ) -> None:
        """Remember ``new`` as the tip, its tree as the index's, and its own files."""
        own = {path: sha for _mode, sha, path in entries if path in own_files}
        if old is not None and old == self._tip:
            self._own_blobs.update(own)
        else:
            self._own_blobs = own
        self._tip = new
        self._index_holds = (new, self._index_state())

    def _index_state(self) -> tuple[object, ...]:
        """Identity of the private index file as it is now: git replaces it
        by a rename on every write, and ends it with a checksum of its
        content (zeros under index.skipHash, where the stat has to do)."""
        try:
            with self.local.index.open("rb") as file:
                st = os.fstat(file.fileno())
                file.seek(max(0, st.st_size - 32))
                tail = file.read()
        except OSError:
            return ()
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, tail)

    def _gone(self) -> str:
        """The sentence for a run branch deleted under a live run."""
        branch = f"gitrun/{self.run_id}"
        tip = read_tip(self.local)
        if tip and git.rev_parse(self.repo, tip):
            how = (
                f"its last tip was {tip[:12]} (recorded in {self.local.tip}): restore it with "
                f"`git branch {branch} {tip}`, or start over"
            )
        else:
            how = "restore it from a clone or a remote that has it, or start over"
        return (
            f"branch {branch} has disappeared; gitrun will not recreate it behind your back — {how}"
        )

    def _clear_dead_index_lock(self) -> None:
        """Only a committer holding commit.lock touches the private index, so
        with that lock held, an index.lock is a dead committer's (a driver
        killed while git wrote the index): remove it, never ask the user to."""
        remove_file(self.local.index.with_name(self.local.index.name + ".lock"))

    def _blobs(
        self, landings: list[Landing], own_files: dict[str, bytes]
    ) -> list[tuple[str, str, str]]:
        """Write blobs: one ``hash-object --stdin-paths`` for every file, or
        for a batch of :data:`PACK_AT` or more, one ``fast-import`` of the
        validated bytes into a pack (see :data:`PACK_AT`).

        Outputs are hashed where they lie (a file that changed after
        validation, or is gone, is stored from the validated bytes instead).
        gitrun's own files are hashed from a private copy of the bytes given,
        since the ledger grows on disk while a commit is built; one whose
        blob the branch's tip already holds (as this committer left it) is
        not written again.
        """
        fmt = self.object_format
        entries: list[tuple[str, str, str]] = []
        outputs: list[tuple[str, str, bytes, str]] = []  # mode, path, bytes, id
        for landing in landings:
            for check in landing.files:
                assert check.data is not None
                sha = check.blob or blob_id(check.data, fmt)
                outputs.append((check.mode, check.path, check.data, sha))
        known = self._own_blobs if self._tip is not None else {}
        fresh: list[tuple[str, bytes, str]] = []  # path, bytes, id
        for path, data in own_files.items():
            sha = blob_id(data, fmt)
            if known.get(path) == sha:
                entries.append(("100644", sha, path))
            else:
                fresh.append((path, data, sha))
        if len(outputs) + len(fresh) >= PACK_AT and _packable(outputs, fresh):
            try:
                git.write_git(
                    self.repo,
                    "fast-import",
                    "--quiet",
                    "--done",
                    input=_blob_stream(outputs, fresh),
                )
            except CommandError:
                pass  # stored as loose objects below, as a small batch is
            else:
                entries += [("100644", sha, path) for path, _data, sha in fresh]
                entries += [(mode, sha, path) for mode, path, _data, sha in outputs]
                return entries
        # Hashing from disk saves a process per file; never through a link (a
        # file there is not the validated one anyway).
        on_disk = regular_files_beneath(self.repo, [path for _, path, _, _ in outputs])
        self.local.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="blobs-", dir=self.local.root) as scratch:
            copies = []
            for n, (_path, data, _sha) in enumerate(fresh):
                copy = Path(scratch) / str(n)
                copy.write_bytes(data)
                copies.append(str(copy))
            try:
                hashed = git.hash_files(self.repo, on_disk + copies)
            except CommandError:  # a file went away meanwhile: each is stored alone below
                hashed = []
        ids = dict(zip(on_disk, hashed[: len(on_disk)], strict=False))
        staged = hashed[len(on_disk) :]
        for n, (path, data, sha) in enumerate(fresh):
            # A copy that did not hash as its bytes would is stored alone.
            ok = n < len(staged) and staged[n] == sha
            entries.append(("100644", sha if ok else git.hash_bytes(self.repo, data), path))
        for mode, path, data, sha in outputs:
            # When the file changed after validation (or is not on disk), store
            # the validated bytes themselves.
            ok = ids.get(path) == sha
            entries.append((mode, sha if ok else git.hash_bytes(self.repo, data), path))
        return entries


def _packable(
    outputs: list[tuple[str, str, bytes, str]], fresh: list[tuple[str, bytes, str]]
) -> bool:
    size = sum(len(data) for _, _, data, _ in outputs) + sum(len(data) for _, data, _ in fresh)
    return size <= PACK_MAX_BYTES


def _blob_stream(
    outputs: list[tuple[str, str, bytes, str]], fresh: list[tuple[str, bytes, str]]
) -> bytes:
    """A ``fast-import`` stream of these blobs (their ids are known already:
    git's id of a blob is the hash of its bytes)."""
    parts = []
    for data in [data for _, _, data, _ in outputs] + [data for _, data, _ in fresh]:
        parts += [b"blob\ndata %d\n" % len(data), data, b"\n"]
    parts.append(b"done\n")
    return b"".join(parts)
