"""Time a second run where almost every task is up to date.

A run of N tasks (default 10,000) is run once and landed. Then, round by
round, a few inputs (default 10) are edited and the run is started again:
`gitrun check` is timed, then `gitrun start` to its end (it runs the changed
tasks only), then the round is landed (not timed). Target: check + start
<= 2 x check alone. start proves the run as check does (the same proof,
up-to-date tasks included) before it runs anything, so that ratio is at
least 2 by construction; the second row shows start alone against check:
what running the changed tasks and recognizing the rest cost beyond the
proof.

    python bench/rerun.py [--tasks 10000] [--changed 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
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
    walls,
    write_bench_run,
)

# Deterministic: the output is the input's first line as JSON.
WORKER = 'printf \'{"line": "%s"}\\n\' "$(head -n 1 "$GITRUN_INPUTS")" > "$GITRUN_OUTPUTS"'


def build(repo: Path, n: int) -> None:
    docs = repo / "docs"
    docs.mkdir()
    for i in range(n):
        (docs / f"ch{i:05d}.md").write_text(f"chapter {i}\n")
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:05d}", "inputs": [f"docs/ch{i:05d}.md"], "outputs": [f"out/t{i:05d}.json"]}
        for i in range(n)
    ]
    write_bench_run(
        repo, tasks, {"kind": "command", "preset": "shell", "shell": WORKER}, concurrency=8
    )
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "the run")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=git_env())


def _gitrun(repo: Path, *args: str) -> None:
    argv = [*gitrun_argv(), *args]
    proc = subprocess.run(argv, cwd=repo, env=git_env(), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"gitrun {' '.join(args)} exited {proc.returncode}: {proc.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = git_env()
    with tempfile.TemporaryDirectory() as scratch:
        repo = make_repo(Path(scratch) / "repo")
        build(repo, args.tasks)
        print(f"first run of {args.tasks:,} tasks (not timed)...", file=sys.stderr)
        _gitrun(repo, "start", "bench", "-q")
        _gitrun(repo, "land", "bench")
        checks: list[Sample] = []
        starts: list[Sample] = []
        step = max(1, args.tasks // args.changed)
        for number in range(args.rounds + 1):
            for i in range(0, args.tasks, step)[: args.changed]:
                path = repo / "docs" / f"ch{i:05d}.md"
                path.write_text(f"chapter {i}, round {number}\n")
            check = measure([*gitrun_argv(), "check", "bench"], repo, env)
            start = measure([*gitrun_argv(), "start", "bench", "-q"], repo, env)
            _gitrun(repo, "land", "bench")
            if number:  # the first round warms the caches; it is not counted
                checks.append(check)
                starts.append(start)
    check_s, start_s = median_of(checks), median_of(starts)
    ratio = (check_s + start_s) / check_s
    table = Table(
        f"gitrun start again: {args.tasks:,} tasks, {args.tasks - args.changed:,} up to date"
    )
    table.add(Row(f"check, {args.tasks:,} tasks", f"{check_s:.3f} s"), checks)
    table.add(
        Row(
            f"check + start to the end ({args.changed} run)",
            f"{check_s + start_s:.3f} s",
            ratio=f"{ratio:.2f}x check",
            target="<= 2x check",
            ok=ratio <= 2,
        ),
        starts,
    )
    alone = start_s / check_s
    table.add(
        Row(
            f"start to the end alone ({args.changed} run)",
            f"{start_s:.3f} s",
            ratio=f"{alone:.2f}x check",
        )
    )
    table.notes.append(f"check rounds: {walls(checks)} s; start rounds: {walls(starts)} s")
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
