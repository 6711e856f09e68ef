"""A run as its branch holds it: the definition, the ledger and the task states
at the branch's tip, read from git objects alone.

What the HTML report shows. It needs nothing on disk but the repository's
object database and refs, so it works on a fresh clone (from the remote's
copy of the branch, ``origin/gitrun/<run>``), on a landed run, and while a
driver runs (it reads one tip, so the page is consistent with one commit).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.definition.load import (
    CONFIG_FILE,
    PACKET_NAME,
    TASKS_NAME,
    RunDef,
    check_run_id,
)
from gitrun.definition.runfiles import read_blobs
from gitrun.engine.states import DONE, FAILED, PENDING, UP_TO_DATE, Engine
from gitrun.errors import GitrunError
from gitrun.store import git, ledger
from gitrun.store.branches import committed_records, find_tip
from gitrun.store.history import read_history
from gitrun.store.jsonlines import file_error
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
    run = _load_definition(repo, run_id, tip, tree)
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


def _load_definition(repo: Path, run_id: str, tip: str, tree: dict[str, tuple[str, str]]) -> RunDef:
    """The run definition as committed at ``tip``, loaded by the one loader
    from a scratch copy of its files (the loader reads files). Settings come
    from where every command takes them: the environment and the repository's
    ``.gitrun/config.toml`` (never committed by gitrun: it may hold secrets)."""
    from gitrun.definition.load import load_run

    run_dir = f".gitrun/runs/{run_id}"
    wanted = [f"{run_dir}/{PACKET_NAME}", f"{run_dir}/{TASKS_NAME}"]
    if wanted[0] not in tree:
        raise GitrunError(
            f"the run's branch (commit {tip[:10]}) holds no {wanted[0]}, so it is not a "
            f"gitrun run's branch; delete it or start the run again"
        )
    from gitrun.definition.outputs import blob_on_disk

    fmt = git.object_format(repo)
    if all(p in tree and blob_on_disk(repo / p, fmt) == tree[p][1] for p in wanted):
        # The files here are the committed ones, byte for byte (the run's own
        # checkout, or a landed run): loaded in place, a big task table's cache serves.
        return load_run(repo, run_id)
    blobs = read_blobs(repo, sorted({tree[p][1] for p in wanted if p in tree}))
    with tempfile.TemporaryDirectory(prefix="gitrun-report-") as scratch:
        for path in wanted:
            if path in tree:
                target = Path(scratch, path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blobs[tree[path][1]])
        config = repo / CONFIG_FILE
        if config.is_file():
            try:
                Path(scratch, CONFIG_FILE).write_bytes(config.read_bytes())
            except OSError as exc:
                raise file_error(config, exc, "read") from exc
        run = load_run(Path(scratch), run_id)
    return dataclasses.replace(run, repo=repo)
