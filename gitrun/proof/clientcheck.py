"""What ``gitrun check`` proves about the Claude Code client before a launch.

- **The Bash sandbox can start.** With ``[executor] bash = "sandbox"`` (the
  default) a claude worker, and the lead of an external run, run Bash in
  Claude Code's sandbox, which on Linux needs ``bwrap`` (bubblewrap) and
  ``socat``; without them the client refuses to start (``failIfUnavailable``).
  The problem names the two ways out the packet offers.
- **The lead's sandbox guards this clone.** ``gitrun hooks install`` puts the
  sandbox in ``.claude/settings.local.json`` with the clone's absolute path;
  a clone moved or copied since keeps guarding the old place.
- **``--settings`` JSON is what the client accepts.** ``claude -p`` silently
  ignores settings that fail its validation, hooks and sandbox with them, and
  silently drops keys it does not know: either means no enforcement. Every
  ``--settings`` JSON of the command (gitrun's own included) is checked
  against the shape of the client's schema for the parts enforcement rests
  on (``hooks``, ``sandbox``), as read from the client gitrun was tested
  with (docs/agent-clients.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gitrun.definition.load import RunDef
from gitrun.errors import GitrunError
from gitrun.guard.install import LOCAL_SETTINGS, stale_sandbox
from gitrun.guard.sandbox import missing_sandbox_tools
from gitrun.problem import Problem
from gitrun.workers.executor import CLAUDE_SETTINGS, claude_settings, command_template
from gitrun.workers.presets import find_preset

# The hook events of Claude Code 2.1.332.
HOOK_EVENTS = frozenset(
    [
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "Notification",
        "UserPromptSubmit",
        "UserPromptExpansion",
        "SessionStart",
        "SessionEnd",
        "Stop",
        "StopFailure",
        "SubagentStart",
        "SubagentStop",
        "PreCompact",
        "PostCompact",
        "PreModelSwitch",
        "PostModelSwitch",
        "PermissionRequest",
        "PermissionDenied",
        "Setup",
        "TeammateIdle",
        "TaskCreated",
        "TaskCompleted",
        "Elicitation",
        "ElicitationResult",
        "ConfigChange",
        "WorktreeCreate",
        "WorktreeRemove",
        "InstructionsLoaded",
        "CwdChanged",
        "FileChanged",
        "DirectoryAdded",
        "MessageDisplay",
        "PreSkillShellCommand",
    ]
)
_BOOL, _STRINGS, _OBJECT = "a boolean", "a list of strings", "an object"
SANDBOX_KEYS: dict[str, str] = {
    "enabled": _BOOL,
    "failIfUnavailable": _BOOL,
    "autoAllowBashIfSandboxed": _BOOL,
    "allowUnsandboxedCommands": _BOOL,
    "excludedCommands": _STRINGS,
    "network": _OBJECT,
    "filesystem": _OBJECT,
    "credentials": _OBJECT,
    "windows": _OBJECT,
    "backend": "a string",
    "ignoreViolations": _OBJECT,
    "enableWeakerNestedSandbox": _BOOL,
    "allowNestedUserNamespaces": _BOOL,
}
FILESYSTEM_KEYS: dict[str, str] = {
    "allowWrite": _STRINGS,
    "denyWrite": _STRINGS,
    "denyRead": _STRINGS,
    "allowRead": _STRINGS,
    "allowManagedReadPathsOnly": _BOOL,
    "disabled": _BOOL,
}
_IS: dict[str, Callable[[Any], bool]] = {
    _BOOL: lambda v: isinstance(v, bool),
    _STRINGS: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    _OBJECT: lambda v: isinstance(v, dict),
    "a string": lambda v: isinstance(v, str),
}


def uses_claude(run: RunDef) -> bool:
    """A claude worker (a preset that runs gitrun's hooks) or an external
    run's lead: where ``[executor] bash`` applies."""
    executor = run.packet.executor
    if executor.kind == "external":
        return True
    record = find_preset(executor.preset)
    return executor.command is None and record is not None and record.hooks is not None


def client_problems(run: RunDef) -> list[Problem]:
    problems = []
    executor = run.packet.executor
    if uses_claude(run) and executor.bash == "sandbox":
        missing = missing_sandbox_tools()
        if missing:
            problems.append(
                Problem(
                    "sandbox",
                    f'{run.packet_path}: [executor] bash is "sandbox", but {" and ".join(missing)} '
                    f"{'is' if len(missing) == 1 else 'are'} not installed, and Claude Code will "
                    "not start its Bash sandbox without them; install bubblewrap and socat (e.g. "
                    '`apt-get install bubblewrap socat`), or set [executor] bash = "deny" (no '
                    'Bash for workers) or "detect" (Bash writes only reported by the audit)',
                )
            )
        problems += _lead_sandbox_problems(run)
    for where, text in _settings_arguments(run):
        for message in settings_problems(text):
            problems.append(
                Problem("claude-settings", f"{run.packet_path}: [executor] {where}: {message}")
            )
    return problems


def _lead_sandbox_problems(run: RunDef) -> list[Problem]:
    """The Bash sandbox ``gitrun hooks install`` put in the clone, when it
    names another place (the clone was moved or copied) or cannot be read."""
    try:
        stale = stale_sandbox(run.repo)
    except GitrunError as exc:
        return [Problem("sandbox", exc.message)]
    return [] if stale is None else [Problem("sandbox", f"{LOCAL_SETTINGS}: {stale}")]


def _settings_arguments(run: RunDef) -> list[tuple[str, str]]:
    """(where, JSON) of every ``--settings`` JSON in a claude command, with
    gitrun's own filled in for this repository."""
    executor = run.packet.executor
    if executor.kind != "command":
        return []
    template = command_template(executor) or []
    found = []
    for index, arg in enumerate(template[:-1]):
        value = template[index + 1]
        if arg != "--settings":
            continue
        if value == "{" + CLAUDE_SETTINGS + "}":
            found.append(("gitrun's --settings", claude_settings(run.repo)))
        elif value.lstrip().startswith("{"):
            found.append((f"the --settings value at argument {index + 1}", value))
    return found


def settings_problems(text: str) -> list[str]:
    """Why Claude Code would ignore ``--settings`` JSON, or part of it gitrun needs."""
    try:
        settings = json.loads(text)
    except ValueError as exc:
        return [f"is not valid JSON ({exc}), and claude -p ignores it silently; fix the JSON"]
    if not isinstance(settings, dict):
        return ["is not a JSON object, and claude -p ignores it silently"]
    problems = []
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        problems.append('"hooks" is not an object, so claude ignores these settings')
    else:
        for event, entries in hooks.items():
            problems += _hook_problems(event, entries)
    sandbox = settings.get("sandbox", {})
    if not isinstance(sandbox, dict):
        problems.append('"sandbox" is not an object, so claude ignores these settings')
    else:
        problems += _keys_problems("sandbox", sandbox, SANDBOX_KEYS)
        filesystem = sandbox.get("filesystem")
        if isinstance(filesystem, dict):
            problems += _keys_problems("sandbox.filesystem", filesystem, FILESYSTEM_KEYS)
    return problems


def _hook_problems(event: str, entries: object) -> list[str]:
    if event not in HOOK_EVENTS:
        return [f'hooks.{event} is no hook event Claude Code knows (see "Tested against")']
    if not isinstance(entries, list):
        return [f"hooks.{event} is not a list, so claude ignores these settings"]
    for number, entry in enumerate(entries):
        where = f"hooks.{event}[{number}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
            return [f'{where} has no "hooks" list, so claude ignores these settings']
        if "matcher" in entry and not isinstance(entry["matcher"], str):
            return [f"{where}.matcher is not a string, so claude ignores these settings"]
        for hook in entry["hooks"]:
            if not (
                isinstance(hook, dict)
                and hook.get("type") == "command"
                and isinstance(hook.get("command"), str)
            ):
                return [
                    f'{where} holds a hook that is not {{"type": "command", "command": "..."}}, '
                    "so claude ignores these settings"
                ]
    return []


def _keys_problems(where: str, values: dict[str, Any], known: dict[str, str]) -> list[str]:
    problems = []
    for key, value in values.items():
        kind = known.get(key)
        if kind is None:
            problems.append(
                f"{where}.{key} is no setting Claude Code knows, and it drops it silently; "
                f"use one of {', '.join(known)}"
            )
        elif not _IS[kind](value):
            problems.append(
                f"{where}.{key} is not {kind}, so claude ignores these settings; make it {kind}"
            )
    return problems
