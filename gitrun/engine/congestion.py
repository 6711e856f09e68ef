"""Congestion control: how many attempts the API takes at once, learnt from its throttles.

:class:`Congestion` is the adaptive concurrency rule alone, with no halts, no
canary and no budget (those are :class:`gitrun.engine.governor.Governor`'s).
It hears of starts, valid endings and throttles, and answers how many
attempts may be out and how many may start now. The rule:

- one decrease per congestion event (throttles of attempts that started
  before the last decrease are the same event), to just under the lowest
  level the API refused, which is remembered as the API's ceiling;
- quick regrowth to just under the ceiling and slow probing above it;
- starts above the level known to work spaced out, so that a throttle is
  heard before many more start;
- a jittered backoff when the API's capacity is found lower than it was.

The level of an attempt is how many attempts were out when it started,
itself included. Times are on the caller's clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitrun.store.records import VERSION, Fields, is_finite

if TYPE_CHECKING:
    from gitrun.definition.schema import Limits

# Pacing of starts above the level known to work (Congestion.pace_gap).
BLIND_GAP = 0.1  # seconds at most, before any throttle came back
MAX_GAP = 10.0  # seconds at most, after
VALID_KEPT = 9  # the valid attempts' durations a typical one is the median of
BURST = 0.05  # seconds: starts closer than this (or half the gap) are one burst


@dataclass
class Congestion:
    """One adaptive concurrency against an API's hidden, moving ceiling."""

    limits: Limits
    rng: random.Random = field(default_factory=random.Random)
    concurrency: int = 0
    backoff_until: float = 0.0
    throttles: int = 0  # congestion events since the last valid completion
    valid_run: int = 0  # valid completions since the last change of concurrency
    ceiling: int = 0  # the lowest level the API throttled at (0: none known)
    decreased_at: float = 0.0  # when concurrency last went down for a throttle
    proven: int = 1  # the highest level an attempt started at and ended valid
    last_start: float = 0.0  # when an attempt last started
    probe_failures: int = 0  # probes above the ceiling throttled since it was found
    throttle_latency: float = 0.0  # how long the fastest throttle took to come back
    levels: dict[str, int] = field(default_factory=dict)  # running attempts' levels
    burst: list[str] = field(default_factory=list)  # the attempts started together last
    paced: bool = True  # False: starts go out together (external dispatch)
    valid_durations: list[float] = field(default_factory=list)  # the last few

    def __post_init__(self) -> None:
        self.concurrency = self.concurrency or self.limits.concurrency

    # -- may attempts start? ------------------------------------------------------

    def paced_room(self, free: int, running: int, now: float) -> tuple[int, bool]:
        """Of ``free`` starts the other limits allow, how many may go now, and
        whether pacing holds them: above the level known to work, one start
        per gap, so that a throttle is heard before many more attempts run
        into it."""
        known = max(0, self.proven - running)
        gap = self.pace_gap()
        if gap and free > known:
            # A probe starts alone, a gap after any other start: whatever the
            # API refuses next is then the probe, not an attempt beside it.
            probes = 1 if not known and now >= self.last_start + gap else 0
            return known + probes, True
        return free, False

    def pace_gap(self) -> float:
        """Seconds between two starts above the level known to work: as long
        as a throttle took to come back, once one has (at most MAX_GAP);
        before that a fraction of a typical attempt's time, so that finding
        the ceiling costs a run of long attempts little and one of short
        attempts nothing (no attempt has ended valid yet: no gap)."""
        if not self.paced:
            return 0.0
        if self.throttle_latency:
            return min(MAX_GAP, self.throttle_latency)
        if not self.valid_durations:
            return 0.0
        typical = sorted(self.valid_durations)[len(self.valid_durations) // 2]
        return min(BLIND_GAP, typical / (2 * self.limits.concurrency))

    # -- what happened ---------------------------------------------------------------

    def started(self, task: str, now: float) -> None:
        """An attempt of ``task`` started at ``now``."""
        level = len(self.levels) + 1
        gap = self.pace_gap()
        if now - self.last_start >= (min(BURST, gap / 2) if gap else BURST):
            self.burst = []
        if task:
            # Attempts started together race to the API, and which of them it
            # refuses is chance: each has the level of the whole burst.
            self.burst.append(task)
            for member in self.burst:
                if member in self.levels or member == task:
                    self.levels[member] = level
        self.last_start = now

    def ended(self, task: str) -> int:
        """An attempt of ``task`` ended: the level it started at (0: not
        started here). Probes start alone, so a throttle's level is the load
        the API refused."""
        return self.levels.pop(task, 0)

    def valid(self, level: int, duration: float, started: float) -> None:
        """An attempt that started at ``level`` ended valid: that level works
        (unless it was out when the API refused that level: of a burst, some
        get through). Below the ceiling concurrency grows back by one per
        valid completion; at it, by one (a probe) after ``grow_after`` rounds
        at the level, and twice as many rounds after each probe the API
        throttled."""
        self.throttles = 0
        self.valid_durations = [*self.valid_durations[-(VALID_KEPT - 1) :], duration]
        if self.ceiling and started < self.decreased_at:
            level = min(level, self.ceiling - 1)
        self.proven = max(self.proven, level)
        if self.ceiling and level >= self.ceiling:
            self.ceiling, self.probe_failures = level + 1, 0  # the API takes more now
        limit = self.limits.concurrency
        if self.concurrency >= limit:
            return
        if not self.ceiling or self.concurrency < self.ceiling - 1:
            self.concurrency += 1
            self.valid_run = 0
            return
        self.valid_run += 1
        rounds = self.limits.grow_after * 2**self.probe_failures
        if self.valid_run >= rounds * self.concurrency:
            self.concurrency += 1
            self.valid_run = 0

    def throttled(self, load: int, duration: float, started: float, now: float) -> None:
        """The API throttled an attempt while ``load`` attempts were out (0:
        unknown). One decrease per congestion event, to just under the
        lowest load the API refused in it, and a jittered backoff: short when
        the ceiling was found or held against a probe (the smaller fan-out
        is under what the API takes), exponential when it is not."""
        self.valid_run = 0
        if duration > 0:
            fastest = self.throttle_latency or duration
            self.throttle_latency = min(fastest, duration)
        load = load or self.concurrency
        if started and started < self.decreased_at:
            # Started before the last decrease: the same congestion event. It
            # says only that the API takes fewer than was thought.
            if load < self.ceiling:
                self.ceiling = load
                self.concurrency = max(1, min(self.concurrency, load - 1))
                self.proven = min(self.proven, self.concurrency)
            return
        self.decreased_at = now
        previous = self.ceiling
        probing = bool(previous) and self.concurrency >= previous
        self.ceiling = min(previous or load, load)
        self.concurrency = max(1, min(self.concurrency, self.ceiling) - 1)
        self.proven = min(self.proven, self.concurrency)
        if probing:
            self.probe_failures += 1  # the ceiling holds; probe less often
        if (previous and not probing) or load <= 1:
            # Refused at a load it took before, or with nothing else out: the
            # API's capacity dropped, and a smaller fan-out is not enough.
            self.throttles += 1
            cap = min(self.limits.backoff_cap, self.limits.backoff_base * 2 ** (self.throttles - 1))
        else:
            # The ceiling found, or held against a probe: the smaller fan-out
            # is under it, and a short wait (as long as two throttles take to
            # come back) keeps the retries apart.
            cap = min(self.limits.backoff_base, 2 * self.throttle_latency)
        self.backoff_until = max(self.backoff_until, now + self.rng.uniform(0, cap))

    # -- between two processes -----------------------------------------------------

    def export(self) -> GovernorState:
        """What must outlive one process (external dispatch calls gitrun per batch)."""
        return GovernorState(
            self.concurrency,
            self.backoff_until,
            self.throttles,
            self.valid_run,
            self.ceiling,
            self.decreased_at,
            self.proven,
            self.last_start,
            self.probe_failures,
            self.throttle_latency,
            dict(self.levels),
            tuple(self.valid_durations),
        )

    def restore(self, state: GovernorState) -> None:
        if 1 <= state.concurrency <= self.limits.concurrency:
            self.concurrency = state.concurrency
        self.backoff_until = state.backoff_until
        self.throttles = max(0, state.throttles)
        self.valid_run = max(0, state.valid_run)
        self.ceiling = max(0, state.ceiling)
        self.decreased_at = state.decreased_at
        self.proven = max(1, state.proven)
        self.last_start = state.last_start
        self.probe_failures = max(0, state.probe_failures)
        self.throttle_latency = max(0.0, state.throttle_latency)
        self.levels = {t: n for t, n in state.levels.items() if n > 0}
        self.valid_durations = [d for d in state.valid_durations if d >= 0][-VALID_KEPT:]


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
        }

    @classmethod
    def from_json(cls, data: Fields) -> GovernorState:
        given = data.data

        def whole(name: str, default: int) -> int:
            return data.integer(name) if name in given else default

        def number(name: str) -> float:
            return data.number(name) if name in given else 0.0

        levels = data.mapping("levels") if "levels" in given else {}
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
        )
