"""`gitrun report RUN --html` on a big run: 10,000 tasks, every outcome.

The run's branch is built with `git fast-import`, as gitrun leaves it: a
definition commit, landing commits of ten tasks each with their trailers,
and the ledger's chunks at the tip. The ledger is simulated: eight workers
at a time, throttles that halve concurrency, retries after missing and
invalid outputs, timeouts, a lost attempt, lies (valid output, exit 1),
tasks that fail for good, and a halt that `gitrun retry` lifted. Targets:
the page renders in < 5 s and weighs < 5 MB.

    python bench/report.py [--tasks 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, gitrun_argv, machine, make_repo, median_seconds

RUN = "bench"
RUN_DIR = f".gitrun/runs/{RUN}"
EPOCH = 1_800_000_000.0  # 2027-01-15
MAX_ATTEMPTS = 3
# The first tasks show one story each, whatever the seed.
STORIES = [
    ["valid"],
    ["valid-lie"],
    ["invalid", "valid"],
    ["missing", "valid"],
    ["throttled", "valid"],
    ["timed out", "valid"],
    ["abandoned", "valid"],
    ["interrupted", "valid"],
    ["missing", "missing", "invalid"],  # failed for good
]


def _story(rng: random.Random) -> list[str]:
    roll = rng.random()
    if roll < 0.80:
        return ["valid"]
    if roll < 0.85:
        return ["valid-lie"]
    if roll < 0.90:
        return ["throttled", "valid"]
    if roll < 0.94:
        return ["missing", "valid"]
    if roll < 0.97:
        return ["invalid", "missing", "valid"]
    if roll < 0.98:
        return ["timed out", "valid"]
    if roll < 0.99:
        return ["missing", "invalid", "missing"]
    return ["throttled", "throttled", "valid"]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def simulate(task_ids: list[str], seed: int, workers: int = 8) -> list[dict[str, object]]:
    """Ledger records for these tasks, as eight workers would leave them."""
    rng = random.Random(seed)
    stories = {
        tid: (STORIES[i] if i < len(STORIES) else _story(rng)) for i, tid in enumerate(task_ids)
    }
    queue = [(0.0, i, tid, 0) for i, tid in enumerate(task_ids)]  # (ready at, order, task, step)
    heapq.heapify(queue)
    free = [EPOCH] * workers
    records: list[dict[str, object]] = []
    halted = False
    while queue:
        ready, order, tid, step = heapq.heappop(queue)
        slot = min(range(workers), key=free.__getitem__)
        start = max(free[slot], EPOCH + ready)
        kind = stories[tid][step]
        duration = rng.uniform(20, 120) if kind != "timed out" else 300.0
        end = start + duration
        free[slot] = end
        record: dict[str, object] = {
            "v": 1,
            "task": tid,
            "attempt": step + 1,
            "stage": "work",
            "started": _iso(start),
            "ended": _iso(end),
            "duration": round(duration, 3),
            "exit": 1 if kind in ("valid-lie", "missing") else 0,
            "signal": None,
            "timed_out": kind == "timed out",
            "outcome": {"valid-lie": "valid", "timed out": "missing"}.get(kind, kind),
        }
        if kind == "throttled":
            record["exit"] = 75
            record["concurrency"] = 4
        if kind in ("abandoned", "timed out"):
            record["exit"] = None
            record["signal"] = 9 if kind == "timed out" else None
        if kind not in ("valid", "valid-lie"):
            record["reason"] = f"out/{tid}.json: does not exist"
        records.append(record)
        if len(records) == 1:
            free = [end] * workers  # the canary ran alone
        if step + 1 < len(stories[tid]):
            heapq.heappush(queue, (end - EPOCH + rng.uniform(1, 30), order, tid, step + 1))
        if not halted and len(records) == len(task_ids) // 2:
            halted = True
            message = "environment fault: 4 of 4 attempts exited within 0.2 s with status 1"
            records.append(
                {"event": "halt", "kind": "environment fault", "message": message, "at": _iso(end)}
            )
            records.append({"event": "lift", "at": _iso(end + 60)})
            free = [max(f, end + 60) for f in free]
    return records


def build(repo: Path, n: int, seed: int = 20270115) -> list[dict[str, object]]:
    """The run's branch for ``n`` tasks; returns its ledger records."""
    import tomli_w

    env = git_env()
    base = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, env=env
    ).stdout.strip()
    width = max(4, len(str(n)))
    task_ids = [f"t{i:0{width}d}" for i in range(1, n + 1)]
    packet = {
        "run": {"id": RUN, "description": "A simulated fan-out of every outcome"},
        "limits": {"concurrency": 8, "max_attempts": MAX_ATTEMPTS, "payload_budget": 100_000_000},
        "model": {"default": "bench-model"},
        "executor": {"kind": "command", "command": ["true", "{pointer}"]},
    }
    tasks = {"task": [{"id": t, "outputs": [f"out/{t}.json"]} for t in task_ids]}
    records = simulate(task_ids, seed)
    final: dict[str, str] = {}
    for r in records:
        if "task" in r:
            final[str(r["task"])] = str(r["outcome"])
    done = [t for t in task_ids if final.get(t) == "valid"]
    stream: list[bytes] = []
    when = int(EPOCH)

    def data(text: str) -> None:
        raw = text.encode()
        stream.append(b"data %d\n" % len(raw) + raw + b"\n")

    def commit(message: str, files: dict[str, str], parent: str | None = None) -> None:
        nonlocal when
        when += 1
        stream.append(b"commit refs/heads/gitrun/%s\n" % RUN.encode())
        stream.append(b"committer bench <bench@example.com> %d +0000\n" % when)
        data(message)
        if parent:  # later commits continue the branch fast-import is building
            stream.append(f"from {parent}\n".encode())
        for path, text in files.items():
            stream.append(f"M 100644 inline {path}\n".encode())
            data(text)

    commit(
        f"gitrun({RUN}): start run\n\nGitrun-Run: {RUN}\nGitrun-Base: {base}\n",
        {
            f"{RUN_DIR}/packet.toml": tomli_w.dumps(packet),
            f"{RUN_DIR}/tasks.toml": tomli_w.dumps(tasks),
        },
        base,
    )
    attempts = {str(r["task"]): int(str(r["attempt"])) for r in records if "task" in r}
    for i in range(0, len(done), 10):
        group = done[i : i + 10]
        trailers = "".join(f"Gitrun-Task: {t}\n" for t in group)
        trailers += "".join(f"Gitrun-Attempt: {t}={attempts[t]}\n" for t in group)
        files = {f"out/{t}.json": json.dumps({"task": t}) + "\n" for t in group}
        commit(
            f"gitrun({RUN}): {', '.join(group[:3])} done\n\nGitrun-Run: {RUN}\n{trailers}", files
        )
    chunks: dict[str, str] = {}
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records]
    for number, at in enumerate(range(0, len(lines), 1000), start=1):
        chunks[f"{RUN_DIR}/ledger/{number // 100:04d}/{number:06d}.jsonl"] = "".join(
            lines[at : at + 1000]
        )
    commit(f"gitrun({RUN}): ledger\n\nGitrun-Run: {RUN}\n", chunks)
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input=b"".join(stream),
        check=True,
        env=env,
    )
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "repo")
        records = build(repo, args.tasks)
        page = Path(tmp) / "report.html"
        argv = [*gitrun_argv(), "-C", str(repo), "report", RUN, "--html", "-o", str(page)]

        cpu: list[float] = []

        def render() -> None:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(argv, check=True, env=git_env(), capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)

        median, samples = median_seconds(render, args.repeat)
        size = page.stat().st_size
        attempts = sum(1 for r in records if "task" in r)
        # Wall time follows the machine's load; CPU time much less so.
        print(
            f"{args.tasks:,} tasks, {attempts:,} attempts: `gitrun report --html` median "
            f"{median:.2f} s wall (runs: {', '.join(f'{s:.2f}' for s in samples)}), "
            f"{statistics.median(cpu):.2f} s CPU, load average {os.getloadavg()[0]:.1f}; "
            f"page {size / 1e6:.2f} MB  (targets: < 5 s, < 5 MB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
