"""The hooks gitrun installs, and installing them: hook ..., hooks install/uninstall,
and the Claude Code plugin that carries them: plugin install/uninstall/path."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gitrun.cli.app import _Group, _repo, app

hook_app = typer.Typer(
    cls=_Group,
    help="The hooks gitrun installs (they read the agent's JSON on stdin).",
    no_args_is_help=True,
)
app.add_typer(hook_app, name="hook")


def _run_hook(name: str) -> None:
    from gitrun.guard.main import run

    raise typer.Exit(run(name))


@hook_app.command("pre-write")
def hook_pre_write() -> None:
    """Claude Code PreToolUse hook: deny a task's writes outside its owns."""
    _run_hook("pre-write")


@hook_app.command("subagent-stop")
def hook_subagent_stop() -> None:
    """Claude Code SubagentStop hook: keep a subagent working until its outputs validate."""
    _run_hook("subagent-stop")


@hook_app.command("pre-commit")
def hook_pre_commit() -> None:
    """git pre-commit hook: reject a worker's commit outside its task's owns."""
    _run_hook("pre-commit")


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
    from gitrun.guard import install as installer
    from gitrun.guard.agents import install_worker_agent, uninstall_worker_agent

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
    from gitrun.guard.probe import hook_statuses

    repo = _repo(ctx)
    statuses = hook_statuses(repo, claude=claude or not git_hook, git_hook=git_hook or not claude)
    for status in statuses:
        typer.echo(f"{'ok' if status.ok else 'FAIL'}  {status.where}: {status.says}")
    raise typer.Exit(0 if all(s.ok for s in statuses) else 1)


plugin_app = typer.Typer(
    cls=_Group,
    help="The gitrun plugin for Claude Code: the fanout and lead skills, the gitrun-worker "
    "agent and gitrun's hooks, without files in the repository.",
    no_args_is_help=True,
)
app.add_typer(plugin_app, name="plugin")


class Scope(StrEnum):
    user = "user"
    project = "project"
    local = "local"


_Scope = Annotated[
    Scope,
    typer.Option(
        "--scope",
        "-s",
        help="user: every session of yours; project: this repository, for everyone "
        "(.claude/settings.json); local: this repository, for you.",
    ),
]
_PluginSandbox = Annotated[
    bool,
    typer.Option(
        "--sandbox",
        help="Also run Bash in Claude Code's sandbox with this repository read-only "
        "(.claude/settings.local.json), for every session here, yours included.",
    ),
]


@plugin_app.command("install")
def plugin_install(
    ctx: typer.Context, scope: _Scope = Scope.user, sandbox: _PluginSandbox = False
) -> None:
    """Install the gitrun plugin with `claude plugin install` over the folder gitrun ships.

    Claude Code loads it in place from there, so upgrading gitrun upgrades
    it; installing twice changes nothing. Its hooks and its lead call
    `gitrun`, which must run from PATH. Start the session after this, then
    ask it for a fan-out (`/gitrun:fanout REQUEST`) or `/gitrun:lead RUN`
    (a `claude -p` lead also needs `--permission-mode acceptEdits`).
    """
    from gitrun.guard.plugin import install

    where = _repo(ctx) if scope is not Scope.user or sandbox else Path.cwd()
    for line in install(where, scope.value, sandbox):
        typer.echo(line)


@plugin_app.command("uninstall")
def plugin_uninstall(
    ctx: typer.Context, scope: _Scope = Scope.user, sandbox: _PluginSandbox = False
) -> None:
    """Uninstall the gitrun plugin from a scope (and gitrun's Bash sandbox with --sandbox)."""
    from gitrun.guard.plugin import uninstall

    where = _repo(ctx) if scope is not Scope.user or sandbox else Path.cwd()
    for line in uninstall(where, scope.value, sandbox):
        typer.echo(line)


@plugin_app.command("path")
def plugin_path() -> None:
    """Print the plugin's folder: `claude --plugin-dir "$(gitrun plugin path)"` loads it
    for one session, with nothing installed."""
    from gitrun.guard.install import plugin_dir

    typer.echo(str(plugin_dir()))
