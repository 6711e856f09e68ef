"""The command line: the only package that knows typer.

``app`` holds the error handling and shared options; each module registers
its commands on it (the import order is the order of ``gitrun --help``).
"""

from gitrun.cli import define, drive, external, hooks  # noqa: F401 - they register commands
from gitrun.cli.app import app, main

__all__ = ["app", "main"]
