"""The console entry point, kept tiny: `gitrun --version` and the write hooks
answer without importing the command line (typer, rich and pydantic cost
~150 ms to import)."""

from __future__ import annotations

import os
import sys

from gitrun import __version__

TYPE_CHECKING = False  # typing costs the write hook milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import NoReturn


def run() -> NoReturn:
    """The ``gitrun`` command and ``python -m gitrun``."""
    if sys.stdin is None or sys.stdout is None or sys.stderr is None:
        _fill_closed_streams()
    raise SystemExit(main())


def _fill_closed_streams() -> None:
    """Open /dev/null where stdin, stdout or stderr was closed (`gitrun status
    r >&-`), as git does, and give Python a stream on it (Python leaves the
    stream None exactly when its descriptor was closed at start).

    What gitrun prints there then goes nowhere, as a click command's output
    does, instead of failing as an internal error (after a run that
    succeeded, or, with stderr closed, before a start made its branch). And no
    file gitrun opens later lands on descriptor 0, 1 or 2, where the processes
    it starts would write into it."""
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
        sys.stdout.write(f"gitrun {__version__}\n")
        return 0
    if len(argv) == 2 and argv[0] == "hook" and argv[1] in ("pre-write", "pre-commit"):
        # the hot path: Claude Code runs the write hook before every write of every agent;
        # deferred: the hooks import no typer (<= 3x `python -c pass`), --version no hook
        from gitrun.commands.hook import run_hook

        try:
            return run_hook(argv[1])
        except (Exception, KeyboardInterrupt) as exc:  # outside a task: reported as any command
            from gitrun.cli.app import report_failure

            return report_failure(exc)
    from gitrun.cli.main import main as cli_main

    return cli_main(argv)
