"""Linked work trees of one repository share each run: one driver, one set of
leases, one journal of running workers, wherever the command is typed; and no
run moves a branch a work tree has checked out."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tests.helpers import (
    commit_all,
    fake_worker_run,
    git,
    gitrun_process,
    run_gitrun,
    wait_for,
    write_run,
)

HANG = "import time\nwhile True: time.sleep(1)"


def _linked(repo: Path, name: str = "linked", branch: str = "side") -> Path:
    """A real linked work tree of ``repo`` on a new branch at HEAD."""
    where = repo.parent / name
    git(repo, "worktree", "add", "-q", "-b", branch, str(where))
    return where


def _hanging_run(repo: Path, run_id: str, count: int) -> None:
    """``count`` tasks whose workers hang until killed; committed."""
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(count)
    ]
    packet = {
        "executor": {"command": [sys.executable, "-c", HANG]},
        "limits": {"timeout": "10m", "canary": 0, "concurrency": count},
    }
    write_run(repo, run_id, tasks, packet)
    commit_all(repo, f"define {run_id}")


def _running_pids(tree: Path, run_id: str) -> list[int]:
    """The worker pids in the run's journals of running attempts, wherever
    in the repository's git directories one is (test and fix agree on the
    facts, not on the place)."""
    common = Path(git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    journals = [common / "gitrun" / run_id / "running.jsonl"]
    journals += (common / "worktrees").glob(f"*/gitrun/{run_id}/running.jsonl")
    pids = []
    for journal in journals:
        lines = journal.read_text().splitlines() if journal.exists() else []
        pids += [int(json.loads(line)["pid"]) for line in lines if '"pid"' in line]
    return sorted(set(pids))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop(proc: subprocess.Popen[str], workers: list[int]) -> None:
    """End a driver this test started and the workers it recorded (each its
    own process group, as gitrun starts them), by pid."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    for pid in workers:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_a_driver_in_a_linked_work_tree_locks_out_resume_in_the_main_one(git_repo: Path) -> None:
    _hanging_run(git_repo, "w", 4)
    linked = _linked(git_repo)
    driver = gitrun_process(linked, "start", "w", capture=False)
    workers: list[int] = []
    try:
        wait_for(
            lambda: len(_running_pids(linked, "w")) == 4,
            60,
            what="four workers ran in the linked worktree",
        )
        workers = _running_pids(linked, "w")
        second = run_gitrun(git_repo, "resume", "w")
        assert second.returncode == 1, second.stdout + second.stderr
        said = second.stderr
        assert "run 'w' is already being driven by" in said, said
        assert f"pid {driver.pid} on host" in said and "started" in said, said
        assert "Traceback" not in said
        assert driver.poll() is None
        # The refused resume started no worker of its own.
        assert sorted(_running_pids(linked, "w")) == sorted(workers)
    finally:
        _stop(driver, workers)


def test_no_task_is_committed_twice_by_drivers_in_two_work_trees(
    git_repo: Path, tmp_path: Path
) -> None:
    # The workers wait behind a gate until the resume has met the first
    # driver, however slowly a loaded machine starts it.
    gate = tmp_path / "gate"
    tasks = [f"t{i:02d}" for i in range(1, 5)]
    spec = {"gate": str(gate), "gated": tasks}
    fake_worker_run(git_repo, "w", 4, spec, {"limits": {"canary": 0}})
    commit_all(git_repo, "define w")
    linked = _linked(git_repo)
    first = gitrun_process(linked, "start", "w")
    try:
        wait_for(
            lambda: (git_repo / ".git/refs/heads/gitrun/w").exists(),
            60,
            what="the run's branch gitrun/w was made",
        )
        second = run_gitrun(git_repo, "resume", "w")
    finally:
        gate.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err
    assert second.returncode == 1 and "already being driven" in second.stderr, second.stderr
    names = git(git_repo, "log", "--format=", "--name-only", "main..gitrun/w").split()
    per_path = Counter(n for n in names if n.startswith("out/"))
    assert per_path == Counter({f"out/t{i:02d}.json": 1 for i in range(1, 5)})


def test_external_next_in_a_linked_work_tree_leases_nothing_twice(git_repo: Path) -> None:
    tasks = [{"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(6)]
    packet = {"executor": {"kind": "external"}, "limits": {"canary": 0, "concurrency": 3}}
    write_run(git_repo, "x", tasks, packet)
    commit_all(git_repo, "define x")
    linked = _linked(git_repo)
    started = run_gitrun(git_repo, "start", "x", "--json", "--full")
    assert started.returncode == 0, started.stderr
    first = [b["task"] for b in json.loads(started.stdout)["leased"]]
    assert first == ["t00", "t01", "t02"]
    nxt = run_gitrun(linked, "next", "x", "--json", "--full")
    assert "Traceback" not in nxt.stderr, nxt.stderr
    again = [b["task"] for b in json.loads(nxt.stdout)["leased"]]
    assert not set(again) & set(first), (first, again)


def test_resume_in_one_work_tree_takes_over_from_a_driver_killed_in_another(
    git_repo: Path,
) -> None:
    _hanging_run(git_repo, "w", 2)
    linked = _linked(git_repo)
    driver = gitrun_process(linked, "start", "w", capture=False)
    workers: list[int] = []
    resumed: subprocess.Popen[str] | None = None
    try:
        wait_for(
            lambda: len(_running_pids(linked, "w")) == 2,
            60,
            what="two workers ran in the linked worktree",
        )
        workers = _running_pids(linked, "w")
        driver.kill()  # SIGKILL: no handler runs, the workers are orphaned
        driver.wait(timeout=30)
        assert all(_alive(pid) for pid in workers)
        resumed = gitrun_process(git_repo, "resume", "w", capture=False)
        # The new driver stops the dead one's workers (proven by pid, start
        # time and command line) and records their attempts.
        wait_for(lambda: not any(_alive(pid) for pid in workers), 60, what="the workers ended")
        wait_for(
            lambda: _recorded_attempts(git_repo, "w") >= {("t00", 1), ("t01", 1)},
            60,
            what="t00 and t01 were recorded as attempted",
        )
    finally:
        if resumed is not None:
            _stop(resumed, _running_pids(git_repo, "w"))
        _stop(driver, workers)


def _recorded_attempts(repo: Path, run_id: str) -> set[tuple[str, int]]:
    from gitrun.store.ledger import read_ledger

    records = read_ledger(repo / ".gitrun/runs" / run_id)
    return {(str(r["task"]), int(str(r["attempt"]))) for r in records if "outcome" in r}


def test_watchdog_in_one_work_tree_sees_a_stale_driver_started_in_another(
    git_repo: Path,
) -> None:
    from gitrun.commands.watchdog import inspect_runs

    _hanging_run(git_repo, "w", 1)
    linked = _linked(git_repo)
    driver = gitrun_process(linked, "start", "w", capture=False)
    workers: list[int] = []
    try:
        wait_for(
            lambda: len(_running_pids(linked, "w")) == 1,
            60,
            what="one worker ran in the linked worktree",
        )
        workers = _running_pids(linked, "w")
        [health] = inspect_runs(git_repo, stale_after=0.0)
        assert health.run == "w" and health.stale and health.pid == driver.pid, health
        driver.kill()
        driver.wait(timeout=30)
        [health] = inspect_runs(git_repo)
        assert health.driver == "dead" and health.stale, health
        assert f"pid {workers[0]}" in health.reason, health
    finally:
        _stop(driver, workers)


# -- a branch checked out in a work tree ---------------------------------------


def _snapshot(tree: Path) -> dict[str, str]:
    """HEAD, the index and every file of the work tree (not .git), as digests."""
    git_dir = Path(git(tree, "rev-parse", "--absolute-git-dir").strip())
    seen = {
        "HEAD": (git_dir / "HEAD").read_text(),
        "index": hashlib.sha256((git_dir / "index").read_bytes()).hexdigest(),
        "status": git(tree, "status", "--porcelain=v1", "--untracked-files=all"),
    }
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _started_run(repo: Path) -> None:
    """Run "w" of two tasks, started and stopped after its first task landed."""
    write_run(
        repo,
        "w",
        [{"id": "t1", "outputs": ["out/t1.json"]}, {"id": "t2", "outputs": ["out/t2.json"]}],
        {
            "executor": {
                "command": [
                    "sh",
                    "-c",
                    'test "$GITRUN_TASK" = t1 || exit 1; echo "{}" > "$GITRUN_OUTPUTS"',
                ]
            },
            "limits": {"canary": 0, "max_attempts": 1},
        },
    )
    commit_all(repo, "define w")
    started = run_gitrun(repo, "start", "w")
    assert started.returncode == 1, started.stdout + started.stderr  # t2 failed for good


def test_resume_refuses_to_move_the_branch_the_main_work_tree_has_checked_out(
    git_repo: Path,
) -> None:
    _started_run(git_repo)
    git(git_repo, "clean", "-fdq", "out", ".gitrun")  # the untracked copies of what it holds
    git(git_repo, "switch", "-q", "gitrun/w")
    tip = git(git_repo, "rev-parse", "gitrun/w")
    before = _snapshot(git_repo)
    for args in (("resume", "w"), ("retry", "w", "t2"), ("start", "w")):
        refused = run_gitrun(git_repo, *args)
        said = refused.stderr
        assert refused.returncode == 1, (args, refused.stdout, said)
        assert "branch gitrun/w is checked out in the work tree" in said, said
        assert f"`git -C {git_repo} switch -`" in said, said
        assert "Traceback" not in said
        assert git(git_repo, "rev-parse", "gitrun/w") == tip
        assert _snapshot(git_repo) == before, args


def test_resume_refuses_to_move_the_branch_a_linked_work_tree_has_checked_out(
    git_repo: Path,
) -> None:
    _started_run(git_repo)
    linked = git_repo.parent / "linked"
    git(git_repo, "worktree", "add", "-q", str(linked), "gitrun/w")
    tip = git(git_repo, "rev-parse", "gitrun/w")
    before, before_main = _snapshot(linked), _snapshot(git_repo)
    for where in (git_repo, linked):
        refused = run_gitrun(where, "resume", "w")
        said = refused.stderr
        assert refused.returncode == 1, (where, refused.stdout, said)
        assert f"branch gitrun/w is checked out in the work tree {linked}" in said, said
        assert "Traceback" not in said
        assert git(git_repo, "rev-parse", "gitrun/w") == tip
        assert _snapshot(linked) == before
        assert _snapshot(git_repo) == before_main


def test_a_run_driven_in_a_linked_work_tree_audits_the_shared_hooks_and_config(
    git_repo: Path,
) -> None:
    """git runs every work tree's hooks from the common git directory, and
    reads its config there: a worker of a run driven in a linked work tree
    that plants a hook or a config command there is reported, as in the main
    one (the audit watched the linked tree's own folder, where git looks for
    neither)."""
    common = git_repo / ".git"
    planter = git_repo.parent / "planter.py"
    planter.write_text(
        "import os, pathlib, subprocess\n"
        f"hook = pathlib.Path({str(common / 'hooks' / 'post-checkout')!r})\n"
        "hook.write_text('#!/bin/sh\\ntrue\\n')\n"
        "subprocess.run(['git', 'config', 'core.fsmonitor', 'false'])\n"
        "out = pathlib.Path(os.environ['GITRUN_OUTPUTS'])\n"
        "out.parent.mkdir(parents=True, exist_ok=True)\n"
        "out.write_text('{}')\n"
    )
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": [sys.executable, str(planter)], "isolation": "none"},
            "limits": {"canary": 0},
        },
    )
    commit_all(git_repo, "define r")
    tree = _linked(git_repo)
    started = run_gitrun(tree, "start", "r", "--json", "--full")
    violations = {v["path"] for v in json.loads(started.stdout)["violations"]}
    assert {".git/hooks/post-checkout", ".git/config"} <= violations, started.stdout


@pytest.mark.usefixtures("gitrun_on_path")
def test_hooks_install_in_a_linked_work_tree_writes_where_git_runs_hooks(git_repo: Path) -> None:
    tree = _linked(git_repo)
    installed = run_gitrun(tree, "hooks", "install", "--git")
    assert installed.returncode == 0, installed.stderr
    hooks = Path(git(tree, "rev-parse", "--path-format=absolute", "--git-path", "hooks").strip())
    assert (hooks / "pre-commit").is_file() and hooks == git_repo / ".git" / "hooks"
