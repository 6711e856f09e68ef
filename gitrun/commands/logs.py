"""``gitrun logs``: what a run's workers printed, from their logs on this machine.

A command-mode attempt's stdout and stderr go to
``.git/gitrun/RUN/logs/TASK.N.log`` (the first MiB, then the last 64 KiB;
an attempt that printed nothing leaves none). A failure's sentence quotes
the last lines; this prints the whole log, made visible (a worker's escape
sequences are shown, never obeyed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitrun.engine.states import DONE, UP_TO_DATE
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.store.jsonlines import shown
from gitrun.store.local import LocalPaths
from gitrun.store.regular import read_regular
from gitrun.visible import visible

MAX_SHOWN = 4 << 20  # bytes of one log printed; a log is bounded below that anyway


@dataclass(frozen=True)
class Log:
    task: str
    attempt: int
    path: Path


def attempt_logs(repo: Path, run_id: str, task: str | None, attempt: int | None) -> list[Log]:
    """The logs to show: ``task``'s attempt ``attempt`` (default its last);
    without ``task``, the last attempt's of every task not done."""
    status = read_status(repo, run_id)
    local = LocalPaths.of(repo, run_id)
    if task is None:
        if attempt is not None:
            raise GitrunError("--attempt needs a TASK: `gitrun logs RUN TASK --attempt N`")
        found = [
            Log(t.id, t.last_attempt, local.log_of(t.id, t.last_attempt))
            for t in status.tasks.values()
            if t.status not in (DONE, UP_TO_DATE) and t.last_attempt
        ]
        return [log for log in found if os.path.exists(log.path)]
    known = status.tasks.get(task)
    if known is None:
        raise GitrunError(
            f"run {run_id!r} has no task {task!r}; `gitrun status {run_id}` lists them"
        )
    number = attempt if attempt is not None else known.last_attempt
    if number < 1 or number > known.last_attempt:
        tried = f"attempts 1 to {known.last_attempt}" if known.last_attempt else "no attempt yet"
        raise GitrunError(f"task {task} of run {run_id!r} has {tried}; choose one of them")
    path = local.log_of(task, number)
    if not os.path.exists(path):
        raise GitrunError(
            f"task {task} attempt {number} left no log here ({shown(path)}): its worker printed "
            "nothing, or it ran on another machine or as an external attempt"
        )
    return [Log(task, number, path)]


def log_text(log: Log) -> str:
    """The log's text, made visible; lines kept."""
    try:
        data = read_regular(log.path, limit=MAX_SHOWN)
    except OSError as exc:
        raise GitrunError(f"{shown(log.path)}: cannot be read ({exc.strerror or exc})") from None
    return visible(data.decode(errors="replace"), lines=True)
