"""Start-up of the commands people run most, against `python -c pass`.

    python bench/startup.py [--repeat 30]

Runs the installed `gitrun` console script next to this interpreter (or
`python -m gitrun` when there is none) in a repository with a 10-task run,
interleaved with `python -c pass` round by round, and prints medians.
Targets: the write hook <= 3x (it runs before every write of every agent:
the one hot path) and `--version` <= 6x; `status RUN` and `--help` <= 25x
(a person's commands: a few tenths of a second are a fair price for one
command line, typer, and one load of the definition, checked every time)
(bench/hook.py measures it in every case).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, Table, git_env, make_repo, write_bench_run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    script = Path(sys.executable).parent / "gitrun"
    gitrun = [str(script)] if script.exists() else [sys.executable, "-m", "gitrun"]
    env = {k: v for k, v in git_env().items() if not k.startswith("GITRUN_")}
    hook_input = b'{"tool_name": "Write", "tool_input": {"file_path": "out/t03.json"}}'
    rows: dict[str, tuple[list[str], float | None, bytes]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], None, b""),
        "gitrun --version": ([*gitrun, "--version"], 6.0, b""),
        "gitrun --help": ([*gitrun, "--help"], 25.0, b""),
        "gitrun status RUN (10 tasks, ran)": ([*gitrun, "status", "bench"], 25.0, b""),
        "gitrun status RUN --json": ([*gitrun, "status", "bench", "--json"], 25.0, b""),
        "gitrun hook pre-write (owned)": ([*gitrun, "hook", "pre-write"], 3.0, hook_input),
    }
    samples: dict[str, list[float]] = {name: [] for name in rows}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "repo")
        tasks: list[dict[str, object]] = [
            {"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(10)
        ]
        # Driven to its end before timing, so status reads a branch and a
        # ledger as it does for a real run: seven tasks done, three failed.
        script = 'case "$GITRUN_TASK" in t0[0-6]) echo "{}" > "$GITRUN_OUTPUTS";; esac'
        executor = {"kind": "command", "command": ["sh", "-c", script]}
        write_bench_run(repo, tasks, executor, max_attempts=1, canary=0)
        subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
        subprocess.run(["git", "commit", "-qm", "define"], cwd=repo, env=env, check=True)
        started = subprocess.run(
            [*gitrun, "start", "bench"], cwd=repo, env=env, capture_output=True
        )
        if b"7 done" not in started.stdout + started.stderr:
            raise SystemExit(f"the run did not end as planned: {started.stderr.decode()}")
        hook_env = {**env, "GITRUN_RUN": "bench", "GITRUN_TASK": "t03"}
        for _ in range(args.repeat + 1):  # the first round warms caches and is dropped
            loads.append(os.getloadavg()[0])
            for name, (argv, _, stdin) in rows.items():
                start = time.perf_counter()
                proc = subprocess.run(
                    argv,
                    cwd=repo,
                    env=hook_env if stdin else env,
                    input=stdin,
                    capture_output=True,
                )
                took = time.perf_counter() - start
                if proc.returncode != 0:
                    raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr.decode()}")
                samples[name].append(took)
    base = statistics.median(samples["python -c pass"][1:])
    table = Table(f"start-up: median of {args.repeat} calls each, against python -c pass")
    table.loads = loads
    for name, (_, target, _) in rows.items():
        median = statistics.median(samples[name][1:])
        if target is None:
            table.rows.append(Row(name, f"{median * 1000:.1f} ms"))
            continue
        ratio = median / base
        table.rows.append(
            Row(
                name,
                f"{median * 1000:.1f} ms",
                f"{base * 1000:.1f} ms",
                f"{ratio:.1f}x",
                f"<= {target:g}x",
                ratio <= target,
            )
        )
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
