"""An orchestrator's calls on an external run: `gitrun next` and `gitrun collect`.

    python bench/external.py [--repeat 20] [--tasks 1000] [--against DIR]

An orchestrating session calls `next` for a batch, dispatches its pointers
as subagents, then calls `collect`, for every batch of the run. This times
both, a batch of one task each round, on an external run of ``--tasks``
tasks: `next --json --max 1` leases a task, the bench writes its output (as
the subagent would), `collect` validates and commits it. Each round also
times `python -c pass`, for scale; medians, the first round dropped (it
writes the bytecode). Target: each <= 35x `python -c pass` (a lead session
waits on them once a batch; they are a person's command, not a hot path).

Then the bytes a lead reads: a run of ``--tasks`` tasks driven to its end
as a lead does it, `start --json`, then `collect --json` and `next --json`
for every batch (at concurrency ``--concurrency``), every byte gitrun
printed counted. Target: <= 200 bytes per task (what gitrun adds to the
lead's context; the pointers are most of it).

``--against DIR`` runs the same calls from another source tree (e.g. `git
worktree add /tmp/before <commit>`) on a run of its own, in the same rounds,
and adds its rows: before and after side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, Table, git_env, make_repo, write_bench_run

TARGET = 35.0  # x python -c pass, for next and for collect
TARGET_BYTES = 200  # of gitrun's output in a lead's context, per task


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])}: exit {proc.returncode}: {proc.stderr}")
    return took, proc.stdout


class Orchestrator:
    """One external run, driven a batch of one task at a time."""

    def __init__(self, root: Path, n: int, tree: str | None) -> None:
        self.repo = make_repo(root)
        self.env = {k: v for k, v in git_env().items() if not k.startswith("GITRUN_")}
        if tree is not None:
            self.env["PYTHONPATH"] = tree
        tasks: list[dict[str, object]] = [
            {"id": f"t{i:04d}", "outputs": [f"out/t{i:04d}.json"]} for i in range(n)
        ]
        write_bench_run(self.repo, tasks, {"kind": "external"}, canary=0, concurrency=1)
        for argv in (["add", "-A"], ["commit", "-qm", "define"]):
            subprocess.run(["git", *argv], cwd=self.repo, env=self.env, check=True)
        self.gitrun = [sys.executable, "-m", "gitrun"]
        leased = self._call("start", "bench", "--json")[1]
        self._write(leased)

    def _call(self, *args: str) -> tuple[float, str]:
        return _timed([*self.gitrun, *args], self.repo, self.env)

    def _write(self, stdout: str) -> None:
        """What the subagents of a batch do: write their outputs."""
        write_outputs(self.repo, stdout)

    def round(self) -> tuple[float, float]:
        """(collect, next) of one batch, in seconds."""
        collected, _ = self._call("collect", "bench")
        leased, stdout = self._call("next", "bench", "--json", "--max", "1")
        self._write(stdout)
        return collected, leased


def write_outputs(repo: Path, stdout: str) -> None:
    """What the subagents of a batch (``next --json``'s output) do: write
    their outputs (the bench's tasks write out/<task>.json)."""
    for task in json.loads(stdout).get("leased", {}):  # task -> its pointer
        path = repo / "out" / f"{task}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"task": task}) + "\n")


def lead_bytes(root: Path, n: int, concurrency: int) -> tuple[int, int]:
    """(bytes gitrun printed, calls) over a whole external run of ``n`` tasks led batch by batch."""
    repo = make_repo(root)
    env = {k: v for k, v in git_env().items() if not k.startswith("GITRUN_")}
    env["GITRUN_MAX_LOAD"] = "1000000"
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:04d}", "outputs": [f"out/t{i:04d}.json"]} for i in range(n)
    ]
    write_bench_run(repo, tasks, {"kind": "external"}, concurrency=concurrency)
    for argv in (["add", "-A"], ["commit", "-qm", "define"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True)
    gitrun = [sys.executable, "-m", "gitrun"]
    printed, calls = 0, 0

    def call(*args: str) -> str:
        nonlocal printed, calls
        proc = subprocess.run([*gitrun, *args], cwd=repo, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        printed += len(proc.stdout.encode()) + len(proc.stderr.encode())
        calls += 1
        return proc.stdout

    batch = call("start", "bench", "--json")
    for _ in range(4 * n):
        if json.loads(batch).get("done"):
            return printed, calls
        write_outputs(repo, batch)
        call("collect", "bench", "--json")
        batch = call("next", "bench", "--json")
    raise SystemExit("the run never finished")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--against", metavar="DIR", help="also run gitrun from this source tree")
    parser.add_argument("--concurrency", type=int, default=16, help="for the bytes a lead reads")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"gitrun": None} | ({"before": args.against} if args.against else {})
        runs = {
            name: Orchestrator(Path(tmp) / name, args.tasks, tree) for name, tree in trees.items()
        }
        for _ in range(args.repeat + 1):  # the first round writes bytecode and is dropped
            loads.append(os.getloadavg()[0])
            base, _ = _timed([sys.executable, "-c", "pass"], Path(tmp), runs["gitrun"].env)
            samples.setdefault("python -c pass", []).append(base)
            for name, run in runs.items():
                collected, leased = run.round()
                samples.setdefault(f"{name}: collect (one task, validated and committed)", [])
                samples[f"{name}: collect (one task, validated and committed)"].append(collected)
                samples.setdefault(f"{name}: next --max 1", []).append(leased)
    base = statistics.median(samples["python -c pass"][1:])
    table = Table(
        f"external run of {args.tasks} tasks: median of {args.repeat} batches of one task, "
        "against python -c pass"
    )
    table.loads = loads
    for name, taken in samples.items():
        median = statistics.median(taken[1:])
        row = Row(name, f"{median * 1000:.1f} ms", f"{base * 1000:.1f} ms")
        if name != "python -c pass":
            row.ratio, row.target = f"{median / base:.1f}x", f"<= {TARGET:g}x"
            row.ok = median / base <= TARGET
        table.rows.append(row)
    with tempfile.TemporaryDirectory() as tmp:
        printed, calls = lead_bytes(Path(tmp) / "lead", args.tasks, args.concurrency)
    per_task = printed / args.tasks
    table.rows.append(
        Row(
            f"bytes a lead reads, {args.tasks} tasks at -j{args.concurrency} ({calls} calls)",
            f"{per_task:.0f} B/task",
            target=f"<= {TARGET_BYTES} B/task",
            ok=per_task <= TARGET_BYTES,
        )
    )
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
