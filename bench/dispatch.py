"""1,000 tasks whose worker writes a small JSON file, at concurrency 4.

gitrun (every output validated and committed on the run branch) against
GNU parallel (`parallel -j4 --joblog`) and `xargs -P4` running the same
1,000 shell commands. Target: gitrun <= 1.0 x parallel's wall time.

    python bench/dispatch.py [--tasks 1000] [--repeat 5]

GNU parallel is optional: without it that row is skipped (install it with
`apt-get install parallel` or `brew install parallel`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, gitrun_argv, machine, make_repo, median_seconds, write_bench_run

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n = args.tasks
    commands = "".join(shell_command(f"t{i:04d}") + "\n" for i in range(n))
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**6))

        def fresh_dir() -> Path:
            path = Path(tmp) / f"d{next(counter)}"
            (path / "out").mkdir(parents=True)
            return path

        def run_gitrun() -> None:
            repo = setup_gitrun(Path(tmp) / f"g{next(counter)}", n)
            proc = subprocess.run(
                [*gitrun_argv(), "start", "bench"],
                cwd=repo,
                capture_output=True,
                env=git_env(),
            )
            if proc.returncode != 0:
                raise SystemExit(f"gitrun failed: {proc.stderr.decode()[-2000:]}")
            count = subprocess.run(
                ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "gitrun/bench", "out/"],
                capture_output=True,
                text=True,
            ).stdout.count("\n")
            if count != n:
                raise SystemExit(f"gitrun committed {count} of {n} outputs")

        def run_parallel() -> None:
            where = fresh_dir()
            subprocess.run(
                ["parallel", "-j4", "--joblog", str(where / "joblog")],
                input=commands.encode(),
                cwd=where,
                check=True,
                capture_output=True,
            )

        def run_xargs() -> None:
            where = fresh_dir()
            subprocess.run(
                ["xargs", "-d", "\n", "-P4", "-n1", "sh", "-c"],
                input=commands.encode(),
                cwd=where,
                check=True,
                capture_output=True,
            )

        rows = [("gitrun start (validated + committed)", run_gitrun)]
        if shutil.which("parallel"):
            rows.append(("parallel -j4 --joblog", run_parallel))
        else:
            print("GNU parallel is not installed: skipped (apt-get install parallel)")
        rows.append(("xargs -P4", run_xargs))
        for name, action in rows:
            median, samples = median_seconds(action, args.repeat)
            results[name] = median
            spread = ", ".join(f"{s:.2f}" for s in samples)
            print(f"{name:<38} median {median:6.2f} s  (runs: {spread})")
    gitrun_time = results["gitrun start (validated + committed)"]
    if "parallel -j4 --joblog" in results:
        ratio = gitrun_time / results["parallel -j4 --joblog"]
        print(f"gitrun / parallel: {ratio:.2f} (target <= 1.0)")
    print(f"gitrun / xargs:    {gitrun_time / results['xargs -P4']:.2f}")
    print(f"{n} tasks, concurrency 4; machine: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
