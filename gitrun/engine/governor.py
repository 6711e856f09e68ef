"""Protecting the API and the machine: how many attempts may start, and when to halt.

The driver asks :meth:`Governor.slots` before starting attempts and tells it
about every attempt that ended. The governor holds these
policies:

- a canary: the first tasks run alone until one produces valid output;
- throttles use up no attempt, and are met by congestion control: one
  decrease per congestion event (throttles of attempts that started before
  the last decrease are the same event), the level that throttled remembered
  as the API's ceiling, quick regrowth to just under it and slow probing
  above it, starts above the level known to work spaced out so that a
  throttle is heard before many more start, and a jittered backoff when the
  API's capacity is found lower than it was;
- an environment-fault breaker: attempts that all end fast with no output
  and the same diagnostic halt the run instead of burning retries;
- a spawn budget and a halt policy on tasks failed for good;
- a spend budget (:mod:`gitrun.engine.budget`): no start that the run's spend plus
  what its running attempts are expected to cost would carry past it, and
  a projection of each stage at its own rate (the canary's stage when the
  canary passes, a later stage at its first valid output);
- a load gate: no starts while the machine is busy.

Its times (``now``, backoff, pacing, a decrease) are on one clock, the
caller's: a driver's monotonic clock (gitrun.clock), or the wall clock in
external dispatch, whose state outlives each call's process. A park's reset
is a wall-clock instant, converted to that clock once, when it is set.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitrun.store.events import Outcome
from gitrun.store.records import VERSION, Fields, is_finite
from gitrun.visible import last_lines

if TYPE_CHECKING:
    from gitrun.definition.schema import Limits
    from gitrun.engine.budget import SpendGate

THROTTLE_EXIT = 75  # EX_TEMPFAIL
# Pacing of starts above the level known to work (Governor.pace_gap).
BLIND_GAP = 0.1  # seconds at most, before any throttle came back
MAX_GAP = 10.0  # seconds at most, after
VALID_KEPT = 9  # the valid attempts' durations a typical one is the median of
BURST = 0.05  # seconds: starts closer than this (or half the gap) are one burst

# Halt reasons, which the CLI maps to exit code 3.
CANARY = "canary"
ENVIRONMENT = "environment fault"
BUDGET = "spawn budget"
POLICY = "halt policy"
STRICT = "ownership violation"
SPEND = "spend budget"  # max_cost_usd or max_tokens, or the canary's projection
BILLING = "billing"  # the API refused to bill: no credit, or a spend cap reached
# Halts that the facts do not undo by themselves: they are written to the
# ledger, hold every later start/resume/next (exit 3), and `gitrun retry`
# lifts them (a spend halt with --budget or --tokens raising the budget).
# Spawn budget and policy halts are recomputed from the ledger instead.
PERSISTENT = (CANARY, ENVIRONMENT, STRICT, SPEND, BILLING)


def choose_canary(candidates: list[str], size: int, any_done: bool) -> list[str]:
    """The canary: the first ``size`` open tasks of the current stage, in table
    order, unless some task already produced valid output. One rule for every
    dispatch mode."""
    if size <= 0 or any_done:
        return []
    return candidates[:size]


def read_load() -> float:
    """The 1-minute load average (tests replace this function)."""
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without a load average
        return 0.0


@dataclass(frozen=True)
class EndFacts:
    """What the governor needs to know about an attempt that ended."""

    task: str
    outcome: str  # valid, missing, invalid, interrupted, throttled
    duration: float
    exit_code: int | None
    signal: int | None
    wrote_nothing: bool  # no output file existed after the attempt
    diagnostic: str  # the last line of its output
    started: float = 0.0  # when it started, on the governor's clock


@dataclass(frozen=True)
class Halt:
    kind: str
    message: str


def parked_clause(until: float, reason: str) -> str:
    """How a park is said everywhere (driver, live view, status, next)."""
    return f"parked until {time.strftime('%H:%M UTC', time.gmtime(until))} ({reason})"


def is_throttled(exit_code: int | None, output: str, patterns: list[str]) -> bool:
    if exit_code == THROTTLE_EXIT:
        return True
    return any(re.search(p, output, re.IGNORECASE) for p in patterns)


def last_line(output: str) -> str:
    """The worker's last line of output, made visible: it goes into a halt's
    sentence, which is printed and committed to the ledger."""
    said = last_lines(output, 1)
    return said[0] if said else ""


@dataclass
class Governor:
    limits: Limits
    tasks: int
    spawns: int  # spawns so far, from the ledger
    canary: list[str]  # canary task ids; empty when the canary has passed
    failed: int = 0  # tasks failed for good
    usable: int = 0
    rng: random.Random = field(default_factory=random.Random)
    concurrency: int = 0
    backoff_until: float = 0.0
    waiting_for_load: bool = False
    load: float = 0.0  # the last load average read
    # What held the last `slots` below the concurrency: "throttled", "load",
    # "canary running", "failing fast", "spawn budget" or "budget"; "" for nothing.
    held: str = ""
    halt: Halt | None = None
    # Parked until a usage limit resets (epoch seconds, as said and recorded;
    # 0: not parked), and why; ``park_ends``: the same instant on ``clock``.
    parked_until: float = 0.0
    park_reason: str = ""
    park_ends: float = 0.0
    # The clock every ``now`` given to the governor is read from: time.time
    # (external dispatch) or time.monotonic (a driver).
    clock: Callable[[], float] = time.time
    _throttles: int = 0  # congestion events since the last valid completion
    _valid_run: int = 0  # valid completions since the last change of concurrency
    # Congestion control. The level of an attempt is how many of this
    # governor's attempts were out when it started, itself included.
    ceiling: int = 0  # the lowest level the API throttled at (0: none known)
    decreased_at: float = 0.0  # when concurrency last went down for a throttle
    proven: int = 1  # the highest level an attempt started at and ended valid
    last_start: float = 0.0  # when an attempt last started
    probe_failures: int = 0  # probes above the ceiling throttled since it was found
    throttle_latency: float = 0.0  # how long the fastest throttle took to come back
    levels: dict[str, int] = field(default_factory=dict)  # running attempts' levels
    _burst: list[str] = field(default_factory=list)  # the attempts started together last
    paced: bool = True  # False: starts go out together (external dispatch)
    _valid_durations: list[float] = field(default_factory=list)  # the last few
    _streak: list[EndFacts] = field(default_factory=list)  # fast, empty endings in a row
    _lost: int = 0  # attempts lost with their machine since the last valid completion
    _canary_failed: set[str] = field(default_factory=set)
    spend: SpendGate | None = None  # the spend budget, when the run has one

    def __post_init__(self) -> None:
        self.concurrency = self.concurrency or self.limits.concurrency
        self._check_budget()
        self._check_policy()

    # -- may attempts start? ------------------------------------------------------

    def slots(self, running: int, now: float, stage: str | None = None) -> int:
        """How many attempts may start now, given ``running`` are out (all of
        ``stage``, the stage whose tasks would start: stages run one by one);
        ``held`` says what kept it below the concurrency."""
        self.held = ""
        if self.halt is not None:
            return 0
        if now < self.park_ends:
            self.held = "parked"
            return 0
        if now < self.backoff_until:
            self.held = "throttled"
            return 0
        self.load = read_load()
        self.waiting_for_load = self.load > self.limits.load_bound()
        cap = self.concurrency

        def hold(limit: int, why: str) -> None:
            nonlocal cap
            if limit < cap:
                cap, self.held = limit, why

        if self.waiting_for_load:
            # The load average counts everyone's processes: with nothing of the
            # run out, one start is allowed, so a busy machine slows a run
            # down to one attempt at a time but never stalls it.
            hold(0 if running else 1, "load")
        if self.canary:
            hold(len(self.canary), "canary running")
        if self._streak:
            # While attempts keep failing fast and empty, start no more than the
            # breaker needs to decide: the fault costs exactly its window.
            hold(self.limits.breaker_size - len(self._streak), "failing fast")
        hold(self.limits.spawn_budget(self.tasks) - self.spawns + running, "spawn budget")
        free = max(0, cap - running)
        # Above the level known to work, one start per gap: a throttle is
        # heard before many more attempts run into it.
        known = max(0, self.proven - running)
        gap = self.pace_gap()
        if gap and free > known:
            # A probe starts alone, a gap after any other start: whatever the
            # API refuses next is then the probe, not an attempt beside it.
            probes = 1 if not known and now >= self.last_start + gap else 0
            free, self.held = known + probes, "pacing"
        if self.spend is not None and stage is not None and free:
            room = self.spend.room(stage, running, free)
            if room < free:
                free, self.held = room, "budget"
            if not free and not running:
                # Nothing is out and the next attempt would pass the budget:
                # the attempts that were out have finished, and the run halts.
                self.halt = Halt(SPEND, self.spend.halt_message(stage))
        return free

    def eligible(self, task: str) -> bool:
        """Whether ``task`` may start now (only canary tasks while the canary runs)."""
        return not self.canary or task in self.canary

    def next_wake(self, now: float) -> float | None:
        """When starting may become possible again without an attempt ending."""
        if self.halt is not None:
            return None
        if now < self.park_ends:
            return self.park_ends
        if now < self.backoff_until:
            return self.backoff_until
        if self.held == "pacing":
            return self.last_start + self.pace_gap()
        return now + 1.0 if self.waiting_for_load else None

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
        if not self._valid_durations:
            return 0.0
        typical = sorted(self._valid_durations)[len(self._valid_durations) // 2]
        return min(BLIND_GAP, typical / (2 * self.limits.concurrency))

    def started(self, task: str = "", now: float = 0.0) -> None:
        """An attempt of ``task`` started at ``now``."""
        self.spawns += 1
        level = len(self.levels) + 1
        gap = self.pace_gap()
        if now - self.last_start >= (min(BURST, gap / 2) if gap else BURST):
            self._burst = []
        if task:
            # Attempts started together race to the API, and which of them it
            # refuses is chance: each has the level of the whole burst.
            self._burst.append(task)
            for member in self._burst:
                if member in self.levels or member == task:
                    self.levels[member] = level
        self.last_start = now
        self._check_budget()

    # -- an attempt ended ------------------------------------------------------------

    def ended(self, facts: EndFacts, now: float, failed_for_good: bool = False) -> None:
        # The level it started at (0: not started by this governor). Probes
        # start alone (see slots), so a throttle's level is the load the API refused.
        level = self.levels.pop(facts.task, 0)
        if facts.outcome == Outcome.VALID:
            self.usable += 1
            self._streak.clear()
            self._lost = 0
            self._throttles = 0
            if self.canary:
                self.canary = []  # the canary passed: widen the fan-out
            self._valid_durations = [*self._valid_durations[-(VALID_KEPT - 1) :], facts.duration]
            self._grow(level, facts.started)
        elif facts.outcome == Outcome.THROTTLED:
            if now >= self.park_ends:  # (a usage limit is no congestion)
                self._throttled(facts, level, now)
        elif facts.outcome in (Outcome.LOST, Outcome.ABANDONED):
            self._note_loss(facts)
        elif facts.outcome != Outcome.INTERRUPTED:
            self._note_failure(facts)
        if failed_for_good:
            self.failed += 1
            self._check_policy()
        self._check_canary(failed_for_good, facts)

    def _grow(self, level: int, started: float) -> None:
        """An attempt that started at ``level`` ended valid: that level works
        (unless it was out when the API refused that level: of a burst, some
        get through). Below the ceiling concurrency grows back by one per
        valid completion; at it, by one (a probe) after ``grow_after`` rounds
        at the level, and twice as many rounds after each probe the API
        throttled."""
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
            self._valid_run = 0
            return
        self._valid_run += 1
        rounds = self.limits.grow_after * 2**self.probe_failures
        if self._valid_run >= rounds * self.concurrency:
            self.concurrency += 1
            self._valid_run = 0

    def _throttled(self, facts: EndFacts, load: int, now: float) -> None:
        """The API throttled an attempt while ``load`` attempts were out (0:
        unknown). One decrease per congestion event, to just under the
        lowest load the API refused in it, and a jittered backoff: short when
        the ceiling was found or held against a probe (the smaller fan-out
        is under what the API takes), exponential when it is not."""
        self._valid_run = 0
        if facts.duration > 0:
            fastest = self.throttle_latency or facts.duration
            self.throttle_latency = min(fastest, facts.duration)
        load = load or self.concurrency
        if facts.started and facts.started < self.decreased_at:
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
            self._throttles += 1
            cap = min(
                self.limits.backoff_cap, self.limits.backoff_base * 2 ** (self._throttles - 1)
            )
        else:
            # The ceiling found, or held against a probe: the smaller fan-out
            # is under it, and a short wait (as long as two throttles take to
            # come back) keeps the retries apart.
            cap = min(self.limits.backoff_base, 2 * self.throttle_latency)
        self.backoff_until = max(self.backoff_until, now + self.rng.uniform(0, cap))

    def _note_failure(self, facts: EndFacts) -> None:
        fast_and_empty = facts.duration < self.limits.breaker_fast and facts.wrote_nothing
        if not fast_and_empty:
            self._streak.clear()
            return
        said = {f.diagnostic for f in self._streak if f.diagnostic}
        if facts.diagnostic and said and facts.diagnostic not in said:
            self._streak = []  # a different complaint: not one fault repeating
        self._streak.append(facts)
        size = self.limits.breaker_size
        if len(self._streak) >= size and self.halt is None:
            self.halt = Halt(ENVIRONMENT, _diagnose(self._streak[-size:]))

    def _note_loss(self, facts: EndFacts) -> None:
        """An attempt lost with the machine running it (or abandoned with the
        lead session that dispatched it) uses no attempt, but losses with no
        valid output in between mean the cluster or the sessions, not a
        task, are failing: past two full waves of them the run halts."""
        self._lost += 1
        window = 2 * max(self.limits.breaker_size, self.limits.concurrency)
        if self._lost >= window and self.halt is None:
            self.halt = Halt(
                ENVIRONMENT,
                f"environment fault: {self._lost} attempts in a row were lost with the machine "
                "or the lead session running them and none produced valid output (last: "
                f"{facts.diagnostic or facts.outcome}); fix the cause, then `gitrun retry` and "
                "`gitrun resume`",
            )

    def _check_canary(self, failed_for_good: bool, facts: EndFacts) -> None:
        if not self.canary or self.halt is not None or not failed_for_good:
            return
        self._canary_failed.add(facts.task)
        if all(t in self._canary_failed for t in self.canary):
            detail = f" (last: {_describe_exit(facts)}" + (
                f": `{facts.diagnostic}`)" if facts.diagnostic else ")"
            )
            self.halt = Halt(
                CANARY,
                f"canary failed: {', '.join(self.canary)} used up {'its' if len(self.canary) == 1 else 'their'} "
                f"attempts without one valid output{detail}; fix the packet or the executor, then "
                "`gitrun retry` and `gitrun resume`",
            )

    def _check_budget(self) -> None:
        budget = self.limits.spawn_budget(self.tasks)
        if self.spawns >= budget and self.halt is None:
            self.halt = Halt(
                BUDGET,
                f"retry storm: {self.spawns} spawns for {self.usable} usable outputs (max_spawns "
                f"{budget}); find the cause in the ledger and logs, then raise limits.max_spawns "
                "(or GITRUN_MAX_SPAWNS) to continue",
            )

    def _check_policy(self) -> None:
        limit = self.limits.halt_after(self.tasks)
        if limit is not None and self.failed >= limit and self.halt is None:
            self.halt = Halt(
                POLICY,
                f"halt policy {self.limits.halt}: {self.failed} of {self.tasks} tasks failed for good",
            )

    def output_valid(self, stage: str, canary_passed: bool) -> None:
        """An attempt of ``stage`` ended valid, its cost counted. When it passed
        the canary, or (in a run with a canary) is the first of a later stage,
        the stage's rate is known before its fan-out widens: the spend budget's
        projection is said, and halts a run it would overspend."""
        spend = self.spend
        if spend is None:
            return
        if not canary_passed and not (self.limits.canary and spend.is_first_output(stage)):
            return
        sentence = spend.project(stage, canary=canary_passed)
        if sentence is not None and self.halt is None:
            self.halt = Halt(SPEND, sentence)

    def take_notices(self) -> list[str]:
        """What the spend budget has to say (a stage's projection, a budget it
        cannot enforce) since the last call."""
        return self.spend.take_notices() if self.spend is not None else []

    def parked_text(self, now: float) -> str:
        """ "parked until 22:51 UTC (usage limit of claude)" while parked, else ""."""
        return parked_clause(self.parked_until, self.park_reason) if self.park_ends > now else ""

    def park(self, until: float, reason: str) -> None:
        """No starts until ``until`` (a usage limit's reset, epoch seconds):
        running attempts finish."""
        if until > self.parked_until:
            self.parked_until, self.park_reason = until, reason
            self.park_ends = self.clock() + (until - time.time())

    def stop_for(self, halt: Halt) -> None:
        if self.halt is None:
            self.halt = halt

    def export(self) -> GovernorState:
        """What must outlive one process (external dispatch calls gitrun per batch)."""
        return GovernorState(
            self.concurrency,
            self.backoff_until,
            self._throttles,
            self._valid_run,
            self.ceiling,
            self.decreased_at,
            self.proven,
            self.last_start,
            self.probe_failures,
            self.throttle_latency,
            dict(self.levels),
            tuple(self._valid_durations),
        )

    def restore(self, state: GovernorState) -> None:
        if 1 <= state.concurrency <= self.limits.concurrency:
            self.concurrency = state.concurrency
        self.backoff_until = state.backoff_until
        self._throttles = max(0, state.throttles)
        self._valid_run = max(0, state.valid_run)
        self.ceiling = max(0, state.ceiling)
        self.decreased_at = state.decreased_at
        self.proven = max(1, state.proven)
        self.last_start = state.last_start
        self.probe_failures = max(0, state.probe_failures)
        self.throttle_latency = max(0.0, state.throttle_latency)
        self.levels = {t: n for t, n in state.levels.items() if n > 0}
        self._valid_durations = [d for d in state.valid_durations if d >= 0][-VALID_KEPT:]


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


def _describe_exit(facts: EndFacts) -> str:
    return f"signal {facts.signal}" if facts.signal else f"status {facts.exit_code}"


def _diagnose(streak: list[EndFacts]) -> str:
    codes = sorted({_describe_exit(f) for f in streak})
    slowest = max(f.duration for f in streak)
    said = next((f.diagnostic for f in streak if f.diagnostic), "")
    how = (
        codes[0]
        if len(codes) == 1
        else "statuses " + ", ".join(c.removeprefix("status ") for c in codes)
    )
    text = (
        f"environment fault: {len(streak)} of {len(streak)} attempts exited within {slowest:.1f} s "
        f"with {how} and no output"
    )
    return (
        text
        + (f": `{said}`" if said else "")
        + "; fix the environment, then `gitrun retry` and `gitrun resume`"
    )
