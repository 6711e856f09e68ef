"""Soak the overlap proof: random pattern pairs, intersect() against brute force.

Each pair of patterns is decided twice: by ``gitrun.ownership.patterns.intersect`` and by
the independent oracle of the test suite (``tests/pattern_oracle.py``), which
tries every path, of any depth, whose names have one to four characters from
``.``, ``a``, ``b``, ``x``, ``*``, ``?``. A *miss* is a pair the oracle finds a
shared path for and intersect() calls disjoint; a *false witness* is a path
intersect() returns that the oracle says one of the two does not own (or that
has an empty, ``.`` or ``..`` name). Both must be zero. Pairs whose witness
needs a name outside the oracle's candidates are counted, not failed.

Patterns are drawn from ``.``, ``a``, ``b``, ``*``, ``?``, ``**``, ``[a-b]``,
``[!a]``, ``[.]``, escapes and trailing ``/`` or ``/**``, up to 4 segments;
pairs are sampled from pools of patterns (each pattern with itself included).

    python bench/patterns_soak.py [--pairs 1000000] [--seed S] [--processes 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POOL = 300  # patterns per pool
PAIRS_PER_POOL = 6_000


def soak_pool(job: tuple[int, int, int]) -> tuple[Counter[str], list[str]]:
    """Check ``pairs`` random pairs from one pool of patterns drawn from (seed, index)."""
    from gitrun.ownership.patterns import intersect, parse
    from tests.pattern_oracle import (
        OraclePattern,
        Signed,
        common_path,
        random_pattern,
        valid_witness,
    )

    seed, index, pairs = job
    rng = random.Random(f"{seed}:{index}")
    ints = iter(lambda: rng.randrange(1 << 30), None)
    texts = [random_pattern(ints, max_segments=4) for _ in range(POOL)]
    oracles = [OraclePattern.read(t) for t in texts]
    signed = [Signed(o) for o in oracles]
    parsed = [parse(t) for t in texts]
    stats: Counter[str] = Counter()
    bad: list[str] = []
    for _ in range(pairs):
        i, j = rng.randrange(POOL), rng.randrange(POOL)
        if rng.randrange(50) == 0:
            j = i  # the same pattern in two tasks
        witness = intersect(parsed[i], parsed[j])
        shared = common_path(signed[i], signed[j])
        stats["pairs"] += 1
        if witness is None:
            if shared is not None:
                stats["misses"] += 1
                bad.append(f"miss: {texts[i]!r} and {texts[j]!r} both own {shared!r}")
            else:
                stats["apart"] += 1
            continue
        if not (valid_witness(witness) and oracles[i].owns(witness) and oracles[j].owns(witness)):
            stats["false witnesses"] += 1
            bad.append(f"false witness {witness!r} for {texts[i]!r} and {texts[j]!r}")
        elif shared is None:
            stats["outside"] += 1
        else:
            stats["meet"] += 1
    return stats, bad[:5]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    jobs = []
    left, index = args.pairs, 0
    while left > 0:
        jobs.append((seed, index, min(PAIRS_PER_POOL, left)))
        left -= PAIRS_PER_POOL
        index += 1
    start = time.monotonic()
    total: Counter[str] = Counter()
    examples: list[str] = []
    with multiprocessing.Pool(max(1, args.processes)) as pool:
        for stats, bad in pool.imap_unordered(soak_pool, jobs):
            total.update(stats)
            examples += bad
    seconds = time.monotonic() - start
    print(f"seed:             {seed}")
    print(f"pairs checked:    {total['pairs']:,}")
    print(f"misses:           {total['misses']:,}")
    print(f"false witnesses:  {total['false witnesses']:,}")
    print(f"seconds:          {seconds:.1f}")
    print(
        f"(meet {total['meet']:,}; apart {total['apart']:,}; meet with a witness name outside "
        f"the oracle's {total['outside']:,})"
    )
    for line in examples[:20]:
        print(line)
    return 1 if total["misses"] or total["false witnesses"] else 0


if __name__ == "__main__":
    sys.exit(main())
