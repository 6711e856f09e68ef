"""Time the pre-launch proof (`gitrun check`) at 1,000 and 10,000 tasks.

Each task owns one file in a shared directory; every 50th task also owns a
directory glob. Targets: 10,000 tasks in <= 2 s, and the 10,000-task time
<= 15 x the 1,000-task time (a pairwise comparison would be ~100 x).

    python bench/check.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, gitrun_argv, machine, make_repo, median_seconds, write_bench_run


def build_run(repo: Path, n: int) -> None:
    tasks = []
    for i in range(n):
        task: dict[str, object] = {
            "id": f"t{i:05d}",
            "inputs": [f"docs/ch{i:05d}.md"],
            "outputs": [f"out/t{i:05d}.json"],
            "owns": [f"out/t{i:05d}.json"],
        }
        if i % 50 == 0:
            task["owns"] = [f"out/t{i:05d}.json", f"logs/t{i:05d}/**", f"cache/t{i:05d}-*.bin"]
        tasks.append(task)
    write_bench_run(repo, tasks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1_000, 10_000):
            repo = make_repo(Path(tmp) / f"r{n}")
            build_run(repo, n)

            def run(repo: Path = repo) -> None:
                proc = subprocess.run(
                    [*gitrun_argv(), "check", "bench"], cwd=repo, capture_output=True, env=git_env()
                )
                if proc.returncode != 0:
                    raise SystemExit(f"gitrun check failed: {proc.stdout!r} {proc.stderr!r}")

            median, samples = median_seconds(run, args.repeat)
            results[n] = median
            shown = ", ".join(f"{s:.2f}" for s in samples)
            print(f"{n:>6} tasks: median {median:.3f} s  (runs: {shown})")
    ratio = results[10_000] / results[1_000]
    print(f"ratio 10k/1k: {ratio:.1f}  (target <= 15)")
    print(f"10k tasks:    {results[10_000]:.2f} s (target <= 2 s)")
    print(f"machine: {machine()}")
    ok = results[10_000] <= 2.0 and ratio <= 15
    print("PASS" if ok else "MISS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
