"""Reading a file that must be a regular file, without ever waiting on one
that is not (a FIFO where a definition or a report belongs hung
every command that opened it).

The file is opened non-blocking (a FIFO without a writer opens at once),
then its kind is checked on the open descriptor, so nothing swapped in
between the check and the read is read. Light: the write hooks import it.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path


class NotRegular(OSError):
    """The path names something other than a regular file; ``kind`` says what,
    as a sentence's noun ("a directory", "a FIFO", ...)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path}: is {kind}, not a regular file")
        self.path = path
        self.kind = kind


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISLNK, "a symbolic link"),
)


def read_regular(path: str | Path, follow: bool = True, limit: int = -1) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit`` when one
    is given). Raises :class:`NotRegular` for anything else (with ``follow``
    False, a symbolic link too) and what ``open`` raises (FileNotFoundError...)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise NotRegular(str(path), "a symbolic link") from exc
        if exc.errno == errno.ENXIO and _is_socket(path, follow):
            raise NotRegular(str(path), "a socket") from exc  # open() refuses one
        raise
    refuse_other_kinds(fd, path)
    with open(fd, "rb") as handle:
        return handle.read(limit)


def kind_of(path: str | Path) -> str:
    """What is at ``path`` when it is there and not a regular file ("a FIFO",
    "a directory"...), following links; "" for a regular file or nothing."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    return "" if stat.S_ISREG(mode) else _noun(mode)


def explained(path: str | Path, exc: OSError) -> OSError:
    """``exc``, or :class:`NotRegular` when what is at ``path`` is not a regular
    file: what ``open``, ``unlink`` or ``flock`` says of a directory, a FIFO
    or a device (EISDIR, ENXIO, nothing at all) names neither the file nor
    the fix, and a traceback is no answer."""
    kind = kind_of(path)
    return NotRegular(str(path), kind) if kind else exc


def refuse_other_kinds(fd: int, path: str | Path) -> None:
    """Raise :class:`NotRegular` (closing ``fd``) when the file open on ``fd``
    is not a regular file."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegular(str(path), _noun(mode))


def remove_file(path: str | Path) -> None:
    """Remove the file gitrun keeps at ``path`` (nothing there is fine); a
    directory in its place is said (:class:`NotRegular`), never removed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise explained(path, exc) from exc


def _noun(mode: int) -> str:
    return next((noun for test, noun in _KINDS if test(mode)), "not a file")


def _is_socket(path: str | Path, follow: bool) -> bool:
    try:
        mode = os.stat(path, follow_symlinks=follow).st_mode
    except OSError:
        return False
    return stat.S_ISSOCK(mode)
