"""The governor's model buckets: one adaptive concurrency per model an attempt calls.

A bucket's key is the executor's client and the model
(:meth:`gitrun.definition.schema.Packet.bucket_for`); attempts of the stages
that call it share its :class:`gitrun.engine.congestion.Congestion`, and a
stage on another model has its own, so a throttled model never slows
another. :class:`Buckets` finds the bucket of a stage or of a running
attempt, and keeps them between two processes of external dispatch
(:class:`GovernorRecord`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitrun.engine.congestion import VALID_KEPT, Congestion
from gitrun.store.records import VERSION, Fields, is_finite

if TYPE_CHECKING:
    from gitrun.definition.schema import Limits
    from gitrun.store.events import ConcurrencyChange


@dataclass
class Buckets:
    limits: Limits
    rng: random.Random
    # The bucket each stage's attempts call, by stage; a stage not named
    # calls the bucket "".
    of_stage: dict[str, str] = field(default_factory=dict)
    by_key: dict[str, Congestion] = field(default_factory=dict)
    # The key of the bucket of the stage last asked about (stages run one by one).
    current: str = ""
    paced: bool = True  # False: starts go out together (external dispatch)
    of_task: dict[str, str] = field(default_factory=dict)  # running attempts' buckets

    def __post_init__(self) -> None:
        if self.of_stage:
            self.current = next(iter(self.of_stage.values()))

    def of(self, stage: str | None = None) -> Congestion:
        """The bucket ``stage``'s attempts call (the current one for None)."""
        return self.keyed(self.current if stage is None else self.of_stage.get(stage, ""))

    def asked(self, stage: str) -> None:
        """Starts of ``stage`` are asked about: its bucket is the current one."""
        self.current = self.of_stage.get(stage, "")

    def keyed(self, key: str) -> Congestion:
        if key not in self.by_key:
            bucket = Congestion(self.limits, self.rng, key, paced=self.paced)
            met = [b for b in self.by_key.values() if b.valid_durations]
            if met:
                # How long attempts and throttles take, not what the API takes:
                # a new bucket's first starts above one are paced from the
                # start instead of going out together.
                bucket.valid_durations = list(met[-1].valid_durations)
                bucket.throttle_latency = met[-1].throttle_latency
                bucket.throttle_slowest = met[-1].throttle_slowest
            self.by_key[key] = bucket
        return self.by_key[key]

    def started(self, task: str, now: float, stage: str | None) -> None:
        bucket = self.of(stage)
        bucket.started(task, now)
        if task:
            self.of_task[task] = bucket.key

    def ended(self, task: str) -> tuple[Congestion, int]:
        """The bucket an attempt of ``task`` that ended called, and its level there."""
        key = self.of_task.pop(task, None)
        if key is None:  # started by an earlier process: the bucket that knows its level
            held = [k for k, b in self.by_key.items() if task in b.levels]
            key = held[0] if held else self.current
        bucket = self.keyed(key)
        return bucket, bucket.ended(task)

    def pace(self, paced: bool) -> None:
        self.paced = paced
        for bucket in self.by_key.values():
            bucket.paced = paced

    def take_changes(self) -> list[ConcurrencyChange]:
        """The buckets' changes of concurrency since the last call, in order."""
        changes = [c for b in self.by_key.values() for c in b.take_changes()]
        return sorted(changes, key=lambda c: c.when)

    def export(self) -> GovernorRecord:
        return GovernorRecord({key: GovernorState.of(b) for key, b in self.by_key.items()})

    def restore(self, record: GovernorRecord) -> None:
        for key, state in record.buckets.items():
            state.apply(self.keyed(key or self.current))  # "": written before buckets


@dataclass(frozen=True)
class GovernorState:
    """The governor's state between two calls of external dispatch
    (``.git/gitrun/<run>/governor.json``, a version-1 record; a record
    written before congestion control has its fields' defaults)."""

    concurrency: int
    backoff_until: float = 0.0
    throttles: int = 0  # congestion events since the last valid completion
    valid_run: int = 0  # valid completions since the last change of concurrency
    ceiling: int = 0
    decreased_at: float = 0.0
    proven: int = 1
    last_start: float = 0.0
    probe_failures: int = 0
    throttle_latency: float = 0.0
    levels: dict[str, int] = field(default_factory=dict)
    valid_durations: tuple[float, ...] = ()
    probe_at: float = 0.0
    moved: bool = False
    reason: str = ""
    settled: int = 0
    below: int = 0
    found_at: float = 0.0
    # The attempts out: when each started and the level it started at itself
    # (an attempt out long enough counts as taken), and how long the slowest
    # throttle took to come back (how long is long enough).
    since: dict[str, float] = field(default_factory=dict)
    own: dict[str, int] = field(default_factory=dict)
    throttle_slowest: float = 0.0

    @classmethod
    def of(cls, bucket: Congestion) -> GovernorState:
        """What of ``bucket`` must outlive one process (external dispatch
        calls gitrun per batch)."""
        return cls(
            bucket.concurrency,
            bucket.backoff_until,
            bucket.throttles,
            bucket.valid_run,
            bucket.ceiling,
            bucket.decreased_at,
            bucket.proven,
            bucket.last_start,
            bucket.probe_failures,
            bucket.throttle_latency,
            dict(bucket.levels),
            tuple(bucket.valid_durations),
            bucket.probe_at,
            bucket.moved,
            bucket.reason,
            bucket.settled,
            bucket.below,
            bucket.found_at,
            dict(bucket.since),
            dict(bucket.own),
            bucket.throttle_slowest,
        )

    def apply(self, bucket: Congestion) -> None:
        """``bucket`` as this state left it, each value within its bounds."""
        if 1 <= self.concurrency <= bucket.limits.concurrency:
            bucket.concurrency = self.concurrency
        bucket.backoff_until = self.backoff_until
        bucket.throttles = max(0, self.throttles)
        bucket.valid_run = max(0, self.valid_run)
        bucket.ceiling = max(0, self.ceiling)
        bucket.decreased_at = self.decreased_at
        bucket.proven = max(1, self.proven)
        bucket.last_start = self.last_start
        bucket.probe_failures = max(0, self.probe_failures)
        bucket.throttle_latency = max(0.0, self.throttle_latency)
        bucket.levels = {t: n for t, n in self.levels.items() if n > 0}
        bucket.valid_durations = [d for d in self.valid_durations if d >= 0][-VALID_KEPT:]
        bucket.probe_at = self.probe_at
        bucket.moved = self.moved
        bucket.reason = self.reason or bucket.reason
        bucket.settled = max(0, self.settled)
        bucket.below = max(0, self.below)
        bucket.found_at = self.found_at
        bucket.since = {t: at for t, at in self.since.items() if t in bucket.levels}
        bucket.own = {t: n for t, n in self.own.items() if t in bucket.levels and n > 0}
        bucket.throttle_slowest = max(self.throttle_latency, self.throttle_slowest)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "concurrency": self.concurrency,
            "backoff_until": self.backoff_until,
            "throttles": self.throttles,
            "valid_run": self.valid_run,
            "ceiling": self.ceiling,
            "decreased_at": self.decreased_at,
            "proven": self.proven,
            "last_start": self.last_start,
            "probe_failures": self.probe_failures,
            "throttle_latency": self.throttle_latency,
            "levels": self.levels,
            "valid_durations": list(self.valid_durations),
            "probe_at": self.probe_at,
            "moved": self.moved,
            "reason": self.reason,
            "settled": self.settled,
            "below": self.below,
            "found_at": self.found_at,
            "since": self.since,
            "own": self.own,
            "throttle_slowest": self.throttle_slowest,
        }

    @classmethod
    def from_json(cls, data: Fields) -> GovernorState:
        given = data.data

        def whole(name: str, default: int) -> int:
            return data.integer(name) if name in given else default

        def number(name: str) -> float:
            return data.number(name) if name in given else 0.0

        def table(name: str) -> dict[str, Any]:
            return data.mapping(name) if name in given else {}

        levels, since, own = table("levels"), table("since"), table("own")
        durations = data.array("valid_durations") if "valid_durations" in given else []
        return cls(
            data.integer("concurrency"),
            data.number("backoff_until"),
            data.integer("throttles"),
            data.integer("valid_run"),
            whole("ceiling", 0),
            number("decreased_at"),
            whole("proven", 1),
            number("last_start"),
            whole("probe_failures", 0),
            number("throttle_latency"),
            {str(t): n for t, n in levels.items() if type(n) is int},
            tuple(float(d) for d in durations if is_finite(d)),
            number("probe_at"),
            data.data.get("moved") is True,
            str(given.get("reason") or ""),
            whole("settled", 0),
            whole("below", 0),
            number("found_at"),
            {str(t): float(at) for t, at in since.items() if is_finite(at)},
            {str(t): n for t, n in own.items() if type(n) is int},
            number("throttle_slowest"),
        )


@dataclass(frozen=True)
class GovernorRecord:
    """Every bucket's state between two calls of external dispatch
    (``.git/gitrun/<run>/governor.json``, version 1: ``{"buckets": {key:
    state}}``; a record of one state, written before buckets, is the state
    of the bucket the run calls first)."""

    buckets: dict[str, GovernorState]

    def to_json(self) -> dict[str, Any]:
        states = {key: state.to_json() for key, state in self.buckets.items()}
        return {"v": VERSION, "buckets": states}

    @classmethod
    def from_json(cls, data: Fields) -> GovernorRecord:
        if "buckets" not in data.data:
            return cls({"": GovernorState.from_json(data)})
        buckets = {}
        for key, state in data.mapping("buckets").items():
            if isinstance(state, dict):
                buckets[str(key)] = GovernorState.from_json(Fields(state))
        return cls(buckets)
