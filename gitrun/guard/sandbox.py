"""Claude Code's Bash sandbox, as gitrun asks for it.

The sandbox keeps every shell command of a session from writing in the
repository, which no write hook can see. Claude Code runs it with
bubblewrap and socat on Linux (the system's own on macOS); without them,
and with ``failIfUnavailable``, the client refuses to start.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SANDBOX_TOOLS = ("bwrap", "socat")  # what the client's sandbox runs on Linux


def claude_sandbox(repo: Path, excluded: list[str] | None = None) -> dict[str, object]:
    """Claude Code's Bash sandbox with ``repo`` read-only to every command
    (checked with the real client: sed, python and mv fail with
    "Read-only file system"). The Write and Edit tools ignore it; the write
    hook guards them. ``excluded`` commands (permission-rule patterns, e.g.
    ``gitrun:*``) run outside it, and only with the session's permission."""
    sandbox: dict[str, object] = {
        "enabled": True,
        "failIfUnavailable": True,  # no bubblewrap: refuse to start, never run unconfined
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": True,
        "filesystem": {"denyWrite": [os.path.realpath(repo)]},
    }
    if excluded:
        sandbox["excludedCommands"] = list(excluded)
    return sandbox


def missing_sandbox_tools() -> list[str]:
    """The programs the client's Bash sandbox needs that are not on PATH (Linux only)."""
    if not sys.platform.startswith("linux"):
        return []  # macOS: the sandbox is the system's own
    return [tool for tool in SANDBOX_TOOLS if shutil.which(tool) is None]
