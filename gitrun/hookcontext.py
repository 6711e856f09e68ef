"""What every gitrun hook shares: its result, and the task a hook call acts for.

A hook call acts for a task when the environment names one (``GITRUN_RUN``
and ``GITRUN_TASK``: a worker gitrun launched, and its own subagents, which
inherit them) or when it comes from a subagent of a lead session that was
dispatched a leased pointer (:mod:`gitrun.subagents`). Where a task is
concerned, a hook that cannot decide blocks (DESIGN rule 10).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.runs import RunDef, Task, load_run

WRITE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")
AGENT_TOOLS = ("Agent", "Task")  # Task: the Agent tool's former name
SHELL_TOOLS = ("Bash",)


@dataclass(frozen=True)
class HookResult:
    code: int = 0
    stdout: str = ""
    stderr: str = ""


class HookFailure(Exception):
    """The hook cannot decide; in a task context that blocks the write."""


def deny(reason: str) -> HookResult:
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    return HookResult(0, json.dumps(out))


def claims_task(data: object, environ: dict[str, str], raw: str = "") -> bool:
    """Whether a hook call happens where a hook that cannot decide must block:
    a task's context (``GITRUN_RUN`` or ``GITRUN_TASK`` in the environment),
    any subagent (its hook input has ``agent_id``: its task is found from it),
    a lead's Agent call that dispatches a gitrun pointer, or input that cannot
    even be parsed but mentions one of these."""
    from gitrun.dispatches import pointers_in

    if environ.get("GITRUN_RUN") or environ.get("GITRUN_TASK"):
        return True
    if isinstance(data, dict):
        if "agent_id" in data:
            return True
        tool_input = data.get("tool_input")
        prompt = tool_input.get("prompt") if isinstance(tool_input, dict) else None
        return data.get("tool_name") in AGENT_TOOLS and bool(pointers_in(str(prompt or "")))
    return '"agent_id"' in raw or bool(pointers_in(raw))


def task_context(
    repo: Path | None, data: dict[str, Any] | None, environ: dict[str, str]
) -> tuple[RunDef, Task] | None:
    """The task this hook call acts for, or None when no gitrun task applies.

    The environment names the task of a worker gitrun launched (and of its
    subagents, which inherit it); a subagent of a lead session is found
    through the Agent call that dispatched it (:mod:`gitrun.subagents`,
    which raises :class:`~gitrun.subagents.Unresolved` when it cannot tell).
    """
    from gitrun.subagents import claims_a_task, task_of_subagent

    run_id, task_id = environ.get("GITRUN_RUN"), environ.get("GITRUN_TASK")
    # In a task's context (either variable set) a task that cannot be
    # identified fails closed: it is never judged as "no task at all".
    if task_id and not run_id:
        raise HookFailure("GITRUN_TASK is set but GITRUN_RUN is not")
    if run_id and not task_id:
        raise HookFailure("GITRUN_RUN is set but GITRUN_TASK is not")
    if repo is None:
        if run_id or (data is not None and claims_a_task(data)):
            raise HookFailure("not inside a git repository")
        return None
    if run_id and task_id:
        run = load_run(repo, run_id)
        for task in run.tasks:
            if task.id == task_id:
                return run, task
        raise HookFailure(f"run {run_id!r} has no task {task_id!r}")
    if data is not None and "agent_id" in data:
        return task_of_subagent(repo, data)
    return None


def repo_of(cwd: str | None) -> Path | None:
    from gitrun.errors import GitrunError
    from gitrun.git import find_repo_root

    try:
        return find_repo_root(Path(cwd) if cwd else None)
    except GitrunError:
        return None
