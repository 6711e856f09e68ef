"""The hooks gitrun installs, and installing them: hook ..., hooks install/uninstall."""

from __future__ import annotations

import os
import sys
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
