"""Which tries of a run continued a cut-off conversation, and what that saved, from its ledger.

A try that continued the conversation of a cut-off one
(:mod:`gitrun.engine.salvage`) says so in its attempt record
(``resumed_from``, ``resumed_turns``); a try that started fresh although the
one before was cut off says why (``fresh_because``). :func:`resumes_of`
gathers them for ``gitrun status`` (text and ``--json``) and the report, so
both say the same: per task, which try continued which attempt; per run, the
turns not redone (counted in the clients' own conversation files as the try
started) and the tokens the continued tries had spent before their cut, as
their clients reported them. Nothing is estimated: an amount no client
reported is "not measured".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitrun.store.events import AttemptRecord, is_attempt
from gitrun.words import counted


@dataclass(frozen=True)
class Continued:
    """A try (the task's ``number``-th, of attempt ``attempt``) that continued
    the conversation of the task's ``of_try``-th (attempt ``of_attempt``, ended
    ``cut``), whose conversation held ``turns`` turns."""

    task: str
    number: int
    attempt: int
    of_try: int | None  # None: the ledger holds no such try (a damaged or pruned copy)
    of_attempt: int
    cut: str
    turns: int

    def describe(self) -> str:
        """``t1: try 2 (attempt 1) continued the conversation of attempt 1 (throttled); 3 turns not redone``"""
        ended = f" ({self.cut})" if self.cut else ""
        said = (
            f"{self.task}: try {self.number} (attempt {self.attempt}) continued the "
            f"conversation of attempt {self.of_attempt}{ended}"
        )
        return said + (f"; {counted(self.turns, 'turn')} not redone" if self.turns else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "try": self.number,
            "attempt": self.attempt,
            "of_try": self.of_try,
            "of_attempt": self.of_attempt,
            "cut": self.cut,
            "turns": self.turns,
        }


@dataclass(frozen=True)
class Fresh:
    """A try that started fresh although the one before was cut off, and why."""

    task: str
    number: int
    attempt: int
    why: str

    def describe(self) -> str:
        return f"{self.task}: try {self.number} (attempt {self.attempt}) started fresh: {self.why}"

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "try": self.number, "attempt": self.attempt, "why": self.why}


@dataclass
class Resumes:
    """A run's resumed and fresh-after-a-cut tries, and what resuming saved."""

    tries: list[Continued | Fresh] = field(default_factory=list)  # in ledger order
    # Tokens the continued (cut-off) tries had spent, as their clients
    # reported; how many of them reported none.
    tokens: int = 0
    unreported: int = 0

    @property
    def continued(self) -> list[Continued]:
        return [t for t in self.tries if isinstance(t, Continued)]

    @property
    def fresh(self) -> list[Fresh]:
        return [t for t in self.tries if isinstance(t, Fresh)]

    @property
    def turns(self) -> int:
        """The turns the continued conversations held: done once, not again."""
        return sum(c.turns for c in self.continued)

    def __bool__(self) -> bool:
        return bool(self.tries)

    def saved_text(self) -> str:
        """The run-level line: ``resumed 2 tries in a cut-off conversation: 6 turns not redone; ...``."""
        fresh = counted(len(self.fresh), "try", "tries") + " after a cut-off started fresh"
        if not self.continued:
            return f"resumed no try; {fresh}"
        line = (
            f"resumed {counted(len(self.continued), 'try', 'tries')} in a cut-off "
            f"conversation: {counted(self.turns, 'turn')} not redone"
        )
        if self.unreported == len(self.continued):
            line += "; tokens of the cut-off tries not measured (their clients reported none)"
        else:
            line += f"; the cut-off tries had spent {self.tokens:,} tokens"
            if self.unreported:
                line += f" ({self.unreported:,} of them not measured)"
        return line + (f"; {fresh}" if self.fresh else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "continued": [c.to_json() for c in self.continued],
            "fresh": [f.to_json() for f in self.fresh],
            "turns_not_redone": self.turns,
            "cut_off_tokens": self.tokens if len(self.continued) > self.unreported else None,
            "cut_off_unreported": self.unreported,
        }


def resumes_of(records: Iterable[Mapping[str, Any]]) -> Resumes:
    """The resumes among a ledger's attempt records (in ledger order)."""
    found = Resumes()
    tries: dict[str, list[AttemptRecord]] = {}
    for data in records:
        if not is_attempt(data):
            continue
        record = AttemptRecord.from_json(data)
        earlier = tries.setdefault(record.task, [])
        earlier.append(record)
        number = len(earlier)
        if record.resumed_from is not None:
            named = (record.resumed_from["attempt"], record.resumed_from["throttles"])
            source = next(
                (
                    (n, r)
                    for n, r in enumerate(earlier[:-1], 1)
                    if (r.attempt, r.throttles) == named
                ),
                None,
            )
            cut = source[1] if source else None
            found.tries.append(
                Continued(
                    record.task,
                    number,
                    record.attempt,
                    source[0] if source else None,
                    named[0],
                    cut.kind if cut else "",
                    record.resumed_turns,
                )
            )
            if cut is not None and cut.usage is not None:
                found.tokens += cut.usage.tokens
            else:
                found.unreported += 1
        elif record.fresh_because:
            found.tries.append(Fresh(record.task, number, record.attempt, record.fresh_because))
    return found
