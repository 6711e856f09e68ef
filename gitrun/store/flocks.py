"""Exclusive locks on files with ``flock``, without importing filelock.

The run's driver lock and the commit lock are ``flock`` locks, which the
kernel drops when their holder dies: nothing to clean up after a crash.
filelock takes them the same way but imports asyncio on the way (~45 ms
of every ``gitrun start``); this takes them directly, interoperating with
filelock's own (the same ``flock`` on the same file), and hands over to
filelock only where the file system has no ``flock`` at all (its soft,
marker-file lock then).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from gitrun.store.regular import NotRegular, explained, kind_of, refuse_other_kinds

# A file system without flock says so with one of these.
_NO_FLOCK = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", -1)}


class Held(Exception):
    """Another holder has the lock (from :func:`hold` with ``wait=False``)."""


@contextlib.contextmanager
def hold(path: Path, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created when missing) for the
    ``with`` block; without ``wait``, :class:`Held` when someone has it.
    Threads of one process exclude each other too: each hold is its own
    open file, and ``flock`` belongs to the open file. A directory, FIFO or
    device in the lock's place is :class:`~gitrun.store.regular.NotRegular`:
    a lock on ``/dev/zero`` would be shared with every process on the machine."""
    try:
        # Non-blocking: opening a FIFO must not wait for a peer.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise explained(path, exc) from exc
    refuse_other_kinds(fd, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) and not wait:
            raise Held(str(path)) from None
        if exc.errno not in _NO_FLOCK:
            raise
        fd = -1
    except BaseException:
        os.close(fd)
        raise
    if fd < 0:
        with _filelock(path, wait):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # which releases the lock


@contextlib.contextmanager
def _filelock(path: Path, wait: bool) -> Iterator[None]:
    """filelock's lock, for a file system without ``flock``."""
    # deferred: filelock takes ~30 ms to import; only a held lock needs it
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=-1 if wait else 0)
    try:
        lock.acquire()
    except Timeout:
        raise Held(str(path)) from None
    try:
        yield
    finally:
        lock.release()


def is_held(path: Path) -> bool:
    """Whether someone holds the lock on ``path`` right now (False when there
    is no such file): a try of the same ``flock``, without waiting, on a
    descriptor of its own (closing it drops what the try took). Where that
    try cannot be made (a link, a file system without ``flock``) filelock
    is asked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        kind = kind_of(path)  # through a link: what the lock would be taken on
        if kind:
            raise NotRegular(str(path), kind) from None
        return _held_by_filelock(path)
    refuse_other_kinds(fd, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return _held_by_filelock(path)
    finally:
        os.close(fd)
    return False


def _held_by_filelock(path: Path) -> bool:
    if not path.exists():
        return False  # a dangling link
    try:
        with _filelock(path, wait=False):
            return False
    except Held:
        return True
