"""The watchdog and status read the live driver's state from its owner record."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from gitrun.cli import app
from gitrun.local import LocalPaths
from gitrun.lock import read_owner, run_locked
from gitrun.watchdog import inspect_runs
from tests.helpers import write_run

runner = CliRunner()


def test_the_owner_record_carries_the_drivers_live_state(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    overdue = {"task": "t1", "attempt": 2, "started": 0.0, "deadline": time.time() - 3600}
    state = {"concurrency": 2, "max_concurrency": 4, "kill_grace": 5.0, "running": [overdue]}
    with run_locked(local, "r") as lock:
        lock.beat(state)
        owner = read_owner(local)
        assert owner is not None and owner.state == state
        [health] = inspect_runs(git_repo)
        assert health.stale and health.overdue == ["t1#2"]
        assert "attempts past their deadline: t1#2" in health.reason
        shown = runner.invoke(app, ["status", "r"])
        assert "concurrency 2/4" in shown.output


def test_a_damaged_live_state_is_read_as_nothing_not_a_crash(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    with run_locked(local, "r") as lock:
        lock.beat({"kill_grace": "soon", "running": ["junk", {"deadline": "never"}, 7]})
        [health] = inspect_runs(git_repo)
        assert not health.stale
        record = json.loads(local.owner.read_text())
        record["state"] = ["not", "a", "table"]
        local.owner.write_text(json.dumps(record))
        owner = read_owner(local)
        assert owner is not None and owner.state == {}
