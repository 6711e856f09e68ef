"""Defining runs: init, new, check."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from gitrun.cli.app import _repo, app, complete_run

_AFTER_DASHES = "gitrun.command"  # where the argv after `--` waits in the context


class _CommandAfterDashes(TyperCommand):
    """``gitrun new ... -- COMMAND [ARG...]``: everything after the first ``--``
    is the worker's command line, kept whole (its options are not gitrun's), and
    nothing but that: an unquoted glob's extra files are still an error."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[_AFTER_DASHES] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND [ARG]...]"]


@app.command()
def init(ctx: typer.Context) -> None:
    """Create .gitrun/config.toml with commented defaults in this repository."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.scaffold import init_repo

    typer.echo(init_repo(_repo(ctx)).message)


@app.command(cls=_CommandAfterDashes)
def new(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", help="Run id: lowercase letters, digits, '.', '_', '-'.")
    ],
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
    preset: Annotated[
        str | None,
        typer.Option(
            help="The agent CLI to launch: claude (default), codex, gemini, aider or shell; "
            "the packet's default model is that CLI's. Or give your own command after --."
        ),
    ] = None,
    rules: Annotated[
        str | None, typer.Option(help="What every worker must do: the packet's [rules] text.")
    ] = None,
    rules_file: Annotated[
        Path | None, typer.Option(help="A text file whose text is the packet's [rules].")
    ] = None,
    validate: Annotated[
        str | None,
        typer.Option(
            help="What every output must pass: json, jsonl, toml, or a JSON schema file "
            "(its path from the repository root). Default: by the output's extension."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="The model workers get as {model} and GITRUN_MODEL."),
    ] = None,
    description: Annotated[str, typer.Option(help="One line describing the run.")] = "",
) -> None:
    """Scaffold a run in .gitrun/runs/RUN/ from the templates.

    With --inputs and --output it writes one task per input file (or per
    group of --per-task files), each owning exactly its output. After --,
    the worker's command: each attempt runs it from the repository root, a
    whole argument {task}, {pointer}, {inputs} or {outputs} (and the other
    placeholders) becoming that task's value.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.scaffold import new_run, told_new

    directory = ctx.find_root().obj  # -C DIR: a relative --rules-file is found from there
    result = new_run(
        _repo(ctx),
        run,
        inputs=inputs,
        output=output,
        per_task=per_task,
        executor=executor,
        preset=preset,
        description=description,
        command=ctx.meta.get(_AFTER_DASHES),
        rules=rules,
        rules_file=Path(directory or ".", rules_file) if rules_file is not None else None,
        validate=validate,
        model=model,
    )
    for line in told_new(result, run, executor):
        typer.echo(line)


@app.command()
def check(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to check.")
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print JSON: ready, summary, tasks, up_to_date and will_run (null while there "
            "are problems), problems.",
        ),
    ] = False,
) -> None:
    """Prove a run is safe to launch; list every problem, not only the first.

    Checks that no two tasks can write the same path, that owned paths stay
    inside the repository and off protected files, that outputs are owned,
    that owned paths hold no uncommitted changes, that pointers fit, and that
    the model comes from configuration. Exit 0 when clean, 1 otherwise.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.check import show_check

    raise typer.Exit(show_check(_repo(ctx), run, as_json, typer.echo))
