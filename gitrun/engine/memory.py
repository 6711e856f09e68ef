"""What a repository's runs learnt of each model bucket, for the next run.

A fresh run's buckets would start at the packet's concurrency and find the
API's ceiling again by climbing into it (gitrun.engine.congestion). A run
that called the same bucket (the executor's client and the model) in this
repository less than :data:`FRESH` ago left its last concurrency and ceiling
estimate in ``.git/gitrun/buckets.json`` (:attr:`LocalPaths.buckets`); a
fresh run (or a new round) starts each of its buckets there, after its
canary, and the ledger records it as a change of concurrency naming the run
it came from. Older knowledge is ignored: ceilings move through the day.

The file is machine-local and a cache: a damaged one is warned about and
read as empty, two drivers writing at once keep the later's view (the other
bucket's knowledge is then learnt again), and nothing else depends on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitrun.store.records import (
    VERSION,
    Fields,
    RecordInvalid,
    load_record,
    warn_stderr,
    write_record,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gitrun.engine.buckets import Buckets
    from gitrun.store.events import ConcurrencyChange
    from gitrun.store.local import LocalPaths

FRESH = 3600.0  # seconds: knowledge older than this starts no run


@dataclass(frozen=True)
class Learnt:
    """One bucket as a run last left it."""

    concurrency: int
    ceiling: int  # 0: none known
    at: float  # wall-clock seconds
    run: str


@dataclass(frozen=True)
class Memory:
    """The version-1 record of ``buckets.json``: bucket key -> :class:`Learnt`."""

    buckets: dict[str, Learnt]

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "buckets": {
                key: {"concurrency": b.concurrency, "ceiling": b.ceiling, "at": b.at, "run": b.run}
                for key, b in self.buckets.items()
            },
        }

    @classmethod
    def from_json(cls, data: Fields) -> Memory:
        buckets = {}
        for key, value in data.mapping("buckets").items():
            if not isinstance(value, dict):
                raise RecordInvalid(f"buckets.{key}", "is not a JSON object")
            fields = Fields(value)
            concurrency, ceiling = fields.integer("concurrency"), fields.integer("ceiling")
            if concurrency < 1 or ceiling < 0:
                raise RecordInvalid(
                    f"buckets.{key}", "holds a concurrency under 1 or a ceiling under 0"
                )
            buckets[key] = Learnt(concurrency, ceiling, fields.number("at"), fields.string("run"))
        return cls(buckets)


def _read(local: LocalPaths) -> dict[str, Learnt]:
    memory = load_record(
        local.buckets,
        Memory.from_json,
        what="record of what runs learnt of their model buckets",
        fix="it is ignored, and this run finds each bucket's ceiling by itself",
        warn=warn_stderr,
    )
    return memory.buckets if memory is not None else {}


def recall(buckets: Buckets, keys: Iterable[str], local: LocalPaths, now: float) -> None:
    """Start each of ``keys`` (the run's buckets) where a run less than
    :data:`FRESH` ago left it."""
    known = _read(local)
    for key in sorted(set(keys)):
        learnt = known.get(key)
        if learnt is None or not 0 <= now - learnt.at < FRESH:
            continue
        ago = max(1, round((now - learnt.at) / 60))
        reason = f"as run {learnt.run} left it {ago} min ago"
        buckets.keyed(key).remembered(learnt.concurrency, learnt.ceiling, reason)


def keep(local: LocalPaths, run_id: str, changes: Iterable[ConcurrencyChange]) -> None:
    """Remember each bucket's last change of ``changes`` for the next run."""
    last = {change.bucket: change for change in changes}
    if not last:
        return
    known = _read(local)
    now = time.time()
    for key, change in last.items():
        known[key] = Learnt(change.concurrency, change.ceiling, now, run_id)
    try:
        write_record(local.buckets, Memory(known))
    except OSError as exc:  # a cache: the run goes on without it
        warn_stderr(
            f"{local.buckets} cannot be written ({exc.strerror or exc}); the next run "
            "finds its buckets' ceilings by itself"
        )
