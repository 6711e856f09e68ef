"""Every kind of record the ledger holds, as a typed record with its reader and writer.

The ledger (:mod:`gitrun.store.ledger`, docs/ledger.md) is JSON lines of two
sorts: attempt records (:class:`AttemptRecord`, format ``"v": 1``) and
run-level events, which carry an ``"event"`` naming their kind
(:class:`Event`) instead. This module is the one place a kind, a field or an
outcome (:class:`Outcome`) is spelled: writers build a record and hand it to
``LedgerWriter.write``; readers take a line's object through :func:`read`,
which gives its typed record (None for a line of no kind this gitrun knows,
which every reader passes over, as it always did) and compare types, never
strings. ``to_json`` gives exactly the object written before records were
typed, so no committed ledger changes format; ``from_json`` reads a field of
the wrong type as its default, as the readers of dicts did.

A record with no ``"v"`` (written before attempt records had one) reads as
version 1; run-level events have never carried one. A field a later gitrun
adds that an older reader would misread bumps :data:`FORMAT`; a new optional
field does not (readers ignore fields they do not know).

The write hooks write ``denied`` records, so importing this module costs no
typing, dataclasses or datetime (enum is already loaded by ``json``'s ``re``):
the records are plain classes.
"""

from __future__ import annotations

from enum import StrEnum

TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, ClassVar, Self

    from gitrun.store.usage import Usage

FORMAT = 1  # the "v" of every attempt record; docs/ledger.md documents the format


class Event(StrEnum):
    """The kind of a run-level record, its ``"event"``."""

    START = "start"  # a round began: its base commit, the tasks up to date
    RETRY = "retry"  # `gitrun retry` gave a task new attempts
    HALT = "halt"  # a halt only a person can lift
    LIFT = "lift"  # `gitrun retry` lifted it
    PARK = "park"  # the run waits for a usage limit's reset
    BUDGET = "budget"  # `gitrun retry --budget/--tokens` set the budget
    VIOLATION = "violation"  # a change outside every owned path
    DEFINITION = "definition"  # the run's own definition: edited, as committed again, taken
    SUSPECT = "suspect"  # a task's valid output appeared, not by an attempt of it
    STRAY = "stray"  # what a confined attempt wrote outside its task's paths
    DENIED = "denied"  # a write the hooks denied an attempt
    CONCURRENCY = "concurrency"  # a model bucket's concurrency changed, and why


class Outcome(StrEnum):
    """How an attempt ended, its ``"outcome"``; also what checking a task's
    outputs on disk finds (valid, missing, invalid)."""

    VALID = "valid"
    MISSING = "missing"
    INVALID = "invalid"
    # Stopped by gitrun (Ctrl-C, SIGTERM) or lost with a dead driver (or the
    # lead session that dispatched it): neither uses up an attempt.
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"
    # Throttled by its API and its outputs did not validate: it backs off and
    # uses no attempt, not even its number (``throttles`` tells tries apart).
    THROTTLED = "throttled"
    LOST = "lost"  # the machine running it was lost (a Ray node or worker died)
    UNSTARTED = "unstarted"  # its program could not be started: the run halts


COUNTED = (Outcome.MISSING, Outcome.INVALID)  # outcomes that use up an attempt
# What an attempt that ended is called where a person reads it (status, the
# report): its outcome, but for one its timeout stopped and one gitrun stopped.
TIMED_OUT = "timed out"
STOPPED = "stopped"
# Where an attempt was dispatched from: gitrun launched it, or a lead session.
COMMAND = "command"
EXTERNAL = "external"
# The ``state`` of a ``definition`` event.
CHANGED = "changed"  # edited while tasks ran
VERIFIED = "verified"  # as committed again
TAKEN = "taken"  # `gitrun resume --take-edits` took the edit


def iso(ts: float) -> str:
    """A ledger timestamp: UTC, milliseconds."""
    from datetime import (
        UTC,
        datetime,
    )  # deferred: the write hook imports this module (<= 3x `python -c pass`)

    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _epoch(value: object) -> float:
    """A ledger timestamp in epoch seconds (0 for one that is not a timestamp)."""
    from datetime import (
        datetime,
    )  # deferred: the write hook imports this module (<= 3x `python -c pass`)

    try:
        return datetime.fromisoformat(value).timestamp() if isinstance(value, str) else 0.0
    except ValueError:
        return 0.0


def _str(data: Mapping[str, Any], name: str, default: str = "") -> str:
    value = data.get(name)
    return value if isinstance(value, str) else default


def _int(data: Mapping[str, Any], name: str) -> int | None:
    value = data.get(name)
    return value if type(value) is int else None


def _strs(data: Mapping[str, Any], name: str) -> list[str]:
    value = data.get(name)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _texts(data: Mapping[str, Any], name: str) -> dict[str, str] | None:
    value = data.get(name)
    if not isinstance(value, dict):
        return None
    if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return value
    return None  # damaged: as if it named none


def _try(value: object) -> dict[str, int] | None:
    """A try named ``{"attempt": N, "throttles": K}`` (None: none, or damaged)."""
    if not isinstance(value, dict):
        return None
    attempt, throttles = value.get("attempt"), value.get("throttles", 0)
    if type(attempt) is not int or type(throttles) is not int:
        return None
    return {"attempt": attempt, "throttles": throttles}


class Record:
    """A record of the ledger; equal to another of its type with the same JSON."""

    __slots__ = ()
    event: ClassVar[Event | None] = None

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Record)
            and type(self) is type(other)
            and self.to_json() == other.to_json()
        )

    __hash__ = None  # type: ignore[assignment]  # records are values, compared by their JSON

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_json()!r})"


class AttemptRecord(Record):
    """One try of a task, as the ledger keeps it: the one definition both
    dispatch modes write (docs/ledger.md, "The ledger"). ``started`` and
    ``ended`` are epoch seconds, written as UTC ISO 8601 with milliseconds
    (:func:`iso`); ``duration`` is the one read back (the written one was
    taken before the times were cut to milliseconds). ``exit``/``signal``
    are None where no process was seen (external dispatch, an attempt a dead
    driver left)."""

    __slots__ = (
        "attempt",
        "concurrency",
        "conversation",
        "dispatch",
        "duration",
        "ended",
        "exit",
        "fresh_because",
        "made",
        "made_from",
        "outcome",
        "reason",
        "resumed_from",
        "resumed_turns",
        "said",
        "signal",
        "stage",
        "started",
        "task",
        "throttles",
        "timed_out",
        "usage",
    )

    def __init__(
        self,
        task: str,
        attempt: int,
        stage: str,
        started: float,
        ended: float,
        outcome: str,
        exit: int | None = None,
        signal: int | None = None,
        timed_out: bool = False,
        reason: str = "",
        dispatch: str = COMMAND,
        concurrency: int | None = None,
        usage: Usage | None = None,
        made_from: dict[str, str] | None = None,
        made: dict[str, str] | None = None,
        said: list[str] | None = None,
        throttles: int = 0,
        duration: float | None = None,
        conversation: str = "",
        resumed_from: dict[str, int] | None = None,
        fresh_because: str = "",
        resumed_turns: int = 0,
    ) -> None:
        self.task = task
        self.attempt = attempt
        self.stage = stage
        self.started = started
        self.ended = ended
        self.outcome = outcome  # an Outcome, or what a newer gitrun wrote
        self.exit = exit
        self.signal = signal
        self.timed_out = timed_out
        self.reason = reason  # why an output did not count, when it did not
        self.dispatch = dispatch  # COMMAND or EXTERNAL
        self.concurrency = concurrency  # after a throttle: the concurrency backed off to
        # What its client reported it used (gitrun.store.usage); None: nothing
        # was reported, so its cost is unknown (never zero).
        self.usage = usage
        # A valid attempt's provenance (gitrun.definition.provenance): what its
        # outputs were made from, and the blob id of each output it made.
        self.made_from = made_from
        self.made = made
        # A failed attempt's last lines of output, made visible (the log has all of it).
        self.said = said or []
        self.throttles = throttles  # the tries of this attempt number throttled before it
        self.duration = round(ended - started, 3) if duration is None else duration
        # Its client's conversation ("": none known), the try whose conversation
        # it continued ({"attempt": N, "throttles": K}; None: it started fresh),
        # and why it started fresh although the try before was cut off
        # (gitrun.engine.salvage).
        self.conversation = conversation
        self.resumed_from = resumed_from
        self.fresh_because = fresh_because
        # The turns (tool calls) the continued conversation held as it started,
        # counted in its client's own file: the turns it did not do again.
        self.resumed_turns = resumed_turns

    @property
    def kind(self) -> str:
        """What the attempt was, in a word a person reads: ``timed out`` when its
        timeout stopped it without valid outputs, ``stopped`` when gitrun stopped
        it (Ctrl-C, ``gitrun stop``), else its outcome."""
        if self.timed_out and self.outcome != Outcome.VALID:
            return TIMED_OUT
        return STOPPED if self.outcome == Outcome.INTERRUPTED else self.outcome

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "v": FORMAT,
            "task": self.task,
            "attempt": self.attempt,
            **({"throttles": self.throttles} if self.throttles else {}),
            "stage": self.stage,
            "started": iso(self.started),
            "ended": iso(self.ended),
            "duration": self.duration,
            "exit": self.exit,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "outcome": self.outcome,
        }
        if self.reason:
            record["reason"] = self.reason
        if self.dispatch != COMMAND:
            record["dispatch"] = self.dispatch
        if self.concurrency is not None:
            record["concurrency"] = self.concurrency
        if self.usage is not None:
            record["usage"] = self.usage.to_json()
        if self.made_from is not None:
            record["made_from"] = self.made_from
        if self.made is not None:
            record["made"] = self.made
        if self.said:
            record["said"] = self.said
        if self.conversation:
            record["conversation"] = self.conversation
        if self.resumed_from is not None:
            record["resumed_from"] = self.resumed_from
        if self.fresh_because:
            record["fresh_because"] = self.fresh_because
        if self.resumed_turns:
            record["resumed_turns"] = self.resumed_turns
        return record

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        from gitrun.store.usage import (
            usage_of,
        )  # deferred: it imports dataclasses, which the write hook must not

        duration = data.get("duration")
        return cls(
            _str(data, "task"),
            _int(data, "attempt") or 0,
            _str(data, "stage"),
            _epoch(data.get("started")),
            _epoch(data.get("ended")),
            _str(data, "outcome"),
            _int(data, "exit"),
            _int(data, "signal"),
            data.get("timed_out") is True,
            _str(data, "reason"),
            _str(data, "dispatch", COMMAND),
            _int(data, "concurrency"),
            usage_of(data),
            _texts(data, "made_from"),
            _texts(data, "made"),
            _strs(data, "said"),
            _int(data, "throttles") or 0,
            duration if type(duration) in (int, float) else None,
            _str(data, "conversation"),
            _try(data.get("resumed_from")),
            _str(data, "fresh_because"),
            max(0, _int(data, "resumed_turns") or 0),  # a count: none below zero
        )


class Start(Record):
    """A round began: the ``base`` commit, and the tasks ``up_to_date`` there."""

    __slots__ = ("at", "base", "up_to_date")
    event = Event.START

    def __init__(self, base: str, up_to_date: list[str], at: str) -> None:
        self.base, self.up_to_date, self.at = base, up_to_date, at

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "base": self.base,
            "up_to_date": self.up_to_date,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str(data, "base"), _strs(data, "up_to_date"), _str(data, "at"))


class Retry(Record):
    """``gitrun retry`` gave ``task`` new attempts (and made an up-to-date one run)."""

    __slots__ = ("at", "task")
    event = Event.RETRY

    def __init__(self, task: str, at: str) -> None:
        self.task, self.at = task, at

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "task": self.task, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        task = data.get("task")
        return cls(task, _str(data, "at")) if isinstance(task, str) else None


class Halt(Record):
    """A halt only a person can lift (``gitrun retry`` lifts it)."""

    __slots__ = ("at", "kind", "message")
    event = Event.HALT

    def __init__(self, kind: str, message: str, at: str) -> None:
        self.kind, self.message, self.at = kind, message, at

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "kind": self.kind, "message": self.message, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        kind = data.get("kind")
        if not isinstance(kind, str):
            return None
        return cls(kind, str(data.get("message") or kind), _str(data, "at"))


class Lift(Record):
    """``gitrun retry`` lifted the halt."""

    __slots__ = ("at",)
    event = Event.LIFT

    def __init__(self, at: str) -> None:
        self.at = at

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(_str(data, "at"))


class Park(Record):
    """A usage limit: no attempt starts before ``until`` (a ledger timestamp)."""

    __slots__ = ("at", "reason", "until")
    event = Event.PARK

    def __init__(self, until: str, reason: str, at: str) -> None:
        self.until, self.reason, self.at = until, reason, at

    @property
    def until_epoch(self) -> float | None:
        """``until`` in epoch seconds; None when it is not a timestamp."""
        from datetime import (
            datetime,
        )  # deferred: the write hook imports this module (<= 3x `python -c pass`)

        try:
            return datetime.fromisoformat(self.until).timestamp()
        except ValueError:
            return None

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "until": self.until, "reason": self.reason, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        until = data.get("until")
        if not isinstance(until, str):
            return None
        return cls(until, str(data.get("reason") or ""), _str(data, "at"))


class Budget(Record):
    """``gitrun retry --budget/--tokens`` set the run's budget; None leaves one as it was.
    Values are as written: the budget's reader judges their range."""

    __slots__ = ("at", "max_cost_usd", "max_tokens")
    event = Event.BUDGET

    def __init__(self, max_cost_usd: object, max_tokens: object, at: str) -> None:
        self.max_cost_usd, self.max_tokens, self.at = max_cost_usd, max_tokens, at

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "max_cost_usd": self.max_cost_usd,
            "max_tokens": self.max_tokens,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(data.get("max_cost_usd"), data.get("max_tokens"), _str(data, "at"))


class Violation(Record):
    """``path`` changed outside every owned path while ``tasks`` ran."""

    __slots__ = ("at", "path", "tasks")
    event = Event.VIOLATION

    def __init__(self, path: str, tasks: list[str], at: str) -> None:
        self.path, self.tasks, self.at = path, tasks, at

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "path": self.path, "tasks": self.tasks, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        path = data.get("path")
        if not isinstance(path, str):
            return None
        return cls(path, _strs(data, "tasks"), _str(data, "at"))


class DefinitionEvent(Record):
    """A file of the run's own definition: ``changed`` while ``tasks`` ran,
    ``verified`` as committed again, or ``taken`` by ``resume --take-edits``
    (the last two without tasks or time)."""

    __slots__ = ("at", "path", "state", "tasks")
    event = Event.DEFINITION

    def __init__(
        self, path: str, state: str, tasks: list[str] | None = None, at: str | None = None
    ) -> None:
        self.path, self.state, self.tasks, self.at = path, state, tasks, at

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"event": self.event, "state": self.state, "path": self.path}
        if self.tasks is not None:
            record["tasks"] = self.tasks
        if self.at is not None:
            record["at"] = self.at
        return record

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        path = data.get("path")
        if not isinstance(path, str):
            return None
        tasks = _strs(data, "tasks") if "tasks" in data else None
        at = _str(data, "at") if "at" in data else None
        return cls(path, _str(data, "state"), tasks, at)


class Suspect(Record):
    """``task``'s valid outputs ``paths`` appeared while ``tasks`` ran, not by an
    attempt of it: set aside under its attempt number ``aside``."""

    __slots__ = ("aside", "at", "paths", "task", "tasks")
    event = Event.SUSPECT

    def __init__(
        self, task: str, paths: list[str], tasks: list[str], aside: int | None, at: str
    ) -> None:
        self.task, self.paths, self.tasks, self.aside, self.at = task, paths, tasks, aside, at

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "task": self.task,
            "paths": self.paths,
            "tasks": self.tasks,
            "aside": self.aside,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        paths = data.get("paths")
        return cls(
            _str(data, "task"),
            paths if isinstance(paths, list) else [],  # readers skip what is not a path
            _strs(data, "tasks"),
            _int(data, "aside"),
            str(data.get("at") or ""),
        )


class Stray(Record):
    """What a confined or scratch attempt wrote outside its task's paths."""

    __slots__ = ("at", "attempt", "paths", "task")
    event = Event.STRAY

    def __init__(self, task: str, attempt: int | None, paths: list[str], at: str) -> None:
        self.task, self.attempt, self.paths, self.at = task, attempt, paths, at

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "task": self.task,
            "attempt": self.attempt,
            "paths": self.paths,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        paths = data.get("paths")
        return cls(
            _str(data, "task"),
            _int(data, "attempt"),
            paths if isinstance(paths, list) else [],
            str(data.get("at") or ""),
        )


class Denied(Record):
    """A write the write hook or the pre-commit hook denied an attempt, asked
    ``times`` times. The hook keeps one line per denial beside the attempt's
    log (``times`` None, and ``"v"``); the ledger, one record a path."""

    __slots__ = ("at", "attempt", "path", "reason", "task", "times", "tool")
    event = Event.DENIED

    def __init__(
        self,
        task: str,
        attempt: int | None,
        path: str,
        tool: str,
        reason: str,
        at: str,
        times: int | None = None,
    ) -> None:
        self.task, self.attempt, self.path = task, attempt, path
        self.tool, self.reason, self.at, self.times = tool, reason, at, times

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "event": self.event,
            "task": self.task,
            "attempt": self.attempt,
            "path": self.path,
            "tool": self.tool,
            "reason": self.reason,
        }
        if self.times is not None:
            record["times"] = self.times
        record["at"] = self.at
        return record

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        times, path = _int(data, "times"), data.get("path")
        if not isinstance(path, str):
            return None
        return cls(
            _str(data, "task"),
            _int(data, "attempt"),
            path,
            str(data.get("tool") or ""),
            str(data.get("reason") or ""),
            str(data.get("at") or ""),
            times if times is None or times > 0 else 1,
        )


class ConcurrencyChange(Record):
    """A model bucket's concurrency changed (gitrun.engine.congestion): to
    what, its ceiling estimate then (0: none known), and why."""

    __slots__ = ("at", "bucket", "ceiling", "concurrency", "reason")
    event = Event.CONCURRENCY

    def __init__(self, bucket: str, concurrency: int, ceiling: int, reason: str, at: str) -> None:
        self.bucket, self.concurrency, self.ceiling = bucket, concurrency, ceiling
        self.reason, self.at = reason, at

    @property
    def when(self) -> float:
        """``at`` in epoch seconds."""
        return _epoch(self.at)

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "bucket": self.bucket,
            "concurrency": self.concurrency,
            "ceiling": self.ceiling,
            "reason": self.reason,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self | None:
        bucket, concurrency = data.get("bucket"), _int(data, "concurrency")
        if not isinstance(bucket, str) or concurrency is None or concurrency < 1:
            return None  # damaged: no bucket runs below one attempt at a time
        ceiling = max(0, _int(data, "ceiling") or 0)
        return cls(bucket, concurrency, ceiling, _str(data, "reason"), _str(data, "at"))


def concurrency_changes(records: list[dict[str, Any]]) -> list[ConcurrencyChange]:
    """Every change of a bucket's concurrency among ``records``, in order."""
    found = (ConcurrencyChange.from_json(r) for r in records if r.get("event") == Event.CONCURRENCY)
    return [change for change in found if change is not None]


EventRecord = (
    Start
    | Retry
    | Halt
    | Lift
    | Park
    | Budget
    | Violation
    | DefinitionEvent
    | Suspect
    | Stray
    | Denied
    | ConcurrencyChange
)
LedgerRecord = AttemptRecord | EventRecord
# The reader of each kind of event.
READERS: dict[str, Callable[[Mapping[str, Any]], EventRecord | None]] = {
    Event.START: Start.from_json,
    Event.RETRY: Retry.from_json,
    Event.HALT: Halt.from_json,
    Event.LIFT: Lift.from_json,
    Event.PARK: Park.from_json,
    Event.BUDGET: Budget.from_json,
    Event.VIOLATION: Violation.from_json,
    Event.DEFINITION: DefinitionEvent.from_json,
    Event.SUSPECT: Suspect.from_json,
    Event.STRAY: Stray.from_json,
    Event.DENIED: Denied.from_json,
    Event.CONCURRENCY: ConcurrencyChange.from_json,
}


def read(data: Mapping[str, Any]) -> LedgerRecord | None:
    """The typed record of one ledger line's object; None for one of no kind
    this gitrun knows (a newer gitrun's event, a line that is no record)."""
    event = data.get("event")
    if event is None:
        if not isinstance(data.get("task"), str):
            return None
        return AttemptRecord.from_json(data)
    reader = READERS.get(event) if isinstance(event, str) else None
    return None if reader is None else reader(data)


def is_record(data: Mapping[str, Any]) -> bool:
    """Whether a line's object is a ledger record at all: it names a task or an event."""
    return isinstance(data.get("task"), str) or isinstance(data.get("event"), str)


def is_attempt(data: Mapping[str, Any]) -> bool:
    """Whether a line's object is an attempt record (no event, an attempt number)."""
    return "attempt" in data and "event" not in data


def write(record: Record) -> dict[str, Any]:
    """The object a record is written as (``LedgerWriter`` writes it as one
    line, keys sorted, no spaces)."""
    return record.to_json()
