"""Chaos: a 60-task run of misbehaving simulated agents, its driver killed with
SIGKILL at 10 random moments and resumed each time. The seed is printed so a
failure can be replayed (CHAOS_SEED=<seed>)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import tomli_w

from gitrun.engine.crashpoints import POINTS
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, committed_ledger, git, gitrun_process

TASKS = 60
KILLS = 10


def _gitrun(repo: Path, *args: str) -> subprocess.Popen[str]:
    return gitrun_process(repo, *args, "--quiet")


def _events(log: Path) -> list[tuple[str, int, str, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        task, attempt, event, at = line.split()
        out.append((task, int(attempt), event, float(at)))
    return out


@pytest.mark.soak
def test_chaos_kill_9_ten_times(git_repo: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 30))
    print(f"chaos seed {seed} (replay: CHAOS_SEED={seed})")
    rng = random.Random(seed)
    sim_log = tmp_path / "sim.log"
    # The user's own work in progress: staged before the run, never touched.
    build_tree(git_repo, {"notes/draft.md": "my staged draft\n"})
    git(git_repo, "add", "notes/draft.md")
    run_dir = git_repo / ".gitrun/runs/r"
    run_dir.mkdir(parents=True)
    packet = {
        "run": {"id": "r"},
        "model": {"default": "sim-model"},
        "limits": {
            "concurrency": 4,
            "max_attempts": 5,
            "timeout": "2s",
            "kill_grace": "0.5s",
            "backoff_base": "0.1s",
            "backoff_cap": "0.5s",
            "breaker_fast": "0.05s",
        },
        "executor": {
            "command": [
                sys.executable,
                "-m",
                "gitrun.workers.simagent",
                "--seed",
                str(seed),
                "--hangs",
                "--think",
                "0.05",
                "0.4",
                "--crowd",
                str(tmp_path / "crowd"),
                "--crowd-limit",
                "3",
            ],
            "env": {"GITRUN_SIM_LOG": str(sim_log)},
        },
    }
    tasks = [{"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(1, TASKS + 1)]
    (run_dir / "packet.toml").write_text(tomli_w.dumps(packet))
    (run_dir / "tasks.toml").write_text(tomli_w.dumps({"task": tasks}))

    driver = _gitrun(git_repo, "start", "r")
    deadline = time.time() + 30
    while not (git_repo / ".git/refs/heads/gitrun/r").exists() and time.time() < deadline:
        time.sleep(0.01)
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.2, 1.5))
        driver.kill()
        driver.communicate()
        driver = _gitrun(git_repo, "resume", "r")
    driver.communicate()
    final = _gitrun(git_repo, "resume", "r")
    out, err = final.communicate(timeout=240)
    assert final.returncode == 0, (seed, out, err[-2000:])

    # Every output committed exactly once on the run branch.
    names = git(git_repo, "log", "--format=", "--name-only", "HEAD..gitrun/r").split()
    per_path = Counter(n for n in names if n.startswith("out/"))
    assert per_path == Counter({f"out/t{i:02d}.json": 1 for i in range(1, TASKS + 1)}), seed
    # No task whose valid output reached the disk was dispatched again.
    events = _events(sim_log)
    for task in {t for t, _, _, _ in events}:
        wrote = [at for t, _, e, at in events if t == task and e == "wrote"]
        if wrote:
            later = [a for t, a, e, at in events if t == task and e == "start" and at > min(wrote)]
            assert not later, (seed, task, later)
    assert git(git_repo, "fsck", "--no-progress", "--no-dangling").strip() == "", seed
    # The user's staged change is still staged, and HEAD did not move.
    assert git(git_repo, "diff", "--cached", "--name-only").split() == ["notes/draft.md"], seed
    assert git(git_repo, "log", "--format=%s", "-1").strip() == "initial"


# -- kill at every journal step ---------------------------------------------------------

STEP_WORKER = """
import fcntl, json, os, sys, time
task, attempt = os.environ["GITRUN_TASK"], os.environ["GITRUN_ATTEMPT"]
events, locks = sys.argv[1], sys.argv[2]
def say(what):
    with open(events, "a") as log:
        log.write(f"{task} {attempt} {what} {os.getpid()}\\n")
# Held while this worker lives (the kernel drops it when it dies, also by
# kill -9): a second live worker of the same task cannot take it.
held = open(os.path.join(locks, task), "a")
try:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    say("DOUBLE")
say("start")
# First attempts outlive a driver's restart: a resume that failed to stop
# them would start a second worker while they still hold their lock.
time.sleep(1.0 if attempt == "1" else 0.1)
if not (task == "t2" and attempt == "1"):  # t2's first attempt writes nothing
    out = os.environ["GITRUN_OUTPUTS"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"task": task, "attempt": attempt}, f)
say("end")
"""

STEP_TASKS = 4


def _step_run(repo: Path, tmp_path: Path) -> Path:
    """A 4-task run of workers that log their start and end and hold a lock per task."""
    (tmp_path / "locks").mkdir()
    worker = tmp_path / "step_worker.py"
    worker.write_text(STEP_WORKER)
    events = tmp_path / "events.log"
    run_dir = repo / ".gitrun/runs/r"
    run_dir.mkdir(parents=True)
    packet = {
        "run": {"id": "r"},
        "model": {"default": "sim-model"},
        "limits": {"concurrency": 2, "max_attempts": 3, "timeout": "20s", "kill_grace": "0.5s"},
        "executor": {
            "command": [sys.executable, str(worker), str(events), str(tmp_path / "locks")]
        },
    }
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, STEP_TASKS + 1)]
    (run_dir / "packet.toml").write_text(tomli_w.dumps(packet))
    (run_dir / "tasks.toml").write_text(tomli_w.dumps({"task": tasks}))
    return events


def _drive(repo: Path, command: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITRUN_CRASH_AT"}
    if crash_at:
        env["GITRUN_CRASH_AT"] = crash_at
    return run_gitrun_call([command, "r", "--quiet"], repo, env=env)


# Each plan: the crash points of successive drivers, then one that finishes.
STEP_PLANS = [[f"{point}:2"] for point in POINTS if point != "recover.recorded"] + [
    ["launch.journaled:2", "recover.recorded:1"],  # the successor dies recovering
    ["launch.spawned:1", "launch.ahead:1"],  # dies before a worker, then with no pid
]


@pytest.mark.parametrize("plan", STEP_PLANS, ids=lambda plan: "+".join(plan))
def test_a_driver_killed_at_a_journal_step_records_each_attempt_exactly_once(
    git_repo: Path, tmp_path: Path, plan: list[str]
) -> None:
    events = _step_run(git_repo, tmp_path)
    command = "start"
    for crash_at in plan:
        proc = _drive(git_repo, command, crash_at)
        assert proc.returncode == -signal.SIGKILL, (crash_at, proc.returncode, proc.stderr)
        command = "resume"
    final = _drive(git_repo, command, None)
    assert final.returncode == 0, (plan, final.stdout, final.stderr[-2000:])

    lines = [line.split() for line in events.read_text().splitlines()]
    assert not [line for line in lines if line[2] == "DOUBLE"], "two live workers of one task"
    started = Counter(
        (task, int(attempt)) for task, attempt, what, _pid in lines if what == "start"
    )
    recorded = Counter(
        (str(r["task"]), int(str(r["attempt"])))
        for r in committed_ledger(git_repo)
        if "attempt" in r
    )
    assert max(recorded.values()) == 1, recorded  # no attempt recorded twice
    assert set(started) <= set(recorded), (started, recorded)  # nor any lost
    assert ("t2", 2) in recorded  # its first attempt wrote nothing
    names = git(git_repo, "log", "--format=", "--name-only", "HEAD..gitrun/r").split()
    per_path = Counter(n for n in names if n.startswith("out/"))
    assert per_path == Counter({f"out/t{i}.json": 1 for i in range(1, STEP_TASKS + 1)})
    assert git(git_repo, "fsck", "--no-progress", "--no-dangling").strip() == ""
    # Found by their script (confined, a worker's pid is its PID namespace's own).
    assert _running(str(tmp_path / "step_worker.py")) == [], "a worker outlived the run"


def _running(text: str) -> list[int]:
    """The live processes (no zombies) whose command line holds ``text``."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and text in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found
