"""What an attempt cost, as its client reported it, and what a run's attempts cost together.

A :class:`Usage` is one attempt's report: tokens by kind, the cost in US
dollars when the client stated one, and the model that did the work. The
ledger keeps it in the attempt's record under ``"usage"``
(:meth:`Usage.to_json`); an attempt whose client reported nothing has no
``"usage"`` at all. Unknown is never zero: an attempt without a report, or
with tokens but no cost, counts in :attr:`UsageTotals.unknown_cost`, and
every sum says how many attempts it could not include.

Token kinds follow the Anthropic API, whose counts do not overlap:
``input`` is input read neither from nor into a cache, ``cache_read`` the
input served from a prompt cache, ``cache_write`` the input written to one,
``output`` everything the model produced (reasoning included). A client
whose input count includes its cached tokens (OpenAI's) is converted by its
reader (:mod:`gitrun.workers.clientusage`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitrun.store.records import Fields, RecordInvalid, is_finite

KINDS = ("input", "output", "cache_read", "cache_write")
MODEL_MAX = 200  # characters of a model name
UNKNOWN_MODEL = "unknown"  # the key of tokens by model whose model was not reported
# The sane range of every amount gitrun holds: a budget (the packet's, or
# `retry --budget`), and one attempt's cost or count of one kind of tokens
# as a worker reports it. Far above any real run or attempt, and far below
# where sums of floats lose their cents or overflow to infinity: a report
# past it is a bug or a lie, never money that was spent.
MAX_USD = 1_000_000.0
MAX_TOKENS = 10**12


def is_dollars(value: object) -> bool:
    """A number of US dollars gitrun can hold: finite, from 0 to :data:`MAX_USD`."""
    return is_finite(value) and 0 <= value <= MAX_USD  # type: ignore[operator]  # a number


def is_token_count(value: object) -> bool:
    """A whole number of tokens from 0 to :data:`MAX_TOKENS` (not a bool)."""
    return type(value) is int and 0 <= value <= MAX_TOKENS


@dataclass(frozen=True)
class Usage:
    """One attempt's usage as its client reported it.

    ``cost_usd`` is None when the client stated no cost (tokens alone are
    not priced: gitrun keeps no price list that could go stale); ``model``
    is None when the client did not say which model answered."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        # The name is shown in status, the live view and the report: what a
        # worker or its client wrote there must not be able to move a
        # terminal's cursor or print lines of its own. Not a name: unknown.
        model = self.model
        if model is not None and not (len(model) <= MODEL_MAX and model.isprintable()):
            object.__setattr__(self, "model", None)

    @property
    def tokens(self) -> int:
        """Every token of the attempt: input, output and both cache kinds."""
        return self.input + self.output + self.cache_read + self.cache_write

    def plus(self, other: Usage) -> Usage:
        """Two reports of one attempt together (say, one per message): the cost is
        known only when both are, the model is the later one's when it has one."""
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            cost,
            other.model or self.model,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "model": self.model,
        }

    @classmethod
    def from_json(cls, data: Fields) -> Usage:
        """The usage of a ledger record's ``"usage"`` object; a kind left out is 0.

        Raises :class:`RecordInvalid` naming a count that is not a whole
        number of tokens in range, a cost that is not a finite number of
        dollars in range (:data:`MAX_USD`: an absurd report is refused, not
        added, so the attempt's cost is unknown), or a model that is not a
        string."""
        get = data.data.get
        counts = (get("input", 0), get("output", 0), get("cache_read", 0), get("cache_write", 0))
        for kind, value in zip(KINDS, counts, strict=True):
            if not is_token_count(value):
                raise RecordInvalid(
                    kind, f"is not a whole number of tokens from 0 to {MAX_TOKENS:,}"
                )
        cost = get("cost_usd")
        if cost is not None and not is_dollars(cost):
            raise RecordInvalid(
                "cost_usd", f"is not a number of US dollars from 0 to {MAX_USD:,.0f} (or null)"
            )
        model = get("model")
        if model is not None and type(model) is not str:
            model = data.optional_string("model")  # raises, naming the field
        input_, output, cache_read, cache_write = counts
        return cls(
            input_,
            output,
            cache_read,
            cache_write,
            None if cost is None else float(cost),
            model or None,
        )


def usage_of(record: Mapping[str, Any]) -> Usage | None:
    """The usage an attempt record holds; None when it holds none (an older
    record, or a client that reported nothing) or one gitrun cannot read."""
    value = record.get("usage")
    if not isinstance(value, dict):
        return None
    try:
        return Usage.from_json(Fields(value))
    except RecordInvalid:
        return None


@dataclass
class ModelTotals:
    """Tokens (and the known cost) of the attempts one model answered."""

    attempts: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float = 0.0  # the known costs only
    unknown_cost: int = 0  # attempts of this model without a stated cost

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


@dataclass
class UsageTotals:
    """A run's attempts summed (``gitrun.store.ledger.usage_totals`` reads them from the ledger).

    ``spent_usd`` and ``wasted_usd`` add up the known costs only; alongside
    each, how many attempts had no known cost (``unknown_cost``,
    ``wasted_unknown``), so no summary passes an unknown off as zero.
    *Wasted* is every attempt that did not end valid: its outputs were
    missing or invalid (or it was throttled, interrupted or lost)."""

    attempts: int = 0
    reported: int = 0  # attempts with a usage report (tokens, a cost, or both)
    unknown_cost: int = 0  # attempts whose cost is unknown: no report, or tokens only
    spent_usd: float = 0.0
    valid: int = 0  # attempts whose outputs validated
    wasted: int = 0  # attempts that did not
    wasted_usd: float = 0.0
    wasted_unknown: int = 0  # of the wasted attempts, those whose cost is unknown
    by_model: dict[str, ModelTotals] = field(default_factory=dict)
    # The known cost and the tokens of each reported attempt, by stage, in
    # ledger order: what the stage's next attempt may be expected to cost.
    stage_costs: dict[str, list[float]] = field(default_factory=dict)
    stage_tokens: dict[str, list[int]] = field(default_factory=dict)
    stage_valid: dict[str, int] = field(default_factory=dict)  # valid attempts by stage

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.by_model.values())

    def add(self, usage: Usage | None, *, valid: bool, stage: str) -> None:
        """Count one attempt: its report (None when it has none) and whether it ended valid."""
        self.attempts += 1
        known = usage is not None and usage.cost_usd is not None
        cost = usage.cost_usd if usage is not None and usage.cost_usd is not None else 0.0
        if valid:
            self.valid += 1
            self.stage_valid[stage] = self.stage_valid.get(stage, 0) + 1
        else:
            self.wasted += 1
            self.wasted_usd += cost
            self.wasted_unknown += not known
        self.unknown_cost += not known
        self.spent_usd += cost
        if usage is None:
            return
        self.reported += 1
        model = self.by_model.setdefault(usage.model or UNKNOWN_MODEL, ModelTotals())
        model.attempts += 1
        model.input += usage.input
        model.output += usage.output
        model.cache_read += usage.cache_read
        model.cache_write += usage.cache_write
        model.cost_usd += cost
        model.unknown_cost += not known
        if known:
            self.stage_costs.setdefault(stage, []).append(cost)
        self.stage_tokens.setdefault(stage, []).append(usage.tokens)

    def median_cost(self, stage: str) -> float | None:
        """The median known cost of the stage's attempts so far; None before the first."""
        costs = self.stage_costs.get(stage)
        return median(costs) if costs else None

    def median_tokens(self, stage: str) -> int | None:
        """The median tokens of the stage's reported attempts so far; None before the first."""
        tokens = self.stage_tokens.get(stage)
        return round(median(tokens)) if tokens else None

    def to_json(self) -> dict[str, Any]:
        """The totals for ``status --json`` and the report."""
        return {
            "attempts": self.attempts,
            "reported": self.reported,
            "unknown_cost": self.unknown_cost,
            "spent_usd": round(self.spent_usd, 6),
            "valid": self.valid,
            "wasted": self.wasted,
            "wasted_usd": round(self.wasted_usd, 6),
            "wasted_unknown": self.wasted_unknown,
            "tokens": self.tokens,
            "by_model": {
                name: {
                    "attempts": m.attempts,
                    **{kind: getattr(m, kind) for kind in KINDS},
                    "cost_usd": round(m.cost_usd, 6),
                    "unknown_cost": m.unknown_cost,
                }
                for name, m in sorted(self.by_model.items())
            },
        }


def median(values: list[float] | list[int]) -> float:
    """statistics.median, imported only when a median is wanted (status shows none)."""
    return statistics.median(values)
