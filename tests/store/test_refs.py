"""Run ids git refuses as branch names, and refs in the way of a run's branch."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gitrun.layout import is_run_id
from tests.helpers import git, one_task_run, run_gitrun, write_run


@pytest.mark.parametrize(
    ("run_id", "rule"),
    [("a..b", "'..' inside"), ("x.lock", "ending in '.lock'"), ("x.", "ending in '.'")],
)
def test_an_id_git_refuses_as_a_branch_is_no_run_id(git_repo: Path, run_id: str, rule: str) -> None:
    write_run(git_repo, run_id, [{"id": "t1", "outputs": ["out/t1.json"]}])
    proc = run_gitrun(git_repo, "check", run_id)
    assert proc.returncode == 1, proc.stdout
    assert f"{run_id!r} is not a valid run id" in proc.stderr
    assert rule in proc.stderr
    assert "Traceback" not in proc.stderr
    new = run_gitrun(git_repo, "new", f"{run_id}")
    assert new.returncode == 1 and "is not a valid run id" in new.stderr


def test_the_id_rules_agree_with_git(tmp_path: Path) -> None:
    ids = ["a", "a.b", "a..b", "a...", "x.lock", "x.lockx", "lock", "x.", "x-", "x_", "0.9"]
    ids += ["a.lock.b", "a-.lock", "r.", "a._b", "a.-.b", "9..", "a" * 64]
    for run_id in ids:
        proc = subprocess.run(
            ["git", "check-ref-format", f"refs/heads/gitrun/{run_id}"], capture_output=True
        )
        git_says = proc.returncode == 0
        assert is_run_id(run_id) == git_says, run_id


def test_a_branch_named_gitrun_is_a_check_problem(git_repo: Path) -> None:
    one_task_run(git_repo)
    git(git_repo, "branch", "gitrun")
    proc = run_gitrun(git_repo, "check", "r")
    assert proc.returncode == 1
    assert "[branch-blocked] branch gitrun is in the way of branch gitrun/r" in proc.stdout
    assert "git branch -m gitrun" in proc.stdout
    start = run_gitrun(git_repo, "start", "r")
    assert start.returncode == 1
    assert "in the way" in start.stderr and "appeared" not in start.stderr
    git(git_repo, "pack-refs", "--all")  # a packed branch blocks all the same
    assert "[branch-blocked]" in run_gitrun(git_repo, "check", "r").stdout


def test_a_stale_ref_lock_is_a_check_problem(git_repo: Path) -> None:
    one_task_run(git_repo)
    lock = git_repo / ".git/refs/heads/gitrun/r.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    proc = run_gitrun(git_repo, "check", "r")
    assert proc.returncode == 1
    assert f"[branch-blocked] branch gitrun/r is locked: {lock} exists" in proc.stdout
    assert "remove it if no git process is running" in proc.stdout
    start = run_gitrun(git_repo, "start", "r")
    assert start.returncode == 1 and "is locked" in start.stderr
    lock.unlink()
    assert run_gitrun(git_repo, "start", "r").returncode == 0


def test_a_ref_lock_held_mid_run_is_reported_as_a_lock(git_repo: Path) -> None:
    """The first task's worker makes the branch's lock file, as a git process
    that died holding it would: the commit of its output names the lock."""
    lock = git_repo / ".git/refs/heads/gitrun/r.lock"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {
                "command": ["sh", "-c", f': > "{lock}"; echo "{{}}" > "$GITRUN_OUTPUTS"'],
                "isolation": "none",  # the worker itself takes the ref's lock
            },
        },
    )
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "define r")
    proc = run_gitrun(git_repo, "start", "r")
    assert proc.returncode != 0
    assert "kept moving" not in proc.stderr
    assert f"branch gitrun/r is locked: {lock} exists" in proc.stderr, proc.stderr
    assert "remove it if no git process is running" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.returncode != 70
