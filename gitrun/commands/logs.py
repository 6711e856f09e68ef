"""``gitrun logs``: what a run's workers printed, from their logs on this machine.

A command-mode attempt's stdout and stderr go to
``.git/gitrun/RUN/logs/TASK.N.log`` (the first MiB, then the last 64 KiB;
an attempt that printed nothing leaves none). A failure's sentence quotes
the last lines; this prints the whole log, made visible (a worker's escape
sequences are shown, never obeyed).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gitrun.engine.states import DONE, RUNNING, UP_TO_DATE
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.store.jsonlines import shown
from gitrun.store.local import LocalPaths
from gitrun.store.regular import NotRegular, kind_of, read_regular
from gitrun.visible import visible

MAX_SHOWN = 4 << 20  # bytes of one log printed; a log is bounded below that anyway


@dataclass(frozen=True)
class Log:
    task: str
    attempt: int
    path: Path


FOLLOW_POLL = 0.5  # seconds between looks at a followed log
STATUS_EVERY = 4  # looks between reads of whether its attempt still runs


def show_logs(
    repo: Path,
    run_id: str,
    task: str | None,
    attempt: int | None,
    following: bool,
    write: Callable[[str], None],
) -> None:
    """``gitrun logs``: write the logs :func:`attempt_logs` finds, each under
    a header when there may be more than one; ``following``: ``task``'s, as
    it grows (:func:`follow`). ``write`` is given whole lines, ends and all."""
    if following:
        if task is None:
            raise GitrunError("--follow needs a TASK: `gitrun logs RUN TASK --follow`")
        [one] = attempt_logs(repo, run_id, task, attempt, follow=True)
        follow(repo, run_id, one, write)
        return
    found = attempt_logs(repo, run_id, task, attempt)
    if not found:
        write(f"run {run_id!r}: no task that is not done left a log here\n")
        return
    for log in found:
        if len(found) > 1 or task is None:
            write(f"==> {log.task} attempt {log.attempt} ({log.path.name}) <==\n")
        write(log_text(log))


def attempt_logs(
    repo: Path, run_id: str, task: str | None, attempt: int | None, follow: bool = False
) -> list[Log]:
    """The logs to show: ``task``'s attempt ``attempt`` (default its last);
    without ``task``, the last attempt's of every task not done. ``follow``:
    the attempt may be running and have printed nothing yet."""
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
    newest = known.last_attempt  # the running one's, or the last that ended
    number = attempt if attempt is not None else newest
    if number < 1 or number > newest:
        tried = f"attempts 1 to {newest}" if newest else "no attempt yet"
        raise GitrunError(f"task {task} of run {run_id!r} has {tried}; choose one of them")
    path = local.log_of(task, number)
    if follow:
        return [Log(task, number, path)]
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


def running(repo: Path, run_id: str, log: Log) -> bool:
    """Whether ``log``'s attempt is still running."""
    task = read_status(repo, run_id).tasks.get(log.task)
    return task is not None and task.status == RUNNING and task.last_attempt == log.attempt


def follow(repo: Path, run_id: str, log: Log, write: Callable[[str], None]) -> None:
    """Print ``log`` as it grows, until its attempt is no longer running (an
    attempt has its timeout, so this ends; Ctrl-C ends it sooner)."""
    offset, looks, live = 0, 0, True
    while True:
        try:
            chunk = _read_from(log.path, offset)
        except FileNotFoundError:
            chunk = b""  # it printed nothing yet
        except OSError as exc:
            raise GitrunError(
                f"{shown(log.path)}: cannot be read ({exc.strerror or exc})"
            ) from None
        if chunk:
            offset += len(chunk)
            write(visible(chunk.decode(errors="replace"), lines=True))
        if not live:
            return
        if looks % STATUS_EVERY == 0:
            live = running(repo, run_id, log)  # one more read after it ended
        looks += 1
        if live:
            time.sleep(FOLLOW_POLL)


def _read_from(path: Path, offset: int) -> bytes:
    """The bytes of the regular file at ``path`` from ``offset`` on (at most
    :data:`MAX_SHOWN`), never waiting on a FIFO in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(str(path), kind_of(path) or "not a file")
        return os.pread(fd, MAX_SHOWN, offset)
    finally:
        os.close(fd)
