"""Two source trees of gitrun side by side: the other bench numbers, alternating.

A change's cost is only visible against the code before it, measured on the
same machine at the same moment: this runs each measurement with tree A, then
tree B, then A again, and so on (a noisy machine slows both alike), and
prints the medians and B / A.

    python bench/compare.py --a OLD_TREE --b NEW_TREE [--rounds 7] [--only status,check]

A tree is a directory holding the ``gitrun`` package (a checkout, or
``git archive <commit> | tar -x -C DIR``); it is put first on PYTHONPATH.
Measured: ``--version`` and ``--help`` (bench/startup.py), ``status`` at
10,000 tasks (bench/status.py), ``check`` at 1,000 and 10,000 tasks
(bench/check.py), and ``start`` of 1,000 tasks at concurrency 4
(bench/dispatch.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check
import dispatch
import status
from _common import git_env, machine, make_repo

Measure = Callable[[dict[str, str]], float]


def timed(argv: list[str], cwd: Path | None, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.decode()[-2000:]}")
    return elapsed


def measurements(tmp: Path, only: set[str]) -> dict[str, Measure]:
    gitrun = [sys.executable, "-m", "gitrun"]
    found: dict[str, Measure] = {}
    if "startup" in only:
        found["--version"] = lambda env: timed([*gitrun, "--version"], None, env)
        found["--help"] = lambda env: timed([*gitrun, "--help"], None, env)
    if "status" in only:
        big = make_repo(tmp / "status10k")
        status.build(big, 10_000)
        found["status 10k"] = lambda env: timed([*gitrun, "status", "bench", "--json"], big, env)
    if "check" in only:
        for n in (1_000, 10_000):
            repo = make_repo(tmp / f"check{n}")
            check.build_run(repo, n)
            found[f"check {n // 1000}k"] = lambda env, repo=repo: timed(
                [*gitrun, "check", "bench"], repo, env
            )
    if "dispatch" in only:
        counter = iter(range(10**6))

        def start(env: dict[str, str]) -> float:
            repo = dispatch.setup_gitrun(tmp / f"dispatch{next(counter)}", 1000)
            return timed([*gitrun, "start", "bench"], repo, env)

        found["start 1000"] = start
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--a", required=True, type=Path, help="the tree before")
    parser.add_argument("--b", required=True, type=Path, help="the tree after")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="startup,status,check,dispatch")
    args = parser.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    for tree in trees.values():
        if not (tree / "gitrun" / "__init__.py").is_file():
            raise SystemExit(f"{tree} holds no gitrun package")
    envs = {name: dict(git_env(), PYTHONPATH=str(tree)) for name, tree in trees.items()}
    print(f"A: {trees['A']}\nB: {trees['B']}\nmachine: {machine()}, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, measure in measurements(Path(tmp), set(args.only.split(","))).items():
            samples: dict[str, list[float]] = {"A": [], "B": []}
            for _ in range(args.rounds):
                for side in ("A", "B"):
                    samples[side].append(measure(envs[side]))
            a, b = (statistics.median(samples[side]) for side in ("A", "B"))
            print(
                f"{name:<12} A {a * 1000:8.1f} ms   B {b * 1000:8.1f} ms   B/A {b / a:5.3f}"
                f"   (A: {', '.join(f'{s * 1000:.0f}' for s in samples['A'])};"
                f" B: {', '.join(f'{s * 1000:.0f}' for s in samples['B'])})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
