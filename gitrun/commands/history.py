"""``gitrun log``: a run's history from its branch (when, which tasks, which
attempt), or every attempt record of its ledger."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from gitrun.definition.load import RUNS_DIR, check_run_id
from gitrun.definition.runfiles import read_run_ledger
from gitrun.errors import GitrunError
from gitrun.store.branches import find_tip
from gitrun.store.history import read_history
from gitrun.store.ledger import attempt_records


def show_log(
    repo: Path, run_id: str, as_json: bool, attempts: bool, say: Callable[[str], None]
) -> None:
    """Say the run's history, a line a commit (``as_json``: one JSON array);
    ``attempts``: its ledger's attempt records instead, a JSON object a line
    (the format docs/ledger.md documents), read from the run's branch when
    it has one."""
    check_run_id(run_id)
    found = find_tip(repo, run_id)
    if attempts:
        tip = found.tip if found is not None else None
        records = attempt_records(read_run_ledger(repo, f"{RUNS_DIR}/{run_id}", tip))
        if as_json:
            say(json.dumps(records, indent=2, sort_keys=True, allow_nan=False))
        for record in records if not as_json else []:
            say(json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False))
        return
    if found is None:
        raise GitrunError(
            f"run {run_id!r} has no branch gitrun/{run_id} here or on a remote yet; start it "
            f"with `gitrun start {run_id}`"
        )
    entries = read_history(repo, run_id, found.ref)
    if as_json:
        say(json.dumps([e.to_json() for e in entries], indent=2, allow_nan=False))
        return
    for entry in entries:
        shown = " ".join(f"{t}#{n}" for t, n in entry.attempts.items())
        say(
            f"{entry.date}  {entry.commit[:10]}  {entry.subject}"
            + (f"  [{shown}]" if shown else "")
        )
