"""Installing and removing gitrun's hooks in a repository: ``gitrun hooks``.

The git pre-commit hook chains any hook that was there (renamed, still
called); gitrun refuses to write into a ``core.hooksPath`` outside the
repository's own hooks directory unless told to. The Claude Code hooks are
merged into ``.claude/settings.json`` next to existing entries; installing
twice changes nothing, installing again brings gitrun's own entries up to
date, and uninstalling removes only gitrun's entries.

Installed hooks outlive this process and travel with a clone, so they call
gitrun the portable way (``gitrun`` on PATH, else ``python3 -m gitrun``),
checked at install time, never through this interpreter's absolute path.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from gitrun.errors import GitrunError
from gitrun.guard.sandbox import claude_sandbox, missing_sandbox_tools
from gitrun.processes.proc import run_cmd
from gitrun.resources import data_dir
from gitrun.store import git
from gitrun.store.repo import common_git_dir
from gitrun.store.tomlfile import write_atomic

MARKER = "gitrun-managed-hook"
CHAINED = "pre-commit.gitrun-chained"
SETTINGS = ".claude/settings.json"
# The plugin's folder in this installation, the plugin's name (also its
# marketplace's), and how its hooks call gitrun. The write hook matches
# Write and Edit (judged against the task's owns), Agent (Task, its former
# name: where the lead dispatches a pointer and gitrun learns the
# subagent's task) and Bash (where a worker is kept from running gitrun).
PLUGIN_FOLDER = "claude-plugin"
PLUGIN = "gitrun"
PLUGIN_CALL = "gitrun"
PORTABLE_COMMANDS = ("gitrun", "python3 -m gitrun")
_ENTRY_COMMANDS = (" hook pre-write", " hook subagent-stop")


def running_gitrun() -> str:
    """This very installation, for the hooks of a client gitrun launches
    itself (the claude preset's ``--settings``): they live only as long as
    the attempt, on this machine."""
    return f"{shlex.quote(sys.executable)} -m gitrun"


def portable_gitrun(commands: tuple[str, ...] = PORTABLE_COMMANDS) -> str:
    """How installed hooks call gitrun: the first of ``commands`` (``gitrun``,
    then ``python3 -m gitrun``) that runs from PATH here.

    An absolute interpreter path (a venv's python) breaks in every clone and
    after every rebuild of the venv, and an installed write hook that cannot
    start blocks every write (:func:`claude_hooks`), so the command is run
    once before it is written anywhere.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    for command in commands:
        argv = command.split()
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            continue
        try:
            proc = subprocess.run(
                [*argv, "--version"],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout.startswith("gitrun "):
            return command
    tried = " nor ".join(f"`{command}`" for command in commands)
    runs = f"neither {tried} runs" if len(commands) > 1 else f"{tried} does not run"
    raise GitrunError(
        f"{runs} from PATH here, and an installed hook that cannot start blocks every write; "
        "put gitrun on PATH (activate its virtual environment, or `pipx install` it), then "
        "install again"
    )


def plugin_dir() -> Path:
    """The gitrun plugin for Claude Code that this installation ships
    (``claude-plugin/gitrun``): its ``hooks/hooks.json`` is the one
    definition of gitrun's Claude Code hooks, whoever installs them."""
    return data_dir(PLUGIN_FOLDER) / PLUGIN


def claude_hooks(command: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """gitrun's Claude Code hook entries, calling gitrun as ``command``
    (default: this installation, for `claude -p --settings`): the plugin's
    hooks, whose commands call ``gitrun`` from PATH.

    The write hook fails closed. Claude Code blocks a tool call only when its
    hook exits 2; any other non-zero status, even 127 from a hook that cannot
    start, lets the call through (seen with the real client), so the command
    turns every status but 0 into 2 and says why on stderr, which the model
    reads. The stop hook does not: a SubagentStop hook that exits 2 keeps the
    subagent from stopping, so one that cannot start would hold every
    subagent, and outputs are judged on disk anyway.
    """
    prefix = command or running_gitrun()
    events = json.loads((plugin_dir() / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    hooks: dict[str, list[dict[str, Any]]] = events["hooks"]
    for entries in hooks.values():
        for entry in entries:
            for hook in entry["hooks"]:
                assert hook["command"].startswith(PLUGIN_CALL), hook  # the shipped file
                hook["command"] = prefix + hook["command"][len(PLUGIN_CALL) :]
    return hooks


def is_ours(entry: object) -> bool:
    """Whether a settings hook entry is one gitrun installed (any version)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
        return False
    return any(
        isinstance(h, dict) and any(c in str(h.get("command", "")) for c in _ENTRY_COMMANDS)
        for h in entry["hooks"]
    )


def read_settings(path: Path, name: str = SETTINGS) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GitrunError(
            f"{name} is not valid JSON ({exc}); fix it first, gitrun will not overwrite it"
        ) from exc
    if not isinstance(data, dict):
        raise GitrunError(f"{name} does not hold a JSON object; fix it first")
    return data


def install_claude(repo: Path, command: str | None = None) -> str:
    """Merge gitrun's hooks into ``.claude/settings.json``, calling gitrun as
    ``command`` (default :func:`portable_gitrun`). gitrun's entries from an
    earlier install are replaced where they stand; everything else is kept."""
    path = repo / SETTINGS
    settings = read_settings(path)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise GitrunError(f'{SETTINGS}: "hooks" is not an object; fix it first')
    before = json.dumps(settings, sort_keys=True, allow_nan=False)
    for event, entries in claude_hooks(command or portable_gitrun()).items():
        existing = hooks.setdefault(event, [])
        if not isinstance(existing, list):
            raise GitrunError(f"{SETTINGS}: hooks.{event} is not a list; fix it first")
        at = next((i for i, e in enumerate(existing) if is_ours(e)), len(existing))
        others = [e for e in existing if not is_ours(e)]
        hooks[event] = others[:at] + entries + others[at:]
    if json.dumps(settings, sort_keys=True, allow_nan=False) == before:
        return f"{SETTINGS}: gitrun's hooks are already there"
    write_atomic(path, (json.dumps(settings, indent=2, allow_nan=False) + "\n").encode())
    return f"{SETTINGS}: installed gitrun's PreToolUse and SubagentStop hooks"


def uninstall_claude(repo: Path) -> str:
    path = repo / SETTINGS
    if not path.exists():
        return f"{SETTINGS}: not there; nothing to remove"
    settings = read_settings(path)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return f"{SETTINGS}: no gitrun hooks"
    removed = False
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = [e for e in entries if not is_ours(e)]
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
        write_atomic(path, (json.dumps(settings, indent=2, allow_nan=False) + "\n").encode())
    else:
        path.unlink()  # gitrun created it
    return f"{SETTINGS}: removed gitrun's hooks"


LOCAL_SETTINGS = ".claude/settings.local.json"
LEAD_EXCLUDED = ["gitrun:*"]  # the lead's gitrun commands run outside the sandbox


def lead_sandbox(repo: Path) -> dict[str, Any]:
    """The Bash sandbox of every session in ``repo`` (the lead of an external
    run and its subagents: the client's sandbox is per session, not per
    subagent). gitrun itself runs outside it, and only with the session's
    permission (``--allowedTools "Bash(gitrun next:*)"``); the hook denies
    gitrun to subagents."""
    return claude_sandbox(repo, LEAD_EXCLUDED)


def gitrun_sandbox_place(block: object) -> str | None:
    """The path a ``"sandbox"`` block keeps read-only when the block is
    exactly what :func:`install_sandbox` writes, for this clone or for the
    place it was moved or copied from; None for any other block (the user's,
    or gitrun's changed by the user), which gitrun never rewrites."""
    if not isinstance(block, dict) or not isinstance(block.get("filesystem"), dict):
        return None
    denied = block["filesystem"].get("denyWrite")
    if not (isinstance(denied, list) and len(denied) == 1 and isinstance(denied[0], str)):
        return None
    form = {**lead_sandbox(Path(os.sep)), "filesystem": {"denyWrite": denied}}
    return str(denied[0]) if block == form else None


def _denied(block: dict[str, Any]) -> list[str]:
    filesystem = block.get("filesystem")
    denied = filesystem.get("denyWrite") if isinstance(filesystem, dict) else None
    return [d for d in denied if isinstance(d, str)] if isinstance(denied, list) else []


def _covers(entry: str, place: str) -> bool:
    """Whether a ``denyWrite`` entry (``/abs`` or ``//abs``) holds ``place``."""
    entry = entry[1:] if entry.startswith("//") else entry
    entry = entry.rstrip("/") or "/"
    return os.path.isabs(entry) and (place == entry or place.startswith(entry.rstrip("/") + "/"))


def _uncovered(repo: Path, block: dict[str, Any]) -> str | None:
    """What the block's ``denyWrite`` names instead of this clone, or None
    when it keeps the clone read-only."""
    here = os.path.realpath(repo)
    denied = _denied(block)
    if any(_covers(entry, here) for entry in denied):
        return None
    names = " and ".join(denied) or "nothing"
    return f"sandbox.filesystem.denyWrite names {names}, not this clone ({here})"


def stale_sandbox(repo: Path) -> str | None:
    """Why the Bash sandbox gitrun installed in :data:`LOCAL_SETTINGS` no longer
    keeps this clone read-only (it names the place the clone was moved or
    copied from), as a sentence after the file's name; None when it does, or
    when there is no gitrun sandbox (a block that does not exclude gitrun's
    commands is the user's own business)."""
    path = repo / LOCAL_SETTINGS
    if not path.exists():
        return None
    block = read_settings(path, LOCAL_SETTINGS).get("sandbox")
    if not isinstance(block, dict):
        return None
    excluded = block.get("excludedCommands")
    if not (isinstance(excluded, list) and all(e in excluded for e in LEAD_EXCLUDED)):
        return None
    wrong = _uncovered(repo, block)
    if wrong is None:
        return None
    fix = (
        "run `gitrun hooks install`"
        if gitrun_sandbox_place(block) is not None
        else f"the block holds settings of your own, so put {os.path.realpath(repo)} in its "
        "denyWrite by hand"
    )
    return (
        f"gitrun's Bash sandbox: {wrong}, so the clone was moved or copied and Bash may write "
        f"anywhere in it; {fix}"
    )


def install_sandbox(repo: Path) -> str:
    """Put the lead's sandbox in ``.claude/settings.local.json``: machine-local
    (it names this clone's absolute path), read by every session here. Not
    where the sandbox cannot start: the client would refuse to start at all.
    gitrun's own sandbox for the place a clone was moved or copied from is
    replaced; a block of the user's is never touched."""
    missing = missing_sandbox_tools()
    if missing:
        return (
            f"{LOCAL_SETTINGS}: no Bash sandbox: {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed, so subagents' shell writes "
            "are only reported by the audit; install bubblewrap and socat, then install again"
        )
    path = repo / LOCAL_SETTINGS
    settings = read_settings(path, LOCAL_SETTINGS)
    ours = lead_sandbox(repo)
    if settings.get("sandbox") == ours:
        return f"{LOCAL_SETTINGS}: gitrun's Bash sandbox is already there"
    stale = gitrun_sandbox_place(settings.get("sandbox"))
    if "sandbox" in settings and stale is None:
        block = settings["sandbox"]
        wrong = _uncovered(repo, block) if isinstance(block, dict) else None
        raise GitrunError(
            f'{LOCAL_SETTINGS} already has "sandbox" settings of its own'
            + (
                f", and its {wrong}; put {os.path.realpath(repo)} there by hand, or remove "
                "the block"
                if wrong
                else "; remove them"
            )
            + " (or run `gitrun hooks install --no-sandbox`)"
        )
    settings["sandbox"] = ours
    write_atomic(path, (json.dumps(settings, indent=2, allow_nan=False) + "\n").encode())
    _exclude_from_git(repo, LOCAL_SETTINGS)
    if stale is not None:
        return (
            f"{LOCAL_SETTINGS}: gitrun's Bash sandbox named {stale}, where this clone was "
            f"moved or copied from; it now keeps {os.path.realpath(repo)} read-only"
        )
    return (
        f"{LOCAL_SETTINGS}: Bash runs in the sandbox, with the repository read-only for every "
        "Claude Code session here, yours included (its gitrun commands excepted); "
        "`gitrun hooks install --no-sandbox` leaves it out, `gitrun hooks uninstall` removes it"
    )


def uninstall_sandbox(repo: Path) -> str:
    path = repo / LOCAL_SETTINGS
    if not path.exists():
        return f"{LOCAL_SETTINGS}: not there; nothing to remove"
    settings = read_settings(path, LOCAL_SETTINGS)
    if gitrun_sandbox_place(settings.get("sandbox")) is None:  # this clone's, or a stale one
        return f"{LOCAL_SETTINGS}: no gitrun sandbox"
    del settings["sandbox"]
    if settings:
        write_atomic(path, (json.dumps(settings, indent=2, allow_nan=False) + "\n").encode())
    else:
        path.unlink()
    return f"{LOCAL_SETTINGS}: removed gitrun's Bash sandbox"


def _exclude_from_git(repo: Path, name: str) -> None:
    """Keep a machine-local file out of commits (``.git/info/exclude``)."""
    ignored = run_cmd(
        ["git", "-C", str(repo), "check-ignore", "-q", "--no-index", name], check=False
    )
    if ignored.returncode == 0:
        return
    exclude = _common_git_dir(repo) / "info" / "exclude"  # git reads it there in every work tree
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    if name not in text.splitlines():
        exclude.write_text(text + ("" if not text or text.endswith("\n") else "\n") + name + "\n")


def _common_git_dir(repo: Path) -> Path:
    return Path(common_git_dir(str(git.git_dir(repo))))


def hooks_dir(repo: Path, force: bool) -> Path:
    """Where git looks for this repository's hooks (``core.hooksPath`` or
    ``.git/hooks``); one elsewhere than ``.git/hooks`` only with ``force``."""
    own = _common_git_dir(repo) / "hooks"  # git runs every work tree's hooks from there
    configured = git.config_value(repo, "core.hooksPath")
    if configured:
        target = Path(configured) if Path(configured).is_absolute() else repo / configured
        if target.resolve() != own.resolve() and not force:
            raise GitrunError(
                f"core.hooksPath points to {configured}, not this repository's hooks; gitrun will "
                "not write there unless you pass --force (or install its pre-commit there yourself)"
            )
        return target
    return own


def install_git(repo: Path, force: bool = False, command: str | None = None) -> str:
    """Install the git pre-commit hook, calling gitrun as ``command``
    (default :func:`portable_gitrun`)."""
    hooks = hooks_dir(repo, force)
    hooks.mkdir(parents=True, exist_ok=True)
    target = hooks / "pre-commit"
    script = (data_dir("hooks") / "pre-commit").read_text()
    script = script.replace("@GITRUN@", command or portable_gitrun())
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
    hooks = hooks_dir(repo, force)
    target = hooks / "pre-commit"
    if not target.exists() or MARKER not in target.read_text(errors="replace"):
        return f"{target}: no gitrun hook"
    if (hooks / CHAINED).exists():
        os.replace(hooks / CHAINED, target)
        return f"{target}: removed gitrun's hook; your own is back in place"
    target.unlink()
    return f"{target}: removed gitrun's hook"
