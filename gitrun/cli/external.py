"""External dispatch for orchestrating sessions: next and collect (what they
print is :mod:`gitrun.commands.external`'s)."""

from __future__ import annotations

from typing import Annotated

import typer

from gitrun.cli.app import _repo, app, complete_run
from gitrun.commands.external import lead_guide
from gitrun.errors import GitrunError


def lead_guide_epilog() -> str:
    """:func:`lead_guide` as a command's epilog, its lines kept as written."""
    return "\n\n".join(f"\b\n{block}" for block in lead_guide().split("\n\n"))


@app.command("next", epilog=lead_guide_epilog())
def next_batch(
    ctx: typer.Context,
    run: Annotated[
        str,
        typer.Argument(
            metavar="RUN",
            autocompletion=complete_run,
            help="The run (its [executor] kind is external).",
        ),
    ],
    max_tasks: Annotated[int | None, typer.Option("--max", help="Lease at most this many.")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"leased": {TASK: POINTER}, "agent", "model", "usage", '
            '"done", "halted", "why", "wait_s", "reason"} as one line of JSON.',
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="With --json, every item whole (attempt, stage, outputs, model, expiry, "
            "usage file), indented.",
        ),
    ] = False,
) -> None:
    """Lease the next batch of tasks and print their two-line pointers.

    As many as the free concurrency allows; while the canary has not produced
    valid output, only the canary. Leases expire after the task timeout.
    Fewer than there is room for, or none: it says why. Exit 0 with tasks
    leased, when every task is done, and while the run waits (a throttle's
    backoff, a busy machine, the canary or other leased subagents still out,
    the spend budget); 3 when halted; 1 when nothing is left but some task
    used up its attempts.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.external import next_batch

    raise typer.Exit(next_batch(_repo(ctx), run, max_tasks, as_json, full))


@app.command()
def collect(
    ctx: typer.Context,
    run: Annotated[
        str,
        typer.Argument(
            metavar="RUN",
            autocompletion=complete_run,
            help="The run (its [executor] kind is external).",
        ),
    ],
    throttled: Annotated[
        list[str] | None,
        typer.Option(
            "--throttled", help="A leased task whose subagent was rate-limited (repeatable)."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the result as one line of JSON, the lists that are empty left out.",
        ),
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="With --json, every field, empty or not, indented.")
    ] = False,
) -> None:
    """Judge every leased task from the disk: commit what validated, release the rest.

    Missing or invalid outputs use up an attempt (invalid files are
    quarantined); tasks named with --throttled back off without using one.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.external import collect

    raise typer.Exit(collect(_repo(ctx), run, list(throttled or []), as_json, full))


@app.command("mcp")
def mcp_server(ctx: typer.Context) -> None:
    """Serve this repository's runs to an MCP client on stdin and stdout.

    Tools: status, check, next, collect, retry and report, each the same
    call as its command (a lease made here is the lease `gitrun next`
    makes); resource: gitrun://runs/RUN/packet.toml. Configure a client to
    start `gitrun mcp` in the repository (or `gitrun -C REPO mcp`). Needs
    the mcp extra: pip install 'gitrun[mcp]'.
    """
    repo = _repo(ctx)
    try:
        # deferred: the MCP SDK is an optional extra (gitrun[mcp])
        from gitrun.mcp.server import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise GitrunError(
            "gitrun mcp needs the mcp extra, which is not installed here: pip install 'gitrun[mcp]'"
        ) from None
    serve(repo)
