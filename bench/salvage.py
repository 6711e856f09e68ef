"""Turns not redone: a cut-off attempt continued against started over, with the real claude.

N tasks (default 20), each a worker of six tool turns (five commands, then
the write of its output) and a closing line, run by the pinned `claude` CLI
through gitrun's claude preset against the mock model (tests/realclient):
every task's conversation is refused at its fourth turn with a 429 "Server is
temporarily limiting requests" whose retry-after (120 s) is over what claude
waits, so its own retries are spent at once and it exits throttled. Counted
per task, from that cut-off to its valid output: the model requests, and the
turns of the cut-off attempt (three) done again. Once resumed (the default),
once with `[executor] resume = false`.

    python bench/salvage.py [--tasks 20] [--concurrency 4]

Target: at least 70% of the cut-off attempt's turns not done again, every
output valid and committed once, no attempt number used by the throttles.
tests/realclient/test_real_salvage.py holds the same on one task, as a test (this one
counts, it does not time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import build_tree, commit_all, git_env, ledger_records, write_run  # noqa: E402
from tests.realclient.claude import claude_env  # noqa: E402
from tests.realclient.mockmodel import Failure, MockModel, Request, Turn, bash, say, write  # noqa: E402

CUT_AT = 3  # the fourth turn
THROTTLE = Failure(headers=(("retry-after", "120"),))
_TASK = re.compile(r"task (t\d+)")


class Workers:
    """Every task's side of the model; counts each task's requests after its cut."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.lock = threading.Lock()
        self.cut: set[str] = set()
        self.after: dict[str, list[int]] = {}  # task -> the turn each request after the cut was at

    def __call__(self, request: Request) -> Turn | Failure:
        found = _TASK.search(request.first_prompt)
        task = found[1] if found else "?"
        messages = request.body.get("messages") or []
        steps = sum(1 for m in messages if m.get("role") == "assistant")
        with self.lock:
            if task in self.cut:
                self.after.setdefault(task, []).append(steps)
            elif steps == CUT_AT:
                self.cut.add(task)
                return THROTTLE
        script = [bash(f"echo {task} step {n}", f"Step {n}") for n in range(1, 6)]
        script.append(write(str(self.repo / f"out/{task}.json"), json.dumps({"task": task})))
        return script[steps] if steps < len(script) else say("done")


def measure(tasks: int, concurrency: int, resume: bool, base: Path) -> dict[str, Any]:
    repo = base / ("resumed" if resume else "fresh") / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    build_tree(repo, {"README.md": "# bench\n"})
    commit_all(repo, "initial")
    ids = [f"t{n:02d}" for n in range(tasks)]
    packet = {
        "executor": {"preset": "claude", "resume": resume},
        "model": {"default": "claude-mock-1"},
        "limits": {
            "canary": 0,
            "concurrency": concurrency,
            "max_attempts": 2,
            "max_spawns": 10 * tasks,
            "timeout": "120s",
            "backoff_base": "1s",
            "backoff_cap": "2s",
            "max_load": 1e6,
        },
    }
    write_run(repo, "b", [{"id": t, "outputs": [f"out/{t}.json"]} for t in ids], packet)
    commit_all(repo, "run b")
    (repo.parent / "home").mkdir()
    workers = Workers(repo)
    with MockModel(workers, max_requests=40 * tasks, lifetime=1200) as model:
        env = claude_env(repo.parent / "home", model.url)
        done = subprocess.run(
            [sys.executable, "-m", "gitrun", "start", "b"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=1200,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"gitrun start failed:\n{done.stdout}\n{done.stderr}")
    tries = [r for r in ledger_records(repo, "b") if "outcome" in r and "event" not in r]
    valid = [r for r in tries if r["outcome"] == "valid"]
    committed = subprocess.run(
        ["git", "log", "--format=%(trailers:key=Gitrun-Task,valueonly)", "gitrun/b"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    requests = [len(workers.after.get(t, [])) for t in ids]
    redone = [sum(1 for s in workers.after.get(t, []) if s < CUT_AT) for t in ids]
    return {
        "requests": sum(requests) / tasks,
        "redone": sum(redone) / (tasks * CUT_AT),
        "valid": len(valid) == tasks and sorted(committed) == ids,
        "numbers": max(r["attempt"] for r in tries),
        "resumed": sum(1 for r in tries if r.get("resumed_from")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    os.environ.update(git_env(Path(tempfile.mkdtemp(prefix="gitrun-bench-home-"))))
    with tempfile.TemporaryDirectory(prefix="gitrun-bench-salvage-") as tmp:
        resumed = measure(args.tasks, args.concurrency, True, Path(tmp))
        fresh = measure(args.tasks, args.concurrency, False, Path(tmp))
    print(f"{args.tasks} tasks, cut off at turn {CUT_AT + 1} of 6, real claude vs the mock")
    print("                 requests/task after the cut  turns redone  resumed tries  valid")
    for name, row in (("resumed", resumed), ("resume = false", fresh)):
        print(
            f"{name:<16} {row['requests']:>28.2f}  {row['redone']:>12.0%}  "
            f"{row['resumed']:>13}  {row['valid']} (attempt numbers used: {row['numbers']})"
        )
    kept = 1 - resumed["redone"]
    print(f"turns of the cut-off attempt not redone: {kept:.0%} (target >= 70%)")


if __name__ == "__main__":
    main()
