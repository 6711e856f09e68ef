"""The console entry point, kept tiny: `gitrun --version` answers without
importing the command line (typer and rich cost ~50 ms to import)."""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"]):
        from gitrun import __version__

        sys.stdout.write(f"gitrun {__version__}\n")
        return 0
    from gitrun.cli import main as cli_main

    return cli_main(argv)
