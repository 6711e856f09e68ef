"""Git's own lock files, as a landing meets them: waited for while a live git
holds one, named (never removed) when one stays that is someone else's, and
removed only when it is provably a dead landing's: the ref's lock its killed
``git update-ref`` left, or an ``index.lock`` that is its claim file.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from gitrun.errors import GitrunError
from gitrun.processes import reaper

LOCK_PATIENCE = 2.0  # seconds to wait for a live git command to let go of a lock
LOCK_CLOCK_SLACK = 1.0  # seconds: file times come from a coarser clock than time.time()
REF_LOCK_PATIENCE = 0.5  # seconds: a live `git update-ref` holds a ref's lock for milliseconds


def wait_for_lock(lock: Path) -> None:
    """Return once ``lock`` is gone; one that stays (held by a live git, or
    left by a dead one that was not a landing) is named, never removed."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while os.path.lexists(lock):
        if time.monotonic() >= deadline:
            raise held(lock, reaper.openers(lock))
        time.sleep(0.02)


def clear_a_dead_ref_lock(lock: Path, since: float) -> None:
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


def held(lock: Path, holders: set[int] | None) -> GitrunError:
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


def take(claim: Path, lock: Path) -> None:
    """Make ``lock`` a hard link to ``claim``: exclusive, as git's O_EXCL is;
    a lock someone holds is waited for a little, then named."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while True:
        try:
            os.link(claim, lock)
            return
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise held(lock, reaper.openers(lock)) from None
            time.sleep(0.02)


def drop_own_lock(lock: Path, claim: Path, journaled: tuple[int, int]) -> None:
    """Remove ``lock`` when it is the very file the journal names: the claim
    file, still there with the journaled device and inode (while it exists,
    no other file can have them)."""
    with contextlib.suppress(OSError):
        found = [(st.st_dev, st.st_ino) for st in (os.lstat(claim), os.lstat(lock))]
        if found == [journaled, journaled]:
            os.unlink(lock)


def clear_private_lock(lock: Path) -> None:
    """git's lock of the landing's private index, left by a git command a
    dead ``land`` started: waited for while a live process holds it open,
    then removed (no one else writes that index)."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while os.path.lexists(lock):
        holders = reaper.openers(lock)
        if not holders:
            lock.unlink(missing_ok=True)
        elif time.monotonic() >= deadline:
            raise held(lock, holders)
        else:
            time.sleep(0.02)
