"""The hooks gitrun installs, and installing them: hook ..., hooks install/uninstall."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gitrun.cli.app import _Group, _repo, app

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


def _run_hook(what: str, hook: Callable[[str, dict[str, str]], Any], stdin: bool = True) -> None:
    """Run a hook; in a gitrun task's context, any failure at all blocks.

    Claude Code blocks a tool call only on exit 2 (any other failure lets it
    through), so an unexpected error here, even in reading the input, must
    not reach the generic crash handler (exit 70) when a task is concerned:
    it exits 2 with one line on stderr (DESIGN rule 10, fail closed).
    Outside every task's context an unexpected error stays a crash.
    """
    from gitrun.hooks import blocked, claims_task

    environ = dict(os.environ)
    raw = ""
    try:
        if stdin:
            raw = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        result = hook(raw, environ)
    except Exception as exc:
        try:
            ours = claims_task(_parsed(raw), environ, raw)
        except Exception:  # pragma: no cover - claims_task reads only dicts and strings
            ours = True
        if not ours:
            raise
        sys.stderr.write(blocked(what, exc) + "\n")
        raise typer.Exit(2) from None
    _emit(result)


def _parsed(raw: str) -> object:
    import json

    try:
        return json.loads(raw)
    except Exception:  # malformed, or nested too deep to parse
        return None


@hook_app.command("pre-write")
def hook_pre_write() -> None:
    """Claude Code PreToolUse hook: deny a task's writes outside its owns."""
    from gitrun.hooks import pre_write

    _run_hook("write", pre_write)


@hook_app.command("subagent-stop")
def hook_subagent_stop() -> None:
    """Claude Code SubagentStop hook: keep a subagent working until its outputs validate."""
    from gitrun.hooks import subagent_stop

    _run_hook("stop", subagent_stop)


@hook_app.command("pre-commit")
def hook_pre_commit() -> None:
    """git pre-commit hook: reject a worker's commit outside its task's owns."""
    from gitrun.hooks import pre_commit

    _run_hook("commit", lambda _raw, environ: pre_commit(environ), stdin=False)


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
    ctx: typer.Context,
    git_hook: bool,
    claude: bool,
    force: bool,
    install: bool,
    sandbox: bool = True,
) -> None:
    """Both kinds of hook unless one is named."""
    from gitrun import install as installer
    from gitrun.agents import install_worker_agent, uninstall_worker_agent

    repo = _repo(ctx)
    if not install:
        if git_hook or not claude:
            typer.echo(installer.uninstall_git(repo, force))
        if claude or not git_hook:
            typer.echo(installer.uninstall_claude(repo))
            typer.echo(uninstall_worker_agent(repo))
            typer.echo(installer.uninstall_sandbox(repo))
        return
    command = installer.portable_gitrun()  # checked once, before anything is written
    if git_hook or not claude:
        typer.echo(installer.install_git(repo, force, command))
    if claude or not git_hook:
        typer.echo(installer.install_claude(repo, command))
        typer.echo(install_worker_agent(repo))
        if sandbox:
            typer.echo(installer.install_sandbox(repo))


@hooks_app.command("install")
def hooks_install(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
    force: _Force = False,
    sandbox: Annotated[
        bool,
        typer.Option(
            "--sandbox/--no-sandbox",
            help="Run Bash in Claude Code's sandbox with the repository read-only "
            "(.claude/settings.local.json).",
        ),
    ] = True,
) -> None:
    """Install the hooks (both kinds unless one is named); installing twice changes nothing.

    The git hook keeps an existing pre-commit hook (renamed, still called);
    the Claude Code hooks are merged next to existing entries, and the
    gitrun-worker agent is written to .claude/agents/. Start the lead
    session after this: agent files are read when a session starts.
    """
    _hooks_action(ctx, git_hook, claude, force, install=True, sandbox=sandbox)


@hooks_app.command("uninstall")
def hooks_uninstall(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
    force: _Force = False,
) -> None:
    """Remove only what gitrun installed (a chained hook is put back)."""
    _hooks_action(ctx, git_hook, claude, force, install=False)


@hooks_app.command("status")
def hooks_status(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
) -> None:
    """Run the installed hooks on sample inputs and say whether they would run and block.

    Exit 0 when every hook checked runs and blocks what it must; 1 otherwise.
    """
    from gitrun.hookcheck import hook_statuses

    repo = _repo(ctx)
    statuses = hook_statuses(repo, claude=claude or not git_hook, git_hook=git_hook or not claude)
    for status in statuses:
        typer.echo(f"{'ok' if status.ok else 'FAIL'}  {status.where}: {status.says}")
    raise typer.Exit(0 if all(s.ok for s in statuses) else 1)
