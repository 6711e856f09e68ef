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


def _json(value: object) -> str:
    """Indented for a person at a terminal; compact (and C-fast) for programs."""
    return json.dumps(value, indent=2 if sys.stdout.isatty() else None)


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
    if executor == "external":
        typer.echo("\n" + _orchestrator_guide())


@app.command()
def check(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run to check.")],
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


EXIT_CODES_HELP = (
    "Exit codes: 0 every task done; 1 some task failed for good; 2 usage error; "
    "3 halted (canary failed, environment fault, spawn budget, halt policy, strict "
    "ownership); 130 or 143 stopped by Ctrl-C or SIGTERM. `gitrun resume` continues "
    "in every case."
)


def _event(line: str) -> None:
    typer.echo(f"gitrun: {line}", err=True)


def _drive(ctx: typer.Context, run: str, as_json: bool, quiet: bool, resume: bool) -> None:
    from gitrun.runs import load_run
    from gitrun.session import resume_run, start_run

    repo = _repo(ctx)
    if load_run(repo, run).packet.executor.kind == "external":
        _drive_external(repo, run, as_json, resume)
    drive = resume_run if resume else start_run
    if quiet or as_json:
        outcome = drive(repo, run, lambda _line: None)
    elif sys.stderr.isatty() and sys.stdout.isatty():
        from gitrun.view import LiveView

        with LiveView(run) as view:
            outcome = drive(repo, run, view.event, view.progress)
    else:
        outcome = drive(repo, run, _event)
    if as_json:
        data = outcome.status.to_json()
        data["exit_code"] = outcome.exit_code
        data["stopped_by"] = outcome.stopped_by
        data["halt"] = (
            {"kind": outcome.halt.kind, "message": outcome.halt.message} if outcome.halt else None
        )
        data["violations"] = [v.to_record() for v in outcome.violations]
        typer.echo(json.dumps(data, indent=2))
    else:
        from gitrun.report import format_summary

        typer.echo(
            format_summary(outcome.status, outcome.stopped_by, outcome.halt, outcome.violations)
        )
    raise typer.Exit(outcome.exit_code)


_QUIET = typer.Option("--quiet", "-q", help="Print only the summary at the end.")


def _drive_external(repo: Path, run: str, as_json: bool, resume: bool) -> None:
    """start/resume of an external run: the branch (start), a collect (resume), a batch."""
    from gitrun.external import external_run
    from gitrun.session import prepare_external

    prepare_external(repo, run, _event, resume)
    with external_run(repo, run) as ext:
        if resume:
            collected = ext.collect([])
            if not as_json:
                _print_collected(collected)
        batch = ext.next_batch(None, agents=False)
    _print_batch(run, batch, as_json)


def _print_batch(run: str, batch: Any, as_json: bool) -> None:
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
    raise typer.Exit(0 if batch.done else 1)


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
    typer.echo(f"next: {collected.next_step}")


def _orchestrator_guide() -> str:
    from gitrun.resources import template_text

    try:
        return template_text("orchestrator.md")
    except FileNotFoundError:  # pragma: no cover - a broken installation
        return ""


@app.command("next", epilog=_orchestrator_guide())
def next_batch(
    ctx: typer.Context,
    run: Annotated[
        str, typer.Argument(metavar="RUN", help="The run (its [executor] kind is external).")
    ],
    max_tasks: Annotated[int | None, typer.Option("--max", help="Lease at most this many.")] = None,
    agents: Annotated[
        bool,
        typer.Option("--agents", help="Also write .claude/agents/gitrun-RUN-TASK.md per task."),
    ] = False,
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
        batch = ext.next_batch(max_tasks, agents)
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


@app.command(epilog=EXIT_CODES_HELP)
def start(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run to start.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final status as JSON.")
    ] = False,
    quiet: Annotated[bool, _QUIET] = False,
) -> None:
    """Check a run, create its branch gitrun/RUN, and drive it to the end.

    Attempts run as child processes, at most `concurrency` at once, after a
    canary. A task is done only when its outputs exist and validate; valid
    outputs are committed on gitrun/RUN as they land. Throttled attempts back
    off; an environment fault, the spawn budget or the halt policy halt the
    run. On a terminal a live view shows progress; otherwise one line per
    event. Refuses when the branch exists.
    """
    _drive(ctx, run, as_json, quiet, resume=False)


@app.command(epilog=EXIT_CODES_HELP)
def resume(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run to continue.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final status as JSON.")
    ] = False,
    quiet: Annotated[bool, _QUIET] = False,
) -> None:
    """Continue a run after any pause, crash or move to another machine.

    Stops workers a dead driver left behind, commits valid outputs that
    reached the disk but not a commit, quarantines invalid ones, and
    dispatches only the tasks whose outputs are missing or invalid. On a
    fresh clone it picks the run up from origin's gitrun/RUN.
    """
    _drive(ctx, run, as_json, quiet, resume=True)


@app.command()
def status(
    ctx: typer.Context,
    run: Annotated[
        str | None, typer.Argument(metavar="RUN", help="The run; all runs when omitted.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="List every task not done.")] = False,
) -> None:
    """Show a run's progress: counts per stage, attempts, spawns and yield.

    Derived from the run branch, the ledger and the files on disk; safe to
    run while the run is being driven.
    """
    from gitrun.report import format_status, format_status_line
    from gitrun.runs import list_runs
    from gitrun.state import read_status

    repo = _repo(ctx)
    if run is None:
        statuses = [read_status(repo, r) for r in list_runs(repo)]
        if as_json:
            typer.echo(json.dumps([st.to_json() for st in statuses], indent=2))
        elif not statuses:
            typer.echo("no runs here; create one with `gitrun new RUN`")
        for st in statuses if not as_json else []:
            typer.echo(format_status_line(st))
        return
    st = read_status(repo, run)
    if as_json:
        typer.echo(_json(st.to_json()))
    else:
        typer.echo(format_status(st, limit=None if show_all else 20))


@app.command()
def log(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
) -> None:
    """Show a run's history from its branch: when, which tasks, which attempt."""
    from gitrun.committer import branch_ref
    from gitrun.git import rev_parse
    from gitrun.history import read_history
    from gitrun.runs import check_run_id

    repo = _repo(ctx)
    check_run_id(run)
    if rev_parse(repo, branch_ref(run)) is None:
        raise GitrunError(
            f"run {run!r} has no branch gitrun/{run} yet; start it with `gitrun start {run}`"
        )
    entries = read_history(repo, run)
    if as_json:
        typer.echo(json.dumps([e.to_json() for e in entries], indent=2))
        return
    for entry in entries:
        attempts = " ".join(f"{t}#{n}" for t, n in entry.attempts.items())
        typer.echo(
            f"{entry.date}  {entry.commit[:10]}  {entry.subject}"
            + (f"  [{attempts}]" if attempts else "")
        )


@app.command()
def land(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run to land.")],
    squash: Annotated[
        bool, typer.Option("--squash", help="One squashed commit instead of a merge.")
    ] = False,
) -> None:
    """Bring a run's results into the current branch as one merge (or squash).

    Untracked files identical to the run's committed artifacts do not block
    it; anything else that would be overwritten stops it with nothing changed.
    """
    from gitrun.land import land_run

    typer.echo(land_run(_repo(ctx), run, squash=squash))


@app.command()
def retry(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run.")],
    tasks: Annotated[
        list[str] | None,
        typer.Argument(metavar="TASK", help="Tasks to retry; default every failed one."),
    ] = None,
) -> None:
    """Give tasks that used up their attempts a fresh set; then `gitrun resume RUN`."""
    from gitrun.retry import retry_tasks

    chosen = retry_tasks(_repo(ctx), run, list(tasks or []))
    if not chosen:
        typer.echo(f"run {run!r} has no failed tasks")
        return
    typer.echo(f"{', '.join(chosen)}: fresh attempts granted; continue with `gitrun resume {run}`")


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
    past their deadline, did a dead driver leave workers running. Meant for
    cron, e.g. `*/10 * * * * cd /path/to/repo && gitrun watchdog --kill`.
    """
    from gitrun.errors import UsageError
    from gitrun.settings import parse_duration
    from gitrun.watchdog import inspect_runs, kill_stale

    try:
        stale_after = parse_duration(stale)
    except ValueError as exc:
        raise UsageError(f"--stale {stale!r}: {exc}") from None
    repo = _repo(ctx)
    findings = inspect_runs(repo, stale_after)
    if as_json:
        typer.echo(json.dumps([h.to_json() for h in findings], indent=2))
    else:
        if not findings:
            typer.echo("no runs here")
        for health in findings:
            typer.echo(health.describe())
    stale_runs = [h for h in findings if h.stale]
    if kill:
        for health in stale_runs:
            typer.echo(kill_stale(repo, health), err=as_json)
    raise typer.Exit(1 if stale_runs else 0)


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
    from gitrun.demo import run_demo

    result = run_demo(directory, tasks, seed, typer.echo)
    raise typer.Exit(result.exit_code)


hook_app = typer.Typer(
    cls=_Group,
    help="The hooks gitrun installs (they read the agent's JSON on stdin).",
    no_args_is_help=True,
)
app.add_typer(hook_app, name="hook")


def _emit(result: Any) -> None:
    if result.stdout:
        sys.stdout.write(result.stdout + "\n")
    if result.stderr:
        sys.stderr.write(result.stderr if result.stderr.endswith("\n") else result.stderr + "\n")
    raise typer.Exit(result.code)


@hook_app.command("pre-write")
def hook_pre_write() -> None:
    """Claude Code PreToolUse hook: deny a task's writes outside its owns."""
    from gitrun.hooks import pre_write

    _emit(pre_write(sys.stdin.read(), dict(os.environ)))


@hook_app.command("subagent-stop")
def hook_subagent_stop() -> None:
    """Claude Code SubagentStop hook: keep a subagent working until its outputs validate."""
    from gitrun.hooks import subagent_stop

    _emit(subagent_stop(sys.stdin.read(), dict(os.environ)))


@hook_app.command("pre-commit")
def hook_pre_commit() -> None:
    """git pre-commit hook: reject a worker's commit outside its task's owns."""
    from gitrun.hooks import pre_commit

    _emit(pre_commit(dict(os.environ)))


hooks_app = typer.Typer(
    cls=_Group, help="Install or remove gitrun's git and Claude Code hooks.", no_args_is_help=True
)
app.add_typer(hooks_app, name="hooks")


_GitHook = Annotated[bool, typer.Option("--git", help="The git pre-commit hook.")]
_ClaudeHooks = Annotated[
    bool, typer.Option("--claude", help="Claude Code hooks in .claude/settings.json.")
]
_Force = Annotated[bool, typer.Option("--force", help="Also when core.hooksPath points elsewhere.")]


def _hooks_action(
    ctx: typer.Context, git_hook: bool, claude: bool, force: bool, install: bool
) -> None:
    """Both kinds of hook unless one is named."""
    from gitrun import install as installer

    repo = _repo(ctx)
    if git_hook or not claude:
        action = installer.install_git if install else installer.uninstall_git
        typer.echo(action(repo, force))
    if claude or not git_hook:
        typer.echo((installer.install_claude if install else installer.uninstall_claude)(repo))


@hooks_app.command("install")
def hooks_install(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
    force: _Force = False,
) -> None:
    """Install the hooks (both kinds unless one is named); installing twice changes nothing.

    The git hook keeps an existing pre-commit hook (renamed, still called);
    the Claude Code hooks are merged next to existing entries.
    """
    _hooks_action(ctx, git_hook, claude, force, install=True)


@hooks_app.command("uninstall")
def hooks_uninstall(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
    force: _Force = False,
) -> None:
    """Remove only what gitrun installed (a chained hook is put back)."""
    _hooks_action(ctx, git_hook, claude, force, install=False)


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
