"""Protecting the API and the machine: how many attempts may start, and when to halt.

The driver asks :meth:`Governor.slots` before starting attempts and tells it
about every attempt that ended. The governor holds these
policies:

- a canary: the first tasks run alone until one produces valid output;
- throttles shrink concurrency and back off with full jitter instead of
  using up attempts; a run of valid completions grows concurrency back;
- an environment-fault breaker: attempts that all end fast with no output
  and the same diagnostic halt the run instead of burning retries;
- a spawn budget and a halt policy on tasks failed for good;
- a spend budget (:mod:`gitrun.engine.budget`): no start that the run's spend plus
  what its running attempts are expected to cost would carry past it, and
  a projection of each stage at its own rate (the canary's stage when the
  canary passes, a later stage at its first valid output);
- a load gate: no starts while the machine is busy.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitrun.store.records import VERSION, Fields
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
# Halts that the facts do not undo by themselves: they are written to the
# ledger, hold every later start/resume/next (exit 3), and `gitrun retry`
# lifts them (a spend halt with --budget or --tokens raising the budget).
# Spawn budget and policy halts are recomputed from the ledger instead.
PERSISTENT = (CANARY, ENVIRONMENT, STRICT, SPEND)


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


@dataclass(frozen=True)
class Halt:
    kind: str
    message: str


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
    _throttles: int = 0  # throttles since the last valid completion
    _valid_run: int = 0  # valid completions since the last change of concurrency
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
        if now < self.backoff_until:
            return self.backoff_until
        return now + 1.0 if self.waiting_for_load else None

    def started(self) -> None:
        self.spawns += 1
        self._check_budget()

    # -- an attempt ended ------------------------------------------------------------

    def ended(self, facts: EndFacts, now: float, failed_for_good: bool = False) -> None:
        if facts.outcome == "valid":
            self.usable += 1
            self._streak.clear()
            self._lost = 0
            self._throttles = 0
            if self.canary:
                self.canary = []  # the canary passed: widen the fan-out
            self._valid_run += 1
            if (
                self._valid_run >= self.limits.grow_after
                and self.concurrency < self.limits.concurrency
            ):
                self.concurrency += 1
                self._valid_run = 0
        elif facts.outcome == "throttled":
            self._throttles += 1
            self._valid_run = 0
            self.concurrency = max(1, self.concurrency // 2)
            ceiling = min(
                self.limits.backoff_cap, self.limits.backoff_base * 2 ** (self._throttles - 1)
            )
            self.backoff_until = max(self.backoff_until, now + self.rng.uniform(0, ceiling))
        elif facts.outcome in ("lost", "abandoned"):
            self._note_loss(facts)
        elif facts.outcome != "interrupted":
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

    def stop_for(self, halt: Halt) -> None:
        if self.halt is None:
            self.halt = halt

    def export(self) -> GovernorState:
        """What must outlive one process (external dispatch calls gitrun per batch)."""
        return GovernorState(self.concurrency, self.backoff_until, self._throttles, self._valid_run)

    def restore(self, state: GovernorState) -> None:
        if 1 <= state.concurrency <= self.limits.concurrency:
            self.concurrency = state.concurrency
        self.backoff_until = state.backoff_until
        self._throttles = max(0, state.throttles)
        self._valid_run = max(0, state.valid_run)


@dataclass(frozen=True)
class GovernorState:
    """The governor's state between two calls of external dispatch
    (``.git/gitrun/<run>/governor.json``, a version-1 record)."""

    concurrency: int
    backoff_until: float = 0.0
    throttles: int = 0  # since the last valid completion
    valid_run: int = 0  # valid completions since the last change of concurrency

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "concurrency": self.concurrency,
            "backoff_until": self.backoff_until,
            "throttles": self.throttles,
            "valid_run": self.valid_run,
        }

    @classmethod
    def from_json(cls, data: Fields) -> GovernorState:
        return cls(
            data.integer("concurrency"),
            data.number("backoff_until"),
            data.integer("throttles"),
            data.integer("valid_run"),
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
