"""Runs have an end: `status` says a run landed, in which branch, by which commit."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from gitrun.cli.main import app
from gitrun.commands.land import land_run
from gitrun.commands.session import resume_run, start_run
from tests.helpers import fake_worker_run, git, write_run

quiet = lambda _line: None  # noqa: E731
runner = CliRunner()


def gitrun(*args: str) -> Result:
    return runner.invoke(app, list(args))


WRITE = {"executor": {"command": ["sh", "-c", 'echo "{}" > "$GITRUN_OUTPUTS"']}}


def _started(repo: Path, run_id: str = "r") -> Path:
    """Run ``run_id`` of two tasks, each writing its JSON output under ``<run>/``, to its end."""
    tasks: list[dict[str, object]] = [
        {"id": tid, "outputs": [f"{run_id}/{tid}.json"]} for tid in ("t01", "t02")
    ]
    write_run(repo, run_id, tasks, WRITE)
    assert start_run(repo, run_id, quiet).exit_code == 0
    return repo


# -- status ---------------------------------------------------------------------------------


def test_status_of_a_landed_run_says_landed_in_which_branch_by_which_commit(
    git_repo: Path,
) -> None:
    _started(git_repo)
    before = json.loads(gitrun("status", "r", "--json").output)
    assert before["state"] == "started" and before["landed_in"] is None
    land_run(git_repo, "r")
    merge = git(git_repo, "rev-parse", "HEAD").strip()
    data = json.loads(gitrun("status", "r", "--json").output)
    assert data["state"] == "landed"
    assert data["landed_in"] == merge and data["landed_branch"] == "main"
    shown = gitrun("status", "r").output
    assert shown.startswith(f"run 'r': landed in main as {merge[:10]}\n"), shown
    assert gitrun("status").output.startswith(f"r: landed in main as {merge[:10]}; 2 done")
    listed = json.loads(gitrun("status", "--json").output)
    assert [(d["run"], d["state"], d["landed_in"]) for d in listed] == [("r", "landed", merge)]


def test_a_squashed_landing_is_found_by_its_commit(git_repo: Path) -> None:
    _started(git_repo)
    land_run(git_repo, "r", squash=True)
    squash = git(git_repo, "rev-parse", "HEAD").strip()
    data = json.loads(gitrun("status", "r", "--json").output)
    assert (data["state"], data["landed_in"]) == ("landed", squash)
    assert f"landed in main as {squash[:10]} (squashed)" in gitrun("status", "r").output


def test_a_run_that_went_on_after_its_landing_is_started_again(git_repo: Path) -> None:
    """A partial landing, then more commits on the run's branch: what it
    holds now is not in the current branch, merged or squashed."""
    spec = fake_worker_run(
        git_repo, "r", 2, {"tasks": {"t02": "nowrite"}}, {"limits": {"max_attempts": 1}}
    )
    assert start_run(git_repo, "r", quiet).exit_code == 1
    land_run(git_repo, "r", squash=True, partial=True)
    assert json.loads(gitrun("status", "r", "--json").output)["state"] == "landed"
    spec.write_text("{}")  # t02 writes now
    assert gitrun("retry", "r").exit_code == 0
    assert resume_run(git_repo, "r", quiet).exit_code == 0
    data = json.loads(gitrun("status", "r", "--json").output)
    assert (data["state"], data["landed_in"]) == ("started", None)
    assert gitrun("status").output.startswith("r: started; 2 done")
