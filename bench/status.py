"""`gitrun status` on big runs: 10,000 (and optionally 100,000) tasks, half done.

The run's branch is built directly with git plumbing (a definition commit,
then one commit holding half of the outputs and a ledger line for each),
as gitrun itself leaves it. Targets: 10k tasks <= 1 s; 100k <= 10 s and
<= 300 MB peak memory. With Snakemake installed, `snakemake -n` on the same
fan-out is timed beside it.

    python bench/status.py [--sizes 10000,100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, gitrun_argv, machine, make_repo, write_bench_run


def build(repo: Path, n: int) -> None:
    env = git_env()
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:06d}", "outputs": [f"out/t{i:06d}.json"]} for i in range(n)
    ]
    run_dir = write_bench_run(repo, tasks)
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, env=env
    ).stdout.strip()
    index = repo / ".git/bench-index"
    genv = dict(env, GIT_INDEX_FILE=str(index))

    def git(*args: str, **kw: object) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            env=genv,
            check=True,
            **kw,
        ).stdout.strip()  # type: ignore[call-overload]

    git("read-tree", head)
    git("add", ".gitrun")
    tree = git("write-tree")
    first = git(
        "commit-tree",
        tree,
        "-p",
        head,
        "-m",
        f"gitrun(bench): start run\n\nGitrun-Run: bench\nGitrun-Base: {head}",
    )
    out = repo / "out"
    out.mkdir()
    with (run_dir / "ledger.jsonl").open("w") as ledger:
        for i in range(n // 2):
            (out / f"t{i:06d}.json").write_text(json.dumps({"i": i}))
            ledger.write(json.dumps({"task": f"t{i:06d}", "attempt": 1, "outcome": "valid"}) + "\n")
    git("add", "out", ".gitrun")
    tree = git("write-tree")
    second = git(
        "commit-tree", tree, "-p", first, "-m", "gitrun(bench): landed\n\nGitrun-Run: bench"
    )
    git("update-ref", "refs/heads/gitrun/bench", second)
    index.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    beside = Path(sys.executable).parent / "snakemake"
    snakemake = str(beside) if beside.exists() else shutil.which("snakemake")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            repo = make_repo(Path(tmp) / f"r{n}")
            build(repo, n)
            times, peaks = [], []
            for _ in range(args.repeat):
                wall, peak = measure(repo)
                times.append(wall)
                peaks.append(peak)
            times.sort()
            median = times[len(times) // 2]
            print(
                f"{n:>7} tasks ({n // 2} done): status median {median:.3f} s, peak {max(peaks):.0f} MB  (runs: {', '.join(f'{t:.2f}' for t in times)})"
            )
            if snakemake:
                peer = snakemake_dry_run(snakemake, Path(tmp) / f"s{n}", n)
                print(
                    f"{'':>7} snakemake -n on the same fan-out: {peer:.2f} s ({peer / median:.1f}x gitrun status)"
                )
            else:
                print("        snakemake is not installed: skipped (pip install snakemake)")
    return 0


def measure(repo: Path) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MB) of one status call."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*gitrun_argv(), "status", "bench", "--json"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=git_env(),
    )
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"gitrun status failed: {err.decode()[-2000:]}")
    json.loads(out)
    return elapsed, usage.ru_maxrss / 1024


def snakemake_dry_run(snakemake: str, where: Path, n: int) -> float:
    where.mkdir(parents=True)
    (where / "Snakefile").write_text(
        f"N = {n}\nrule all:\n    input: expand('out/t{{i:06d}}.json', i=range(N))\n"
        "rule one:\n    output: 'out/t{i}.json'\n    shell: 'echo {wildcards.i} > {output}'\n"
    )
    out = where / "out"
    out.mkdir()
    for i in range(n // 2):
        (out / f"t{i:06d}.json").write_text("{}")
    start = time.perf_counter()
    subprocess.run(
        [snakemake, "-n", "--cores", "1", "--quiet"], cwd=where, capture_output=True, check=True
    )
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
