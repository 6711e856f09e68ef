"""1,000 tasks whose worker writes a small JSON file, at concurrency 4.

gitrun (every output validated and committed on the run branch) against
GNU parallel (`parallel -j4 --joblog`) and `xargs -P4` running the same
1,000 shell commands, interleaved round by round; gitrun's load gate is set
beyond reach and parallel runs sh, so every tool sees the same machine. The
timed section is the command alone (the repository is set up before it).
Target: gitrun <= 0.5 x parallel's wall time.

    python bench/dispatch.py [--tasks 1000] [--repeat 5]

GNU parallel is optional: without it that row is skipped (install it with
`apt-get install parallel` or `brew install parallel`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, gitrun_argv, machine, make_repo, write_bench_run

SCRIPT = 'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'


def shell_command(task: str) -> str:
    return f'printf \'{{"task": "%s"}}\\n\' {task} > out/{task}.json'


def setup_gitrun(root: Path, n: int) -> Path:
    repo = make_repo(root)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:04d}", "outputs": [f"out/t{i:04d}.json"]} for i in range(n)
    ]
    write_bench_run(
        repo, tasks, {"kind": "command", "command": ["sh", "-c", SCRIPT]}, concurrency=4
    )
    return repo


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n = args.tasks
    commands = "".join(shell_command(f"t{i:04d}") + "\n" for i in range(n))
    # The same machine for every tool: gitrun's load gate (which holds starts
    # while the load average is high, as no peer does) is set beyond reach,
    # and GNU parallel runs its commands with sh, as gitrun's worker does.
    gitrun_env = {**git_env(), "GITRUN_MAX_LOAD": "1000000"}
    sh_env = {**os.environ, "SHELL": "/bin/sh"}
    samples: dict[str, list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**6))

        def fresh_dir() -> Path:
            path = Path(tmp) / f"d{next(counter)}"
            (path / "out").mkdir(parents=True)
            return path

        def run_gitrun() -> float:
            repo = setup_gitrun(Path(tmp) / f"g{next(counter)}", n)  # not timed

            def start() -> None:
                proc = subprocess.run(
                    [*gitrun_argv(), "start", "bench", "--quiet"],
                    cwd=repo,
                    capture_output=True,
                    env=gitrun_env,
                )
                if proc.returncode != 0:
                    raise SystemExit(f"gitrun failed: {proc.stderr.decode()[-2000:]}")

            took = timed(start)
            count = subprocess.run(
                ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "gitrun/bench", "out/"],
                capture_output=True,
                text=True,
            ).stdout.count("\n")
            if count != n:
                raise SystemExit(f"gitrun committed {count} of {n} outputs")
            return took

        def run_parallel() -> float:
            where = fresh_dir()
            argv = ["parallel", "-j4", "--joblog", str(where / "joblog")]
            return timed(
                lambda: subprocess.run(
                    argv,
                    input=commands.encode(),
                    cwd=where,
                    env=sh_env,
                    check=True,
                    capture_output=True,
                )
            )

        def run_xargs() -> float:
            where = fresh_dir()
            argv = ["xargs", "-d", "\n", "-P4", "-n1", "sh", "-c"]
            return timed(
                lambda: subprocess.run(
                    argv, input=commands.encode(), cwd=where, check=True, capture_output=True
                )
            )

        rows: list[tuple[str, Callable[[], float]]] = [(GITRUN, run_gitrun)]
        if shutil.which("parallel"):
            rows.append((PARALLEL, run_parallel))
        else:
            print("GNU parallel is not installed: skipped (apt-get install parallel)")
        rows.append(("xargs -P4", run_xargs))
        # Interleaved, the order turning each round: a burst of load elsewhere
        # falls on every tool alike.
        for round_ in range(args.repeat):
            turn = rows[round_ % len(rows) :] + rows[: round_ % len(rows)]
            for name, action in turn:
                loads.append(os.getloadavg()[0])
                samples.setdefault(name, []).append(action())
    results = {name: statistics.median(times) for name, times in samples.items()}
    for name, times in samples.items():
        spread = ", ".join(f"{t:.2f}" for t in times)
        print(f"{name:<38} median {results[name]:6.2f} s  (runs: {spread})")
    verdict = 0
    if PARALLEL in results:
        ratio = results[GITRUN] / results[PARALLEL]
        ok = ratio <= TARGET
        verdict = 0 if ok else 1
        print(f"gitrun / parallel: {ratio:.2f} (target <= {TARGET}) {'PASS' if ok else 'MISS'}")
    print(f"gitrun / xargs:    {results[GITRUN] / results['xargs -P4']:.2f}")
    print(
        f"{n} tasks, concurrency 4, {args.repeat} rounds; load average during the runs "
        f"{min(loads):.1f}-{max(loads):.1f}; machine: {machine()}"
    )
    return verdict


GITRUN = "gitrun start (validated + committed)"
PARALLEL = "parallel -j4 --joblog"
TARGET = 0.5


if __name__ == "__main__":
    sys.exit(main())
