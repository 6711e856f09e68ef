"""What a command that failed says: gitrun's own errors as their lines (the
first of each kind, then a count), a failure of the machine around gitrun as
one sentence, anything else as a crash log holding the traceback.

The command line prints these and picks the exit code.
"""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from gitrun import __version__
from gitrun.errors import GitrunError
from gitrun.store.jsonlines import shown
from gitrun.store.regular import NotRegular
from gitrun.visible import visible

PER_KIND = 20  # problems of one kind shown before a count of the rest


def error_lines(exc: GitrunError) -> list[str]:
    """An error's lines as a person reads them: capped per kind when it
    lists problems of kinds, each made visible (a sentence may name a file
    or quote a process a worker made)."""
    kinds = getattr(exc, "kinds", None)
    lines = exc.lines
    if isinstance(kinds, list) and len(kinds) == len(lines):
        lines = capped(lines, kinds)
    return [visible(line, lines=True) for line in lines]


def capped(lines: list[str], kinds: list[str], limit: int = PER_KIND) -> list[str]:
    """The first ``limit`` lines of each kind, then one line counting the rest.

    A table with 10,000 broken entries says so in 21 lines, not 10,000;
    ``--json`` output stays complete.
    """
    totals: dict[str, int] = {}
    for kind in kinds:
        totals[kind] = totals.get(kind, 0) + 1
    seen_of: dict[str, int] = {}
    out: list[str] = []
    for line, kind in zip(lines, kinds, strict=True):
        seen = seen_of[kind] = seen_of.get(kind, 0) + 1
        if seen <= limit:
            out.append(line)
        elif seen == limit + 1:
            label = kind.rsplit(": ", 1)[-1]
            out.append(f"... and {totals[kind] - limit:,} more of this kind ({label})")
    return out


def environment_failure(exc: BaseException) -> str:
    """The sentence for a failure of the machine around gitrun, not of gitrun:
    a full disk under what it writes, a current directory that was deleted."""
    if not isinstance(exc, OSError):
        return ""
    if isinstance(exc, NotRegular):  # a FIFO or a directory where gitrun keeps a file
        return (
            f"{shown(Path(exc.path))}: is {exc.kind}, where gitrun keeps a regular file; move "
            "it aside and run the command again"
        )
    if exc.errno == errno.ENOSPC:
        where = exc.filename or "standard output"
        return f"could not write to {where}: no space left on device; free some space"
    if exc.errno == errno.ENOENT and exc.filename is None and not _cwd_exists():
        return "the current directory no longer exists; cd to the repository (or pass -C DIR)"
    return ""


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except OSError:
        return False
    return True


def write_crash_log() -> str:
    """Write the exception being handled, after the versions, to a new log
    file; its path."""
    fd, path = tempfile.mkstemp(prefix="gitrun-crash-", suffix=".log")
    with os.fdopen(fd, "w") as handle:
        handle.write(_versions() + "\n" + traceback.format_exc())
    return path


def _versions() -> str:
    """What a report of a crash needs first: which gitrun, git, Python, platform."""
    try:
        git = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = "git: not found"
    return (
        f"gitrun {__version__}\n{git or 'git: unknown'}\n"
        f"Python {platform.python_version()} ({sys.executable})\n{platform.platform()}\n"
    )
