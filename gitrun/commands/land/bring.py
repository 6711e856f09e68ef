"""Steps 5 and 6 of a landing: the run's files into the work tree, then its
entries of the changed paths into the index.

Every blob the work tree lacks is streamed from one ``git cat-file --batch``
into ``land-new/`` beside the journal, then renamed into place, one atomic
rename per file, so a file is either the old one or the run's, never cut
short; deleted paths are unlinked. Both steps are idempotent: a landing
that finishes a killed one runs them again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from gitrun.commands.land.journal import Landing, drop_journal, record_step
from gitrun.commands.land.locks import clear_private_lock, drop_own_lock, take
from gitrun.commands.land.look import SYMLINK, Change, Where, git_says
from gitrun.commands.land.plan import Plan
from gitrun.engine.crashpoints import crash_point
from gitrun.errors import CommandError, GitrunError
from gitrun.processes.proc import clean_env
from gitrun.store import git
from gitrun.store.local import LocalPaths


def bring(
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
    _update_index(where, local, journal, changes, plan.skip)
    crash_point("land.indexed")
    drop_journal(local)


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


def _update_index(
    where: Where, local: LocalPaths, journal: Landing, changes: list[Change], skip: list[str]
) -> None:
    """The landing's entries of the changed paths into the user's index
    (nothing else of it changes), with their stat data (``skip``: with the
    skip-worktree bit instead, outside a sparse checkout), under git's own
    ``index.lock``, which this landing takes and can later prove its own.

    The lock is made as git makes it, exclusively, but as a hard link to a
    claim file whose device and inode the journal recorded first: whoever
    finds an ``index.lock`` with that inode after this process died knows
    it for this landing's, and anything else for someone else's. The claim
    file stays until the journal is gone, so no other file can get its
    inode meanwhile. Under the lock, git updates a copy of the index
    (``GIT_INDEX_FILE``), which is renamed over the index; then the lock goes."""
    if journal.step == "indexing" and journal.claim is not None:
        drop_own_lock(where.index_lock, local.land_claim, journal.claim)  # a dead land's
    private, claim = local.land_index, local.land_claim
    for leftover in (private, claim):
        leftover.unlink(missing_ok=True)
    clear_private_lock(local.land_index_lock)
    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    made = os.fstat(fd)
    os.close(fd)
    journal = record_step(local, journal, "indexing", claim=(made.st_dev, made.st_ino))
    crash_point("land.indexing")
    take(claim, where.index_lock)
    try:
        crash_point("land.holding")
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(where.git_dir / "index", private)
        zero = "0" * len(journal.tip)
        entries = [(*(c.new or ("0", zero)), c.path) for c in changes]
        try:
            git.set_index_entries(where.repo, entries, private)
            if skip:
                names = "".join(f"{path}\0" for path in skip).encode(errors="surrogateescape")
                env = {"GIT_INDEX_FILE": str(private)}
                git.write_git(
                    where.repo,
                    "update-index",
                    "--skip-worktree",
                    "-z",
                    "--stdin",
                    input=names,
                    env=env,
                )
        except CommandError as exc:
            raise GitrunError(
                f"run {journal.run!r} is committed on the current branch and its files are in "
                f"place, but git could not write its index ({git_says(exc)}); land again to "
                "finish"
            ) from exc
        os.replace(private, where.git_dir / "index")
    finally:
        where.index_lock.unlink(missing_ok=True)  # ours: the claim, linked by take
