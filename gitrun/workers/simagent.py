"""A simulated agent CLI that misbehaves like real ones, deterministically from a seed.

``python -m gitrun.workers.simagent --seed N`` reads its task from the ``GITRUN_*``
variables. Each task gets a temperament from the seed:

- steady: thinks a little, writes its JSON output, exits 0;
- liar: writes a valid output, then reports "Server is temporarily limiting
  requests (not your usage limit)" and exits 1 — done, whatever it says;
- flaky: its first attempt dies before writing; later attempts work;
- sloppy: its first attempt writes invalid JSON; later attempts work;
- hanger (with ``--hangs``): its first attempt hangs past any timeout.

Any attempt is throttled (exit 75, a rate-limit message, nothing written)
when more than ``--crowd-limit`` copies run at once (counted with lock files
in ``--crowd``). With ``GITRUN_SIM_LOG`` set, each attempt appends "start"
and, once its output is in place, "wrote" lines there.

Every attempt that reached its model reports what it used to
``$GITRUN_USAGE`` (tokens from the seed, priced like a mid-range model), as
any worker may; an attempt that died or was throttled reports nothing, so
its cost is unknown.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from gitrun.processes.reaper import is_running

TEMPERAMENTS = ("steady", "steady", "steady", "liar", "flaky", "sloppy")
THROTTLE_MESSAGE = "Server is temporarily limiting requests (not your usage limit)"


def temperament(seed: int, task: str, hangs: bool) -> str:
    rng = random.Random(f"{seed}:{task}")
    kinds = (*TEMPERAMENTS, "hanger") if hangs else TEMPERAMENTS
    return rng.choice(kinds)


def log_event(event: str) -> None:
    """Append "<task> <attempt> <event> <time>" to $GITRUN_SIM_LOG, if set."""
    path = os.environ.get("GITRUN_SIM_LOG")
    if path:
        line = f"{os.environ['GITRUN_TASK']} {os.environ['GITRUN_ATTEMPT']} {event} {time.time():.6f}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, line.encode())
        os.close(fd)


def write_whole(path: str, text: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)  # whole or absent, never half-written


# Dollars per million tokens: input, output, cache read, cache write.
PRICES = (3.0, 15.0, 0.3, 3.75)


def report_usage(rng: random.Random) -> None:
    """Write this attempt's usage to $GITRUN_USAGE, if gitrun set it."""
    path = os.environ.get("GITRUN_USAGE")
    if not path:
        return
    counts = (
        rng.randint(800, 2400),
        rng.randint(150, 900),
        rng.randint(0, 6000),
        rng.randint(0, 1200),
    )
    cost = sum(n * price for n, price in zip(counts, PRICES, strict=True)) / 1e6
    usage = dict(zip(("input", "output", "cache_read", "cache_write"), counts, strict=True))
    model = os.environ.get("GITRUN_MODEL") or None
    write_whole(
        path, json.dumps({**usage, "cost_usd": round(cost, 6), "model": model}, allow_nan=False)
    )


def _crowd_size(crowd: Path) -> int:
    """Copies running now; lock files of copies killed without cleanup (gone,
    or zombies nobody reaped) are dropped."""
    alive = 0
    for lock in crowd.iterdir():
        if lock.name.isdigit() and is_running(int(lock.name)):
            alive += 1
        else:
            lock.unlink(missing_ok=True)
    return alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gitrun.workers.simagent", description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--crowd", type=Path, help="directory for the copies' lock files")
    parser.add_argument("--crowd-limit", type=int, default=3)
    parser.add_argument("--think", type=float, nargs=2, default=(0.2, 0.8), metavar=("MIN", "MAX"))
    parser.add_argument("--hangs", action="store_true", help="some first attempts hang")
    args = parser.parse_args(argv)
    task = os.environ["GITRUN_TASK"]
    attempt = int(os.environ["GITRUN_ATTEMPT"])
    outputs = [p for p in os.environ.get("GITRUN_OUTPUTS", "").split("\n") if p]
    kind = temperament(args.seed, task, args.hangs)
    rng = random.Random(f"{args.seed}:{task}:{attempt}")
    log_event("start")
    mine = None
    if args.crowd is not None:
        args.crowd.mkdir(parents=True, exist_ok=True)
        mine = args.crowd / str(os.getpid())
        mine.write_text(task)
    try:
        time.sleep(rng.uniform(*args.think))
        if args.crowd is not None and _crowd_size(args.crowd) > args.crowd_limit:
            print(f"Error: 429 {THROTTLE_MESSAGE}", file=sys.stderr)
            return 75
        if kind == "hanger" and attempt == 1:
            time.sleep(3600)
        if kind == "flaky" and attempt == 1:
            print("Error: connection reset by peer", file=sys.stderr)
            return 1
        if kind == "sloppy" and attempt == 1:
            for path in outputs:
                write_whole(path, '{"task": "' + task + '", "summary": ')
            report_usage(rng)
            print("Done! The summary is written.")
            return 0
        summary = {"task": task, "attempt": attempt, "summary": f"{task} read and summarised"}
        for path in outputs:
            write_whole(path, json.dumps(summary, allow_nan=False) + "\n")
        log_event("wrote")
        report_usage(rng)
        if kind == "liar":
            print(f"API Error: {THROTTLE_MESSAGE}", file=sys.stderr)
            return 1
        print("Done.")
        return 0
    finally:
        if mine is not None:
            mine.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
