"""The command line: the only package that knows typer.

Each command calls the core and maps its result to output and an exit code.
Errors: a known error prints ``gitrun: error: <sentence>`` and exits 1 (2 for
usage); Ctrl-C exits 130; anything unexpected prints one line pointing at a
log file holding the traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gitrun import __version__
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
    if isinstance(exc, GitrunError):
        kinds = getattr(exc, "kinds", None)
        lines = exc.lines
        if isinstance(kinds, list) and len(kinds) == len(lines):
            lines = capped(lines, kinds)
        from gitrun.visible import visible

        for line in lines:  # a sentence may name a file or quote a process a worker made
            typer.echo(f"gitrun: error: {visible(line, lines=True)}", err=True)
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):  # `gitrun ... | head`: the reader has gone
        from gitrun.commands.drive import silence

        silence(sys.stdout)
        return 1
    if isinstance(exc, KeyboardInterrupt):
        typer.echo("gitrun: interrupted", err=True)
        return 130
    said = _environment_failure(exc)
    if said:
        typer.echo(f"gitrun: error: {said}", err=True)
        return 1
    log = _write_crash_log()
    typer.echo(
        f"gitrun: internal error ({type(exc).__name__}: {exc}); the traceback is in {log}; "
        "please report it",
        err=True,
    )
    return EXIT_INTERNAL


def _environment_failure(exc: BaseException) -> str:
    """The sentence for a failure of the machine around gitrun, not of gitrun:
    a full disk under what it writes, a current directory that was deleted."""
    if not isinstance(exc, OSError):
        return ""
    from gitrun.store.regular import NotRegular

    if isinstance(exc, NotRegular):  # a FIFO or a directory where gitrun keeps a file
        from gitrun.store.jsonlines import shown

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


PER_KIND = 20  # problems of one kind shown before a count of the rest


def capped(lines: list[str], kinds: list[str], limit: int = PER_KIND) -> list[str]:
    """The first ``limit`` lines of each kind, then one line counting the rest.

    A table with 10,000 broken entries says so in 21 lines, not 10,000;
    ``--json`` output stays complete.
    """
    totals: dict[str, int] = {}
    for kind in kinds:
        totals[kind] = totals.get(kind, 0) + 1
    shown: dict[str, int] = {}
    out: list[str] = []
    for line, kind in zip(lines, kinds, strict=True):
        seen = shown[kind] = shown.get(kind, 0) + 1
        if seen <= limit:
            out.append(line)
        elif seen == limit + 1:
            label = kind.rsplit(": ", 1)[-1]
            out.append(f"... and {totals[kind] - limit:,} more of this kind ({label})")
    return out


def _write_crash_log() -> str:
    fd, path = tempfile.mkstemp(prefix="gitrun-crash-", suffix=".log")
    with os.fdopen(fd, "w") as handle:
        handle.write(_versions() + "\n" + traceback.format_exc())
    return path


def _versions() -> str:
    """What a report of a crash needs first: which gitrun, git, Python, platform."""
    import platform
    import subprocess

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
    from gitrun.store.repo import find_repo

    directory = ctx.find_root().obj
    found = find_repo(str(directory) if directory else None)
    if found is not None:
        return Path(found.root)
    from gitrun.store.git import find_repo_root

    return find_repo_root(Path(directory) if directory else None)


def complete_run(ctx: typer.Context, incomplete: str) -> list[str]:
    """The shell's completion of a RUN argument: the runs defined in the work
    tree (of ``-C DIR`` when given); nothing outside a repository."""
    from gitrun.layout import run_ids
    from gitrun.store.repo import find_repo

    directory = ctx.find_root().params.get("directory")  # the root callback has not run
    found = find_repo(str(directory) if directory else None)
    if found is None:
        return []
    return [run_id for run_id in run_ids(found.root) if run_id.startswith(incomplete)]


def lead_guide() -> str:
    """How to lead an external run: the body of the plugin's lead skill, the
    one text a lead reads, from Claude Code or from any other session."""
    from gitrun.guard.install import plugin_dir

    try:
        text = (plugin_dir() / "skills" / "lead" / "SKILL.md").read_text(encoding="utf-8")
    except OSError:  # pragma: no cover - a broken installation
        return ""
    return text.split("---\n", 2)[-1].strip()


def lead_guide_epilog() -> str:
    """:func:`lead_guide` as a command's epilog, its lines kept as written."""
    return "\n\n".join(f"\b\n{block}" for block in lead_guide().split("\n\n"))


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    try:
        app(args=argv, prog_name="gitrun", standalone_mode=True)
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
