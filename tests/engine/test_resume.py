"""Crashes, concurrent users and other machines: resume continues from what is committed."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run
from tests.forkserver import run_gitrun_call
from tests.helpers import (
    build_tree,
    committed_ledger,
    fake_worker_run,
    git,
    gitrun_process,
    ledger_records,
    spawn_events,
)

quiet = lambda _line: None  # noqa: E731


def _commits_per_path(repo: Path, ref: str) -> Counter[str]:
    out = git(repo, "log", "--format=", "--name-only", f"HEAD..{ref}")
    return Counter(line for line in out.splitlines() if line)


@pytest.mark.soak
def test_kill_9_at_random_moments_then_resume(git_repo: Path, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    spawn_log = tmp_path / "spawns.log"
    spec = {"sleep": [0.05, 0.3], "spawn_log": str(spawn_log)}
    spec_path = fake_worker_run(git_repo, "r", 40, spec, {"limits": {"concurrency": 4}})
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    # (A start killed before it made the branch has not started: resume says
    # so and names `gitrun start`. Kill it only once it is under way.)
    deadline = time.time() + 30
    while not (git_repo / ".git/refs/heads/gitrun/r").exists() and time.time() < deadline:
        time.sleep(0.01)
    for _ in range(6):
        time.sleep(rng.uniform(0.2, 1.2))
        driver.kill()  # SIGKILL: no handler runs, workers are orphaned
        driver.wait()
        driver = gitrun_process(git_repo, "resume", "r", capture=False)
    time.sleep(rng.uniform(0.2, 1.2))
    driver.kill()
    driver.wait()
    final = run_gitrun_call(["resume", "r"], git_repo)
    assert final.returncode == 0, (seed, final.stdout, final.stderr[-3000:])

    # Every output committed exactly once on the run branch.
    per_path = _commits_per_path(git_repo, "gitrun/r")
    outputs = [f"out/t{i:02d}.json" for i in range(1, 41)]
    assert all(per_path[p] == 1 for p in outputs), (seed, per_path)
    # No task whose valid output reached the disk was dispatched again.
    events = spawn_events(spec_path)
    for task in {t for t, _, _, _ in events}:
        wrote = [at for t, _, e, at in events if t == task and e == "wrote"]
        starts = [at for t, _, e, at in events if t == task and e == "start"]
        if wrote:
            assert all(s < min(wrote) for s in starts), (seed, task, events)
    # Integrity and connectivity; objects a killed driver built but never
    # published are dangling garbage for `git gc`, not damage.
    assert git(git_repo, "fsck", "--no-progress", "--no-dangling").strip() == ""


def test_user_commits_on_their_branch_while_the_run_commits(git_repo: Path, tmp_path: Path) -> None:
    fake_worker_run(git_repo, "r", 60, {}, {"limits": {"concurrency": 4}})
    build_tree(git_repo, {"user/staged-before.txt": "staged before the run\n"})
    git(git_repo, "add", "user/staged-before.txt")
    head_before = git(git_repo, "rev-parse", "HEAD").strip()
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    user_commits = []
    staged_only = []
    i = 0
    while driver.poll() is None or i < 5:
        build_tree(git_repo, {f"user/c{i}.txt": f"{i}\n", f"user/s{i}.txt": f"staged {i}\n"})
        git(git_repo, "add", f"user/c{i}.txt")
        git(git_repo, "commit", "-q", "-m", f"user {i}", "--", f"user/c{i}.txt")
        user_commits.append(git(git_repo, "rev-parse", "HEAD").strip())
        git(git_repo, "add", f"user/s{i}.txt")
        staged_only.append(f"user/s{i}.txt")
        i += 1
    assert driver.returncode == 0
    # HEAD moved only through the user's own commits.
    chain = git(git_repo, "rev-list", f"{head_before}..HEAD").split()
    assert chain[::-1] == user_commits
    # Every entry the user staged is still staged.
    staged = set(git(git_repo, "diff", "--cached", "--name-only").split())
    assert staged == {"user/staged-before.txt", *staged_only}
    # No user path in any gitrun commit.
    per_path = _commits_per_path(git_repo, "gitrun/r")
    assert not [p for p in per_path if p.startswith("user/")]
    assert sum(1 for p in per_path if p.startswith("out/")) == 60


def test_resume_on_a_fresh_clone_carries_attempt_counts(git_repo: Path, tmp_path: Path) -> None:
    """The run directory exists only on gitrun/r (never committed on main):
    `gitrun resume` on a fresh clone brings it back and carries the attempts."""
    from gitrun.processes.reaper import kill_recorded_group
    from gitrun.store.journal import running_records
    from gitrun.store.local import LocalPaths

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    git(git_repo, "push", "-q", "origin", "HEAD")
    # t01 writes broken JSON first and then waits for an ALLOW file that only
    # the other machine has; the other tasks just finish.
    spec = {"tasks": {"t01": "hang_unless_allowed"}, "sleep": 0.05}
    fake_worker_run(git_repo, "r", 6, spec, {"limits": {"concurrency": 2, "canary": 0}})
    driver = gitrun_process(git_repo, "start", "r", capture=False)

    local = LocalPaths.of(git_repo, "r")
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            records = committed_ledger(git_repo)
            entry = running_records(local).get("t01")
            hanging = entry is not None and entry.attempt == 2
            attempts = [r for r in records if "attempt" in r]  # not the round's start
            if len(attempts) >= 6 and hanging:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"t01 never reached attempt 2 with the rest committed: {records}")
        git(git_repo, "push", "-q", "origin", "gitrun/r")  # mid-run: t01 hangs in attempt 2
    finally:
        driver.kill()
        driver.wait()
        for record in running_records(local).values():  # the worker the killed driver left
            kill_recorded_group(record.to_json())

    clone = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert not (clone / ".gitrun").exists()
    (clone / "ALLOW").write_text("")
    resumed = run_gitrun_call(["resume", "r", "--json"], clone, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    status = json.loads(resumed.stdout)
    ledger = ledger_records(clone)
    t01 = [(r["attempt"], r["outcome"]) for r in ledger if r.get("task") == "t01"]
    # Attempt 2 never reached the committed ledger: the clone runs it again.
    assert t01 == [(1, "invalid"), (2, "valid")]
    assert status["tasks"]["t01"]["last_attempt"] == 2
    trailer = git(
        clone,
        "log",
        "-1",
        "--format=%(trailers:key=Gitrun-Attempt,valueonly)",
        "gitrun/r",
        "--",
        "out/t01.json",
    )
    assert trailer.strip() == "t01=2"
    assert status["counts"]["done"] == 6


def test_resume_survives_a_damaged_journal_record_and_signals_nothing(git_repo: Path) -> None:
    from gitrun.commands.session import start_run
    from gitrun.store.local import LocalPaths

    fake_worker_run(git_repo, "r", 2, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    journal = LocalPaths.of(git_repo, "r").running
    junk = [
        {"task": "t01", "attempt": "x", "started": "y", "before": 5, "pid": 1},
        {"task": "t02", "attempt": 2, "started": "y", "before": 5, "pid": 1},
        {"task": 7},
        [1],
    ]
    journal.write_text("".join(json.dumps(j) + "\n" for j in junk))
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0
    # t01's attempt is unknown, so the last recorded one: recorded already, skipped.
    assert not any("t01" in line for line in said)
    assert any("t02 attempt 2" in line and "nothing signalled" in line for line in said)


def test_an_attempt_recorded_before_the_kill_is_not_recorded_again(git_repo: Path) -> None:
    """The kill point between an attempt's ledger record and closing it in the
    journal: the next resume must not record the attempt a second time."""
    from gitrun.commands.session import start_run
    from gitrun.store.local import LocalPaths

    fake_worker_run(git_repo, "r", 2, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    left_open = {
        "task": "t01",
        "attempt": 1,
        "run": "r",
        "pid": 4_000_000,  # above pid_max: no such process
        "create_time": 1.0,
        "cmdline": ["worker"],
        "started": time.time() - 5,
        "before": {},
    }
    LocalPaths.of(git_repo, "r").running.write_text(json.dumps(left_open) + "\n")
    assert resume_run(git_repo, "r", quiet).exit_code == 0
    records = ledger_records(git_repo)
    assert Counter((r.get("task"), r.get("attempt")) for r in records)[("t01", 1)] == 1


def test_a_worker_started_without_a_recorded_pid_is_found_by_its_attempt_id(
    git_repo: Path,
) -> None:
    """The kill point between the write-ahead record and the spawn's record:
    resume finds the worker by the attempt id it inherited, stops it (and
    only it), and dispatches the task again."""
    import os
    import signal

    from gitrun.processes.reaper import is_running
    from gitrun.store.local import LocalPaths

    fake_worker_run(git_repo, "r", 2, {})
    assert start_run_quiet(git_repo) == 0
    git(git_repo, "update-ref", "-d", "refs/heads/gitrun/r")  # start over on the same id
    shutil.rmtree(git_repo / ".gitrun/runs/r/ledger")
    for path in (git_repo / "out").iterdir():
        path.unlink()
    written = time.time() - 1
    base = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    ours = {"GITRUN_RUN": "r", "GITRUN_TASK": "t01", "GITRUN_ATTEMPT": "1"}
    worker = subprocess.Popen(
        ["sleep", "300"], env={**base, **ours, "GITRUN_ATTEMPT_ID": "a1"}, start_new_session=True
    )
    decoy = subprocess.Popen(
        ["sleep", "300"], env={**base, **ours, "GITRUN_ATTEMPT_ID": "zz"}, start_new_session=True
    )
    try:
        record = {"run": "r", "task": "t01", "attempt": 1, "attempt_id": "a1"}
        record |= {"started": written, "before": {}}
        local = LocalPaths.of(git_repo, "r")
        local.running.write_text(json.dumps(record) + "\n")
        from gitrun.commands.session import start_run

        said: list[str] = []
        outcome = start_run(git_repo, "r", said.append)
        assert outcome.exit_code == 0
        assert worker.wait(timeout=10) == -signal.SIGKILL
        assert is_running(decoy.pid)
        assert any("t01 attempt 1: left by a dead driver; stopped" in line for line in said)
    finally:
        for proc in (worker, decoy):
            proc.kill()
            proc.wait()


def test_the_journal_is_written_ahead_of_every_spawn(git_repo: Path) -> None:
    from gitrun.store.local import LocalPaths

    fake_worker_run(git_repo, "r", 3, {})
    # Killed once the last attempt's end is journaled: the journal as it was.
    env = {**os.environ, "GITRUN_CRASH_AT": "end.closed:3"}
    proc = run_gitrun_call(["start", "r", "-q"], git_repo, env=env, timeout=120, text=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    journal = LocalPaths.of(git_repo, "r").running
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    for task in ("t01", "t02", "t03"):
        mine = [r for r in records if r["task"] == task and not r.get("end")]
        assert "pid" not in mine[0] and mine[0]["attempt_id"]  # ahead of the spawn
        assert mine[1]["pid"] > 1 and mine[1]["attempt_id"] == mine[0]["attempt_id"]
    # A driver that ends with every attempt recorded leaves no journal to read.
    assert resume_run(git_repo, "r", quiet).exit_code == 0
    assert not journal.exists()


def start_run_quiet(repo: Path) -> int:
    from gitrun.commands.session import start_run

    return start_run(repo, "r", quiet).exit_code


def _drop_object(repo: Path, sha: str) -> None:
    """Delete a loose object, as `git gc --prune=now` racing a writer can."""
    path = repo / ".git" / "objects" / sha[:2] / sha[2:]
    assert path.exists(), "the object should be loose"
    path.chmod(0o644)
    path.unlink()


def test_resume_repairs_a_branch_whose_tip_commit_was_pruned(git_repo: Path) -> None:
    from gitrun.commands.session import start_run

    fake_worker_run(git_repo, "r", 3, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    tip = git(git_repo, "rev-parse", "gitrun/r").strip()
    _drop_object(git_repo, tip)
    from gitrun.commands.summary import format_status
    from gitrun.engine.status import read_status

    assert "objects are missing" in format_status(read_status(git_repo, "r"))
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    assert any("whose objects are missing" in line for line in said)
    assert all(t.status == "done" for t in outcome.status.tasks.values())
    # The reflog keeps naming the pruned commit (git's own record); the branch is whole.
    fsck = ["git", "-C", str(git_repo), "fsck", "--no-dangling", "--no-reflogs"]
    assert subprocess.run(fsck).returncode == 0


def test_resume_repairs_a_branch_whose_tip_tree_was_pruned(git_repo: Path) -> None:
    from gitrun.commands.session import start_run

    fake_worker_run(git_repo, "r", 3, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    tree = git(git_repo, "rev-parse", "gitrun/r^{tree}").strip()
    _drop_object(git_repo, tree)
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    assert any("moved it back" in line for line in said)
    for task in ("t01", "t02", "t03"):
        git(git_repo, "cat-file", "-e", f"gitrun/r:out/{task}.json")
