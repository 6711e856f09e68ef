"""Defining runs: init, new, check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from gitrun.cli.app import _repo, app, capped, complete_run
from gitrun.words import counted

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
    from gitrun.commands.scaffold import new_run

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
    typer.echo(result.message)
    for path in result.paths[:5]:
        typer.echo(f"  {path}")
    if len(result.paths) > 5:
        typer.echo(f"  ... and {len(result.paths) - 5} more")
    if result.ready and executor != "external":
        typer.echo(f"next: `gitrun start {run}` (it runs `gitrun check {run}` first)")
    elif result.ready:
        typer.echo(f"next: `gitrun check {run}`")
    else:
        typer.echo(f"next: edit the packet's [rules] (or give --rules), then `gitrun check {run}`")
    if executor == "external":
        typer.echo(
            f"then lead it from Claude Code: `gitrun plugin install` once, and `/gitrun:lead {run}` "
            "in a session started after it (or `gitrun hooks install` to keep the hooks and the "
            f"worker agent in the repository); any other lead: `gitrun next --help`"
        )


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
    from gitrun.definition.load import load_run
    from gitrun.proof.check import check_json, check_named, check_run

    repo = _repo(ctx)
    if as_json:
        problems, proven = check_named(repo, run)
        typer.echo(json.dumps(check_json(problems, proven), indent=2, allow_nan=False))
        raise typer.Exit(1 if problems else 0)
    report = check_run(load_run(repo, run))  # a broken definition: its sentences, as an error
    if report.problems:
        count = len(report.problems)
        typer.echo(f"run {run!r}: {counted(count, 'problem')}:")
        lines = [f"[{problem.code}] {problem.message}" for problem in report.problems]
        for line in capped(lines, [problem.code for problem in report.problems]):
            typer.echo(f"  {line}")
    else:
        typer.echo(f"run {run!r} is ready: {report.summary}")
    raise typer.Exit(1 if report.problems else 0)
