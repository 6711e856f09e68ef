"""Chaos: a 60-task run of misbehaving simulated agents, its driver killed with
SIGKILL at 10 random moments and resumed each time. The seed is printed so a
failure can be replayed (CHAOS_SEED=<seed>)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import tomli_w

from tests.helpers import build_tree, git, gitrun_process

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
                "gitrun.simagent",
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
