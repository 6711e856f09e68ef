"""Which task a Claude Code subagent works on, from its hook input (issue 11).

Inside a subagent, PreToolUse carries ``agent_id`` (the lead's calls carry
none), and the client has written ``<transcript without .jsonl>/subagents/
agent-<agent_id>.meta.json`` by the subagent's first tool call. Its
``toolUseId`` is the id of the lead's Agent call, which the lead's hook
recorded with the task it dispatched (:mod:`gitrun.dispatches`). Environment
variables cannot tell subagents apart: the hook's environment is the lead's.

Anything that cannot be resolved for a subagent that claims a task (an agent
type with gitrun's prefix, a gitrun description) or whose meta file cannot be
read is :class:`Unresolved`, and the hooks deny its call with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.runs import RunDef, Task

_AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class Unresolved(Exception):
    """A subagent whose task cannot be found; the message is the reason the model reads."""


@dataclass(frozen=True)
class Subagent:
    agent_id: str
    agent_type: str
    tool_use_id: str
    description: str


def is_subagent(data: dict[str, Any]) -> bool:
    return "agent_id" in data


def meta_path(data: dict[str, Any]) -> Path:
    """``<transcript without .jsonl>/subagents/agent-<agent_id>.meta.json``."""
    agent_id, transcript = data.get("agent_id"), data.get("transcript_path")
    if not isinstance(agent_id, str) or _AGENT_ID.fullmatch(agent_id) is None:
        raise Unresolved(f"the hook input's agent_id {agent_id!r} is not one Claude Code makes")
    if not isinstance(transcript, str) or not transcript.endswith(".jsonl"):
        raise Unresolved("the hook input names no session transcript, so the subagent is unknown")
    return Path(transcript.removesuffix(".jsonl")) / "subagents" / f"agent-{agent_id}.meta.json"


def read_subagent(data: dict[str, Any]) -> Subagent:
    path = meta_path(data)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise Unresolved(
            f"cannot read this subagent's {path.name} ({why}), so gitrun cannot tell its task"
        ) from None
    tool_use_id = meta.get("toolUseId") if isinstance(meta, dict) else None
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise Unresolved(f"this subagent's {path.name} names no toolUseId")
    agent_type = meta.get("agentType") or data.get("agent_type") or ""
    description = meta.get("description") or ""
    return Subagent(str(data["agent_id"]), str(agent_type), tool_use_id, str(description))


def claims_a_task(data: dict[str, Any], sub: Subagent | None = None) -> bool:
    """Whether a subagent presents itself as a gitrun worker (gitrun's agent
    type, or the description gitrun gives dispatched tasks)."""
    from gitrun.agents import PREFIX

    types = [data.get("agent_type"), sub.agent_type if sub else None]
    if any(isinstance(t, str) and t.startswith(PREFIX) for t in types):
        return True
    return sub is not None and sub.description.startswith("gitrun ")


def task_of_subagent(repo: Path, data: dict[str, Any]) -> tuple[RunDef, Task] | None:
    """The run and task a subagent was dispatched for; None for a subagent no
    gitrun task concerns (launched without a pointer). Raises
    :class:`Unresolved` when it cannot tell, or when the dispatch is stale."""
    from gitrun.dispatches import read_dispatches
    from gitrun.leases import read_leases
    from gitrun.local import LocalPaths, local_runs
    from gitrun.runs import load_run

    quiet = _quiet
    records = [LocalPaths.of(repo, run_id) for run_id in local_runs(repo)]
    records = [local for local in records if local.dispatches.exists()]
    if not records:  # no lead dispatched anything here: no subagent has a task
        if claims_a_task(data):
            raise Unresolved(
                "this subagent has gitrun's agent type, but no gitrun pointer was dispatched "
                "here; the lead must dispatch the exact pointer `gitrun next` printed, as the "
                "whole prompt of one subagent"
            )
        return None
    sub = read_subagent(data)
    for local in records:
        run_id = local.root.name
        dispatch = read_dispatches(local, warn=quiet).get(sub.tool_use_id)
        if dispatch is None:
            continue
        run = load_run(repo, run_id)
        task = next((t for t in run.tasks if t.id == dispatch.task), None)
        if task is None:
            raise Unresolved(f"run {run_id!r} has no task {dispatch.task!r} any more")
        lease = read_leases(local, warn=quiet).get(task.id)
        if lease is None or lease.attempt != dispatch.attempt:
            raise Unresolved(
                f"gitrun task {task.id} (attempt {dispatch.attempt}) is no longer handed out: "
                "it was collected or handed out again, so nothing this subagent writes counts; "
                "stop now"
            )
        return run, task
    if claims_a_task(data, sub):
        raise Unresolved(
            f"this subagent ({sub.agent_type or 'no type'}: {sub.description!r}) was not "
            "dispatched with a leased gitrun pointer; the lead must dispatch the exact pointer "
            "`gitrun next` printed, as the whole prompt of one subagent"
        )
    return None


def _quiet(_line: str) -> None:
    """A damaged record only identifies fewer subagents; the hook says nothing else."""
