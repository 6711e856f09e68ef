"""``gitrun retry``: new attempts for tasks that used theirs up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gitrun import ledger
from gitrun.engine import FAILED
from gitrun.errors import GitrunError
from gitrun.local import LocalPaths
from gitrun.lock import run_locked
from gitrun.runs import load_run
from gitrun.state import read_status


@dataclass(frozen=True)
class Retried:
    tasks: list[str]  # given fresh attempts
    lifted: str | None = None  # the halt lifted, if the run was halted


def retry_tasks(repo: Path, run_id: str, task_ids: list[str]) -> Retried:
    """Give ``task_ids`` (default: every failed task) fresh attempts, and lift
    a halt that holds the run (a failed canary, an environment fault, a strict
    ownership violation)."""
    run = load_run(repo, run_id)
    local = LocalPaths.of(repo, run_id)
    with run_locked(local, run_id):
        status = read_status(repo, run_id, run)
        unknown = [t for t in task_ids if t not in status.tasks]
        if unknown:
            raise GitrunError(
                f"run {run_id!r} has no task {', '.join(unknown)}; see `gitrun status {run_id}`"
            )
        chosen = task_ids or [t for t, s in status.tasks.items() if s.status == FAILED]
        done = [t for t in chosen if status.tasks[t].status == "done"]
        if done:
            raise GitrunError(f"{', '.join(done)} already done; there is nothing to retry")
        at = datetime.now(UTC).isoformat(timespec="milliseconds")
        writer = ledger.LedgerWriter(run.repo / run.dir)
        try:
            for tid in chosen:
                writer.write({"event": "retry", "task": tid, "at": at})
            lifted = status.halt["message"] if status.halt else None
            if lifted is not None:
                writer.write({"event": ledger.LIFT, "at": at})
        finally:
            writer.close()
        return Retried(chosen, lifted)
