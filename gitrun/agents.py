"""Per-task agent definitions for orchestrating sessions (``gitrun next --agents``).

Each leased task gets ``.claude/agents/gitrun-<run>-<task>.md``; a subagent
dispatched from it carries the agent type ``gitrun-<run>-<task>`` in its hook
input, which is how the write-time hooks find its task.
"""

from __future__ import annotations

import string
from pathlib import Path

from gitrun.resources import template_text
from gitrun.runs import RunDef, Task, list_runs, load_run
from gitrun.tomlfile import write_atomic

AGENTS_DIR = ".claude/agents"
PREFIX = "gitrun-"


def agent_name(run_id: str, task_id: str) -> str:
    return f"{PREFIX}{run_id}-{task_id}"


def write_agent(run: RunDef, task: Task, pointer: str) -> str:
    name = agent_name(run.id, task.id)
    stage = run.stage_of(task)
    text = string.Template(template_text("agent.md")).substitute(
        name=name,
        run=run.id,
        task=task.id,
        outputs=", ".join(o.path for o in run.outputs_of(task)),
        model=run.packet.model_for(stage),
        pointer=pointer,
        packet=run.packet_path,
    )
    write_atomic(run.repo / AGENTS_DIR / f"{name}.md", text.encode(), durable=False)
    return name


def remove_agent(repo: Path, name: str) -> None:
    (repo / AGENTS_DIR / f"{name}.md").unlink(missing_ok=True)


def task_of_agent(repo: Path, agent_type: str) -> tuple[RunDef, Task] | None:
    """The run and task an agent type ``gitrun-<run>-<task>`` names, if any.

    Run and task ids may both contain '-', so every run here is tried.
    """
    if not agent_type.startswith(PREFIX):
        return None
    rest = agent_type[len(PREFIX) :]
    for run_id in sorted(list_runs(repo), key=len, reverse=True):
        if rest.startswith(run_id + "-"):
            task_id = rest[len(run_id) + 1 :]
            run = load_run(repo, run_id)
            for task in run.tasks:
                if task.id == task_id:
                    return run, task
    return None
