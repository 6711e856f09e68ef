"""Hook inputs of a lead session and its subagents, as Claude Code writes them.

The lead's PreToolUse on Agent carries ``tool_use_id`` and the prompt; a
subagent's carries ``agent_id``, and the client has written
``<transcript without .jsonl>/subagents/agent-<agent_id>.meta.json`` with
the lead's ``toolUseId`` by then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gitrun.commands.session import prepare_external
from gitrun.engine.external import external_run


def lease(repo: Path, run_id: str, *, start: bool = False) -> dict[str, str]:
    """Hand out the next batch of an external run (``start``: its first): task -> pointer."""
    if start:
        prepare_external(repo, run_id, lambda _line: None, resume=False)
    with external_run(repo, run_id) as ext:
        batch = ext.next_batch(None)
    return {item["task"]: item["pointer"] for item in batch.leased}


def collect(repo: Path, run_id: str) -> Any:
    with external_run(repo, run_id) as ext:
        return ext.collect([])


def agent_call(
    repo: Path, transcript: Path, prompt: str, tool_use_id: str, kind: str = "gitrun-worker"
) -> dict[str, Any]:
    """The lead's PreToolUse input for one Agent call."""
    return {
        "session_id": "lead",
        "transcript_path": str(transcript),
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": "Agent",
        "tool_input": {"description": "a task", "prompt": prompt, "subagent_type": kind},
        "tool_use_id": tool_use_id,
    }


def start_subagent(
    transcript: Path,
    agent_id: str,
    tool_use_id: str,
    kind: str = "gitrun-worker",
    description: str = "",
) -> None:
    """What the client writes when it starts the subagent of an Agent call."""
    meta = transcript.with_suffix("") / "subagents" / f"agent-{agent_id}.meta.json"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(
        json.dumps({"agentType": kind, "description": description, "toolUseId": tool_use_id})
    )


def subagent_call(
    repo: Path,
    transcript: Path,
    agent_id: str,
    tool: str,
    tool_input: dict[str, Any],
    kind: str = "gitrun-worker",
) -> dict[str, Any]:
    """A subagent's PreToolUse input for one tool call."""
    return {
        "session_id": "lead",
        "transcript_path": str(transcript),
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "agent_id": agent_id,
        "agent_type": kind,
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"toolu_{agent_id}_{tool}",
    }
