"""The governor against the simulated API of `bench/throttle.py`, as a
discrete-event model: seconds of work in milliseconds of time.

    python bench/governor_model.py [--seeds 7] [--start 0.01] [--call 0.015]
                                   [--seen 0.02] [--refused 0.005] [--warm]

The real :class:`gitrun.engine.governor.Governor` decides; the model stands
in for the driver's loop (it asks for slots whenever an attempt ends, the
governor's wake comes, or half a second passes, as the driver's TICK) and
for the processes: a start costs ``--start`` s of the loop, its call
reaches the API ``--call`` s later, a refused call is seen ``--refused`` s
after it, and a taken one holds its slot T = 1 s and is seen ended
``--seen`` s after its slot frees (the worker writes, exits, is reaped).
The scenarios and the oracle are the bench's. With every cost 0 it shows
what the rule alone loses (the canary's lone task and the climb); with the
defaults it lands within a few percent of `bench/throttle.py` on a quiet
machine, so a change to the rule can be tried here in seconds first.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gitrun.definition.schema import Limits
from gitrun.engine import governor as governor_module
from gitrun.engine.governor import EndFacts, Governor
from gitrun.store.events import Outcome

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throttle import MOVING, oracle_time

SCENARIOS = {
    "moving": (MOVING, 100),
    "fixed 3": ([[0.0, 3]], 40),
    "fixed 5": ([[0.0, 5]], 50),
    "fixed 8": ([[0.0, 8]], 60),
    "stage at 3": ([[0.0, 3]], 60),
    "stage at 6": ([[0.0, 6]], 60),
}
TICK = 0.5  # the driver looks again at least this often


def run(
    phases: list[list[float]],
    n: int,
    seed: int,
    start: float,
    call: float,
    seen: float,
    refused: float,
    k: int = 16,
    learnt: tuple[int, int] | None = None,
) -> tuple[float, int, tuple[int, int]]:
    """The API's time (first call to last output), the calls it refused, and
    the bucket's concurrency and ceiling at the end. ``learnt``: the bucket
    starts there, as a run after one that learnt it does (gitrun.engine.memory)."""
    rng = random.Random(seed)
    tasks = [f"t{i:03d}" for i in range(n)]
    gov = Governor(Limits(concurrency=k), n, 0, tasks[:1], rng=random.Random(seed))
    if learnt is not None:
        gov.bucket().remembered(*learnt, "as a first run left it")
    pending, running, held = list(tasks), 0, []
    events: list[tuple[float, int, str, str, float, float]] = []
    now, first, last_out, throttled, done, number = 0.0, -1.0, 0.0, 0, 0, 0

    def takes(at: float) -> bool:
        nonlocal first
        if first < 0:
            first = at
        ceiling = [c for since, c in phases if at - first >= since][-1]
        held[:] = [end for end in held if end > at]
        return len(held) < ceiling

    while done < n:
        free = gov.slots(running, now, None)
        for task in [t for t in pending if gov.eligible(t)][:free]:
            pending.remove(task)
            gov.started(task, now)
            at = now + call * (0.8 + 0.4 * rng.random())
            if takes(at):
                held.append(at + 1.0)
                heapq.heappush(events, (at + 1.0 + seen, number, task, "valid", now, at + 1.0))
            else:
                heapq.heappush(events, (at + refused, number, task, "throttled", now, 0.0))
            number += 1
            running += 1
            now += start
        wake = gov.next_wake(now)
        later = [w for w in (wake, now + TICK) if w is not None and w > now]
        if events:
            later.append(max(events[0][0], now))
        now = min(later)
        while events and events[0][0] <= now:
            end, _, task, kind, began, out = heapq.heappop(events)
            running -= 1
            if kind == "valid":
                done += 1
                last_out = max(last_out, out)
                gov.ended(
                    EndFacts(task, Outcome.VALID, end - began, 0, None, False, "", began), end
                )
            else:
                throttled += 1
                pending.insert(0, task)
                facts = EndFacts(task, Outcome.THROTTLED, end - began, 1, None, True, "", began)
                gov.ended(facts, end)
    bucket = gov.bucket()
    return last_out - first, throttled, (bucket.concurrency, bucket.ceiling)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--start", type=float, default=0.01)
    parser.add_argument("--call", type=float, default=0.015)
    parser.add_argument("--seen", type=float, default=0.02)
    parser.add_argument("--refused", type=float, default=0.005)
    parser.add_argument(
        "--warm",
        action="store_true",
        help="each round is a second run, its bucket started where a first run of it ended",
    )
    args = parser.parse_args()
    governor_module.read_load = lambda: 0.0  # the model has no machine
    print(f"governor model: medians of {args.seeds} seeds, K = 16, T = 1 s")
    print("| scenario | API time | oracle | ratio | throttled |")
    print("|---|---|---|---|---|")
    for name, (phases, n) in SCENARIOS.items():
        costs = (args.start, args.call, args.seen, args.refused)
        rounds = []
        for seed in range(args.seeds):
            outcome = run(phases, n, seed, *costs)
            if args.warm:  # a second run, where the first left the bucket
                outcome = run(phases, n, seed + 1000, *costs, learnt=outcome[2])
            rounds.append(outcome)
        took = statistics.median(r[0] for r in rounds)
        throttled = statistics.median(r[1] for r in rounds)
        oracle = oracle_time(phases, 1.0, n)
        print(
            f"| {name} | {took:.2f} s | {oracle:.1f} s | {took / oracle:.3f}x | "
            f"{throttled:g} ({throttled / n:.0%}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
