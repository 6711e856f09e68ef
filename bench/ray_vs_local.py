"""1,000 trivial tasks on a local Ray cluster against the local executor.

The same run (a worker that writes a small JSON file; every output validated
and committed) with ``[executor] kind = "command"`` and with ``kind = "ray"``
on a one-node cluster on 127.0.0.11 with as many CPUs as the concurrency,
in scratch mode (inputs shipped, outputs sent back) and with ``shared_fs``.
The cluster is started before the timed section and stopped after it. The
per-task overhead is what Ray adds to each attempt's slot:
(wall(ray) - wall(local)) x concurrency / tasks.

    python bench/ray_vs_local.py [--tasks 1000] [--concurrency 4] [--repeat 1]

Needs Ray (`pip install 'gitrun[ray]'`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

from _common import (
    Row,
    Table,
    git_env,
    gitrun_argv,
    make_repo,
    measure,
    median_of,
    walls,
    write_bench_run,
)

# The project's root on the path, for tests/raycluster.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
SCRIPT = 'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'


def setup(root: Path, n: int, executor: dict[str, object], concurrency: int) -> Path:
    repo = make_repo(root)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:04d}", "outputs": [f"out/t{i:04d}.json"]} for i in range(n)
    ]
    command = {"command": ["sh", "-c", SCRIPT]}
    # The load gate reads this machine, where the cluster runs too: set beyond reach.
    write_bench_run(repo, tasks, {**executor, **command}, concurrency=concurrency, max_load=1e6)
    return repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if importlib.util.find_spec("ray") is None:
        print("Ray is not installed: pip install 'gitrun[ray]'")
        return 1
    from tests.raycluster import LocalCluster

    n, width = args.tasks, args.concurrency
    env = git_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = LocalCluster(root / "cluster")
        try:
            cluster.start_head(num_cpus=width)
            cases = {
                "local executor": {"kind": "command"},
                "ray, scratch directories": {"kind": "ray", "address": cluster.address},
                "ray, shared_fs": {"kind": "ray", "address": cluster.address, "shared_fs": True},
            }
            results: dict[str, list] = {name: [] for name in cases}
            for round_ in range(args.repeat):
                for i, (name, executor) in enumerate(cases.items()):
                    repo = setup(root / f"repo-{round_}-{i}", n, executor, width)
                    argv = [*gitrun_argv(), "start", "bench", "--quiet"]
                    results[name].append(measure(argv, repo, env))
        finally:
            cluster.stop()
            cluster.clean_up()
    local = median_of(results["local executor"])
    table = Table(f"{n:,} trivial tasks at concurrency {width}, one Ray node of {width} CPUs")
    for name, samples in results.items():
        wall = median_of(samples)
        per_task = wall * width / n * 1000
        extra = (wall - local) * width / n * 1000
        shown = f"{wall:.1f} s, {n / wall:.0f} tasks/s, {per_task:.0f} ms a slot per task"
        if name != "local executor":
            shown += f", +{extra:.0f} ms per task"
        table.add(Row(name, shown, ratio=f"{wall / local:.2f} x local"), samples)
        table.notes.append(f"{name}: runs {walls(samples)} s")
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
