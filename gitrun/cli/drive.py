"""Driving and reading runs: start, resume, status, ls, log, land, rm, retry, watchdog, stop,
demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gitrun.cli.app import _repo, app, complete_run
from gitrun.errors import UsageError
from gitrun.layout import check_run_id

EXIT_CODES_HELP = (
    "Exit codes: 0 every task done; 1 some task failed for good; 2 usage error; "
    "3 halted (canary failed, environment fault, spawn budget, spend budget, halt "
    "policy, strict ownership); 130 or 143 stopped by Ctrl-C or SIGTERM. `gitrun resume` continues "
    "in every case."
)


def _drive(
    ctx: typer.Context,
    run: str,
    as_json: bool,
    quiet: bool,
    resume: bool,
    rerun_all: bool = False,
    take_edits: bool = False,
    full: bool = False,
) -> None:
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.drive import drive

    raise typer.Exit(drive(_repo(ctx), run, as_json, quiet, resume, rerun_all, take_edits, full))


_QUIET = typer.Option("--quiet", "-q", help="Print only the summary at the end.")
_FULL = typer.Option(
    "--full",
    help="An external run's batch with every item whole (attempt, stage, outputs, model, "
    "expiry, usage file), not the lead's compact form.",
)


@app.command(epilog=EXIT_CODES_HELP)
def start(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to start.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final status as JSON.")
    ] = False,
    quiet: Annotated[bool, _QUIET] = False,
    rerun_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Run every task, also those up to date (made before from the same inputs).",
        ),
    ] = False,
    full: Annotated[bool, _FULL] = False,
) -> None:
    """Check a run, create its branch gitrun/RUN, and drive it to the end.

    Attempts run as child processes, at most `concurrency` at once, after a
    canary. A task is done only when its outputs exist and validate; valid
    outputs are committed on gitrun/RUN as they land. Throttled attempts back
    off; an environment fault, the spawn budget or the halt policy halt the
    run. On a terminal a live view shows progress; otherwise one line per
    event. Tasks up to date are not run: their outputs at HEAD were made by
    an earlier attempt from the same inputs and definition. A run landed in
    HEAD starts again as a new round; any other started run is refused
    (resume it).
    """
    _drive(ctx, run, as_json, quiet, resume=False, rerun_all=rerun_all, full=full)


@app.command(epilog=EXIT_CODES_HELP)
def resume(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to continue.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final status as JSON.")
    ] = False,
    quiet: Annotated[bool, _QUIET] = False,
    take_edits: Annotated[
        bool,
        typer.Option(
            "--take-edits",
            help="Take the edits of the run's definition made while it was driven as yours "
            "(without it, resume refuses such a definition: a worker could have written it).",
        ),
    ] = False,
    full: Annotated[bool, _FULL] = False,
) -> None:
    """Continue a run after any pause, crash or move to another machine.

    Stops workers a dead driver left behind, commits valid outputs that
    reached the disk but not a commit, quarantines invalid ones, and
    dispatches only the tasks whose outputs are missing or invalid. On a
    fresh clone it picks the run up from origin's gitrun/RUN. A definition
    edited while the run was driven is taken only with --take-edits.
    """
    _drive(ctx, run, as_json, quiet, resume=True, take_edits=take_edits, full=full)


@app.command()
def status(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(
            metavar="RUN",
            autocompletion=complete_run,
            help="The run; all runs when omitted (as `gitrun ls`).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="With RUN, list every task not done; without, list also the leftovers of runs "
            "(a branch gitrun/RUN or local state without a run directory) for `gitrun rm`.",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="With RUN, show it live (read again every second) while a driver or a lead "
            "moves it on, wherever that runs; end when none does, or on Ctrl-C.",
        ),
    ] = False,
) -> None:
    """Show a run's progress: its state, counts per stage, attempts, spawns and yield.

    The state is not started, started, driving, landed (its branch is in the
    current branch, by a merge or a squash: the landing commit is named), or
    branch gone; a started run with tasks left that no driver or lead moves
    on, and no halt or park holds, is stalled since its last driver was last
    seen (UTC). It also says a halt or park that holds the run, each model
    bucket's concurrency and ceiling estimate, and which tries continued a
    cut-off attempt's conversation. Derived from the run branch, the ledger
    and the files on disk; safe to run while the run is being driven.
    """
    if watch:
        # deferred: --help and status (<= 25x `python -c pass`) import only the command run
        from gitrun.commands.watch import watch_status

        if run is None or as_json:
            raise UsageError(
                "--watch shows one run live: `gitrun status RUN --watch` (without --json)"
            )
        raise typer.Exit(watch_status(_repo(ctx), run))
    from gitrun.commands.drive import show_status

    show_status(_repo(ctx), run, as_json, show_all)


@app.command("ls")
def list_runs(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="List also the leftovers of runs (a branch gitrun/RUN or local state without a "
            "run directory) for `gitrun rm`.",
        ),
    ] = False,
) -> None:
    """List the runs here, one line each: its state, counts, spawns and yield
    (`gitrun status` without a run says the same)."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.drive import list_runs

    list_runs(_repo(ctx), as_json, show_all)


@app.command()
def logs(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run.")
    ],
    task: Annotated[
        str | None,
        typer.Argument(metavar="TASK", help="The task; default every task not done."),
    ] = None,
    attempt: Annotated[
        int | None,
        typer.Option("--attempt", metavar="N", help="The attempt; default the task's last."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="With TASK, print its log as it grows until the attempt ends."
        ),
    ] = False,
) -> None:
    """Print what a run's workers printed: the log of each task's last attempt.

    Without TASK, the logs of every task not done (the ones to read after a
    failure). Logs are kept on the machine that ran the attempt, one per
    attempt, in .git/gitrun/RUN/logs/TASK.N.log (the first MiB of output,
    then its last 64 KiB); a worker that printed nothing leaves none. A
    task keeps the logs of its last 5 attempts.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.logs import show_logs

    show_logs(_repo(ctx), run, task, attempt, follow, lambda text: typer.echo(text, nl=False))


@app.command()
def log(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
    attempts: Annotated[
        bool,
        typer.Option(
            "--attempts",
            help="Print every attempt record of the ledger instead, one JSON object a line "
            "(with --json: one JSON array; the format docs/ledger.md documents).",
        ),
    ] = False,
) -> None:
    """Show a run's history from its branch: when, which tasks, which attempt."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.history import show_log

    show_log(_repo(ctx), run, as_json, attempts, typer.echo)


@app.command()
def report(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run.")
    ],
    html: Annotated[
        bool,
        typer.Option(
            "--html", help="Write the HTML page: the only format, so this is the default."
        ),
    ] = True,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write it; default with the run's local state in the git "
            "directory, so the work tree gets no file.",
        ),
    ] = None,
) -> None:
    """Write a run's report as one self-contained HTML page: a timeline of every
    attempt, concurrency over time, summary numbers and a sortable table of
    tasks, from what the run's branch holds (so it works on a fresh clone and
    after `gitrun land`). Prints the path it wrote. For text, `gitrun status RUN`."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.report.page import said_path, write_report

    del html  # accepted for the scripts that pass it; HTML is what report writes
    written = write_report(_repo(ctx), run, output)
    typer.echo(written if output is not None else said_path(written))


@app.command()
def land(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to land.")
    ],
    squash: Annotated[
        bool, typer.Option("--squash", help="One squashed commit instead of a merge.")
    ] = False,
    partial: Annotated[
        bool,
        typer.Option("--partial", help="Land a run that is not finished: the tasks done so far."),
    ] = False,
) -> None:
    """Bring a run's results into the current branch as one merge (or squash).

    A run with tasks not done is refused unless --partial. Untracked files
    identical to the run's committed artifacts do not block it; anything
    else that would be overwritten stops it with nothing changed. A land
    that was killed half way is finished by the next one.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.land.landing import land_run

    check_run_id(run)
    typer.echo(land_run(_repo(ctx), run, squash=squash, partial=partial))


@app.command()
def rm(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to remove.")
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Remove it even when that loses commits no other ref holds, run files "
            "committed nowhere, or tasks handed out and not collected.",
        ),
    ] = False,
) -> None:
    """End a run: remove its branch gitrun/RUN, its local state under
    .git/gitrun/RUN/ and its run directory from the work tree.

    Says what it removes first. Commits nothing: run files the current branch
    tracks then show as deleted in `git status`, for you to commit. Refuses,
    unless --force, when that would lose work: commits of the branch that no
    other branch, tag or remote-tracking branch holds (land the run first),
    run files edited or added and committed nowhere (unless nothing of the
    run was ever started or committed: that undoes `gitrun new`), tasks
    `gitrun next` handed out and `gitrun collect` did not judge. Refuses a run being
    driven, or whose dead driver left workers running, even with --force.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.remove import remove_run

    remove_run(_repo(ctx), run, force, typer.echo)


@app.command()
def retry(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run.")
    ],
    tasks: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TASK",
            help="Tasks to retry; default every failed one (none when raising the budget).",
        ),
    ] = None,
    budget: Annotated[
        str | None,
        # Read by parse_budget, not as a float: float() takes "nan", "inf"
        # and "1e400" (infinity), which no budget is and JSON cannot hold.
        typer.Option("--budget", metavar="USD", help="Set the run's max_cost_usd to USD."),
    ] = None,
    tokens: Annotated[
        int | None,
        typer.Option("--tokens", metavar="N", help="Set the run's max_tokens to N."),
    ] = None,
) -> None:
    """Give tasks that used up their attempts a fresh set, and lift a halt
    (failed canary, environment fault, strict ownership violation, spend
    budget); with --budget or --tokens, raise the run's spend budget (kept in
    its ledger); then `gitrun resume RUN`."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.retry import retry_run

    retry_run(_repo(ctx), run, list(tasks or []), budget, tokens, typer.echo)


@app.command()
def watchdog(
    ctx: typer.Context,
    stale: Annotated[
        str, typer.Option(help="Heartbeat age that counts as stuck, e.g. 90s, 5m.")
    ] = "2m",
    kill: Annotated[
        bool, typer.Option("--kill", help="End stale drivers so `resume` can take over.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Find stuck runs: exit 0 when every run is healthy, 1 when any is stale.

    For each run: is a driver alive, how old is its heartbeat, are attempts
    past their deadline, did a dead driver leave workers running, has a run
    with tasks left stalled (no driver or lead moves it on, and no halt or
    park holds it: "stalled since T", T in UTC). Meant for cron, e.g.
    `*/10 * * * * cd /path/to/repo && gitrun watchdog --kill`.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.watchdog import duration_option, watch_runs

    stale_after = duration_option("--stale", stale)
    repo = _repo(ctx)
    raise typer.Exit(
        watch_runs(
            repo, stale_after, kill, as_json, typer.echo, lambda line: typer.echo(line, err=True)
        )
    )


@app.command()
def stop(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_run, help="The run to stop.")
    ],
    wait: Annotated[
        str,
        typer.Option(
            "--wait",
            metavar="DURATION",
            help="How long to wait for the driver to go, e.g. 30s, 5m.",
        ),
    ] = "1m",
) -> None:
    """Stop the live driver of a run, as Ctrl-C in its terminal would, and wait until it has gone.

    The driver is the process that holds the run's lock, proved by the
    kernel's lock table and by its start time and command line as its owner
    record has them (never found by name). Its attempts are stopped and
    judged as on Ctrl-C: valid outputs are committed, the rest count no
    attempt. Then `gitrun resume RUN` goes on, or, when every task is done,
    `gitrun land RUN`. Exit 0 once the driver has gone, and also when no
    driver runs the run (nothing to stop: it says so); 1 when the driver
    cannot be proved, runs on another host, or is still there after --wait.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.stop import stop_run
    from gitrun.commands.watchdog import duration_option

    patience = duration_option("--wait", wait)
    stop_run(_repo(ctx), run, typer.echo, patience)


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Where to create the demo repository (new or empty)."),
    ] = None,
    tasks: Annotated[int, typer.Option(help="How many tasks the demo run has.")] = 24,
    seed: Annotated[int, typer.Option(help="Seed of the simulated agents' misbehaviour.")] = 7,
) -> None:
    """Watch gitrun survive a misbehaving fan-out, offline, in under a minute.

    Creates a throwaway repository (in a temporary directory unless --dir)
    with a run of simulated agents that lie about their exit status, fail,
    write invalid JSON and get throttled; kills its own driver halfway as a
    lost session would, resumes, lands the run and shows what happened.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.demo import run_demo

    result = run_demo(directory, tasks, seed, typer.echo)
    raise typer.Exit(result.exit_code)
