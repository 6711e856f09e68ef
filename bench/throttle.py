"""A rate-limited API with a hidden ceiling: gitrun against GNU parallel.

The simulated API (`bench/simapi.py`, a process a call) has C slots (lock
files); a worker that finds all C taken prints what Claude Code prints when
the server throttles (`API Error: Server is temporarily limiting requests
(not your usage limit) · Rate limited`) and exits 1 at once; otherwise it
holds its slot for T seconds and writes its output. N tasks; gitrun's
concurrency K (above C: it must find the ceiling).

Per case (C, K, T, N), interleaved round by round, medians of the rounds:

- gitrun: wall time against the ideal (ceil(N / C) x T), throttled attempts
  (from the ledger) against N, outputs made. Targets: wall <= 1.15 x ideal,
  throttled <= 10% of N, every output made.
- the oracle, `parallel -jC` (it knows the ceiling), for scale;
- `parallel -jK --retries 20`, which retries at once: its retries storm
  while the ceiling's slots are busy, and the outputs it never made are shown.

    python bench/throttle.py [--repeat 3] [--case C,K,T,N ...]

A ceiling that moves, and one per model (``--scenario``; each API's time is
taken as the API sees it, from the first call on a model to its last output,
against an oracle that knows the ceiling at each instant and never waits):

- ``moving``: N = 100 tasks of 1 s on one model, K = 16, the ceiling 8 for
  the first third of the oracle's time, then 4, then 12. Targets: <= 1.10x
  the oracle, throttled <= 5% of N.
- ``stages``: two stages of 60 tasks of 1 s on two models whose ceilings are
  3 and 6, K = 16. Target: each model within 1.10x its own oracle.
- ``fixed``: ceilings 3, 5 and 8 (N = 40, 50, 60), K = 16. Targets: <= 1.05x
  the oracle, throttled <= 3% of N.

``--warm``: each round is a second run, started from the buckets a first
run of the same case left (``.git/gitrun/buckets.json``,
gitrun.engine.memory), as a user's next run in the same repository is; the
first run is not counted.

Without GNU parallel the peer columns stay empty (`apt-get install parallel`).
"""

from __future__ import annotations

import argparse
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

# The simulated API, one call a process (it starts in a third of this script's time).
SIMAPI = Path(__file__).resolve().parent / "simapi.py"

# C in {3, 5, 8}, K in {2C, 16}, T = 1 s, N from 40 to 60 (T = 3 s with --case).
CASES = [(3, 6, 1.0, 40), (3, 16, 1.0, 40), (5, 10, 1.0, 50), (5, 16, 1.0, 50)]
CASES += [(8, 16, 1.0, 60)]
TARGET_WALL = 1.15  # x ideal
TARGET_THROTTLED = 0.10  # of N


def oracle_time(phases: list[list[float]], seconds: float, n: int) -> float:
    """The time an oracle that knows the ceiling at each instant takes: it
    starts as many calls as the ceiling allows the moment it allows them."""
    ends: list[float] = []
    now, left = 0.0, n
    while left or ends:
        ends = [e for e in ends if e > now]
        ceiling = int([c for at, c in phases if now >= at][-1])
        go = max(0, min(left, ceiling - len(ends)))
        ends += [now + seconds] * go
        left -= go
        if not left:
            return max(ends) if ends else now
        later = [at for at, _ in phases if at > now]
        now = min([*ends, *later])
    return now


@dataclass(frozen=True)
class Seen:
    """What one model's API saw of a run."""

    took: float  # from its first call to its last output
    throttled: int
    made: int


def api_seen(api: Path, model: str) -> Seen:
    lines = [line.split() for line in (api / f"calls-{model}.log").read_text().splitlines()]
    calls = [float(t) for kind, t in lines if kind in ("start", "throttled")]
    outs = [float(t) for kind, t in lines if kind == "out"]
    throttled = sum(1 for kind, _ in lines if kind == "throttled")
    return Seen(max(outs) - min(calls) if outs else math.inf, throttled, len(outs))


def run_models(
    root: Path,
    stages: list[tuple[str, list[list[float]], int]],
    k: int,
    t: float,
    learnt: Path | None = None,
) -> dict[str, Seen]:
    """One gitrun run of stages in order, each of its own tasks on its own
    model (``stages``: model, its ceiling's schedule, tasks). ``learnt``: the
    buckets an earlier run of the same repository left
    (``.git/gitrun/buckets.json``), which this run starts from."""
    root.mkdir(parents=True, exist_ok=True)
    repo = make_repo(root / "repo")
    if learnt is not None and learnt.is_file():
        (repo / ".git/gitrun").mkdir(parents=True, exist_ok=True)
        shutil.copy(learnt, repo / ".git/gitrun/buckets.json")
    api = root / "api"
    api.mkdir()
    tasks: list[dict[str, object]] = []
    models: dict[str, str] = {}
    for number, (model, phases, n) in enumerate(stages):
        (api / f"schedule-{model}").write_text("".join(f"{at!r} {c}\n" for at, c in phases))
        stage = f"s{number}"
        models[stage] = model
        tasks += [
            {"id": f"{stage}t{i:03d}", "stage": stage, "outputs": [f"out/{stage}t{i:03d}.json"]}
            for i in range(1, n + 1)
        ]
    command = [sys.executable, str(SIMAPI), "--api", str(api), "{model}", str(t), "{outputs}"]
    # The simulated API is shared state in a temporary directory: no private /tmp.
    executor = {"kind": "command", "command": command, "isolation": "none"}
    run_dir = write_bench_run(repo, tasks, executor, concurrency=k)
    packet = (run_dir / "packet.toml").read_text()
    packet = packet.replace('default = "bench-model"', f'default = "{stages[0][0]}"')
    packet += "\n[model.stages]\n" + "".join(f'{s} = "{m}"\n' for s, m in models.items())
    packet += "".join(f'\n[[stages]]\nname = "{s}"\n' for s in models)
    (run_dir / "packet.toml").write_text(packet)
    env = {**git_env(), "GITRUN_MAX_LOAD": "1000000"}
    done = subprocess.run(
        [*gitrun_argv(), "start", "bench"], cwd=repo, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    return {model: api_seen(api, model) for model, _, _ in stages}


MOVING = [[0.0, 8], [13 / 3, 4], [26 / 3, 12]]  # thirds of the oracle's 13 s
SCENARIOS: dict[str, list[tuple[str, list[tuple[str, list[list[float]], int]], float, float]]] = {
    # name: [(case, stages, target wall, target throttled share)]
    "moving": [("8, 4, 12", [("m", MOVING, 100)], 1.10, 0.05)],
    "stages": [("3 then 6", [("a", [[0, 3]], 60), ("b", [[0, 6]], 60)], 1.10, 1.0)],
    "fixed": [(f"{c}", [("m", [[0, c]], n)], 1.05, 0.03) for c, n in ((3, 40), (5, 50), (8, 60))],
}


def run_scenario(name: str, repeat: int, warm: bool = False) -> bool:
    """Each case of scenario ``name`` ``repeat`` times; its table; whether its
    targets hold. ``warm``: each round is a second run, started from the
    buckets a first run of the same case left (the first is not counted)."""
    ok = True
    second = ", each a second run (--warm)" if warm else ""
    print(f"throttle --scenario {name}: medians of {repeat} rounds{second}, K = 16, T = 1 s")
    print("| case | model | API time | oracle | ratio | throttled | outputs | target |")
    print("|---|---|---|---|---|---|---|---|")
    for case, stages, wall_target, share in SCENARIOS[name]:
        rounds = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="gitrun-throttle-") as tmp:
                learnt = None
                if warm:
                    run_models(Path(tmp) / "first", stages, 16, 1.0)
                    learnt = Path(tmp) / "first/repo/.git/gitrun/buckets.json"
                rounds.append(run_models(Path(tmp) / "round", stages, 16, 1.0, learnt))
        for model, phases, n in stages:
            took = statistics.median(r[model].took for r in rounds)
            throttled = statistics.median(r[model].throttled for r in rounds)
            made = min(r[model].made for r in rounds)
            oracle = oracle_time(phases, 1.0, n)
            passed = took <= wall_target * oracle and throttled <= share * n and made == n
            ok = ok and passed
            print(
                f"| {case} | {model} | {took:.1f} s | {oracle:.1f} s | {took / oracle:.2f}x | "
                f"{throttled:g} ({throttled / n:.0%}) | {made}/{n} | "
                f"{'PASS' if passed else 'MISS'} |",
                flush=True,
            )
    return ok


def _worker_argv(slots: Path, ceiling: int, seconds: float, output: str) -> list[str]:
    return [sys.executable, str(SIMAPI), "--worker", str(slots), str(ceiling), str(seconds), output]


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
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="with --scenario: each round a second run, from the buckets a first one left",
    )
    args = parser.parse_args()
    if args.scenario:
        passed = [run_scenario(name, args.repeat, args.warm) for name in args.scenario]
        print(f"machine: {machine()}; load average (1 min) at the end {os.getloadavg()[0]:.2f}")
        return 0 if all(passed) else 1
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
