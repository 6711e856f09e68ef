"""A run as its branch holds it: the definition, the ledger and the task states
at the branch's tip, read from git objects alone.

What the HTML report shows. It needs nothing on disk but the repository's
object database and refs, so it works on a fresh clone (from the remote's
copy of the branch, ``origin/gitrun/<run>``), on a landed run, and while a
driver runs (it reads one tip, so the page is consistent with one commit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.definition.committed import load_committed_run
from gitrun.definition.load import RunDef, check_run_id
from gitrun.engine.states import DONE, FAILED, PENDING, UP_TO_DATE, Engine
from gitrun.errors import GitrunError
from gitrun.store import git, ledger
from gitrun.store.branches import committed_records, find_tip
from gitrun.store.history import read_history
from gitrun.store.local import LocalPaths


@dataclass(frozen=True)
class CommittedRun:
    run: RunDef
    ref: str  # the branch read: gitrun/<run>, or a remote's copy of it
    tip: str
    records: list[dict[str, Any]]  # the committed ledger's current round, in order
    status: dict[str, str]  # task id -> done, up-to-date, failed or pending (table order)
    commits: dict[str, str]  # task id -> the newest commit landing its outputs
    summary: ledger.LedgerSummary  # the committed ledger, summed up

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys((DONE, UP_TO_DATE, PENDING, FAILED), 0)
        for status in self.status.values():
            out[status] += 1
        return out


def find_run_ref(repo: Path, run_id: str) -> tuple[str, str]:
    """The run's branch here, or else a remote's copy of it: (ref, tip)."""
    check_run_id(run_id)
    found = find_tip(repo, run_id)
    if found is not None:
        return found.ref, found.tip
    raise GitrunError(
        f"run {run_id!r} has no branch gitrun/{run_id} here or on a remote, and the report "
        f"reads only what the branch holds; start the run (`gitrun start {run_id}`) or fetch "
        "its branch first"
    )


def read_committed(repo: Path, run_id: str) -> CommittedRun:
    """The run at its branch's tip."""
    ref, tip = find_run_ref(repo, run_id)
    run_dir = f".gitrun/runs/{run_id}"
    tree = git.ls_tree(repo, tip, [run_dir])
    run = load_committed_run(repo, run_id, tip, tree)
    records = committed_records(repo, run_id, tip)
    # The engine's states over the committed ledger; what runs now is no committed fact.
    engine = Engine(run, LocalPaths.of(repo, run_id), tip, running=(), records=records)
    status = dict(engine.status)
    summary = engine.summary
    records = engine.records  # the current round's
    commits: dict[str, str] = {}
    for entry in read_history(repo, run_id, tip):  # newest first
        for tid in entry.tasks:
            commits.setdefault(tid, entry.commit)
    shown = ref.removeprefix("refs/heads/").removeprefix("refs/remotes/")
    return CommittedRun(run, shown, tip, records, status, commits, summary)
