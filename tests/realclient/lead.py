"""A mock-model lead that follows the plugin's lead skill.

:class:`Lead` is a :data:`~tests.realclient.mockmodel.Brain`: it reads only
what gitrun printed into the conversation and the client's notifications,
never a worker's words, and answers each request the way the skill tells a
model to (start or resume, dispatch the batch, collect, ask again, land).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from tests.realclient.mockmodel import Request, Turn, agent, agents, bash, say


def conversation(request: Request) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The tool calls the model made so far and what each returned."""
    calls: list[dict[str, Any]] = []
    results: dict[str, str] = {}
    for message in request.body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and message.get("role") == "assistant":
                calls.append(block)
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                parts = inner if isinstance(inner, list) else [{"text": inner}]
                results[str(block.get("tool_use_id"))] = " ".join(
                    str(b.get("text", "")) for b in parts if isinstance(b, dict)
                )
    return calls, results


def json_in(text: str) -> dict[str, Any] | None:
    """The JSON object a Bash result holds (gitrun's stdout), or None."""
    try:
        found = json.loads(text[text.index("{") : text.rindex("}") + 1])
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def task_of(prompt: str) -> str:
    """The task a pointer names."""
    found = re.search(r"task ([a-z0-9._-]+):", prompt)
    assert found, prompt
    return found[1]


@dataclass
class Lead:
    """The lead skill's loop over run ``run``, opened with the command
    ``first`` (its start or resume) in a conversation that has no tool call
    yet, or whose last call handed over to the lead skill."""

    run: str
    first: str
    batches: int = 0
    commands: list[str] = field(default_factory=list)

    def __call__(self, request: Request) -> Turn:
        calls, results = conversation(request)
        if not calls or calls[-1]["name"] == "Skill":
            return self._bash(self.first)
        last = calls[-1]
        if last["name"] == "Agent":  # the batch came back, each subagent with its result
            batch = calls[max(i for i, c in enumerate(calls) if c["name"] == "Bash") + 1 :]
            throttled = [
                task_of(c["input"]["prompt"])
                for c in batch
                if re.search(r"\b429\b|rate.?limit", results.get(c["id"], ""), re.I)
            ]
            flag = f" --throttled {' '.join(throttled)}" if throttled else ""
            return self._bash(f"gitrun collect {self.run} --json{flag}")
        command = str(last["input"]["command"])
        said = results.get(last["id"], "")
        if command.startswith(("gitrun next", "gitrun start", "gitrun resume")):
            batch_json = json_in(said)
            if batch_json is None:
                self.commands.append(f"unreadable: {said}")
                return say(f"gitrun printed no batch: {said[:300]}")
            if batch_json.get("leased"):
                self.batches += 1
                kind = batch_json["agent"]
                return agents(
                    *(agent(p, t, kind, wait=True) for t, p in batch_json["leased"].items())
                )
            if batch_json.get("done"):
                return self._bash(f"gitrun land {self.run}")
            if batch_json.get("halted"):
                return say(f"The run halted: {batch_json.get('reason')}")
            if batch_json.get("wait_s"):
                return self._bash(f"sleep {math.ceil(batch_json['wait_s'])}")
            return self._bash(f"gitrun collect {self.run} --json")
        if command.startswith(("sleep", "gitrun collect")):
            return self._bash(f"gitrun next {self.run} --json")
        return say("The run is landed.")

    def _bash(self, command: str) -> Turn:
        self.commands.append(command)
        return bash(command, "gitrun")
