"""Time the pre-launch proof (`gitrun check`) at 1,000, 10,000 and 100,000 tasks.

Three shapes of run:
- *files*: each task owns one file in a shared directory; every 50th task
  also owns a directory glob and a file glob (`cache/tNNNNN-*.bin`: 2,000
  globs in one directory at 100,000 tasks);
- *shared globs*: every task owns its file in one directory, and every tenth
  also a glob there (`work/tNNNNN-*.part`: 10,000 globs beside 100,000 files),
  which a pairwise comparison makes quadratic;
- *all globs*: the same with a glob for every task (100,000 globs beside
  100,000 files), a stress beyond the targets' "thousands of globs".

Each size is measured round by round, shapes and sizes in turn; the first
round (the task table parsed, not yet cached) is shown apart and not counted.
Times are medians; memory is the peak resident size of the command, taken by a
small helper process. Targets: 100,000 tasks <= 5 s and <= 250 MB, and the
100,000-task time <= 11 x the 10,000-task time (a pairwise comparison would be
~100 x).

    python bench/check.py [--sizes 1000,10000,100000] [--repeat 5] [--shapes files,...]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
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


def build_run(repo: Path, n: int) -> None:
    """The *files* shape."""
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


def build_shared_globs(repo: Path, n: int, every: int = 10) -> None:
    """The *shared globs* shape (``every`` 1: *all globs*)."""
    tasks: list[dict[str, object]] = []
    for i in range(n):
        owns = [f"work/t{i:05d}.json"]
        if i % every == 0:
            owns.append(f"work/t{i:05d}-*.part")
        tasks.append(
            {
                "id": f"t{i:05d}",
                "inputs": [f"docs/ch{i:05d}.md"],
                "outputs": [f"work/t{i:05d}.json"],
                "owns": owns,
            }
        )
    write_bench_run(repo, tasks)


def build_all_globs(repo: Path, n: int) -> None:
    build_shared_globs(repo, n, every=1)


def commit_inputs(repo: Path, n: int) -> None:
    """The tasks' inputs, ``docs/chNNNNN.md``, committed: `check` proves each
    exists in the work tree or at the base commit."""
    docs = repo / "docs"
    docs.mkdir()
    for i in range(n):
        (docs / f"ch{i:05d}.md").write_text(f"chapter {i}\n")
    env = git_env()
    subprocess.run(["git", "-C", str(repo), "add", "docs"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "inputs"], check=True, env=env)


SHAPES = {"files": build_run, "shared globs": build_shared_globs, "all globs": build_all_globs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    shapes = {name: SHAPES[name] for name in args.shapes.split(",")}
    env = git_env()
    table = Table("gitrun check: the pre-launch proof")
    with tempfile.TemporaryDirectory() as tmp:
        repos = {}
        for shape, build in shapes.items():
            for n in sizes:
                repo = make_repo(Path(tmp) / f"{shape.replace(' ', '-')}{n}")
                build(repo, n)
                commit_inputs(repo, n)
                repos[shape, n] = repo
        first: dict[tuple[str, int], Sample] = {}
        samples: dict[tuple[str, int], list[Sample]] = {key: [] for key in repos}
        for round_ in range(1 + args.repeat):
            for key, repo in repos.items():
                sample = measure([*gitrun_argv(), "check", "bench"], repo, env)
                if round_ == 0:
                    first[key] = sample
                else:
                    samples[key].append(sample)
    for shape in shapes:
        for n in sizes:
            key = (shape, n)
            median, peak = median_of(samples[key]), peak_of(samples[key])
            row = Row(f"check, {shape}, {n:,} tasks", f"{median:.3f} s, {peak:.0f} MB")
            if n >= 100_000:
                row.target = "<= 5 s, <= 250 MB"
                row.ok = median <= 5.0 and peak <= 250
            table.add(row, samples[key], [first[key]])
            table.notes.append(
                f"  {row.case}: runs {walls(samples[key])} s (first, cache cold, not counted: "
                f"{first[key].wall:.2f} s)"
            )
        for small, big in itertools.pairwise(sizes):
            ratio = median_of(samples[shape, big]) / median_of(samples[shape, small])
            row = Row(
                f"check, {shape}, {big:,} / {small:,} tasks",
                f"{median_of(samples[shape, big]):.3f} s",
                f"{small:,} tasks: {median_of(samples[shape, small]):.3f} s",
                f"{ratio:.1f}x",
            )
            if big == 10 * small and big >= 100_000:
                row.target, row.ok = "<= 11x", ratio <= 11
            table.rows.append(row)
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
