"""A fresh clone of a repository whose run pushed its branch: every command
reads the same branch (the remote's copy, origin/gitrun/<run>) and tells the
same story."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import commit_all, git, run_gitrun, write_run


def test_every_command_reads_the_pushed_branch_on_a_fresh_clone(
    git_repo: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    # t3's worker writes nothing: it fails for good after its one attempt.
    script = 'case "$GITRUN_TASK" in t3) exit 1;; esac; echo "{}" > "$GITRUN_OUTPUTS"'
    write_run(
        git_repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)],
        {
            "executor": {"command": ["sh", "-c", script]},
            "limits": {"max_attempts": 1, "canary": 0},
        },
    )
    commit_all(git_repo, "define r")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stderr  # t3 failed
    git(git_repo, "push", "-q", "origin", "main", "gitrun/r")
    here = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)["counts"]
    assert (here["done"], here["failed"]) == (2, 1)
    history = run_gitrun(git_repo, "log", "r").stdout.splitlines()

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert git(clone, "branch", "--list", "gitrun/r") == ""  # only origin/gitrun/r

    status = run_gitrun(clone, "status", "r", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["started"] and data["counts"] == here
    logged = run_gitrun(clone, "log", "r")
    assert logged.returncode == 0, logged.stderr
    assert logged.stdout.splitlines() == history
    start = run_gitrun(clone, "start", "r")
    assert start.returncode == 1
    assert "origin/gitrun/r" in start.stderr and "gitrun resume r" in start.stderr
    retry = run_gitrun(clone, "retry", "r")
    assert retry.returncode == 0, retry.stderr
    assert "t3" in retry.stdout
    # retry took the branch, and wrote its record after the committed ones.
    assert git(clone, "rev-parse", "gitrun/r") == git(clone, "rev-parse", "origin/gitrun/r")
    after = json.loads(run_gitrun(clone, "status", "r", "--json").stdout)["counts"]
    assert after["done"] == 2 and after["failed"] == 0


def test_the_local_branch_wins_and_origin_is_read_first(git_repo: Path) -> None:
    """The local branch is the run even when a remote's copy is ahead of it;
    without one, origin's copy comes before another remote's."""
    from gitrun.store.branches import find_tip

    first = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "commit", "-q", "--allow-empty", "-m", "later")
    later = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "update-ref", "refs/remotes/aaa/gitrun/r", first)
    git(git_repo, "update-ref", "refs/remotes/origin/gitrun/r", later)
    found = find_tip(git_repo, "r")
    assert found is not None and (found.shown, found.tip) == ("origin/gitrun/r", later)
    git(git_repo, "update-ref", "refs/heads/gitrun/r", first)  # behind origin's copy
    found = find_tip(git_repo, "r")
    assert found is not None and (found.shown, found.tip) == ("gitrun/r", first)
