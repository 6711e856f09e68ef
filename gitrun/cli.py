"""The command line: the only module that knows typer.

Each command calls the core and maps its result to output and an exit code.
Errors: a known error prints ``gitrun: error: <sentence>`` and exits 1 (2 for
usage); Ctrl-C exits 130; anything unexpected prints one line pointing at a
log file holding the traceback.
"""

from __future__ import annotations

import json
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
        except GitrunError as exc:
            for line in exc.lines:
                typer.echo(f"gitrun: error: {line}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            typer.echo("gitrun: interrupted", err=True)
            ctx.exit(130)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # typer's own exits and usage errors
        except Exception as exc:
            log = _write_crash_log()
            typer.echo(
                f"gitrun: internal error ({type(exc).__name__}: {exc}); the traceback is in {log}; "
                "please report it",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _write_crash_log() -> str:
    fd, path = tempfile.mkstemp(prefix="gitrun-crash-", suffix=".log")
    with os.fdopen(fd, "w") as handle:
        handle.write(traceback.format_exc())
    return path


app = typer.Typer(
    cls=_Group,
    name="gitrun",
    help="A git-native, resumable run manager for large fan-outs of workers.",
    no_args_is_help=True,
    add_completion=False,
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
    from gitrun.git import find_repo_root

    start = ctx.find_root().obj
    return find_repo_root(Path(start) if start else None)


@app.command()
def init(ctx: typer.Context) -> None:
    """Create .gitrun/config.toml with commented defaults in this repository."""
    from gitrun.scaffold import init_repo

    typer.echo(init_repo(_repo(ctx)).message)


@app.command()
def new(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run id: lowercase letters, digits, '.', '_', '-'.")],
    inputs: Annotated[
        str | None,
        typer.Option(help="Glob of input files, relative to the repository root ('docs/**/*.md')."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(help="Output path per task; placeholders {task}, {stem}, {name}, {n}."),
    ] = None,
    per_task: Annotated[
        int, typer.Option(help="Inputs per task (N > 1 writes a bundle file).")
    ] = 1,
    executor: Annotated[
        str, typer.Option(help="command (gitrun launches workers) or external (a session does).")
    ] = "command",
    description: Annotated[str, typer.Option(help="One line describing the run.")] = "",
) -> None:
    """Scaffold a run in .gitrun/runs/RUN/ from the templates.

    With --inputs and --output it writes one task per input file (or per
    group of --per-task files), each owning exactly its output.
    """
    from gitrun.scaffold import new_run

    result = new_run(
        _repo(ctx),
        run,
        inputs=inputs,
        output=output,
        per_task=per_task,
        executor=executor,
        description=description,
    )
    typer.echo(result.message)
    for path in result.paths[:5]:
        typer.echo(f"  {path}")
    if len(result.paths) > 5:
        typer.echo(f"  ... and {len(result.paths) - 5} more")
    typer.echo(f"next: edit the packet's [rules], then `gitrun check {run}`")


@app.command()
def check(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run to check.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the problems as JSON.")] = False,
) -> None:
    """Prove a run is safe to launch; list every problem, not only the first.

    Checks that no two tasks can write the same path, that owned paths stay
    inside the repository and off protected files, that outputs are owned,
    that owned paths hold no uncommitted changes, that pointers fit, and that
    the model comes from configuration. Exit 0 when clean, 1 otherwise.
    """
    from gitrun.check import check_run
    from gitrun.errors import DefinitionError
    from gitrun.runs import load_run

    repo = _repo(ctx)
    try:
        run_def = load_run(repo, run)
    except DefinitionError as exc:
        if not as_json:
            raise
        problems: list[dict[str, object]] = [
            {"code": "definition", "message": line, "tasks": [], "path": exc.path}
            for line in exc.lines
        ]
        typer.echo(json.dumps(problems, indent=2))
        raise typer.Exit(1) from None
    report = check_run(run_def)
    if as_json:
        typer.echo(json.dumps([p.to_json() for p in report.problems], indent=2))
    elif report.problems:
        count = len(report.problems)
        typer.echo(f"run {run!r}: {count} problem{'s' * (count != 1)}:")
        for problem in report.problems:
            typer.echo(f"  [{problem.code}] {problem.message}")
    else:
        typer.echo(f"run {run!r} is ready: {report.summary}")
    raise typer.Exit(1 if report.problems else 0)


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    try:
        app(args=argv, prog_name="gitrun", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m gitrun` uses __main__.py
    sys.exit(main())
