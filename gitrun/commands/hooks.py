"""``gitrun hooks install|uninstall|status`` and ``gitrun plugin
install|uninstall|path``: the git and Claude Code hooks gitrun installs, in
the repository or carried by the Claude Code plugin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gitrun.guard import install as installer
from gitrun.guard import plugin
from gitrun.guard.agents import install_worker_agent, uninstall_worker_agent
from gitrun.guard.probe import hook_statuses


def install_hooks(
    repo: Path, git_hook: bool, claude: bool, force: bool, sandbox: bool, say: Callable[[str], None]
) -> None:
    """Install the git hook, the Claude Code hooks (with the worker agent
    and, with ``sandbox``, the Bash sandbox), or both when neither is named."""
    command = installer.portable_gitrun()  # checked once, before anything is written
    if git_hook or not claude:
        say(installer.install_git(repo, force, command))
    if claude or not git_hook:
        say(installer.install_claude(repo, command))
        say(install_worker_agent(repo))
        if sandbox:
            say(installer.install_sandbox(repo))


def uninstall_hooks(
    repo: Path, git_hook: bool, claude: bool, force: bool, say: Callable[[str], None]
) -> None:
    """Remove what :func:`install_hooks` wrote, of the kinds named (both
    when neither is)."""
    if git_hook or not claude:
        say(installer.uninstall_git(repo, force))
    if claude or not git_hook:
        say(installer.uninstall_claude(repo))
        say(uninstall_worker_agent(repo))
        say(installer.uninstall_sandbox(repo))


def check_hooks(repo: Path, git_hook: bool, claude: bool, say: Callable[[str], None]) -> int:
    """Run the installed hooks (the kinds named, both when neither is) on
    sample inputs and say what each did; 0 when each runs and blocks what it
    must, else 1."""
    statuses = hook_statuses(repo, claude=claude or not git_hook, git_hook=git_hook or not claude)
    for status in statuses:
        say(f"{'ok' if status.ok else 'FAIL'}  {status.where}: {status.says}")
    return 0 if all(s.ok for s in statuses) else 1


def install_plugin(where: Path, scope: str, sandbox: bool, say: Callable[[str], None]) -> None:
    """Install the Claude Code plugin at ``scope`` (with ``sandbox``, also
    the Bash sandbox of the repository at ``where``)."""
    for line in plugin.install(where, scope, sandbox):
        say(line)


def uninstall_plugin(where: Path, scope: str, sandbox: bool, say: Callable[[str], None]) -> None:
    """Uninstall the Claude Code plugin from ``scope`` (and the sandbox)."""
    for line in plugin.uninstall(where, scope, sandbox):
        say(line)


def plugin_path() -> str:
    """The folder of the plugin gitrun ships."""
    return str(installer.plugin_dir())
