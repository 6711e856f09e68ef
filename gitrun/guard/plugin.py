"""Installing the gitrun plugin for Claude Code: ``gitrun plugin``.

gitrun ships the plugin as a folder that is also a one-plugin marketplace
(``claude-plugin/``); installing it is Claude Code's own ``claude plugin
install`` over that folder, which Claude Code then loads in place. Nothing
is written in the repository but what the client writes for a project or
local scope (``enabledPlugins``), and the Bash sandbox where it is asked for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gitrun.errors import GitrunError
from gitrun.guard.install import (
    LOCAL_SETTINGS,
    PLUGIN,
    PLUGIN_CALL,
    PLUGIN_FOLDER,
    SETTINGS,
    install_sandbox,
    plugin_dir,
    portable_gitrun,
    read_settings,
    uninstall_sandbox,
)
from gitrun.resources import data_dir

PLUGIN_ID = f"{PLUGIN}@{PLUGIN}"  # the plugin, in the marketplace of the same name
SCOPES = ("user", "project", "local")
CLIENT = "claude"
INSTALL_CLIENT = "npm install -g @anthropic-ai/claude-code"
TIMEOUT = 120.0  # the client reads a local folder: seconds, unless it hangs


def marketplace_dir() -> Path:
    return data_dir(PLUGIN_FOLDER)


def enabled_by(repo: Path) -> str | None:
    """The settings file that enables the gitrun plugin for sessions in
    ``repo`` (the local, the project, then the user settings: the first that
    says wins), or None when none does."""
    user = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "settings.json"
    for path, shown in ((repo / LOCAL_SETTINGS, LOCAL_SETTINGS), (repo / SETTINGS, SETTINGS)):
        said = _enables(path, shown)
        if said is not None:
            return shown if said else None
    return str(user) if _enables(user, str(user)) else None


def _enables(path: Path, shown: str) -> bool | None:
    if not path.is_file():
        return None
    plugins = read_settings(path, shown).get("enabledPlugins")
    said = plugins.get(PLUGIN_ID) if isinstance(plugins, dict) else None
    return said if isinstance(said, bool) else None


def install(repo: Path, scope: str, sandbox: bool) -> list[str]:
    """Install the plugin at ``scope`` (and the Bash sandbox in ``repo``);
    what was done, one line each."""
    # Its hooks and its lead call `gitrun` from PATH: a hook that cannot
    # start blocks every write, so it must run before the plugin goes in.
    portable_gitrun((PLUGIN_CALL,))
    said = _client(
        repo, "install", PLUGIN, "--marketplace", str(marketplace_dir()), "--scope", scope
    )
    if sandbox:
        said.append(install_sandbox(repo))
    said.append(
        f"start the session after this, and ask it for a fan-out (`/{PLUGIN}:fanout "
        f"REQUEST`) or lead a run with `/{PLUGIN}:lead RUN` "
        "(Claude Code reads plugins when a session starts)"
    )
    return said


def uninstall(repo: Path, scope: str, sandbox: bool) -> list[str]:
    said = _client(repo, "uninstall", PLUGIN_ID, "--scope", scope)
    if sandbox:
        said.append(uninstall_sandbox(repo))
    return said


def _client(repo: Path, *args: str) -> list[str]:
    """``claude plugin ARGS`` in ``repo``; the client's own lines, or its
    words in an error when it fails."""
    binary = shutil.which(CLIENT)
    if binary is None:
        raise GitrunError(
            f"Claude Code (`{CLIENT}`) is not on PATH; install it ({INSTALL_CLIENT}), or load "
            f"the plugin for one session only: claude --plugin-dir {plugin_dir()}"
        )
    argv = [binary, "plugin", *args]
    try:
        proc = subprocess.run(
            argv,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitrunError(f"`{CLIENT} plugin {args[0]}` could not run ({exc})") from exc
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode != 0:
        why = lines[-1] if lines else "it printed nothing"
        raise GitrunError(
            f"`{CLIENT} plugin {' '.join(args[:2])}` failed (exit {proc.returncode}): {why}"
        )
    return lines
