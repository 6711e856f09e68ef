"""The PreToolUse hook on the lead's Agent and SendMessage calls and on Bash.

- ``pre_agent``: a lead session's Agent call (``Task`` before the tool was
  renamed) whose prompt holds a gitrun pointer is allowed only for a task
  that is leased right now and not yet dispatched; its description becomes
  ``gitrun <run> <task>`` (``updatedInput``) and its ``tool_use_id`` is
  recorded (:mod:`gitrun.store.dispatches`), which is how the subagent's own hooks
  find the task. A worker (a subagent with a task, or a worker gitrun
  launched) may not launch subagents: theirs would be nobody's task.
- ``pre_send``: a lead's SendMessage that continues a subagent (by the id
  gitrun recorded for the lease it held) with a task's pointer dispatches
  that task's new lease to it, the same way.
- ``pre_bash``: a worker may not run gitrun, whose commands change the run's
  state (the lead runs them). Bash writes themselves are confined by the
  client's sandbox where the packet asks for it (``[executor] bash``).

Both return the :class:`~gitrun.guard.write.HookResult` the CLI emits; a call they
cannot judge raises, and the caller blocks it where a task is concerned.
"""

from __future__ import annotations

import contextlib
import json
import re

from gitrun.guard.context import HookFailure, HookResult, deny, pointers_in, repo_of, task_context
from gitrun.guard.subagents import Subagent, Unresolved, read_subagent
from gitrun.layout import run_ids
from gitrun.store.local import LocalPaths

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

# `gitrun` run as a command: a word of its own, or a path or `-m` ending in it.
# `.gitrun/runs/...` (reading the packet) and `gitrun/r` (the branch) are not.
_RUNS_GITRUN = re.compile(r"(?:^|[\s;&|(`'\"=/$])gitrun(?=$|[\s;&|)`'\".])")


# What the shell removes from a word before it runs it: quotes and escapes
# (`g''itrun`, `"gitrun"`, `\gitrun` all run gitrun).
_QUOTING = str.maketrans("", "", "'\"\\")


def runs_gitrun(command: str) -> bool:
    """Whether a Bash command line runs gitrun, as written or once the shell
    has removed its quotes. Advisory: a name the shell builds at run time
    (`$(printf git)run`, a variable) is not seen; the client's sandbox is what
    confines a worker's Bash."""
    return any(_RUNS_GITRUN.search(text) for text in (command, command.translate(_QUOTING)))


def _is_worker(data: dict[str, Any], environ: dict[str, str]) -> bool:
    return "agent_id" in data or bool(environ.get("GITRUN_TASK") or environ.get("GITRUN_RUN"))


def pre_bash(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    if not _is_worker(data, environ):
        return HookResult(0)
    tool_input = data.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if not isinstance(command, str):
        raise HookFailure("the Bash call names no command")
    if runs_gitrun(command):
        return deny(
            "a gitrun worker may not run gitrun: its commands change the run's state, and the "
            "lead runs them; write your outputs with the Write tool, then stop"
        )
    if "agent_id" in data:
        _bind(data, environ)
    return HookResult(0)


def _bind(data: dict[str, Any], environ: dict[str, str]) -> None:
    """Learn which subagent took a dispatch at its first call, whatever the
    tool (:func:`gitrun.guard.subagents.bind`): one that a throttle stops
    before it writes is still known, and its lead can continue it. Its Bash
    is not judged here: the client's sandbox confines it."""
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    with contextlib.suppress(Exception):  # unknown or stale: its writes are judged as they come
        task_context(repo_of(cwd), data, environ)


def pre_agent(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    if _is_worker(data, environ):
        return _launch_from_worker(data, environ)
    tool_input = data.get("tool_input")
    prompt = tool_input.get("prompt") if isinstance(tool_input, dict) else None
    found = pointers_in(prompt) if isinstance(prompt, str) else []
    if not found:
        return HookResult(0)  # not a gitrun dispatch
    assert isinstance(tool_input, dict)
    tool_use_id = data.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise HookFailure("the Agent call has no tool_use_id, so its subagent could not be known")
    return _dispatch(data, found, tool_use_id, tool_input, "dispatches")


def pre_send(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    """The lead continues a subagent by its id (SendMessage, its context
    intact) with a pointer: allowed only for that task's own subagent (the
    one gitrun's dispatch of it started) and a lease of the task now; the
    subagent's Agent call then dispatches the new lease, so its hooks find
    the task again."""
    tool_input = data.get("tool_input")
    message = tool_input.get("message") if isinstance(tool_input, dict) else None
    found = pointers_in(message) if isinstance(message, str) else []
    if not found:
        return HookResult(0)  # not a gitrun dispatch
    if _is_worker(data, environ):
        return _launch_from_worker(data, environ)
    assert isinstance(tool_input, dict)
    to = tool_input.get("to")
    try:
        sub = read_subagent({**data, "agent_id": to})
    except Unresolved as exc:
        return deny(
            f"gitrun cannot continue subagent {to!r} ({exc}); dispatch the pointer to a new "
            "subagent with the Agent tool instead"
        )
    return _dispatch(data, found, sub.tool_use_id, None, f"continues subagent {to} on", sub)


def _dispatch(
    data: dict[str, Any],
    found: list[tuple[str, str]],
    tool_use_id: str,
    tool_input: dict[str, Any] | None,
    how: str,
    continued: Subagent | None = None,
) -> HookResult:
    """Record that the subagent of the Agent call ``tool_use_id`` works on the
    one leased task ``found`` names (``tool_input``: the Agent call's, to
    give it gitrun's description; ``continued``: the subagent a SendMessage
    continues, which must be the task's own)."""
    if len(found) > 1:
        shown = ", ".join(task for _, task in found)
        return deny(
            f"this prompt holds the pointers of {len(found)} gitrun tasks ({shown}); dispatch "
            "each pointer as the whole prompt of its own subagent"
        )
    run_id, task_id = found[0]
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    repo = repo_of(cwd)
    if repo is None:
        raise HookFailure(f"the pointer names gitrun run {run_id!r}, but {cwd} is no repository")
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from pathlib import Path

    from gitrun.store.dispatches import DISPATCHED, description_of, record_dispatch

    if run_id not in run_ids(repo.root):
        return deny(f"there is no gitrun run {run_id!r} in this repository; check the pointer")
    if continued is not None and continued.description != description_of(run_id, task_id):
        return deny(
            f"subagent {continued.agent_id!r} was not gitrun task {task_id}'s; dispatch the "
            "pointer to a new subagent with the Agent tool instead"
        )
    local = LocalPaths.under(Path(repo.git_dir), run_id)
    outcome = record_dispatch(local, run_id, task_id, tool_use_id)
    if outcome is None:
        return deny(
            f"gitrun task {task_id} of run {run_id} is not handed out now; run `gitrun next "
            f"{run_id}` and dispatch only the pointers it prints"
        )
    if outcome == DISPATCHED:
        return deny(
            f"gitrun task {task_id} of run {run_id} is already being worked on by another "
            f"subagent; wait for it, then `gitrun collect {run_id}`"
        )
    decision: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": f"gitrun {how} task {task_id} (attempt {outcome})",
    }
    if tool_input is not None:
        decision["updatedInput"] = {**tool_input, "description": description_of(run_id, task_id)}
    return HookResult(0, json.dumps({"hookSpecificOutput": decision}, allow_nan=False))


def _launch_from_worker(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    """A worker's own subagent would belong to no task (its Agent call was
    not dispatched by the lead): denied when the worker has a task."""
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    context = task_context(repo_of(cwd), data, environ)
    if context is None:
        return HookResult(0)  # a subagent no gitrun task concerns
    if "agent_id" not in data:
        return HookResult(0)  # gitrun launched it: its subagents inherit GITRUN_TASK
    return deny(
        f"gitrun task {context.task_id} may not launch subagents of its own; do the task "
        "yourself and write its outputs with the Write tool"
    )
