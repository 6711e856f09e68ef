"""Installing and removing gitrun's hooks in a repository: ``gitrun hooks``.

The git pre-commit hook chains any hook that was there (renamed, still
called); gitrun refuses to write into a ``core.hooksPath`` outside the
repository's own hooks directory unless told to. The Claude Code hooks are
merged into ``.claude/settings.json`` next to existing entries; installing
twice changes nothing, and uninstalling removes only gitrun's entries.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from gitrun import git
from gitrun.errors import GitrunError
from gitrun.resources import data_dir
from gitrun.tomlfile import write_atomic

MARKER = "gitrun-managed-hook"
CHAINED = "pre-commit.gitrun-chained"
SETTINGS = ".claude/settings.json"
WRITE_MATCHER = "Write|Edit|MultiEdit|NotebookEdit"


def gitrun_command() -> str:
    """How hooks call gitrun: `gitrun` when that is this installation, else this Python."""
    found = shutil.which("gitrun")
    if found and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return "gitrun"
    return f"{shlex.quote(sys.executable)} -m gitrun"


def claude_hooks(command: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """gitrun's Claude Code hook entries (also passed to `claude -p --settings`)."""
    prefix = command or gitrun_command()
    return {
        "PreToolUse": [
            {
                "matcher": WRITE_MATCHER,
                "hooks": [{"type": "command", "command": f"{prefix} hook pre-write"}],
            }
        ],
        "SubagentStop": [
            {"hooks": [{"type": "command", "command": f"{prefix} hook subagent-stop"}]}
        ],
    }


def _is_ours(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    return any(
        (isinstance(h, dict) and " hook pre-write" in str(h.get("command", "")))
        or (isinstance(h, dict) and " hook subagent-stop" in str(h.get("command", "")))
        for h in entry.get("hooks", [])
    )


def _read_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GitrunError(
            f"{SETTINGS} is not valid JSON ({exc}); fix it first, gitrun will not overwrite it"
        ) from exc
    if not isinstance(data, dict):
        raise GitrunError(f"{SETTINGS} does not hold a JSON object; fix it first")
    return data


def install_claude(repo: Path) -> str:
    path = repo / SETTINGS
    settings = _read_settings(path)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise GitrunError(f'{SETTINGS}: "hooks" is not an object; fix it first')
    changed = False
    for event, entries in claude_hooks().items():
        existing = hooks.setdefault(event, [])
        if not isinstance(existing, list):
            raise GitrunError(f"{SETTINGS}: hooks.{event} is not a list; fix it first")
        if not any(_is_ours(e) for e in existing):
            existing.extend(entries)
            changed = True
    if not changed:
        return f"{SETTINGS}: gitrun's hooks are already there"
    write_atomic(path, (json.dumps(settings, indent=2) + "\n").encode())
    return f"{SETTINGS}: added gitrun's PreToolUse and SubagentStop hooks"


def uninstall_claude(repo: Path) -> str:
    path = repo / SETTINGS
    if not path.exists():
        return f"{SETTINGS}: not there; nothing to remove"
    settings = _read_settings(path)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return f"{SETTINGS}: no gitrun hooks"
    removed = False
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = [e for e in entries if not _is_ours(e)]
        removed |= len(kept) != len(entries)
        if kept:
            hooks[event] = kept
        elif len(kept) != len(entries):
            del hooks[event]  # gitrun emptied it
    if not removed:
        return f"{SETTINGS}: no gitrun hooks"
    if not hooks:
        del settings["hooks"]
    if settings:
        write_atomic(path, (json.dumps(settings, indent=2) + "\n").encode())
    else:
        path.unlink()  # gitrun created it
    return f"{SETTINGS}: removed gitrun's hooks"


def _hooks_dir(repo: Path, force: bool) -> Path:
    own = git.git_dir(repo) / "hooks"
    configured = git.run_git_quiet(repo, "config", "--get", "core.hooksPath")
    if configured:
        target = Path(configured) if Path(configured).is_absolute() else repo / configured
        if target.resolve() != own.resolve() and not force:
            raise GitrunError(
                f"core.hooksPath points to {configured}, not this repository's hooks; gitrun will "
                "not write there unless you pass --force (or install its pre-commit there yourself)"
            )
        return target
    return own


def install_git(repo: Path, force: bool = False) -> str:
    hooks = _hooks_dir(repo, force)
    hooks.mkdir(parents=True, exist_ok=True)
    target = hooks / "pre-commit"
    script = (data_dir("hooks") / "pre-commit").read_text().replace("@GITRUN@", gitrun_command())
    note = ""
    if target.exists() and MARKER not in target.read_text(errors="replace"):
        if (hooks / CHAINED).exists():
            raise GitrunError(
                f"both {target} and {hooks / CHAINED} exist; merge them by hand, then install again"
            )
        os.replace(target, hooks / CHAINED)
        note = f" (your hook is kept as {CHAINED} and still runs)"
    elif target.exists() and target.read_text() == script:
        return f"{target}: gitrun's hook is already there"
    write_atomic(target, script.encode())
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return f"{target}: installed gitrun's pre-commit hook{note}"


def uninstall_git(repo: Path, force: bool = False) -> str:
    hooks = _hooks_dir(repo, force)
    target = hooks / "pre-commit"
    if not target.exists() or MARKER not in target.read_text(errors="replace"):
        return f"{target}: no gitrun hook"
    if (hooks / CHAINED).exists():
        os.replace(hooks / CHAINED, target)
        return f"{target}: removed gitrun's hook; your own is back in place"
    target.unlink()
    return f"{target}: removed gitrun's hook"
