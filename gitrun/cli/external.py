"""External dispatch for orchestrating sessions: next and collect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gitrun.cli.app import _event, _orchestrator_guide, _repo, app

EXIT_HALTED = 3  # as start and resume in command mode


def drive_external(repo: Path, run: str, as_json: bool, resume: bool) -> NoReturn:
    """start/resume of an external run: the branch (start), a collect (resume), a batch."""
    from gitrun.external import external_run
    from gitrun.session import prepare_external

    prepare_external(repo, run, _event, resume)
    with external_run(repo, run, afresh=True) as ext:
        if resume:
            collected = ext.collect([])
            if not as_json:
                _print_collected(collected)
        batch = ext.next_batch(None)
    _print_batch(run, batch, as_json)


def _print_batch(run: str, batch: Any, as_json: bool) -> NoReturn:
    for violation in batch.violations:
        typer.echo(f"ownership violation: {violation}", err=True)
    for notice in batch.notices:  # the spend budget's
        typer.echo(notice, err=True)
    if as_json:
        typer.echo(json.dumps(batch.leased, indent=2))
    for item in batch.leased if not as_json else []:
        typer.echo(item["pointer"] + "\n")
    if batch.leased:
        if not as_json:
            typer.echo(
                f"leased {len(batch.leased)}: dispatch each pointer above as one subagent, wait for "
                f"them, then `gitrun collect {run}`"
            )
        raise typer.Exit(0)
    typer.echo(batch.reason, err=as_json)
    raise typer.Exit(0 if batch.done else EXIT_HALTED if batch.halted else 1)


def _print_collected(collected: Any) -> None:
    for label in ("done", "missing", "invalid", "throttled", "failed"):
        items = getattr(collected, label)
        if not items:
            continue
        shown = [
            f"{t} ({collected.reasons[t]})" if t in collected.reasons and label != "done" else t
            for t in items
        ]
        typer.echo(f"{label}: {', '.join(shown)}")
    for violation in collected.violations:
        typer.echo(f"ownership violation: {violation}")
    for notice in collected.notices:  # the spend budget's
        typer.echo(notice)
    typer.echo(f"next: {collected.next_step}")


@app.command("next", epilog=_orchestrator_guide())
def next_batch(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", help="The run (its [executor] kind is external).")
    ],
    max_tasks: Annotated[int | None, typer.Option("--max", help="Lease at most this many.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the batch as JSON.")] = False,
) -> None:
    """Lease the next batch of tasks and print their two-line pointers.

    As many as the free concurrency allows; while the canary has not produced
    valid output, only the canary. Leases expire after the task timeout.
    Nothing to hand out: says why and exits 0 when every task is done, else 1.
    """
    from gitrun.external import external_run

    if max_tasks is not None and max_tasks < 1:
        from gitrun.errors import UsageError

        raise UsageError("--max must be 1 or more")
    with external_run(_repo(ctx), run) as ext:
        batch = ext.next_batch(max_tasks)
    _print_batch(run, batch, as_json)


@app.command()
def collect(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", help="The run (its [executor] kind is external).")
    ],
    throttled: Annotated[
        list[str] | None,
        typer.Option(
            "--throttled", help="A leased task whose subagent was rate-limited (repeatable)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Judge every leased task from the disk: commit what validated, release the rest.

    Missing or invalid outputs use up an attempt (invalid files are
    quarantined); tasks named with --throttled back off without using one.
    """
    from gitrun.external import external_run

    with external_run(_repo(ctx), run) as ext:
        collected = ext.collect(list(throttled or []))
    if as_json:
        typer.echo(json.dumps(collected.to_json(), indent=2))
    else:
        _print_collected(collected)
    if collected.halted:
        raise typer.Exit(EXIT_HALTED)
