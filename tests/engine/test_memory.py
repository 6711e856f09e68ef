"""A fresh run starts each model bucket where this repository's last run on it left it.

Real runs against the fake agent's crowd (an API that takes two calls at
once): the first run learns the bucket's ceiling, the next run of the same
model starts there (its ledger says from which run), and a run on another
model, a memory older than an hour, a resumed run and a damaged memory
file are left as they were.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from gitrun.definition.load import load_run
from gitrun.engine.memory import FRESH, Learnt, Memory
from gitrun.engine.states import load_engine
from gitrun.store.local import LocalPaths
from gitrun.store.records import write_record
from tests.helpers import FAKE_WORKER, commit_all, fake_worker_run, ledger_records, write_run

quiet = lambda _line: None  # noqa: E731
BUCKET = "command/m-small"
LIMITS = {"concurrency": 4, "backoff_base": "0.05s", "backoff_cap": "0.5s", "max_attempts": 2}


def _crowd(tmp_path: Path) -> dict[str, object]:
    return {
        "default": "crowd",
        "crowd_dir": str(tmp_path / "crowd"),
        "crowd_limit": 2,
        "sleep": 0.3,  # three overlap whatever the load
    }


def _second_run(repo: Path, spec: Path, model: str = "m-small", run_id: str = "r2") -> None:
    """Another run of the same worker, on ``model``, with outputs of its own."""
    tasks: list[dict[str, object]] = [
        {"id": f"s{i}", "outputs": [f"{run_id}/s{i}.json"]} for i in range(1, 4)
    ]
    packet = {
        "executor": {"command": [sys.executable, str(FAKE_WORKER), str(spec)]},
        "limits": {**LIMITS, "timeout": "60s"},
        "model": {"default": model},
    }
    write_run(repo, run_id, tasks, packet)
    commit_all(repo, f"run {run_id}")


def _bucket(repo: Path, run_id: str) -> tuple[int, int, str]:
    engine, _tip = load_engine(load_run(repo, run_id), LocalPaths.of(repo, run_id))
    bucket = engine.governor.bucket(engine.current_stage() or "work")
    return bucket.concurrency, bucket.ceiling, bucket.reason


def _remember(repo: Path, learnt: dict[str, Learnt]) -> Path:
    path = LocalPaths.of(repo, "r2").buckets
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, Memory(learnt))
    return path


def test_the_next_run_of_a_bucket_starts_where_the_last_one_left_it(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = fake_worker_run(
        git_repo, "r1", 12, _crowd(tmp_path), {"limits": LIMITS, "model": {"default": "m-small"}}
    )
    assert start_run(git_repo, "r1", quiet).exit_code == 0
    changes = [r for r in ledger_records(git_repo, "r1") if r.get("event") == "concurrency"]
    assert changes, "the first run never changed its concurrency"
    kept = json.loads(LocalPaths.of(git_repo, "r1").buckets.read_text())["buckets"][BUCKET]
    assert (kept["concurrency"], kept["ceiling"], kept["run"]) == (
        changes[-1]["concurrency"],
        changes[-1]["ceiling"],
        "r1",
    )
    _second_run(git_repo, spec)
    concurrency, ceiling, reason = _bucket(git_repo, "r2")
    assert (concurrency, ceiling) == (kept["concurrency"], kept["ceiling"])
    assert reason.startswith("as run r1 left it"), reason
    assert start_run(git_repo, "r2", quiet).exit_code == 0
    first = next(r for r in ledger_records(git_repo, "r2") if r.get("event") == "concurrency")
    assert first["bucket"] == BUCKET and str(first["reason"]).startswith("as run r1 left it")
    assert first["concurrency"] == kept["concurrency"]


def test_another_model_an_old_memory_and_a_resumed_run_start_as_before(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"default": "write"}))
    now = time.time()
    _remember(git_repo, {"command/m-large": Learnt(2, 3, now - 60, "r0")})
    _second_run(git_repo, spec)  # on m-small: nothing known of it
    assert _bucket(git_repo, "r2") == (4, 0, "the packet's concurrency")
    _remember(git_repo, {BUCKET: Learnt(2, 3, now - FRESH - 60, "r0")})
    assert _bucket(git_repo, "r2") == (4, 0, "the packet's concurrency")
    _remember(git_repo, {BUCKET: Learnt(2, 3, now - 60, "r0")})
    assert _bucket(git_repo, "r2") == (2, 3, "as run r0 left it 1 min ago")
    # Once the run has a ledger, it is what the run's buckets start from.
    assert start_run(git_repo, "r2", quiet).exit_code == 0
    _remember(git_repo, {BUCKET: Learnt(1, 2, now - 60, "r9")})
    assert "r9" not in _bucket(git_repo, "r2")[2]


@pytest.mark.parametrize("kind", ["corrupt", "directory", "fifo", "other version"])
def test_a_damaged_memory_is_warned_about_and_the_run_goes_on(
    git_repo: Path, tmp_path: Path, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"default": "write"}))
    _second_run(git_repo, spec)
    path = LocalPaths.of(git_repo, "r2").buckets
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "corrupt":
        path.write_text('{"v": 1, "buckets": {"command/m-small": {"concurrency": 0')
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text('{"v": 7, "buckets": {}}')
    assert _bucket(git_repo, "r2") == (4, 0, "the packet's concurrency")
    said = capfd.readouterr().err
    assert f"gitrun: warning: {path}" in said and "finds each bucket's ceiling by itself" in said
    assert "Traceback" not in said
    assert start_run(git_repo, "r2", quiet).exit_code == 0
    assert "Traceback" not in capfd.readouterr().err
