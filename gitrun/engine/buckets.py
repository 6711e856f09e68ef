"""The governor's model buckets: one adaptive concurrency per model an attempt calls.

A bucket's key is the executor's client and the model
(:meth:`gitrun.definition.schema.Packet.bucket_for`); attempts of the stages
that call it share its :class:`gitrun.engine.congestion.Congestion`, and a
stage on another model has its own, so a throttled model never slows
another. :class:`Buckets` finds the bucket of a stage or of a running
attempt, and keeps them between two processes of external dispatch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gitrun.engine.congestion import Congestion, GovernorRecord, GovernorState

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
