"""``gitrun retry``: new attempts for tasks that used theirs up."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gitrun import ledger
from gitrun.errors import GitrunError
from gitrun.local import LocalPaths
from gitrun.lock import run_locked
from gitrun.runs import load_run
from gitrun.state import FAILED, ledger_path, read_status


def retry_tasks(repo: Path, run_id: str, task_ids: list[str]) -> list[str]:
    """Give ``task_ids`` (default: every failed task) fresh attempts; returns them."""
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
        for tid in chosen:
            ledger.append(ledger_path(run), {"event": "retry", "task": tid, "at": at})
        return chosen
