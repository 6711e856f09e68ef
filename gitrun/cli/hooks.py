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
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hook import run_hook

    raise typer.Exit(run_hook(name))


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
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import install_hooks

    install_hooks(_repo(ctx), git_hook, claude, force, sandbox, typer.echo)


@hooks_app.command("uninstall")
def hooks_uninstall(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
    force: _Force = False,
) -> None:
    """Remove only what gitrun installed (a chained hook is put back)."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import uninstall_hooks

    uninstall_hooks(_repo(ctx), git_hook, claude, force, typer.echo)


@hooks_app.command("status")
def hooks_status(
    ctx: typer.Context,
    git_hook: _GitHook = False,
    claude: _ClaudeHooks = False,
) -> None:
    """Run the installed hooks on sample inputs and say whether they would run and block.

    Exit 0 when every hook checked runs and blocks what it must; 1 otherwise.
    """
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import check_hooks

    raise typer.Exit(check_hooks(_repo(ctx), git_hook, claude, typer.echo))


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
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import install_plugin

    where = _repo(ctx) if scope is not Scope.user or sandbox else Path.cwd()
    install_plugin(where, scope.value, sandbox, typer.echo)


@plugin_app.command("uninstall")
def plugin_uninstall(
    ctx: typer.Context, scope: _Scope = Scope.user, sandbox: _PluginSandbox = False
) -> None:
    """Uninstall the gitrun plugin from a scope (and gitrun's Bash sandbox with --sandbox)."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import uninstall_plugin

    where = _repo(ctx) if scope is not Scope.user or sandbox else Path.cwd()
    uninstall_plugin(where, scope.value, sandbox, typer.echo)


@plugin_app.command("path")
def plugin_path() -> None:
    """Print the plugin's folder: `claude --plugin-dir "$(gitrun plugin path)"` loads it
    for one session, with nothing installed."""
    # deferred: --help and status (<= 25x `python -c pass`) import only the command run
    from gitrun.commands.hooks import plugin_path

    typer.echo(plugin_path())
