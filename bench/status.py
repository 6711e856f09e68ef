"""`gitrun status` on what a killed run leaves: 10,000 (and 100,000) tasks, about half done.

The state is real: `gitrun start` runs the fan-out (a worker writes each task's
JSON file; every tenth task's first attempt writes broken JSON and fails, so it
is quarantined and retried) and is killed with SIGKILL once about half of the
outputs exist. What it leaves is what status reads: the run branch with its
landing commits and ledger chunks, a lock and a journal of a dead driver,
worker logs, and outputs on disk that no commit holds yet. Building 100,000
tasks this way takes minutes: `--state DIR` keeps the states for later runs.

Measured, round by round so a noisy machine slows every row alike:
- status with a cold cache (as on a fresh clone: gitrun keeps no cache of a
  definition, and the files older trees kept, listed in CACHES, are deleted
  first so a tree before can be measured the same way), again held to one
  CPU with `taskset`, a second time (warm: the page cache only), and
  `status --json`;
- `snakemake -n` on the same fan-out (half the outputs present), the same
  number of times, when Snakemake is installed (`pip install snakemake`, or
  `--snakemake PATH`); its first run is marked, not counted.

Times are medians; memory is the peak resident size of the command, taken by a
small helper process. Targets: 10,000 tasks with a cold cache >= 10x faster
than `snakemake -n`; 100,000 tasks <= 3 s and <= 200 MB.

    python bench/status.py [--sizes 10000,100000] [--repeat 5] [--state DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Row,
    Sample,
    Table,
    git_env,
    gitrun_argv,
    make_repo,
    measure,
    median_of,
    peak_of,
    walls,
    write_bench_run,
)

# The first attempt of every tenth task writes broken JSON and fails.
WORKER = (
    'case "$GITRUN_TASK" in *3) if [ "$GITRUN_ATTEMPT" = 1 ]; then '
    'echo "{" > "$GITRUN_OUTPUTS"; exit 1; fi;; esac; '
    'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'
)
BUILD_DEADLINE = 3600.0  # seconds; 100,000 tasks take about five minutes
# What older trees kept of a definition (a fresh clone has none of it).
CACHES = (
    ".git/gitrun/bench/tasks.cache.json",
    ".git/gitrun/bench/run-view.jsonl",
    ".git/gitrun/bench/definition.json",
)


def build(repo: Path, n: int) -> None:
    """In ``repo`` (made by make_repo), a run of ``n`` tasks started and killed
    with SIGKILL once about half of its outputs exist."""
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:06d}", "outputs": [f"out/t{i:06d}.json"]} for i in range(n)
    ]
    executor = {"kind": "command", "command": ["sh", "-c", WORKER]}
    write_bench_run(repo, tasks, executor, concurrency=8, max_load=1000.0)
    driver = subprocess.Popen(
        [*gitrun_argv(), "start", "bench"],
        cwd=repo,
        env=git_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    out = repo / "out"
    deadline = time.monotonic() + BUILD_DEADLINE
    try:
        while driver.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)
            if out.is_dir() and len(os.listdir(out)) >= n // 2:
                break
        if driver.poll() is not None:
            raise SystemExit(
                f"gitrun start ended (status {driver.returncode}) before half was done"
            )
        if time.monotonic() >= deadline:
            raise SystemExit(f"building {n} tasks took over {BUILD_DEADLINE:.0f} s")
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the whole group: the driver and its workers
        driver.wait()


def snakemake_dir(where: Path, n: int) -> Path:
    """The same fan-out for Snakemake, with the first half of the outputs present."""
    where.mkdir(parents=True)
    (where / "Snakefile").write_text(
        f"N = {n}\nrule all:\n    input: expand('out/t{{i:06d}}.json', i=range(N))\n"
        "rule one:\n    output: 'out/t{i}.json'\n    shell: 'echo {wildcards.i} > {output}'\n"
    )
    out = where / "out"
    out.mkdir()
    for i in range(n // 2):
        (out / f"t{i:06d}.json").write_text("{}")
    return where


def state(root: Path, n: int) -> Path:
    """The killed run of ``n`` tasks under ``root``, built unless it is there."""
    repo = root / f"status{n}"
    marker = repo / ".git" / "bench-state.json"
    if marker.is_file() and json.loads(marker.read_text()).get("tasks") == n:
        return repo
    if repo.exists():
        shutil.rmtree(repo)
    print(f"building a killed run of {n:,} tasks in {repo} ...", flush=True)
    start = time.perf_counter()
    build(make_repo(repo), n)
    marker.write_text(json.dumps({"tasks": n, "built": time.strftime("%Y-%m-%d %H:%M")}))
    print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)
    return repo


def find_snakemake(given: str | None) -> str | None:
    if given:
        return given
    beside = Path(sys.executable).parent / "snakemake"
    return str(beside) if beside.exists() else shutil.which("snakemake")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--state", type=Path, help="keep (and reuse) the built states here")
    parser.add_argument("--snakemake", help="the snakemake program (default: found on PATH)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    snakemake = find_snakemake(args.snakemake)
    table = Table("gitrun status on a killed run, about half done")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.state or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            measure_size(table, state(root, n), Path(tmp) / f"snakemake{n}", n, snakemake, args)
    if not snakemake:
        table.notes.append(
            "snakemake is not installed: its rows are skipped (pip install snakemake)"
        )
    table.print()
    return 0 if table.passed else 1


def measure_size(
    table: Table,
    repo: Path,
    peer_dir: Path,
    n: int,
    snakemake: str | None,
    args: argparse.Namespace,
) -> None:
    env = git_env()
    status = [*gitrun_argv(), "status", "bench"]
    cold: list[Sample] = []
    cold_one_cpu: list[Sample] = []
    warm: list[Sample] = []
    as_json: list[Sample] = []
    peer: list[Sample] = []
    # A cold status checks the definition in a child beside it when a second
    # CPU is there; on one CPU (taskset) it loads first, as before.
    taskset = shutil.which("taskset")
    one_cpu = [taskset, "-c", str(min(os.sched_getaffinity(0))), *status] if taskset else None
    peer_argv = [snakemake, "-n", "--cores", "1", "--quiet"] if snakemake and n <= 10_000 else None
    if peer_argv:
        snakemake_dir(peer_dir, n)
    for _ in range(args.repeat):
        for cache in CACHES:
            (repo / cache).unlink(missing_ok=True)
        cold.append(measure(status, repo, env))
        if one_cpu:
            for cache in CACHES:
                (repo / cache).unlink(missing_ok=True)
            cold_one_cpu.append(measure(one_cpu, repo, env))
        warm.append(measure(status, repo, env))
        as_json.append(measure([*status, "--json"], repo, env))
        if peer_argv:
            peer.append(measure(peer_argv, peer_dir, env))
    if peer_argv:  # as many counted runs as gitrun's, after one that sets Snakemake up
        peer.append(measure(peer_argv, peer_dir, env))
    size = f"{n:,} tasks"
    big = n >= 100_000
    shown = [("cold cache", cold), ("cold cache, one CPU", cold_one_cpu)]
    shown += [("warm cache", warm), ("--json, warm", as_json)]
    for label, samples in shown:
        if not samples:
            table.notes.append(f"  status, {size}, {label}: skipped (no taskset here)")
            continue
        median, peak = median_of(samples), peak_of(samples)
        row = Row(f"status, {size}, {label}", f"{median:.3f} s, {peak:.0f} MB")
        if big and label in ("cold cache", "warm cache"):
            row.target = "<= 3 s, <= 200 MB"
            row.ok = median <= 3.0 and peak <= 200
        if peer and label != "--json, warm":  # the one-CPU row's ratio is for scale
            counted = peer[1:]
            speedup = median_of(counted) / median
            row.peer = f"snakemake -n {median_of(counted):.2f} s"
            row.ratio = f"{speedup:.1f}x faster"
            if label == "cold cache":
                row.target = ">= 10x"
                row.ok = speedup >= 10
        table.add(row, samples)
        table.notes.append(f"  {row.case}: runs {walls(samples)} s")
    if peer:
        table.loads += [s.load for s in peer]
        table.notes.append(
            f"  snakemake -n, {size}: runs {walls(peer[1:])} s (first run, not counted: "
            f"{peer[0].wall:.2f} s)"
        )


if __name__ == "__main__":
    sys.exit(main())
