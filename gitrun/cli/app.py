"""The command line: the only package that knows typer.

Each command calls the core and maps its result to output and an exit code.
Errors: a known error prints ``gitrun: error: <sentence>`` and exits 1 (2 for
usage); Ctrl-C exits 130; anything unexpected prints one line pointing at a
log file holding the traceback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
import typer.main
from typer.core import TyperGroup

from gitrun import __version__
from gitrun.commands.repo import repo_root, run_names
from gitrun.errors import GitrunError

EXIT_INTERNAL = 70  # EX_SOFTWARE


class _Group(TyperGroup):
    """Maps gitrun's errors to messages and exit codes for every command."""

    def invoke(self, ctx: Any) -> Any:  # typer.Context; the base class names its own
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # typer's own exits and usage errors
        except (GitrunError, KeyboardInterrupt, Exception) as exc:
            ctx.exit(report_failure(exc))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command's first sentence whole, wrapped to the width (click
        cuts it at the width with "...")."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def report_failure(exc: BaseException) -> int:
    """Say what went wrong, in gitrun's words, and return the exit code:
    gitrun's own errors as their lines, anything else as an internal error
    with the traceback kept in a log file."""
    if isinstance(exc, BrokenPipeError):  # `gitrun ... | head`: the reader has gone
        # deferred: --help and status (<= 25x `python -c pass`) import only the command run
        from gitrun.commands.drive import silence

        silence(sys.stdout)
        return 1
    if isinstance(exc, KeyboardInterrupt):
        typer.echo("gitrun: interrupted", err=True)
        return 130
    from gitrun.commands import failure  # only on a failure: what it imports costs each command

    if isinstance(exc, GitrunError):
        for line in failure.error_lines(exc):
            typer.echo(f"gitrun: error: {line}", err=True)
        return exc.exit_code
    said = failure.environment_failure(exc)
    if said:
        typer.echo(f"gitrun: error: {said}", err=True)
        return 1
    log = failure.write_crash_log()
    typer.echo(
        f"gitrun: internal error ({type(exc).__name__}: {exc}); the traceback is in {log}; "
        "please report it",
        err=True,
    )
    return EXIT_INTERNAL


app = typer.Typer(
    cls=_Group,
    name="gitrun",
    help="A git-native, resumable run manager for large fan-outs of workers.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gitrun {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    directory: Annotated[
        Path | None,
        typer.Option("-C", help="Run as if gitrun was started in this directory."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    ctx.obj = directory


def _repo(ctx: typer.Context) -> Path:
    """The top of the work tree holding ``-C DIR`` (default: here); git's own
    error outside every work tree."""
    return repo_root(ctx.find_root().obj)


def complete_run(ctx: typer.Context, incomplete: str) -> list[str]:
    """The shell's completion of a RUN argument: the runs defined in the work
    tree (of ``-C DIR`` when given); nothing outside a repository."""
    directory = ctx.find_root().params.get("directory")  # the root callback has not run
    return run_names(directory, incomplete)


@functools.cache
def command() -> typer.core.TyperGroup:
    """The click command typer builds from ``app``, built once in a process:
    typer builds it again on each call of ``app`` (~40 ms of reading every
    command's signature). _Group.invoke reports every error, so typer's
    traceback hook, which ``app()`` would install, has nothing to show."""
    built = typer.main.get_command(app)
    assert isinstance(built, typer.core.TyperGroup)
    return built


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    try:
        command().main(args=argv, prog_name="gitrun", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        code = code if isinstance(code, int) else (0 if code is None else 1)
    else:
        code = 0
    try:
        sys.stdout.flush()  # what is still buffered: a full disk shows here
    except OSError as exc:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes it again at exit
        return report_failure(exc)
    return code
