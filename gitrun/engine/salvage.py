"""Salvage: the try after a cut-off attempt continues its conversation, where it can.

An attempt cut off mid-task (throttled after its client's retries, parked by
a usage limit, timed out, stopped, or left by a dead driver) has done turns
its client keeps. :class:`Salvage` decides, for each launch, whether the try
continues the conversation of the task's latest try
(:func:`gitrun.engine.verdict.next_try`) and fills in what it is told: the
conversation's id, and a continuation prompt that repeats the pointer. The
same decision, taken as an attempt ends, says whether its outputs that did
not validate stay where they are for the try that continues it (a fresh try
finds them quarantined, as always).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitrun.definition.load import RunDef
from gitrun.engine.verdict import NextTry, Tried, is_cut_off, next_try
from gitrun.store import ledger
from gitrun.store.events import Outcome
from gitrun.workers.executor import resumable
from gitrun.workers.salvage import continuation, conversation_said, stored_conversation


@dataclass(frozen=True)
class Start:
    """How a try starts: its conversation ("": one its client names), the
    try it continues (None: fresh) and the turns that conversation holds (what
    the try does not redo), and why it is fresh after a cut-off."""

    conversation: str = ""
    resumed_from: tuple[int, int] | None = None
    fresh_because: str = ""
    turns: int = 0

    @property
    def resumed(self) -> bool:
        return self.resumed_from is not None


class Salvage:
    """A run's way of continuing its cut-off attempts (none: ``[executor]
    resume = false``, or a client gitrun cannot resume)."""

    def __init__(self, run: RunDef, env: Mapping[str, str]) -> None:
        self.resume = resumable(run.packet.executor)
        self.env = {**env, **run.packet.executor.env}  # where the worker finds its client's home

    def after(self, outcome: str, timed_out: bool, conversation: str, resumed: bool) -> NextTry:
        """Whether the try after one that ended so continues its conversation."""
        if self.resume is None:
            return NextTry(False)
        cut = is_cut_off(outcome, timed_out)
        stored = None
        if cut and conversation and not resumed:
            stored = stored_conversation(self.resume, conversation, self.env)
        return next_try(
            Tried(
                cut,
                conversation,
                resumed,
                stored is not None and stored.found,
                stored.turns if stored else 0,
                stored.size if stored else 0,
                self.resume.max_bytes,
            )
        )

    def keeps(self, history: ledger.TaskHistory) -> bool:
        """Whether the task's latest try is to be continued (its outputs stay)."""
        return self._after(history).resume

    def _after(self, history: ledger.TaskHistory) -> NextTry:
        outcome = history.last_outcome or ""
        return self.after(
            outcome, history.last_timed_out, history.conversation, history.last_resumed
        )

    def start(self, history: ledger.TaskHistory, values: dict[str, str]) -> Start:
        """How the task's next try starts; ``values`` get its conversation and,
        for a resumed try, the continuation prompt as its pointer."""
        if self.resume is None:
            return Start()
        plan = self._after(history)
        if plan.resume:
            values["conversation"] = history.conversation
            values["pointer"] = continuation(values["pointer"], _cut_off(history))
            return Start(history.conversation, history.last_try, turns=plan.turns)
        given = str(uuid.uuid4()) if self.resume.given else ""
        values["conversation"] = given
        return Start(given, None, plan.why)

    def said(self, log: Path) -> str:
        """The conversation a client named in its output (``""``: none)."""
        return conversation_said(self.resume, log) if self.resume else ""


def _cut_off(history: ledger.TaskHistory) -> str:
    """How the try before ended, in the continuation prompt's words."""
    if history.last_timed_out:
        return "its time ran out"
    words: dict[str, str] = {
        Outcome.THROTTLED: "the API refused further requests for a while",
        Outcome.ABANDONED: "the process running it stopped",
    }
    return words.get(history.last_outcome or "", "it was stopped")
