"""The two-line pointer dispatched to a worker for one task.

It names the run, the packet, the task, its inputs and its outputs, nothing
else: the shared rules stay in the packet file, which workers read from disk.
:func:`attempt_values` are the values a command's placeholders (and the
worker's ``GITRUN_*`` environment) take for one attempt.
"""

from __future__ import annotations

from functools import cache

from gitrun.definition.inputs import task_inputs
from gitrun.definition.load import RunDef, Task
from gitrun.resources import template_text

POINTER_TEMPLATE = "pointer.txt"


@cache
def _template() -> str:
    return template_text(POINTER_TEMPLATE).rstrip("\n")


def render_pointer(run: RunDef, task: Task) -> str:
    return _pointer(run, task, run.stage_of(task), run.output_paths(task))


def _pointer(run: RunDef, task: Task, stage: str, outputs: list[str]) -> str:
    if task.bundle:
        inputs = f"listed in {task.bundle}"
    else:
        inputs = ", ".join(task.inputs) if task.inputs else "none"
    return _template().format(
        run=run.id,
        task=task.id,
        stage=stage,
        packet=run.packet_path,
        note=f" {task.note}" if task.note else "",
        inputs=inputs,
        outputs=", ".join(outputs),
        done_when="it exists and validates" if len(outputs) == 1 else "they exist and validate",
    )


def attempt_values(
    run: RunDef, task: Task, attempt: int, pointer: str | None = None
) -> dict[str, str]:
    """What one attempt of ``task`` is told: placeholder name -> value."""
    stage = run.stage_of(task)
    outputs = run.output_paths(task)
    return {
        "pointer": pointer if pointer is not None else _pointer(run, task, stage, outputs),
        "task": task.id,
        "run": run.id,
        "model": run.packet.model_for(stage),
        "packet": run.packet_path,
        "attempt": str(attempt),
        "outputs": "\n".join(outputs),
        "inputs": "\n".join(task_inputs(run, task)),
        "stage": stage,
        "repo": str(run.repo),  # absolute: where a worker's sandbox keeps Bash from writing
    }
