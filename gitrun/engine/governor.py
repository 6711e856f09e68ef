"""Protecting the API and the machine: how many attempts may start, and when to halt.

The driver asks :meth:`Governor.slots` before starting attempts and tells it
about every attempt that ended. The governor holds these
policies:

- a canary: the first tasks run alone until one produces valid output;
- throttles use up no attempt, and are met by congestion control
  (:mod:`gitrun.engine.congestion`: the adaptive concurrency rule);
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
from typing import TYPE_CHECKING

from gitrun.engine.buckets import Buckets, GovernorRecord
from gitrun.engine.congestion import Congestion
from gitrun.store.events import ConcurrencyChange, Outcome
from gitrun.store.ledger import Refused, refusals
from gitrun.visible import last_lines

if TYPE_CHECKING:
    from gitrun.definition.schema import Limits
    from gitrun.engine.budget import SpendGate

THROTTLE_EXIT = 75  # EX_TEMPFAIL

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
    waiting_for_load: bool = False
    load: float = 0.0  # the last load average read
    # The attempts the API refused in a row (throttles, usage limits) and what
    # the last of them said, from the ledger and kept current.
    refused: Refused = (0, "")
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
    # The bucket (gitrun.engine.buckets) each stage's attempts call, by stage.
    stage_buckets: dict[str, str] = field(default_factory=dict)
    buckets: Buckets = field(init=False)  # one adaptive concurrency per model bucket
    _streak: list[EndFacts] = field(default_factory=list)  # fast, empty endings in a row
    _lost: int = 0  # attempts lost with their machine since the last valid completion
    _canary_failed: set[str] = field(default_factory=set)
    spend: SpendGate | None = None  # the spend budget, when the run has one

    def __post_init__(self) -> None:
        self.buckets = Buckets(self.limits, self.rng, dict(self.stage_buckets))
        self._check_budget()
        self._check_policy()

    # -- the buckets -----------------------------------------------------------------

    def bucket(self, stage: str | None = None) -> Congestion:
        """The bucket ``stage``'s attempts call (the current one for None)."""
        return self.buckets.of(stage)

    @property
    def congestion(self) -> Congestion:
        """The bucket of the current stage."""
        return self.buckets.of()

    def take_changes(self) -> list[ConcurrencyChange]:
        """The buckets' changes of concurrency since the last call, in order."""
        return self.buckets.take_changes()

    # -- the current bucket's numbers, as the callers read them ----------------------

    @property
    def concurrency(self) -> int:
        return self.congestion.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self.congestion.concurrency = value

    @property
    def backoff_until(self) -> float:
        return self.congestion.backoff_until

    @backoff_until.setter
    def backoff_until(self, value: float) -> None:
        self.congestion.backoff_until = value

    # -- may attempts start? ------------------------------------------------------

    def slots(self, running: int, now: float, stage: str | None = None) -> int:
        """How many attempts may start now, given ``running`` are out (all of
        ``stage``, the stage whose tasks would start: stages run one by one);
        ``held`` says what kept it below the concurrency. The concurrency,
        backoff and pacing are those of ``stage``'s bucket."""
        self.held = ""
        if stage is not None:
            self.buckets.asked(stage)
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
        self.congestion.look(now)
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
        free, pacing = self.congestion.paced_room(max(0, cap - running), running, now)
        if pacing:
            self.held = "pacing"
        if self.spend is not None and stage is not None and free:
            room = self.spend.room(stage, running, free)
            if room < free:
                free, self.held = room, "budget"
            if not free and not running:
                # Nothing is out and the next attempt would pass the budget:
                # the attempts that were out have finished, and the run halts.
                self.halt = Halt(SPEND, self.spend.halt_message(stage))
        return free

    def canary_passed(self) -> None:
        """The canary's outputs validate before its attempt ended: widen now."""
        self.canary = []

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
        # An attempt out long enough to count as taken, or a probe due: the
        # next slots() reads either.
        looks = [self.congestion.taken_at(), self.congestion.probe_due()]
        if self.held == "pacing":  # (past: a start may go now, and none is waiting)
            looks.append(self.congestion.raised_at + self.congestion.pace_gap())
        if self.waiting_for_load:
            looks.append(now + 1.0)
        return min((at for at in looks if at is not None and at > now), default=None)

    def started(self, task: str = "", now: float = 0.0, stage: str | None = None) -> None:
        """An attempt of ``task`` (of ``stage``: None, the current one) started at ``now``."""
        self.spawns += 1
        self.buckets.started(task, now, stage)
        self._check_budget()

    # -- an attempt ended ------------------------------------------------------------

    def ended(self, facts: EndFacts, now: float, failed_for_good: bool = False) -> None:
        bucket, level = self.buckets.ended(facts.task)
        self.refused = refusals(self.refused, facts.outcome, facts.diagnostic)
        if facts.outcome == Outcome.VALID:
            self.usable += 1
            self._streak.clear()
            self._lost = 0
            if self.canary:
                self.canary = []  # the canary passed: widen the fan-out
            bucket.valid(level, facts.duration, facts.started, now)
        elif facts.outcome == Outcome.THROTTLED:
            if now >= self.park_ends:  # (a usage limit is no congestion)
                bucket.throttled(level, facts.duration, facts.started, now)
        elif facts.outcome in (Outcome.LOST, Outcome.ABANDONED):
            self._note_loss(facts)
        elif facts.outcome != Outcome.INTERRUPTED:
            self._note_failure(facts)
        if failed_for_good:
            self.failed += 1
            self._check_policy()
        self._check_canary(failed_for_good, facts)

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
            numbers = f"{self.spawns} spawns for {self.usable} usable outputs (max_spawns {budget})"
            fix = "raise limits.max_spawns (or GITRUN_MAX_SPAWNS) to continue"
            count, said = self.refused
            if count:
                # Refusals use no attempt but are spawns: a limit that does
                # not lift spends the budget, and that is the cause to name.
                said = f" (last: `{said}`)" if said else ""
                last = f"last {count} attempts" if count > 1 else "last attempt"
                cause = (
                    f"the API refused the {last} that ended{said}: its limit has not "
                    f"lifted; once it has, {fix}"
                )
            else:
                cause = f"find the cause in the ledger and logs, then {fix}"
            self.halt = Halt(BUDGET, f"retry storm: {numbers}; {cause}")

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

    def export(self) -> GovernorRecord:
        """What must outlive one process (external dispatch calls gitrun per batch)."""
        return self.buckets.export()

    def restore(self, record: GovernorRecord) -> None:
        self.buckets.restore(record)


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
