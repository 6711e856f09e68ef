"""A rate-limited API with a hidden ceiling: gitrun against GNU parallel.

The simulated API has C slots (lock files); a worker that finds all C taken
prints what Claude Code prints when the server throttles (`API Error: Server
is temporarily limiting requests (not your usage limit) · Rate limited`) and
exits 1 at once; otherwise it holds its slot for T seconds and writes its
output. N tasks; gitrun's concurrency K (above C: it must find the ceiling).

Per case (C, K, T, N), interleaved round by round, medians of the rounds:

- gitrun: wall time against the ideal (ceil(N / C) x T), throttled attempts
  (from the ledger) against N, outputs made. Targets: wall <= 1.15 x ideal,
  throttled <= 10% of N, every output made.
- the oracle, `parallel -jC` (it knows the ceiling), for scale;
- `parallel -jK --retries 20`, which retries at once: its retries storm
  while the ceiling's slots are busy, and the outputs it never made are shown.

    python bench/throttle.py [--repeat 3] [--case C,K,T,N ...]

Without GNU parallel the peer columns stay empty (`apt-get install parallel`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import git_env, gitrun_argv, machine, make_repo, write_bench_run

THROTTLED = (
    "API Error: Server is temporarily limiting requests (not your usage limit) · Rate limited"
)
# C in {3, 5, 8}, K in {2C, 16}, T = 1 s, N from 40 to 60 (T = 3 s with --case).
CASES = [(3, 6, 1.0, 40), (3, 16, 1.0, 40), (5, 10, 1.0, 50), (5, 16, 1.0, 50)]
CASES += [(8, 16, 1.0, 60)]
TARGET_WALL = 1.15  # x ideal
TARGET_THROTTLED = 0.10  # of N


def worker(slots: Path, ceiling: int, seconds: float, output: Path) -> int:
    """One call of the simulated API: a free slot, or a throttle at once."""
    slots.mkdir(parents=True, exist_ok=True)
    for number in range(ceiling):
        handle = open(slots / f"slot{number}", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        time.sleep(seconds)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps({"task": output.stem}) + "\n")
        return 0
    print(THROTTLED, file=sys.stderr)
    return 1


def _worker_argv(slots: Path, ceiling: int, seconds: float, output: str) -> list[str]:
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--worker", str(slots), str(ceiling), str(seconds), output]


@dataclass(frozen=True)
class Took:
    wall: float
    throttled: int  # attempts the API throttled
    made: int  # outputs made


def run_gitrun(root: Path, c: int, k: int, t: float, n: int) -> Took:
    repo = make_repo(root / "repo")
    slots = root / "slots"
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(1, n + 1)
    ]
    command = _worker_argv(slots, c, t, "{outputs}")
    write_bench_run(repo, tasks, {"kind": "command", "command": command}, concurrency=k)
    env = {**git_env(), "GITRUN_MAX_LOAD": "1000000"}
    began = time.perf_counter()
    done = subprocess.run(
        [*gitrun_argv(), "start", "bench"], cwd=repo, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    throttled = 0
    for ledger in (repo / ".gitrun/runs/bench/ledger").rglob("*.jsonl"):
        for line in ledger.read_text().splitlines():
            if '"outcome": "throttled"' in line or '"outcome":"throttled"' in line:
                throttled += 1
    made = len(list((repo / "out").glob("*.json")))
    return Took(wall, throttled, made)


def run_parallel(root: Path, c: int, jobs: int, t: float, n: int, retries: int) -> Took:
    slots = root / "slots"
    out = root / "out"
    log = root / "joblog"
    argv = ["parallel", f"-j{jobs}", "--joblog", str(log)]
    if retries:
        argv += ["--retries", str(retries)]
    worker_cmd = " ".join(_worker_argv(slots, c, t, str(out) + "/{}.json"))
    names = "\n".join(f"t{i:02d}" for i in range(1, n + 1))
    began = time.perf_counter()
    subprocess.run([*argv, worker_cmd], input=names, text=True, capture_output=True)
    wall = time.perf_counter() - began
    lines = log.read_text().splitlines()[1:] if log.exists() else []
    throttled = sum(1 for line in lines if line.split("\t")[6:7] == ["1"])
    return Took(wall, throttled, len(list(out.glob("*.json"))) if out.exists() else 0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", action="append", help="C,K,T,N (repeatable)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        slots, ceiling, seconds, output = args.worker
        return worker(Path(slots), int(ceiling), float(seconds), Path(output))
    cases = CASES
    if args.case:
        cases = []
        for text in args.case:
            c, k, t, n = text.split(",")
            cases.append((int(c), int(k), float(t), int(n)))
    has_parallel = shutil.which("parallel") is not None
    rows = []
    ok = True
    for c, k, t, n in cases:
        got: dict[str, list[Took]] = {"gitrun": [], "oracle": [], "storm": []}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="gitrun-throttle-") as tmp:
                root = Path(tmp)
                (root / "g").mkdir()
                got["gitrun"].append(run_gitrun(root / "g", c, k, t, n))
                if has_parallel:
                    (root / "o").mkdir()
                    got["oracle"].append(run_parallel(root / "o", c, c, t, n, 0))
                    (root / "s").mkdir()
                    got["storm"].append(run_parallel(root / "s", c, k, t, n, 20))
        ideal = math.ceil(n / c) * t
        g = got["gitrun"]
        wall = statistics.median(x.wall for x in g)
        throttled = statistics.median(x.throttled for x in g)
        made = min(x.made for x in g)
        passed = wall <= TARGET_WALL * ideal and throttled <= TARGET_THROTTLED * n and made == n
        ok = ok and passed
        oracle = (
            f"{statistics.median(x.wall for x in got['oracle']):.1f} s" if got["oracle"] else "—"
        )
        storm = "—"
        if got["storm"]:
            s = got["storm"]
            storm = f"{statistics.median(x.wall for x in s):.1f} s, {n - min(x.made for x in s)} of {n} never made"
        rows.append(
            f"| {n}, {t:g} s, {c}, {k} | {wall:.1f} s ({wall / ideal:.2f}x ideal) | "
            f"{throttled:g} ({throttled / n:.0%}) | {made}/{n} | {oracle} | {storm} | "
            f"{'PASS' if passed else 'MISS'} |"
        )
        print(rows[-1], flush=True)
    print()
    print(
        "throttle: gitrun against a simulated API with a hidden ceiling C (medians of "
        f"{args.repeat} interleaved rounds; ideal = ceil(N/C) x T)"
    )
    print(
        "| N, T, C, K | gitrun wall | throttled attempts | outputs | oracle `parallel -jC` | "
        "`parallel -jK --retries 20` | target |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print(
        f"targets: wall <= {TARGET_WALL}x ideal, throttled <= {TARGET_THROTTLED:.0%} of N, every output made"
    )
    load = os.getloadavg()[0]
    print(f"machine: {machine()}; load average (1 min) at the end {load:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
