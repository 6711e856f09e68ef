"""What every gitrun hook shares: its result, and the task a hook call acts for.

A hook call acts for a task when the environment names one (``GITRUN_RUN``
and ``GITRUN_TASK``: a worker gitrun launched, and its own subagents, which
inherit them) or when it comes from a subagent of a lead session that was
dispatched a leased pointer (:mod:`gitrun.guard.subagents`). Where a task is
concerned, a hook that cannot decide blocks, since letting the call
through could let a stray write through.
"""

from __future__ import annotations

import json
import re

from gitrun.guard.rules import NoSuchTask, TaskRules, rules_of
from gitrun.guard.subagents import claims_a_task, task_of_subagent
from gitrun.store.repo import Repo, find_repo

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

WRITE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")
AGENT_TOOLS = ("Agent", "Task")  # Task: the Agent tool's former name
SEND_TOOLS = ("SendMessage",)  # continues a subagent by its id, its context intact
SHELL_TOOLS = ("Bash",)
# The first line of a pointer (templates/pointer.txt) names the run and the task.
POINTER = re.compile(
    r"gitrun run (?P<run>[a-z0-9][a-z0-9._-]{0,63}), task (?P<task>[a-z0-9][a-z0-9._-]{0,63}): "
    r"follow "
)


def pointers_in(prompt: str) -> list[tuple[str, str]]:
    """The (run, task) of every pointer in a prompt, in order, without repeats."""
    return list(dict.fromkeys((m["run"], m["task"]) for m in POINTER.finditer(prompt)))


class HookResult:
    """What a hook call ends with: its exit code, and what it prints."""

    __slots__ = ("code", "stderr", "stdout")

    def __init__(self, code: int = 0, stdout: str = "", stderr: str = "") -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookResult) and (self.code, self.stdout, self.stderr) == (
            other.code,
            other.stdout,
            other.stderr,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HookResult({self.code!r}, {self.stdout!r}, {self.stderr!r})"


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
    return HookResult(0, json.dumps(out, allow_nan=False))


def claims_task(data: object, environ: dict[str, str], raw: str = "") -> bool:
    """Whether a hook call happens where a hook that cannot decide must block:
    a task's context (``GITRUN_RUN`` or ``GITRUN_TASK`` in the environment),
    any subagent (its hook input has ``agent_id``: its task is found from it),
    a lead's Agent call that dispatches a gitrun pointer, or input that cannot
    even be parsed but mentions one of these."""
    if environ.get("GITRUN_RUN") or environ.get("GITRUN_TASK"):
        return True
    if isinstance(data, dict):
        if "agent_id" in data:
            return True
        tool_input = data.get("tool_input")
        tool = data.get("tool_name")
        said = (
            tool_input.get("message" if tool in SEND_TOOLS else "prompt")
            if isinstance(tool_input, dict)
            else None
        )
        return tool in (*AGENT_TOOLS, *SEND_TOOLS) and bool(pointers_in(str(said or "")))
    return '"agent_id"' in raw or bool(pointers_in(raw))


def task_context(
    repo: Repo | None, data: dict[str, Any] | None, environ: dict[str, str]
) -> TaskRules | None:
    """The rules of the task this hook call acts for, or None when no gitrun
    task applies.

    The environment names the task of a worker gitrun launched (and of its
    subagents, which inherit it); a subagent of a lead session is found
    through the Agent call that dispatched it (:mod:`gitrun.guard.subagents`,
    which raises :class:`~gitrun.guard.subagents.Unresolved` when it cannot tell).
    """
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
        try:
            return rules_of(repo, run_id, task_id)
        except NoSuchTask as exc:
            raise HookFailure(str(exc)) from None
    if data is not None and "agent_id" in data:
        return task_of_subagent(repo, data)
    return None


def repo_of(cwd: str | None) -> Repo | None:
    return find_repo(cwd)
