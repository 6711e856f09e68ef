"""Where the quick path (:mod:`gitrun.entry`) enters the command line: the
batch of an external start or resume, printed by the code the typer command
runs, without parsing the command line again."""

from __future__ import annotations

import typer

from gitrun.cli.external import drive_external
from gitrun.quickcmd import ExternalRun


def external(found: ExternalRun) -> int:
    """The batch's exit code (the typer command exits with it)."""
    try:
        drive_external(found.repo, found.run, found.as_json, found.resume)
    except typer.Exit as done:
        return done.exit_code
