"""The console entry point, kept tiny: `gitrun --version` and the write hooks
answer without importing the command line (typer, rich and pydantic cost
~150 ms to import)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import NoReturn


def run() -> NoReturn:
    """The ``gitrun`` command and ``python -m gitrun``: :func:`main`, then
    :func:`leave` with its exit code (the lean paths exit as usual: their
    teardown is short)."""
    if sys.stdin is None or sys.stdout is None or sys.stderr is None:
        _fill_closed_streams()
    argv = sys.argv[1:]
    if argv[:1] == ["hook"] or argv in (["--version"], ["-V"]):
        raise SystemExit(main())
    inherited = writable_descriptors()
    leave(main(), inherited)


def _fill_closed_streams() -> None:
    """Open /dev/null where stdin, stdout or stderr was closed (`gitrun status
    r >&-`), as git does, and give Python a stream on it (Python leaves the
    stream None exactly when its descriptor was closed at start).

    What gitrun prints there then goes nowhere, as a click command's output
    does, instead of failing as an internal error (after a run that
    succeeded, or, with stderr closed, before a start made its branch). And no
    file gitrun opens later lands on descriptor 0, 1 or 2, where the processes
    it starts would write into it and the quick exit would take it for a
    stream."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is not None or _is_open(fd):
            continue
        null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        os.set_inheritable(fd, True)  # as a given stream is, for the processes gitrun starts
        # the process's own stream for its whole life, as sys.stdout is: no with block
        stream = open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def main() -> int:
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"]):
        from gitrun import __version__

        sys.stdout.write(f"gitrun {__version__}\n")
        return 0
    try:
        if len(argv) == 2 and argv[0] == "hook" and argv[1] in ("pre-write", "pre-commit"):
            # the hot path: Claude Code runs the write hook before every write of every agent
            from gitrun.hookmain import run as run_hook

            return run_hook(argv[1])
        from gitrun.quickcmd import main as quick_main

        code = quick_main(argv)  # the everyday commands, without typer's start-up
    except (Exception, KeyboardInterrupt) as exc:  # reported as the command line reports it
        from gitrun.cli.app import report_failure

        return report_failure(exc)
    if code is not None:
        return code
    from gitrun.cli import main as cli_main

    return cli_main(argv)


def writable_descriptors() -> dict[int, tuple[int, int, bool]] | None:
    """Every open descriptor that can write, with the file it writes (device,
    inode) and whether it closes on exec; None where /proc does not list them.

    The last tells a descriptor the process was given from one it opened on
    the same number and the same file after closing the given one: whatever
    survived an exec has no close-on-exec flag, and Python sets it on every
    descriptor it opens (PEP 446). Stdin, stdout and stderr are listed too: a
    file opened where one of them was closed takes its number."""
    import fcntl

    try:
        numbers = os.listdir("/proc/self/fd")
    except OSError:
        return None
    found: dict[int, tuple[int, int, bool]] = {}
    for name in numbers:
        fd = int(name)
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
                continue
            closes = bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
            st = os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor, closed already
        found[fd] = (st.st_dev, st.st_ino, closes)
    return found


def leave(code: int, inherited: dict[int, tuple[int, int, bool]] | None) -> NoReturn:
    """Exit with ``code``, without the interpreter's teardown when nothing can
    be lost by skipping it.

    The teardown frees every object and module one by one (~40 ms after a
    start of 1,000 tasks). What it does that matters is: run the ``atexit``
    functions, wait for other threads, flush and close files, and run the
    finalizers of what is left. Here the ``atexit`` functions are run; the
    rest is skipped only when no other thread runs and every descriptor that
    can write is one of ``inherited`` (what :func:`writable_descriptors` found
    as the process began: stdout and stderr among them, unless they were
    closed), still open on the same file and not opened again since. A file
    object with data still buffered holds a writable descriptor of its own, so
    then, and whenever stdout or stderr cannot be flushed, the interpreter
    exits as usual (its ``atexit`` functions are not run twice)."""
    import atexit
    import threading

    if inherited is not None and threading.active_count() == 1:
        atexit._run_exitfuncs()
        if _nothing_to_lose(inherited):
            os._exit(code)
    raise SystemExit(code)


def _nothing_to_lose(inherited: dict[int, tuple[int, int, bool]]) -> bool:
    """No other thread, no writable descriptor of this process's own (only the
    ones it was given), and stdout and stderr flushed."""
    import threading

    mine = writable_descriptors()
    if mine is None or threading.active_count() != 1:
        return False
    if any(inherited.get(fd) != file for fd, file in mine.items()):
        return False
    # the streams, and the originals in case something (a live view) replaced them
    try:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False  # the usual exit reports it, as it always has
    return True
