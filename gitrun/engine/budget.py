"""The spend budget: what a run may spend, and whether one more attempt fits.

A run's budget is ``[limits] max_cost_usd`` and ``max_tokens``, unless
``gitrun retry RUN --budget USD`` / ``--tokens N`` raised it since: that
writes a ``budget`` event to the ledger, so the raise travels with the run
(resume, another machine, ``land``) like every other fact of it.

:class:`SpendGate` is the governor's arithmetic. An attempt may start when
what the run spent, plus what the attempts out now are expected to cost,
plus what it is expected to cost, stays within the budget. *Expected* is
the median of the finished attempts of the same stage; before the stage's
first, of every finished attempt (the canary's, first of all). Before any
attempt finished, one runs at a time. Attempts whose client stated no cost
are not counted: every sentence says how many, and a budget no attempt
reported against cannot be enforced, which the gate says once per run
and again only when the budget changes (a limit added or raised): its
:attr:`SpendGate.warned` keys name what each warning was about, and in
external mode, where every ``next`` and ``collect`` is a process and a gate
of its own, :class:`SaidWarnings` keeps them in the run's machine-local
state between the calls (``start`` and ``resume`` begin afresh, as a
driver does in command mode).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitrun.store import events, ledger
from gitrun.store.records import VERSION, Fields, load_record, write_record
from gitrun.store.usage import UsageTotals, is_dollars, is_token_count, median
from gitrun.words import counted

if TYPE_CHECKING:
    from pathlib import Path

    from gitrun.definition.load import RunDef
    from gitrun.definition.schema import Limits

_SLACK = 1e-9  # dollars compared as floats: $0.1 + $0.2 may be $0.30000000000000004


@dataclass(frozen=True)
class Budget:
    """The run's budget now; None where it has none."""

    cost_usd: float | None = None
    tokens: int | None = None

    @property
    def is_set(self) -> bool:
        return self.cost_usd is not None or self.tokens is not None

    def to_json(self) -> dict[str, Any]:
        return {"max_cost_usd": self.cost_usd, "max_tokens": self.tokens}


def budget_of(limits: Limits, records: list[dict[str, Any]]) -> Budget:
    """The packet's budget, as the ledger's latest ``budget`` events set it."""
    cost, tokens = limits.max_cost_usd, limits.max_tokens
    for record in ledger.typed(records):
        if not isinstance(record, events.Budget):
            continue
        # Out of range (a ledger an older gitrun wrote): not a budget, skipped.
        value = record.max_cost_usd
        if is_dollars(value) and isinstance(value, int | float) and value > 0:
            cost = float(value)
        value = record.max_tokens
        if is_token_count(value) and type(value) is int and value > 0:
            tokens = value
    return Budget(cost, tokens)


def money(dollars: float) -> str:
    """$0.0079, $0.12, $1.50, $60."""
    if 0 < dollars < 0.01:
        return f"${dollars:.4f}"
    text = f"{dollars:,.2f}"
    return "$" + (text[:-3] if dollars >= 10 and text.endswith(".00") else text)


def _not_reported(attempts: int, what: str) -> str:
    """That no attempt so far reported ``what`` ("a cost", "its tokens")."""
    if attempts == 1:
        return f"the one attempt so far did not report {what} (its client states none)"
    return f"none of the {attempts} attempts so far reported {what} (their client states none)"


def unknown_note(count: int, *, verb: str = "not counted") -> str:
    """ " (2 attempts of unknown cost not counted)", or "" when every cost is known."""
    if not count:
        return ""
    return f" ({counted(count, 'attempt')} of unknown cost {verb})"


@dataclass
class SpendGate:
    """How many more attempts the run's budget lets start, and the sentences
    that go with it. ``totals`` is the engine's, kept current as attempts end."""

    run_id: str
    budget: Budget
    totals: UsageTotals
    tasks: int
    factor: float  # limits.max_projection
    notices: list[str] = field(default_factory=list)  # for the driver or next/collect to say
    # The warnings said, by what each was about: the limit and its value.
    warned: set[str] = field(default_factory=set)
    shape: RunDef | None = None  # the run, for its tasks by stage (None: one stage)
    _sizes: dict[str, int] | None = None

    # -- what an attempt is expected to cost ------------------------------------------------

    def expected_cost(self, stage: str) -> float | None:
        own = self.totals.median_cost(stage)
        if own is not None:
            return own
        every = [c for costs in self.totals.stage_costs.values() for c in costs]
        return median(every) if every else None

    def expected_tokens(self, stage: str) -> int | None:
        own = self.totals.median_tokens(stage)
        if own is not None:
            return own
        every = [t for tokens in self.totals.stage_tokens.values() for t in tokens]
        return round(median(every)) if every else None

    # -- may attempts start? -------------------------------------------------------------------

    def room(self, stage: str, running: int, wanted: int) -> int:
        """How many of ``wanted`` more attempts of ``stage`` fit, ``running`` being out."""
        fits = wanted
        if self.budget.cost_usd is not None:
            known = bool(self.totals.stage_costs)
            fits = min(
                fits,
                self._fit(
                    "max_cost_usd",
                    self.totals.spent_usd,
                    self.expected_cost(stage),
                    self.budget.cost_usd,
                    running,
                    known,
                ),
            )
        if self.budget.tokens is not None:
            known = bool(self.totals.stage_tokens)
            fits = min(
                fits,
                self._fit(
                    "max_tokens",
                    self.totals.tokens,
                    self.expected_tokens(stage),
                    self.budget.tokens,
                    running,
                    known,
                ),
            )
        return max(0, fits)

    def _fit(
        self,
        name: str,
        spent: float,
        each: float | None,
        limit: float,
        running: int,
        known: bool,
    ) -> int:
        if spent >= limit - _SLACK:
            return 0
        if not known:
            if self.totals.attempts == 0:
                return 0 if running else 1  # nothing to go by yet: one at a time
            self._say_unenforceable(name)
            return 1 << 30
        assert each is not None
        if each <= 0:
            return 1 << 30
        return math.floor((limit - spent + _SLACK) / each) - running

    def _say_unenforceable(self, name: str) -> None:
        limit = self.budget.cost_usd if name == "max_cost_usd" else self.budget.tokens
        key = f"{name}={limit!r}"  # the same budget, unenforceable still: said already
        if key in self.warned:
            return
        self.warned.add(key)
        what = "a cost" if name == "max_cost_usd" else "its tokens"
        unreported = _not_reported(self.totals.attempts, what)
        self.notices.append(
            f"warning: limits.{name} cannot be enforced: {unreported}, and gitrun counts "
            "them as unknown, never as zero"
        )

    def halt_message(self, stage: str) -> str:
        """The one sentence of the halt: the spend, the next attempt's estimate, the budget."""
        t = self.totals
        fix = f"raise it with `gitrun retry {self.run_id} --budget USD`"
        if self.budget.cost_usd is not None and self.room_for_cost(stage) == 0:
            each = self.expected_cost(stage)
            nxt = f" and the next attempt is expected to cost ~{money(each)}" if each else ""
            return (
                f"spend budget reached: {money(t.spent_usd)} spent"
                f"{unknown_note(t.unknown_cost)}{nxt}, against max_cost_usd "
                f"{money(self.budget.cost_usd)}; {fix}, then `gitrun resume {self.run_id}`"
            )
        each_tokens = self.expected_tokens(stage)
        nxt = f" and the next attempt is expected to use ~{each_tokens:,}" if each_tokens else ""
        return (
            f"token budget reached: {t.tokens:,} tokens used{unknown_note(t.attempts - t.reported)}"
            f"{nxt}, against max_tokens {self.budget.tokens or 0:,}; raise it with "
            f"`gitrun retry {self.run_id} --tokens N`, then `gitrun resume {self.run_id}`"
        )

    def room_for_cost(self, stage: str) -> int:
        cost = self.budget.cost_usd
        if cost is None:
            return 1 << 30
        known = bool(self.totals.stage_costs)
        return self._fit(
            "max_cost_usd", self.totals.spent_usd, self.expected_cost(stage), cost, 0, known
        )

    # -- the projection: the canary's, then each later stage's first output's ---------------

    def stage_sizes(self) -> dict[str, int]:
        """The run's tasks by stage, in stage order (counted when first asked)."""
        if self._sizes is None:
            shape = self.shape
            if shape is None:
                self._sizes = {"": self.tasks}
            else:
                sizes = dict.fromkeys(shape.stage_names, 0)
                for task in shape.tasks:
                    sizes[shape.stage_of(task)] += 1
                self._sizes = sizes
        return self._sizes

    def is_first_output(self, stage: str) -> bool:
        """Whether the one valid attempt of ``stage`` so far has just been counted."""
        return self.totals.stage_valid.get(stage, 0) == 1

    def project(self, stage: str, canary: bool = True) -> str | None:
        """Once ``stage``'s rate is known (the canary passed, or the stage's
        first output validated), before its fan-out widens: say what its tasks
        would cost at that rate, and the run with what the stages before it
        spent (a notice); return a halt's sentence when that passes the
        budget by more than ``factor``. A later stage is never priced at this
        stage's rate: it is said not to be projected yet."""
        t = self.totals
        sizes = self.stage_sizes()
        single = sum(1 for n in sizes.values() if n) <= 1
        names = list(sizes)
        later = (
            [(name, sizes[name]) for name in names[names.index(stage) + 1 :]]
            if (not single and stage in sizes)
            else []
        )
        pending = _not_projected([item for item in later if item[1]])
        size = self.tasks if single else sizes.get(stage, 0)
        usable = max(1, t.valid if single else t.stage_valid.get(stage, 0))
        halts = []
        if self.budget.cost_usd is not None:
            spent = t.spent_usd if single else sum(t.stage_costs.get(stage, []))
            rate = spent / usable
            before = t.spent_usd - spent
            halts.append(
                self._projection(
                    "max_cost_usd",
                    bool(t.stage_costs),
                    single or bool(t.stage_costs.get(stage)),
                    before + rate * size,
                    self.budget.cost_usd + _SLACK,
                    _Projected(canary, single, stage, size, money, rate, before, pending).said(
                        "cost", "spent", unknown_note(t.unknown_cost)
                    )
                    + f"; budget {money(self.budget.cost_usd)}",
                    "--budget USD",
                )
            )
        if self.budget.tokens is not None:
            used = t.tokens if single else sum(t.stage_tokens.get(stage, []))
            rate = used / usable
            before = t.tokens - used
            halts.append(
                self._projection(
                    "max_tokens",
                    bool(t.stage_tokens),
                    single or bool(t.stage_tokens.get(stage)),
                    before + rate * size,
                    self.budget.tokens,
                    _Projected(canary, single, stage, size, _count, rate, before, pending).said(
                        "tokens", "used", ""
                    )
                    + f"; max_tokens {self.budget.tokens:,}",
                    "--tokens N",
                )
            )
        return next((halt for halt in halts if halt), None)

    def _projection(
        self,
        name: str,
        known: bool,
        stage_known: bool,
        projected: float,
        limit: float,
        said: str,
        option: str,
    ) -> str | None:
        """Say one projection; the halt's sentence when it passes ``factor`` x ``limit``
        (``known``: some attempt reported against ``name``; ``stage_known``: one
        of the stage projected did, without which it has no rate to go by)."""
        if not known:
            self._say_unenforceable(name)
            return None
        if not stage_known:
            return None
        self.notices.append(said)
        if projected <= self.factor * limit:
            return None
        return (
            f"{said}, more than {self.factor:g} x the budget: raise it with "
            f"`gitrun retry {self.run_id} {option}` (or limits.max_projection), "
            f"then `gitrun resume {self.run_id}`"
        )

    def take_notices(self) -> list[str]:
        said, self.notices = self.notices, []
        return said


@dataclass(frozen=True)
class _Projected:
    """One projection's words: the stage's rate, its tasks at that rate, and
    the run with what the stages before it spent (``show`` writes an amount)."""

    canary: bool
    single: bool  # the run has one stage: "N tasks at this rate", as it always said
    stage: str
    size: int
    show: Callable[[float], str]
    rate: float
    before: float
    pending: str  # the later stages, not projected yet

    def said(self, measure: str, verb: str, unknown: str) -> str:
        show, part = self.show, self.rate * self.size
        if self.canary:
            rate = f"canary {measure} {show(self.rate)}{unknown}"
        elif measure == "cost":
            rate = f"stage {self.stage} cost {show(self.rate)} per usable output so far{unknown}"
        else:
            rate = f"stage {self.stage} used {show(self.rate)} tokens per usable output so far"
        tasks = _tasks(self.size)
        if not self.single:
            tasks = f"stage {self.stage}'s {tasks}" if self.canary else f"its {tasks}"
        text = f"{rate}; {tasks} at this rate: ~{show(part)}"
        if self.before > _SLACK or not (self.canary or self.single):
            run = show(self.before + part)
            text += f", the run ~{run} with the {show(self.before)} {verb} before it"
        return text + self.pending


def _tasks(count: int) -> str:
    return counted(count, "task")


def _count(tokens: float) -> str:
    return f"{tokens:,.0f}"


def _not_projected(later: list[tuple[str, int]]) -> str:
    """ " (not projected yet: stage review's 4 tasks, until the first of them validates)"."""
    if not later:
        return ""
    named = " and ".join(f"stage {name}'s {_tasks(size)}" for name, size in later)
    until = (
        "until the first of them validates"
        if len(later) == 1
        else "each until the first of its tasks validates"
    )
    return f" (not projected yet: {named}, {until})"


@dataclass(frozen=True)
class SaidWarnings:
    """The keys of :attr:`SpendGate.warned` an external run has said
    (:attr:`gitrun.store.local.LocalPaths.budget_warnings`, a version-1 record)."""

    keys: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return {"v": VERSION, "said": sorted(self.keys)}

    @classmethod
    def from_json(cls, data: Fields) -> SaidWarnings:
        return cls(frozenset(data.strings("said")))


def read_said(path: Path) -> set[str]:
    """The warnings said already; none when the file is missing or damaged,
    which costs only a warning said again."""
    found = load_record(path, SaidWarnings.from_json, what="budget warnings", fix="", warn=_forget)
    return set(found.keys) if found is not None else set()


def write_said(path: Path, keys: set[str]) -> None:
    """Remember ``keys``; a file that cannot be written only means they are said again."""
    with contextlib.suppress(OSError):
        write_record(path, SaidWarnings(frozenset(keys)))


def _forget(_message: str) -> None:
    """A damaged record of warnings said is read as none said: no more to say."""


# -- showing spend (status, the summary, the live view, the report, the demo) -----------------


def per_usable(totals: UsageTotals, usable: int) -> float | None:
    """The known spend per usable output; None before the first, or with no known cost."""
    if not usable or not totals.stage_costs:
        return None
    return totals.spent_usd / usable


def spend_json(totals: UsageTotals, usable: int, budget: Budget) -> dict[str, Any]:
    """The run's spend for ``status --json``: the totals, per usable output, the budget."""
    per = per_usable(totals, usable)
    return {
        **totals.to_json(),
        "per_usable_usd": None if per is None else round(per, 6),
        "budget": budget.to_json(),
    }


def spend_text(totals: UsageTotals, usable: int, budget: Budget) -> str:
    """One line: the spend so far (and how many attempts it could not count),
    per usable output, wasted, and the budget; "" before any attempt."""
    if not totals.attempts and not budget.is_set:
        return ""
    if totals.attempts and not totals.stage_costs:
        shown = (
            f"spend unknown: none of the {totals.attempts} attempts reported a cost"
            if totals.attempts > 1
            else "spend unknown: the one attempt reported no cost"
        )
    else:
        shown = f"spent {money(totals.spent_usd)}{unknown_note(totals.unknown_cost)}"
        per = per_usable(totals, usable)
        if per is not None:
            shown += f"; {money(per)} per usable output"
        if totals.wasted:
            shown += (
                f"; wasted {money(totals.wasted_usd)} on {counted(totals.wasted, 'attempt')} that did not "
                f"validate{unknown_note(totals.wasted_unknown, verb='among them')}"
            )
    limits = []
    if budget.cost_usd is not None:
        limits.append(f"{money(budget.cost_usd)}")
    if budget.tokens is not None:
        limits.append(f"{budget.tokens:,} tokens")
    if limits:
        shown += f"; budget {' and '.join(limits)}"
    return shown


def tokens_text(totals: UsageTotals) -> str:
    """Tokens by model, one line; "" when no attempt reported any."""
    if not totals.by_model:
        return ""
    parts = []
    for name, m in sorted(totals.by_model.items(), key=lambda item: -item[1].tokens):
        cache = m.cache_read + m.cache_write
        parts.append(
            f"{name} {m.tokens:,} (input {m.input:,}, output {m.output:,}"
            + (f", cache {cache:,}" if cache else "")
            + ")"
        )
    return f"tokens {totals.tokens:,}: " + "; ".join(parts)
