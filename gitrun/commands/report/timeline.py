"""What a run's ledger says happened over time: its attempts as intervals, the
canary, how many ran against how many were allowed, the throttles and back-offs.

Plain computations over ledger records (no git, no disk), for the HTML report.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gitrun.definition.schema import Limits
from gitrun.engine.governor import EndFacts, Governor
from gitrun.store import events, ledger
from gitrun.store.events import COMMAND, STOPPED, TIMED_OUT, AttemptRecord, Outcome

# How an attempt is drawn: as status names it (gitrun.store.ledger.attempt_kind),
# except that one whose driver died reads "lost".
LOST = Outcome.LOST
KINDS = (
    Outcome.VALID,
    Outcome.INVALID,
    Outcome.MISSING,
    Outcome.THROTTLED,
    TIMED_OUT,
    LOST,
    STOPPED,
)


@dataclass(frozen=True)
class Attempt:
    task: str
    number: int
    stage: str
    start: float  # seconds since the epoch
    end: float
    outcome: str
    kind: str  # one of KINDS (or the outcome itself when gitrun did not know it)
    exit: int | None
    signal: int | None
    reason: str
    concurrency: int | None  # after a throttle: what concurrency backed off to
    recovered: bool  # recorded by the driver that took over from a dead one
    said: tuple[str, ...] = ()  # its worker's last lines, when it did not end valid
    throttles: int = 0  # the tries of its number the API throttled before it

    @property
    def named(self) -> str:
        """``t1 attempt 2``, and which try of it when throttles came before."""
        again = f" (again, after {self.throttles} throttled)" if self.throttles else ""
        return f"{self.task} attempt {self.number}{again}"

    @property
    def lied(self) -> bool:
        """It wrote valid output and still exited non-zero."""
        return self.outcome == Outcome.VALID and self.exit not in (0, None)


def needless_reruns(records: list[dict[str, Any]]) -> list[str]:
    """Tasks a runner trusting exit statuses would have re-run for nothing:
    each wrote a valid output, then exited non-zero."""
    return sorted(
        {
            r.task
            for r in ledger.typed(records)
            if isinstance(r, AttemptRecord)
            and r.outcome == Outcome.VALID
            and r.exit not in (0, None)
        }
    )


def parse_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def read_attempts(records: list[dict[str, Any]]) -> list[Attempt]:
    """The attempt records with readable times, ordered by start."""
    attempts = []
    for line in ledger.attempt_records(records):
        r = AttemptRecord.from_json(line)
        if not r.started or not r.ended or ledger.try_of(line) is None:
            continue  # no readable times, or no attempt number
        attempts.append(
            Attempt(
                task=r.task,
                number=r.attempt,
                stage=r.stage,
                start=r.started,
                end=max(r.started, r.ended),
                outcome=r.outcome,
                kind=LOST if r.outcome == Outcome.ABANDONED else r.kind,
                exit=r.exit,
                signal=r.signal,
                reason=r.reason,
                concurrency=r.concurrency,
                recovered=_recovered(r),
                said=tuple(r.said),
                throttles=r.throttles,
            )
        )
    attempts.sort(key=lambda a: (a.start, a.end))
    return attempts


def _recovered(record: AttemptRecord) -> bool:
    """Recorded after the fact by a driver taking over from a dead one: no
    process was seen end, yet gitrun launched it."""
    if record.outcome == Outcome.ABANDONED:
        return True
    return record.dispatch == COMMAND and record.exit is None and record.signal is None


def canary_attempts(attempts: list[Attempt], canary: int) -> set[tuple[str, int, int]]:
    """The canary's attempts: while no task has produced valid output, only the
    canary may start, so every attempt that started before the
    first valid one ended was the canary's."""
    if canary <= 0:
        return set()
    first_valid = min((a.end for a in attempts if a.outcome == Outcome.VALID), default=None)
    return {
        (a.task, a.number, a.throttles)
        for a in attempts
        if first_valid is None or a.start < first_valid
    }


@dataclass
class Concurrency:
    """Steps of (time, value): attempts running, and attempts allowed to run."""

    running: list[tuple[float, int]]
    allowed: list[tuple[float, int]]
    throttles: list[Attempt]
    backoffs: list[tuple[float, float]]  # windows no attempt may start in, at most
    takeovers: list[float]  # moments a new driver took the run over


def recorded_allowed(
    replayed: list[tuple[float, int]], changes: list[events.ConcurrencyChange]
) -> list[tuple[float, int]]:
    """Allowed, as the governor recorded it: the replay up to its first
    recorded change (the canary alone, the packet's concurrency), then each
    change of a bucket's concurrency the ledger holds (stages run one by one,
    so the bucket that changed last is the one attempts start in)."""
    if not changes:
        return replayed
    first = changes[0].when
    steps = [step for step in replayed if step[0] < first]
    for change in changes:
        if steps and steps[-1][0] == change.when:
            steps[-1] = (change.when, change.concurrency)
        elif not steps or steps[-1][1] != change.concurrency:
            steps.append((change.when, change.concurrency))
    return steps


def concurrency_over_time(attempts: list[Attempt], limits: Limits, tasks: int) -> Concurrency:
    """Running: the attempts that overlap each moment. Allowed: the governor's
    own rules replayed over the attempts' ends (halved at each throttle, to
    the value the ledger recorded; grown after ``grow_after`` valid ends; the
    canary alone first), starting again from the packet's concurrency where a
    new driver took over from a dead or stopped one. A back-off lasts a random
    time up to a ceiling: its window is drawn to that ceiling, or to the next
    start where that came sooner (no attempt starts during a back-off)."""
    moves = sorted([(a.start, 1) for a in attempts] + [(a.end, -1) for a in attempts])
    running: list[tuple[float, int]] = []
    now = 0
    for at, step in moves:  # ends sort before starts at the same moment
        now += step
        if running and running[-1][0] == at:
            running[-1] = (at, now)
        else:
            running.append((at, now))
    starts = sorted(a.start for a in attempts)
    ends = sorted(attempts, key=lambda a: a.end)
    # A driver took over: from an attempt recorded by recovery, or at the
    # first start after one gitrun interrupted. One takeover records all the
    # attempts it found before it starts any.
    takeovers: list[float] = []
    candidates = {a.end for a in attempts if a.recovered}
    candidates |= {
        s for a in attempts if a.outcome == Outcome.INTERRUPTED for s in _next(starts, a.end)
    }
    for at in sorted(candidates):
        if not takeovers or _started_between(starts, takeovers[-1], at):
            takeovers.append(at)
    governor = _replay_governor(limits, tasks, canary=True)
    allowed: list[tuple[float, int]] = []
    if attempts:
        allowed.append((attempts[0].start, _cap(governor)))
    backoffs: list[tuple[float, float]] = []
    seen_valid = False
    events = sorted([(t, 0, None) for t in takeovers] + [(a.end, 1, a) for a in ends], key=_first2)
    for at, _order, attempt in events:
        if attempt is None:
            governor = _replay_governor(limits, tasks, canary=not seen_valid)
        else:
            facts = EndFacts(attempt.task, attempt.outcome, attempt.end - attempt.start,
                             attempt.exit, attempt.signal, False, "", attempt.start)  # fmt: skip
            governor.ended(facts, at)
            if attempt.outcome == Outcome.VALID:
                seen_valid = True
            elif attempt.outcome == Outcome.THROTTLED:
                if attempt.concurrency is not None:
                    governor.concurrency = attempt.concurrency
                until = min([governor.backoff_until, *_next(starts, at)])
                if until > at:  # (finding the ceiling needs no wait)
                    backoffs.append((at, until))
        value = _cap(governor)
        if allowed and allowed[-1][0] == at:
            allowed[-1] = (at, value)
        elif not allowed or allowed[-1][1] != value:
            allowed.append((at, value))
    throttles = [a for a in ends if a.outcome == Outcome.THROTTLED]
    return Concurrency(running, allowed, throttles, backoffs, takeovers)


class _Ceiling(random.Random):
    """Jitter that always picks the largest back-off: the window's upper bound."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _replay_governor(limits: Limits, tasks: int, canary: bool) -> Governor:
    return Governor(
        limits,
        tasks=tasks,
        spawns=0,
        canary=["canary"] * limits.canary if canary else [],
        rng=_Ceiling(),
    )


def _cap(governor: Governor) -> int:
    if governor.canary:
        return min(governor.concurrency, len(governor.canary))
    return governor.concurrency


def _next(starts: list[float], after: float) -> list[float]:
    """The first start after ``after``, as a list of at most one."""
    i = bisect_right(starts, after)
    return starts[i : i + 1]


def _started_between(starts: list[float], after: float, until: float) -> bool:
    """Whether some attempt started after ``after`` and by ``until``."""
    return any(after < s <= until for s in _next(starts, after))


def _first2(event: tuple[float, int, Attempt | None]) -> tuple[float, int]:
    return event[0], event[1]
