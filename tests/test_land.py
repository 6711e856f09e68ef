"""Landing a run into the user's branch; reading its status, history and retries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.commands.land import land_run
from gitrun.commands.session import start_run
from gitrun.errors import GitrunError
from tests.helpers import build_tree, fake_worker_run, git

quiet = lambda _line: None  # noqa: E731
runner = CliRunner()


@pytest.fixture
def finished(git_repo: Path) -> Path:
    fake_worker_run(git_repo, "r", 3, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    return git_repo


def test_land_merges_with_identical_untracked_artifacts_present(finished: Path) -> None:
    # The workers' files are still in the work tree, untracked and identical.
    assert (finished / "out/t01.json").exists()
    message = land_run(finished, "r")
    assert "merged" in message
    parents = git(finished, "log", "-1", "--format=%P").split()
    assert len(parents) == 2
    assert git(finished, "status", "--porcelain", "--untracked-files=all", "out").strip() == ""
    assert "already landed" in land_run(finished, "r")


def test_land_refuses_a_different_untracked_file_and_changes_nothing(finished: Path) -> None:
    (finished / "out/t02.json").write_text('{"mine": true}\n')
    head = git(finished, "rev-parse", "HEAD")
    with pytest.raises(GitrunError, match=r"untracked out/t02.json would be overwritten"):
        land_run(finished, "r")
    assert git(finished, "rev-parse", "HEAD") == head
    assert (finished / "out/t02.json").read_text() == '{"mine": true}\n'
    assert (finished / "out/t01.json").exists()


def test_land_stops_on_a_conflicting_tracked_change(finished: Path) -> None:
    build_tree(finished, {"out/t03.json": "tracked by the user\n"})
    git(finished, "add", "out/t03.json")
    git(finished, "commit", "-q", "-m", "user's own t03")
    build_tree(finished, {"out/t03.json": "edited, not committed\n"})
    head = git(finished, "rev-parse", "HEAD")
    with pytest.raises(GitrunError, match="changed nothing"):
        land_run(finished, "r")
    assert git(finished, "rev-parse", "HEAD") == head
    assert (finished / "out/t03.json").read_text() == "edited, not committed\n"
    assert (finished / "out/t01.json").exists()


def test_land_squash_is_one_commit_and_refuses_staged_changes(finished: Path) -> None:
    build_tree(finished, {"notes.txt": "staged\n"})
    git(finished, "add", "notes.txt")
    with pytest.raises(GitrunError, match="staged changes"):
        land_run(finished, "r", squash=True)
    git(finished, "reset", "-q", "notes.txt")
    land_run(finished, "r", squash=True)
    assert len(git(finished, "log", "-1", "--format=%P").split()) == 1
    files = git(finished, "show", "--name-only", "--format=", "HEAD").split()
    assert {"out/t01.json", "out/t02.json", "out/t03.json"} <= set(files)


def test_status_json_and_log_json(finished: Path) -> None:
    result = runner.invoke(app, ["status", "r", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["run"] == "r"
    assert data["counts"] == {
        "done": 3,
        "up-to-date": 0,
        "pending": 0,
        "running": 0,
        "failed": 0,
    }
    assert data["spawns"] == 3 and data["usable"] == 3 and data["yield"] == 1.0
    assert data["tasks"]["t01"]["status"] == "done" and data["tasks"]["t01"]["attempts"] == 0
    result = runner.invoke(app, ["log", "r", "--json"])
    entries = json.loads(result.output)
    landed = sorted(t for e in entries for t in e["tasks"])
    assert landed == ["t01", "t02", "t03"]
    assert all(e["attempts"][t] == 1 for e in entries for t in e["tasks"])
    plain = runner.invoke(app, ["status"]).output
    assert plain.startswith("r: started; 3 done")


def test_retry_gives_failed_tasks_new_attempts(git_repo: Path) -> None:
    spec_path = fake_worker_run(
        git_repo, "r", 2, {"tasks": {"t02": "nowrite"}}, {"limits": {"max_attempts": 1}}
    )
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.tasks["t02"].status == "failed"
    result = runner.invoke(app, ["retry", "r", "t01"])
    assert result.exit_code == 1 and "t01 already done" in result.output
    spec_path.write_text(json.dumps({}))  # the worker behaves now
    result = runner.invoke(app, ["retry", "r"])
    assert result.exit_code == 0 and "t02" in result.output
    result = runner.invoke(app, ["resume", "r", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["counts"]["done"] == 2
    assert data["tasks"]["t02"]["last_attempt"] == 2


def test_status_of_a_run_not_started(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {})
    result = runner.invoke(app, ["status", "r", "--json"])
    data = json.loads(result.output)
    assert data["started"] is False and data["counts"]["pending"] == 2
    result = runner.invoke(app, ["resume", "r"])
    assert result.exit_code == 1 and "gitrun start r" in result.output


def test_outputs_with_glob_characters_are_literal_paths(git_repo: Path) -> None:
    tasks = [
        {"id": "t1", "outputs": ["out/[a].json"], "owns": ["out/\\[a\\].json"]},
        {"id": "t2", "outputs": ["out/a.json"]},
    ]
    from tests.helpers import write_run

    script = "for p in $GITRUN_OUTPUTS; do echo '{}' > \"$p\"; done"
    write_run(git_repo, "g", tasks, {"executor": {"command": ["sh", "-c", script]}})
    outcome = start_run(git_repo, "g", quiet)
    assert outcome.exit_code == 0, outcome.status.to_json()
    assert sorted(t for t, s in outcome.status.tasks.items() if s.status == "done") == ["t1", "t2"]
    land_run(git_repo, "g")
    assert git(git_repo, "ls-files", "--", ":(literal)out/[a].json").strip() == "out/[a].json"


def test_a_land_killed_mid_way_loses_nothing_and_names_the_real_cause(finished: Path) -> None:
    """A killed land leaves git's index.lock and the copies it set aside: the
    next land puts the copies back, names the lock, and lands once it is gone."""
    from gitrun.store.local import LocalPaths

    aside = LocalPaths.of(finished, "r").root / "land-aside"
    (aside / "out").mkdir(parents=True)
    for name in ("t01.json", "t02.json"):
        (finished / "out" / name).rename(aside / "out" / name)  # as the killed land left them
    lock = finished / ".git" / "index.lock"
    lock.write_text("")
    with pytest.raises(GitrunError, match=r"index\.lock exists: another git command is running"):
        land_run(finished, "r")
    assert (finished / "out/t01.json").exists() and (finished / "out/t02.json").exists()
    assert not aside.exists()
    lock.unlink()
    assert "merged" in land_run(finished, "r")
    assert git(finished, "status", "--porcelain", "--untracked-files=all").strip() == ""
    assert json.loads((finished / "out/t01.json").read_text()) is not None


def test_a_copy_set_aside_is_kept_when_its_place_is_taken(finished: Path) -> None:
    from gitrun.store.local import LocalPaths

    aside = LocalPaths.of(finished, "r").root / "land-aside"
    (aside / "out").mkdir(parents=True)
    (finished / "out/t01.json").rename(aside / "out/t01.json")
    (finished / "out/t01.json").write_text('{"someone": "else"}\n')
    with pytest.raises(GitrunError, match="kept in"):
        land_run(finished, "r")
    assert (aside / "out/t01.json").exists()  # never deleted
    assert (finished / "out/t01.json").read_text() == '{"someone": "else"}\n'


def test_a_huge_untracked_file_in_the_way_is_refused_not_read(finished: Path) -> None:
    with open(finished / "out/t01.json", "wb") as handle:
        handle.truncate(200 * 1024**3)  # sparse: no disk used
    with pytest.raises(GitrunError, match=r"untracked out/t01\.json would be overwritten"):
        land_run(finished, "r")


def test_log_attempts_prints_the_ledger_records_one_a_line(finished: Path) -> None:
    result = runner.invoke(app, ["log", "r", "--attempts"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines()]
    assert sorted(r["task"] for r in records) == ["t01", "t02", "t03"]
    for record in records:
        assert record["v"] == 1 and record["outcome"] == "valid" and record["attempt"] == 1
        assert {"stage", "started", "ended", "duration", "exit", "signal", "timed_out"} <= set(
            record
        )


def test_attempt_records_in_log_json_and_status_json(finished: Path) -> None:
    listed = runner.invoke(app, ["log", "r", "--attempts", "--json"])
    assert listed.exit_code == 0, listed.output
    records = sorted(json.loads(listed.output), key=lambda r: (r["task"], r["attempt"]))
    assert [r["task"] for r in records] == ["t01", "t02", "t03"]
    status = runner.invoke(app, ["status", "r", "--json"])
    assert status.exit_code == 0, status.output
    tasks = json.loads(status.output)["tasks"]
    # status names each task's attempts: the very records of the ledger.
    assert [r for tid in sorted(tasks) for r in tasks[tid]["records"]] == records


@pytest.fixture
def unfinished(git_repo: Path) -> Path:
    """A run whose t02 failed for good: 2 of 3 tasks done."""
    fake_worker_run(
        git_repo, "r", 3, {"tasks": {"t02": "nowrite"}}, {"limits": {"max_attempts": 1}}
    )
    assert start_run(git_repo, "r", quiet).exit_code == 1
    return git_repo


def test_land_refuses_an_unfinished_run_and_changes_nothing(unfinished: Path) -> None:
    head = git(unfinished, "rev-parse", "HEAD")
    result = runner.invoke(app, ["-C", str(unfinished), "land", "r"])
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert "run 'r' is not finished: 2 of 3 tasks done, 0 pending and 1 failed" in line
    assert "`gitrun land r --partial`" in line and "`gitrun status r`" in line
    assert git(unfinished, "rev-parse", "HEAD") == head


def test_land_partial_lands_what_is_done_and_says_what_it_leaves_out(unfinished: Path) -> None:
    said = land_run(unfinished, "r", partial=True)
    assert "merged" in said and "left out: 0 pending and 1 failed of 3 tasks" in said, said
    landed = git(unfinished, "ls-tree", "-r", "--name-only", "HEAD", "out").split()
    assert landed == ["out/t01.json", "out/t03.json"]


def test_land_partial_of_a_finished_run_is_refused_with_the_reason(finished: Path) -> None:
    with pytest.raises(GitrunError, match="every task of run 'r' is done, so --partial means"):
        land_run(finished, "r", partial=True)
    assert "merged" in land_run(finished, "r")
