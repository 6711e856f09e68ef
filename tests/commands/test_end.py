"""Runs have an end: `status` says a run landed, and `gitrun rm` removes its
branch, its local state and its run directory, refusing what would lose work."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gitrun.cli.main import app
from gitrun.commands.land.landing import land_run
from gitrun.commands.session import resume_run, start_run
from gitrun.store.journal import running_records
from gitrun.store.local import LocalPaths
from gitrun.store.lock import is_locked
from tests.helpers import (
    fake_worker_run,
    git,
    gitrun_process,
    spawn_events,
    wait_until,
    write_run,
)

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


def _pieces(repo: Path, run_id: str = "r") -> tuple[bool, bool, bool]:
    """Whether the run's branch, local state and run directory exist."""
    branch = git(repo, "branch", "--list", f"gitrun/{run_id}").strip() != ""
    local = LocalPaths.of(repo, run_id).root.exists()
    return branch, local, (repo / ".gitrun/runs" / run_id).exists()


def _one_error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("gitrun: error: "), line
    return line


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
    assert shown.startswith(
        f"run 'r': landed in main as {merge[:10]}; `gitrun start r` runs it again"
    ), shown
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


def test_status_all_lists_the_leftovers_of_runs(git_repo: Path) -> None:
    _started(git_repo, "gone")  # its run directory removed by hand
    _started(git_repo, "kept")
    _started(git_repo, "orphan")  # its branch deleted by hand
    _started(git_repo, "stray")  # only its local state is left
    for run_id in ("gone", "stray"):
        for path in sorted((git_repo / ".gitrun/runs" / run_id).rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        (git_repo / ".gitrun/runs" / run_id).rmdir()
    git(git_repo, "branch", "-D", "gitrun/orphan", "gitrun/stray")
    plain = gitrun("status").output.splitlines()
    assert [line.split(";")[0] for line in plain] == [
        "kept: started",
        "orphan: branch gitrun/orphan gone",
        "and 2 leftovers of runs without a packet (`gitrun ls --all` lists them)",
    ]
    every = gitrun("status", "--all").output.splitlines()
    assert every[:2] == plain[:2]
    assert every[2] == (
        "gone: started; left: branch gitrun/gone, local state .git/gitrun/gone/; `gitrun rm gone` "
        "removes them (`gitrun resume gone` restores the run directory from the branch)"
    )
    assert (
        every[3]
        == "stray: branch gone; left: local state .git/gitrun/stray/; `gitrun rm stray` removes it"
    )
    data = {d["run"]: d for d in json.loads(gitrun("status", "--all", "--json").output)}
    assert {run: d["state"] for run, d in data.items()} == {
        "gone": "started",
        "kept": "started",
        "orphan": "branch gone",
        "stray": "branch gone",
    }
    assert data["gone"]["run_dir"] is False and data["gone"]["branch"] is not None
    # With a run, --all keeps its meaning: every task not done.
    assert "t01" not in gitrun("status", "kept", "--all").output


def test_ls_lists_the_runs_as_status_without_a_run_does(git_repo: Path) -> None:
    assert gitrun("ls").output == "no runs here; create one with `gitrun new RUN`\n"
    _started(git_repo, "kept")
    _started(git_repo, "stray")  # only its local state is left
    for path in sorted((git_repo / ".gitrun/runs/stray").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (git_repo / ".gitrun/runs/stray").rmdir()
    git(git_repo, "branch", "-D", "gitrun/stray")
    for args in ([], ["--all"], ["--json"], ["--all", "--json"]):
        listed = gitrun("ls", *args)
        assert listed.exit_code == 0, listed.output
        assert listed.output == gitrun("status", *args).output, args
    lines = gitrun("ls").output.splitlines()
    assert lines[0].startswith("kept: started; 2 done")
    assert lines[1] == "and 1 leftover of runs without a packet (`gitrun ls --all` lists them)"
    assert gitrun("ls", "--all").output.splitlines()[1].startswith("stray: branch gone; left:")
    assert [d["run"] for d in json.loads(gitrun("ls", "--json").output)] == ["kept"]


# -- rm -------------------------------------------------------------------------------------


def test_rm_of_a_landed_run_removes_its_branch_local_state_and_run_directory(
    git_repo: Path,
) -> None:
    _started(git_repo)
    land_run(git_repo, "r")
    head = git(git_repo, "rev-parse", "HEAD")
    tip = git(git_repo, "rev-parse", "gitrun/r").strip()
    # The definition and the ledger's chunks (how many: as the commits went).
    files = len(git(git_repo, "ls-files", ".gitrun/runs/r").splitlines())
    result = gitrun("rm", "r")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:4] == [
        "removing run 'r':",
        f"  branch gitrun/r at {tip[:10]} (landed in main as {head[:10]})",
        "  local state .git/gitrun/r/",
        f"  run directory .gitrun/runs/r/ from the work tree ({files} files, {files} of them "
        "tracked in the current branch)",
    ]
    assert lines[4] == "removed run 'r'"
    assert "`git commit` records the removal" in lines[5]
    assert _pieces(git_repo) == (False, False, False)
    # Nothing committed: the run's files show as deleted, for the user to commit.
    assert git(git_repo, "rev-parse", "HEAD") == head
    deleted = git(git_repo, "status", "--porcelain", "--", ".gitrun").splitlines()
    assert len(deleted) == files and all(line.startswith(" D ") for line in deleted)
    assert (git_repo / "r/t01.json").exists()  # the landed results stay
    assert gitrun("status").output == "no runs here; create one with `gitrun new RUN`\n"


def test_rm_of_a_squashed_run_drops_only_its_history(git_repo: Path) -> None:
    _started(git_repo)
    land_run(git_repo, "r", squash=True)
    commits = int(git(git_repo, "rev-list", "--count", "HEAD..gitrun/r"))
    result = gitrun("rm", "r")
    assert result.exit_code == 0, result.output
    assert f"(squashed); its {commits} commits of history go with it)" in result.output
    assert _pieces(git_repo) == (False, False, False)


def test_rm_of_an_abandoned_run_is_refused_without_force_and_done_with_it(
    git_repo: Path,
) -> None:
    _started(git_repo)
    tip = git(git_repo, "rev-parse", "gitrun/r").strip()
    line = _one_error(gitrun("rm", "r"))
    commits = int(git(git_repo, "rev-list", "--count", "HEAD..gitrun/r"))  # landings may share one
    assert f"run 'r' is not landed: {commits} commits of branch gitrun/r would be lost" in line
    assert "`gitrun land r`" in line and "`gitrun rm r --force`" in line
    assert _pieces(git_repo) == (True, True, True)
    result = gitrun("rm", "r", "--force")
    assert result.exit_code == 0, result.output
    assert f"(with {commits} commits no other ref holds: --force)" in result.output
    assert f"`git branch gitrun/r {tip[:10]}` brings the branch back" in result.output
    assert _pieces(git_repo) == (False, False, False)


def test_rm_of_a_run_held_by_a_remote_tracking_branch_needs_no_force(git_repo: Path) -> None:
    _started(git_repo)
    git(git_repo, "update-ref", "refs/remotes/origin/gitrun/r", "gitrun/r")  # as a push leaves
    result = gitrun("rm", "r")
    assert result.exit_code == 0, result.output
    assert "origin/gitrun/r stays: `git push origin --delete gitrun/r` removes it" in result.output
    assert _pieces(git_repo) == (False, False, False)


def test_rm_refuses_run_files_edited_and_committed_nowhere(git_repo: Path) -> None:
    _started(git_repo)
    land_run(git_repo, "r")
    packet = git_repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text() + "# a note of mine\n")
    line = _one_error(gitrun("rm", "r"))
    assert ".gitrun/runs/r/packet.toml in the run directory holds bytes committed nowhere" in line
    assert _pieces(git_repo) == (True, True, True)
    assert gitrun("rm", "r", "--force").exit_code == 0
    assert _pieces(git_repo) == (False, False, False)


def test_rm_of_a_run_never_started_and_committed_nowhere_needs_no_force(git_repo: Path) -> None:
    """A run `gitrun new` scaffolded and nobody started: no branch, no ledger,
    nothing of it in any commit. Removing it is the undo of `new`."""
    fake_worker_run(git_repo, "r", 2, {})
    result = gitrun("rm", "r")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "removing run 'r':",
        "  run directory .gitrun/runs/r/ from the work tree (2 files)",
        "removed run 'r'",
    ]
    assert _pieces(git_repo) == (False, False, False)


def test_rm_of_a_run_never_started_keeps_a_definition_edited_since_a_commit(
    git_repo: Path,
) -> None:
    """A definition some commit holds (this branch's or another's) and edited
    since: the edit is kept nowhere, so --force is needed."""
    fake_worker_run(git_repo, "r", 2, {})
    git(git_repo, "add", ".gitrun")
    git(git_repo, "commit", "-qm", "define r")
    packet = git_repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text() + "# my rules\n")
    line = _one_error(gitrun("rm", "r"))
    assert ".gitrun/runs/r/packet.toml in the run directory holds bytes committed nowhere" in line
    assert not LocalPaths.of(git_repo, "r").root.exists()  # a refusal leaves nothing behind
    git(git_repo, "checkout", "-q", ".gitrun")
    result = gitrun("rm", "r")  # committed: the definition is kept in the current branch
    assert result.exit_code == 0, result.output
    assert _pieces(git_repo) == (False, False, False)
    # Committed on another branch only, here untracked and edited.
    git(git_repo, "checkout", "-qb", "other")
    fake_worker_run(git_repo, "s", 2, {})
    git(git_repo, "add", ".gitrun")
    git(git_repo, "commit", "-qm", "define s")
    git(git_repo, "checkout", "-q", "-")
    fake_worker_run(git_repo, "s", 2, {}, {"rules": {"text": "edited here"}})
    line = _one_error(gitrun("rm", "s"))
    assert "bytes committed nowhere" in line
    assert gitrun("rm", "s", "--force").exit_code == 0
    assert _pieces(git_repo, "s") == (False, False, False)


def test_rm_of_an_unknown_run_names_the_runs_here(git_repo: Path) -> None:
    line = _one_error(gitrun("rm", "nope"))
    assert line.endswith("there are no runs here"), line
    _started(git_repo, "a")
    _started(git_repo, "b")
    line = _one_error(gitrun("rm", "nope"))
    assert line == (
        "gitrun: error: no run 'nope' here (no .gitrun/runs/nope/, no branch gitrun/nope, no "
        "local state); the runs here are a, b"
    )
    assert "not a valid run id" in _one_error(gitrun("rm", "../a"))


def test_rm_leaves_other_runs_alone(git_repo: Path) -> None:
    _started(git_repo, "a")
    _started(git_repo, "b")
    land_run(git_repo, "a")
    b_tip = git(git_repo, "rev-parse", "gitrun/b")
    assert gitrun("rm", "a").exit_code == 0
    assert _pieces(git_repo, "a") == (False, False, False)
    assert _pieces(git_repo, "b") == (True, True, True)
    assert git(git_repo, "rev-parse", "gitrun/b") == b_tip
    assert gitrun("status").output.startswith("b: started; 2 done")
    assert json.loads(gitrun("status", "b", "--json").output)["counts"]["done"] == 2


def test_rm_of_a_leftover_branch_removes_it(git_repo: Path) -> None:
    _started(git_repo)
    land_run(git_repo, "r")
    git(git_repo, "rm", "-rq", ".gitrun/runs/r")
    git(git_repo, "commit", "-qm", "drop the run directory")
    result = gitrun("rm", "r")
    assert result.exit_code == 0, result.output
    assert "run directory" not in result.output
    assert _pieces(git_repo) == (False, False, False)


def test_rm_of_a_run_being_driven_is_refused_even_with_force(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = fake_worker_run(git_repo, "r", 1, {"sleep": 60, "spawn_log": str(tmp_path / "log")})
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    try:
        wait_until(
            driver,
            lambda: any(e == "start" for _, _, e, _ in spawn_events(spec)),
            30,
            what="the worker started",
        )
        assert is_locked(LocalPaths.of(git_repo, "r"))
        for args in (["rm", "r"], ["rm", "r", "--force"]):
            line = _one_error(gitrun(*args))
            assert f"run 'r' is being driven now by pid {driver.pid} on host" in line, line
            assert "never removes a live run, even with --force" in line
        assert _pieces(git_repo) == (True, True, True)
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=60)


def test_rm_refuses_workers_a_dead_driver_left_running(git_repo: Path, tmp_path: Path) -> None:
    spec = fake_worker_run(git_repo, "r", 1, {"sleep": 60, "spawn_log": str(tmp_path / "log")})
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    local = LocalPaths.of(git_repo, "r")
    wait_until(
        driver,
        lambda: any(e == "start" for _, _, e, _ in spawn_events(spec)),
        30,
        what="the worker started",
    )
    wait_until(
        driver,
        lambda: any(e.pid for e in running_records(local).values()),
        30,
        what="the running worker's pid was recorded",
    )
    driver.kill()  # SIGKILL: its worker lives on
    driver.wait()
    [worker] = running_records(local).values()
    try:
        line = _one_error(gitrun("rm", "r", "--force"))
        assert f"workers a dead driver left running (t01#1 (pid {worker.pid}))" in line, line
        assert _pieces(git_repo) == (True, True, True)
    finally:
        assert worker.pid is not None
        os.killpg(worker.pid, signal.SIGKILL)


def test_rm_refuses_tasks_handed_out_and_not_collected(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {}, {"executor": {"kind": "external"}})
    assert gitrun("start", "r").exit_code == 0  # leases the first batch
    git(git_repo, "update-ref", "refs/tags/keep", "gitrun/r")  # its commits are held elsewhere
    line = _one_error(gitrun("rm", "r"))
    assert "handed out by `gitrun next` and not collected" in line
    assert "`gitrun collect r`" in line
    assert gitrun("rm", "r", "--force").exit_code == 0
    assert _pieces(git_repo) == (False, False, False)


@pytest.mark.parametrize("where", ["here", "worktree"])
def test_rm_refuses_a_branch_that_is_checked_out(
    git_repo: Path, tmp_path: Path, where: str
) -> None:
    _started(git_repo)
    land_run(git_repo, "r")
    if where == "here":
        git(git_repo, "checkout", "-q", "gitrun/r")
        shown = str(git_repo)
    else:
        shown = str(tmp_path / "wt")
        git(git_repo, "worktree", "add", "-q", shown, "gitrun/r")
    line = _one_error(gitrun("rm", "r", "--force"))
    assert f"branch gitrun/r is checked out in {os.path.realpath(shown)}" in line, line
    assert _pieces(git_repo)[:2] == (True, True)
