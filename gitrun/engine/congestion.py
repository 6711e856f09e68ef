"""Congestion control: how many attempts one model bucket's API takes at once.

:class:`Congestion` is the adaptive concurrency rule of one bucket (the
executor's client and the model, :meth:`gitrun.definition.schema.Packet.bucket_for`),
with no halts, no canary and no budget (those are
:class:`gitrun.engine.governor.Governor`'s, which keeps one Congestion per
bucket). It hears of starts, valid endings and throttles, and answers how
many attempts may be out and how many may start now. The API's ceiling is
hidden and moves; the rule follows it:

- the ceiling is found by climbing: starts that raise the load above the
  level known to work go one at a time, a little longer apart than a
  throttle takes to come back, so that a throttle is heard before the next
  raise runs into it (a start in an ended attempt's place goes at once);
  the first level refused is the ceiling, and the concurrency stays just
  under it;
- one decrease per congestion event (throttles of attempts that started
  before the last decrease are the same event, and a refusal just after a
  climb found the ceiling finds it lower);
- a refusal at a level that worked is a drop: the concurrency halves, and
  grows back one per valid ending, paced, to just under the level refused
  next;
- just under the ceiling, a probe (one start at the ceiling) goes after a
  number of task durations, doubling with each probe refused and never
  stopping, however long the bucket runs full; a ceiling that has moved is
  probed sooner than one found on the way up (fixed limits are the common
  case);
- a probe that ends valid means the ceiling rose: the bucket climbs again;
- a jittered backoff when the API refuses an attempt with nothing else out.

The level of an attempt is how many attempts were out when it started,
itself included. Times are on the caller's clock. Each change of the
concurrency is kept with its reason (:class:`Change`) for the ledger.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gitrun.store.events import ConcurrencyChange as Change
from gitrun.store.events import iso

if TYPE_CHECKING:
    from gitrun.definition.schema import Limits

# Pacing of starts above the level known to work (Congestion.pace_gap).
BLIND_GAP = 0.1  # seconds at most, before any throttle came back
MAX_GAP = 10.0  # seconds at most, after
GAP_MARGIN = 1.25  # the gap after a throttle: this many times the fastest's return
VALID_KEPT = 9  # the valid attempts' durations a typical one is the median of
BURST = 0.05  # seconds: starts closer than this (or half the gap) are one burst
# Probes just under a ceiling: after this many times ``grow_after`` task durations
# for a ceiling found on the way up, once for one that moved, doubling with each
# refused probe up to PROBE_MAX times.
FOUND_WAIT = 8
PROBE_MAX = 32


@dataclass
class Congestion:
    """One adaptive concurrency against an API's hidden, moving ceiling."""

    limits: Limits
    rng: random.Random = field(default_factory=random.Random)
    key: str = ""  # the bucket's key
    concurrency: int = 0
    backoff_until: float = 0.0
    throttles: int = 0  # congestion events since the last valid completion
    valid_run: int = 0  # valid completions since the last change of concurrency
    ceiling: int = 0  # the lowest level the API throttled at (0: none known)
    decreased_at: float = 0.0  # when concurrency last went down for a throttle
    proven: int = 1  # the highest level an attempt started at and ended valid
    # The level the bucket settled at after its last decrease, raised by valid
    # attempts (less one: a level counts attempts whose call has just ended).
    # A refusal at or under it is a drop; above it, the ceiling found again.
    settled: int = 0
    below: int = 0  # the ceiling a probe taken set off a climb from (0: none)
    found_at: float = 0.0  # when a climb last found the ceiling
    last_start: float = 0.0  # when an attempt last started
    raised_at: float = 0.0  # when one last started above the level known to work
    probe_failures: int = 0  # probes above the ceiling throttled since it was found
    throttle_latency: float = 0.0  # how long the fastest throttle took to come back
    levels: dict[str, int] = field(default_factory=dict)  # running attempts' levels
    own: dict[str, int] = field(default_factory=dict)  # the same, before a burst raised them
    burst: list[str] = field(default_factory=list)  # the attempts started together last
    paced: bool = True  # False: starts go out together (external dispatch)
    valid_durations: list[float] = field(default_factory=list)  # the last few
    probe_at: float = 0.0  # when a probe may go above a known ceiling
    since: dict[str, float] = field(default_factory=dict)  # running attempts' starts
    throttle_slowest: float = 0.0  # how long the slowest throttle took to come back
    moved: bool = False  # the ceiling was seen to move (a drop or a rise)
    reason: str = "the packet's concurrency"  # why the concurrency is what it is
    changes: list[Change] = field(default_factory=list)  # not yet in the ledger

    def __post_init__(self) -> None:
        self.concurrency = self.concurrency or self.limits.concurrency

    def _set(self, concurrency: int, reason: str) -> None:
        """The concurrency is now ``concurrency``, for ``reason``."""
        concurrency = max(1, min(concurrency, self.limits.concurrency))
        if concurrency != self.concurrency or reason != self.reason:
            self.concurrency, self.reason = concurrency, reason
            self.changes.append(
                Change(self.key, concurrency, self.ceiling, reason, iso(time.time()))
            )

    def seed(
        self, concurrency: int, ceiling: int, reason: str = "as the ledger last left it"
    ) -> None:
        """Start from what an earlier driver learnt: ``concurrency`` works
        (its first wave goes out at once), ``ceiling`` was refused."""
        self.concurrency = max(1, min(concurrency, self.limits.concurrency))
        self.ceiling = max(0, ceiling)
        self.proven = self.settled = self.concurrency
        self.reason = reason

    def remembered(self, concurrency: int, ceiling: int, reason: str) -> None:
        """Start from what another run learnt of this bucket (gitrun.engine.memory):
        its concurrency, of which half goes out at once and the rest paced,
        as a climb: the ceiling may have moved since, and a lower one is then
        met by a climb's refusals instead of a whole wave's and a drop."""
        self.seed(concurrency, ceiling, "")
        self.proven = self.settled = max(1, self.concurrency // 2)
        self._set(self.concurrency, reason)  # not this run's ledger's: a change to record

    def take_changes(self) -> list[Change]:
        changes, self.changes = self.changes, []
        return changes

    # -- may attempts start? ------------------------------------------------------

    def paced_room(self, free: int, running: int, now: float) -> tuple[int, bool]:
        """Of ``free`` starts the other limits allow, how many may go now, and
        whether pacing holds them: above the level known to work, one start
        per gap, so that a throttle is heard before many more attempts run
        into it. The caller has :meth:`look`-ed at ``now`` first."""
        known = max(0, self._worked() - running)
        gap = self.pace_gap()
        if gap and free > known:
            # A start above the level known to work goes a gap after the
            # last one: whatever the API refuses next is then that start, at
            # its level (with the starts beside it, the burst's). Starts that
            # only keep the level (an attempt ended) go meanwhile: however
            # often attempts end, the climb goes on.
            probes = 1 if now >= self.raised_at + gap else 0
            return known + probes, True
        return free, False

    def _worked(self) -> int:
        """The highest level a start may go to without a gap: the level
        known to work, or that of an attempt out (a start in its place
        raises the load on the API no higher)."""
        return max(self.proven, *self.levels.values()) if self.levels else self.proven

    def _climb(self, why: str) -> None:
        """The API took more than the level it refused: the ceiling rose, and
        the bucket climbs to find it again, as at the start."""
        self.below = self.ceiling
        self.ceiling, self.probe_failures, self.moved, self.valid_run = 0, 0, True, 0
        self._set(self.limits.concurrency, f"{why}: climbing")

    def look(self, now: float) -> None:
        """What the attempts out say, and a probe when one is due: before the
        concurrency is read for a start, so that a probe due now starts now.
        An attempt out twice as long as the slowest throttle took to come
        back was taken at its level (once one has come back, and unless it
        started before the last decrease): the level works, and a probe
        taken means the ceiling rose. Just under a known ceiling, past
        ``probe_at``: one start at the ceiling."""
        if self.throttle_slowest:
            # Its own level: a later member of its burst may be the one refused.
            taken = [
                self.own.get(task, level)
                for task, level in self.levels.items()
                if self.decreased_at <= self.since.get(task, 0.0) <= now - 2 * self.throttle_slowest
            ]
            if taken:
                self.proven = max(self.proven, *taken)
                if self.ceiling and max(taken) >= self.ceiling:
                    self._climb(f"a probe at {max(taken)} was taken")
                    return
        due = self.probe_due()
        if due is not None and now >= due:
            self.probe_at = 0.0
            self._set(self.ceiling, f"probe: does the API take {self.ceiling} now?")

    def probe_due(self) -> float | None:
        """When the next probe above the ceiling goes, if one is to go: just
        under a known ceiling, with room under the packet's concurrency."""
        waiting = self.ceiling and self.probe_at and self.concurrency == self.ceiling - 1
        return self.probe_at if waiting and self.concurrency < self.limits.concurrency else None

    def taken_at(self) -> float | None:
        """When an attempt out above the level known to work will have been
        out long enough to count as taken (:meth:`look`), if one is out."""
        if not self.throttle_slowest:
            return None
        times = [
            self.since[task] + 2 * self.throttle_slowest
            for task, level in self.own.items()
            if level > self.proven and self.since.get(task, 0.0) >= self.decreased_at
        ]
        return min(times, default=None)

    def _probe_later(self, now: float) -> None:
        """The next probe above the ceiling: a number of task durations from
        ``now``, doubling with each refused probe; sooner for a ceiling seen
        to move."""
        if self.moved:  # the first two refused probes do not slow the next
            rounds = self.limits.grow_after * 2 ** max(0, self.probe_failures - 2)
        else:
            rounds = self.limits.grow_after * FOUND_WAIT * 2**self.probe_failures
        rounds = min(rounds, self.limits.grow_after * PROBE_MAX)
        self.probe_at = now + rounds * self.typical()

    def typical(self) -> float:
        """A typical valid attempt's duration (a second before any)."""
        if not self.valid_durations:
            return 1.0
        return sorted(self.valid_durations)[len(self.valid_durations) // 2]

    def pace_gap(self) -> float:
        """Seconds between two starts above the level known to work, so that
        a throttle is heard before the next start runs into it: a quarter
        more than the fastest throttle took to come back, once one has (at
        most MAX_GAP; throttles come back later than the fastest); before
        that BLIND_GAP, or an eighth of a typical attempt's time for
        attempts under a second, whose climb would otherwise cost a share of
        the run (no attempt has ended valid yet: no gap)."""
        if not self.paced:
            return 0.0
        if self.throttle_latency:
            return min(MAX_GAP, GAP_MARGIN * self.throttle_latency)
        if not self.valid_durations:
            return 0.0
        return min(BLIND_GAP, self.typical() / 8)

    # -- what happened ---------------------------------------------------------------

    def started(self, task: str, now: float) -> None:
        """An attempt of ``task`` started at ``now``."""
        level = len(self.levels) + 1
        if level > self._worked():
            self.raised_at = now
        gap = self.pace_gap()
        if now - self.last_start >= (min(BURST, gap / 2) if gap else BURST):
            self.burst = []
        if task:
            self.since[task] = now
            self.own[task] = level
            # Attempts started together race to the API, and which of them it
            # refuses is chance: each has the level of the whole burst, the
            # highest any of them started at (one out may have ended between).
            self.burst.append(task)
            top = max([level] + [self.levels[m] for m in self.burst if m in self.levels])
            for member in self.burst:
                if member in self.levels or member == task:
                    self.levels[member] = top
        self.last_start = now

    def ended(self, task: str) -> int:
        """An attempt of ``task`` ended: the level it started at (0: not
        started here). Probes start alone, so a throttle's level is the load
        the API refused."""
        self.since.pop(task, None)
        self.own.pop(task, None)
        return self.levels.pop(task, 0)

    def valid(self, level: int, duration: float, started: float, now: float = 0.0) -> None:
        """An attempt that started at ``level`` ended valid: that level works
        (unless it was out when the API refused that level: of a burst, some
        get through). Under the ceiling concurrency grows back by one per
        valid completion, to just under it; a probe at the ceiling that ends
        valid means the ceiling rose, and the bucket climbs again."""
        self.throttles = 0
        self.valid_durations = [*self.valid_durations[-(VALID_KEPT - 1) :], duration]
        if started < self.decreased_at:
            # Out when the API refused: it got in before the ceiling was
            # found (or dropped), and says nothing of the room there is now.
            self.proven = max(self.proven, min(level, self.concurrency))
            return
        self.proven = max(self.proven, level)
        self.settled = max(self.settled, min(level - 1, self.concurrency))
        if self.ceiling and level >= self.ceiling:
            self._climb(f"a probe at {level} ended valid")
            return
        if self.concurrency >= self.limits.concurrency:
            return
        if not self.ceiling or self.concurrency < self.ceiling - 1:
            self._set(self.concurrency + 1, "grown back after a valid attempt")
        if self.ceiling and self.concurrency == self.ceiling - 1 and not self.probe_at:
            self._probe_later(now or started + duration)

    def throttled(self, load: int, duration: float, started: float, now: float) -> None:
        """The API throttled an attempt while ``load`` attempts were out (0:
        unknown). One decrease per congestion event: a refused probe or a
        ceiling found keeps the bucket just under the level refused; a
        refusal at a level that worked (a drop) halves it. The backoff is
        short (as long as two throttles take to come back) unless the API
        refused an attempt with nothing else out, or drops again before any
        attempt is valid: then it is jittered and exponential."""
        self.valid_run = 0
        self.burst = []  # a start after a refusal is made knowing of it: not the same race
        if duration > 0:
            fastest = self.throttle_latency or duration
            self.throttle_latency = min(fastest, duration)
            self.throttle_slowest = max(self.throttle_slowest, duration)
        load = load or self.concurrency
        if started and started < self.decreased_at:
            # Started before the last decrease: the same congestion event. It
            # says only that the API takes fewer than was thought.
            if load < self.ceiling:
                self.ceiling = load
                self.proven = min(self.proven, load - 1)
                self._set(min(self.concurrency, load - 1), f"throttled at {load} (same event)")
            return
        self.decreased_at = now
        previous = self.ceiling
        if not previous and load <= self.below:
            # Refused at or under the ceiling a probe climbed from: the probe
            # got in while a call out had just ended. The ceiling holds.
            previous = self.below
        self.below = 0
        probing = bool(previous) and load >= previous
        # Refused at a level that worked: a drop. While climbing, a level is
        # off by the throttles still on their way back: only a refusal at
        # half of what worked is a drop then. Growing back after a decrease,
        # a refusal above the level settled at is the ceiling found again.
        # Within a task duration of a climb finding the ceiling, a refusal
        # under it is the same climb's: its levels counted attempts whose
        # refusals were on their way back. The ceiling is found lower.
        worked = self.settled if previous else self.proven // 2
        dropped = not probing and load <= worked and now >= self.found_at + self.typical()
        self.ceiling = previous if probing else load
        if probing:
            self.probe_failures += 1  # the ceiling holds; probe less often
            self._set(self.ceiling - 1, f"probe at {load} throttled: the ceiling holds")
        elif dropped:
            self.moved, self.probe_failures = True, 0
            self.proven = max(1, load // 2)
            self._set(load // 2, f"throttled at {load}, a level that worked: the ceiling dropped")
        else:
            if not previous:  # found by climbing: until it moves again, probed rarely
                self.moved, self.found_at = False, now
            self._set(self.ceiling - 1, f"throttled at {load}: the ceiling found")
        self.proven = min(self.proven, self.concurrency)
        self.settled = self.concurrency
        self._probe_later(now)
        if load <= 1 or (dropped and self.throttles):
            # Refused with nothing else out, or a second drop with nothing
            # valid between: a smaller fan-out is not enough.
            self.throttles += 1
            cap = min(self.limits.backoff_cap, self.limits.backoff_base * 2 ** (self.throttles - 1))
        else:
            if dropped:
                self.throttles += 1
            cap = min(self.limits.backoff_base, 2 * self.throttle_latency)
        self.backoff_until = max(self.backoff_until, now + self.rng.uniform(0, cap))
