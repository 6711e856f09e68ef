"""The console entry point, kept tiny: `gitrun --version` and the write hooks
answer without importing the command line (typer, rich and pydantic cost
~150 ms to import)."""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"]):
        from gitrun import __version__

        sys.stdout.write(f"gitrun {__version__}\n")
        return 0
    try:
        if len(argv) == 2 and argv[0] == "hook" and argv[1] in ("pre-write", "pre-commit"):
            # the hot path: Claude Code runs the write hook before every write of every agent
            from gitrun.hookmain import run

            return run(argv[1])
        from gitrun.quickcmd import main as quick_main

        code = quick_main(argv)  # status and --help, without typer's start-up
    except (Exception, KeyboardInterrupt) as exc:  # reported as the command line reports it
        from gitrun.cli.app import report_failure

        return report_failure(exc)
    if code is not None:
        return code
    from gitrun.cli import main as cli_main

    return cli_main(argv)
