"""Per-task agent definitions for orchestrating sessions (``gitrun next --agents``).

Each leased task gets ``.claude/agents/<name>.md``; a subagent dispatched
from it carries the agent type ``<name>`` in its hook input, which is how the
write-time hooks find its task.

The name is ``gitrun-<length of the run id>-<run>-<task>``. Run and task ids
may both contain '-', so ``gitrun-<run>-<task>`` was ambiguous: run ``a``
task ``b-c`` and run ``a-b`` task ``c`` were both ``gitrun-a-b-c``, one
subagent was judged as the other's task, and their agent files overwrote
each other. With the length in front, a name parses back in exactly one way.
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
    """``gitrun-<len(run_id)>-<run_id>-<task_id>``, which :func:`parse_agent_name` reads back."""
    return f"{PREFIX}{len(run_id)}-{run_id}-{task_id}"


def parse_agent_name(agent_type: str) -> tuple[str, str] | None:
    """The (run id, task id) an agent name made by :func:`agent_name` holds;
    None for any other text (a name with gitrun's prefix that does not parse
    names no task, and the hooks refuse it)."""
    if not agent_type.startswith(PREFIX):
        return None
    length, dash, rest = agent_type[len(PREFIX) :].partition("-")
    if not dash or not length.isascii() or not length.isdigit() or length != str(int(length)):
        return None
    size = int(length)
    run_id, task_id = rest[:size], rest[size + 1 :]
    if size == 0 or len(rest) <= size + 1 or rest[size] != "-":
        return None
    return run_id, task_id


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
    """The run and task an agent type made by :func:`agent_name` names, if
    that run and task exist here; None otherwise."""
    parsed = parse_agent_name(agent_type)
    if parsed is None:
        return None
    run_id, task_id = parsed
    if run_id not in list_runs(repo):
        return None
    run = load_run(repo, run_id)
    for task in run.tasks:
        if task.id == task_id:
            return run, task
    return None
