"""When git cannot serve gitrun, the user reads one sentence naming the cause and the fix.

A shallow clone, a PATH without git, and a repository git refuses to open
(``safe.directory``), each with the real thing: a real ``git clone --depth 1``,
a real PATH, a real ownership check.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gitrun.commands.session import start_run
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, commit_all, git, one_task_run

quiet = lambda _line: None  # noqa: E731


def _gitrun(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_gitrun_call(list(args), cwd, env=env)


def _one_sentence(proc: subprocess.CompletedProcess[str]) -> str:
    """gitrun's error, which must be one line, no traceback, and not exit 70."""
    assert proc.returncode not in (0, 70), (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gitrun: error: "), proc.stderr
    return lines[0]


def test_land_in_a_shallow_clone_names_the_shallow_history_and_the_fix(
    git_repo: Path, tmp_path: Path
) -> None:
    one_task_run(git_repo)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    build_tree(git_repo, {"later.txt": "later\n"})
    commit_all(git_repo, "later")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{git_repo}", str(clone))
    git(clone, "fetch", "-q", "--depth", "1", "origin", "gitrun/r:gitrun/r")
    assert git(clone, "rev-parse", "--is-shallow-repository").strip() == "true"
    said = _one_sentence(_gitrun(clone, "land", "r"))
    assert "shallow" in said and "`git fetch --unshallow`" in said, said
    assert "merge-tree" not in said and "unrelated histories" not in said, said
    git(clone, "fetch", "-q", "--unshallow")
    git(clone, "fetch", "-q", "origin", "gitrun/r:gitrun/r")  # the run branch's history too
    landed = _gitrun(clone, "land", "r")
    assert landed.returncode == 0, landed.stderr
    assert (clone / "out/t1.json").exists()


def test_a_path_without_git_is_named_with_the_fix(git_repo: Path, tmp_path: Path) -> None:
    one_task_run(git_repo)
    empty = tmp_path / "no-git"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}  # Python is started by its absolute path
    for args in (["status"], ["status", "r"], ["check", "r"], ["start", "r"]):
        said = _one_sentence(_gitrun(git_repo, *args, env=env))
        assert said == (
            "gitrun: error: git is not installed here (no `git` on PATH), and gitrun works "
            "through it; install git (2.38 or newer) or put it on PATH, then run the command again"
        ), (args, said)
    assert not git(git_repo, "branch", "--list", "gitrun/r").strip()


def test_a_repository_git_refuses_to_open_names_safe_directory(git_repo: Path) -> None:
    """git's ownership check (a repository owned by another user), as git's own
    test suite triggers it without a second user."""
    one_task_run(git_repo)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    env = {**os.environ, "GIT_TEST_ASSUME_DIFFERENT_OWNER": "1"}
    refused = subprocess.run(["git", "status"], cwd=git_repo, env=env, capture_output=True)
    assert b"detected dubious ownership" in refused.stderr  # the real refusal
    for args in (["status"], ["status", "r"], ["check", "r"], ["land", "r"]):
        said = _one_sentence(_gitrun(git_repo, *args, env=env))
        assert said == (
            f"gitrun: error: git refuses to work in {git_repo}: it is owned by another user "
            "(git's safe.directory check); if you trust it, run `git config --global --add "
            f"safe.directory {git_repo}`, then run the command again"
        ), (args, said)
