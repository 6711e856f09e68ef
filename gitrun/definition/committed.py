"""A run's definition as a commit holds it, and a run found wherever it is defined.

On a fresh clone a run may be defined only on its branch (its first commit
holds the packet and task table), here or on a remote's copy of it
(``origin/gitrun/<run>``): ``status`` and the report read it from there, as
``resume`` and ``log`` find it (:func:`gitrun.store.branches.find_tip`),
without writing anything.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from gitrun.definition.load import CONFIG_FILE, PACKET_NAME, RUNS_DIR, TASKS_NAME, RunDef, load_run
from gitrun.definition.outputs import blob_on_disk
from gitrun.definition.runfiles import read_blobs
from gitrun.errors import GitrunError
from gitrun.layout import check_run_id
from gitrun.store import git
from gitrun.store.branches import find_tip
from gitrun.store.jsonlines import file_error


def load_committed_run(
    repo: Path, run_id: str, tip: str, tree: dict[str, tuple[str, str]] | None = None
) -> RunDef:
    """The run definition as committed at ``tip`` (``tree``: its listing of the
    run directory, when the caller has it), loaded by the one loader from a
    scratch copy of its files (the loader reads files). Settings come from
    where every command takes them: the environment and the repository's
    ``.gitrun/config.toml`` (never committed by gitrun: it may hold secrets)."""
    run_dir = f"{RUNS_DIR}/{run_id}"
    if tree is None:
        tree = git.ls_tree(repo, tip, [run_dir])
    wanted = [f"{run_dir}/{PACKET_NAME}", f"{run_dir}/{TASKS_NAME}"]
    if wanted[0] not in tree:
        raise GitrunError(
            f"the run's branch (commit {tip[:10]}) holds no {wanted[0]}, so it is not a "
            f"gitrun run's branch; delete it or start the run again"
        )
    fmt = git.object_format(repo)
    if all(p in tree and blob_on_disk(repo / p, fmt) == tree[p][1] for p in wanted):
        # The files here are the committed ones, byte for byte (the run's own
        # checkout, or a landed run): loaded in place, a big task table's cache serves.
        return load_run(repo, run_id)
    blobs = read_blobs(repo, sorted({tree[p][1] for p in wanted if p in tree}))
    with tempfile.TemporaryDirectory(prefix="gitrun-committed-") as scratch:
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


def load_run_anywhere(repo: Path, run_id: str) -> RunDef:
    """The run as the work tree defines it; where it does not (a fresh clone),
    as its branch holds it, here or on a remote. A run defined nowhere gets
    :func:`~gitrun.definition.load.load_run`'s error, which says how to make it."""
    check_run_id(run_id)
    if not os.path.lexists(repo / RUNS_DIR / run_id / PACKET_NAME):
        found = find_tip(repo, run_id)
        if found is not None:
            return load_committed_run(repo, run_id, found.tip)
    return load_run(repo, run_id)
