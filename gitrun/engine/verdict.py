"""The verdict: what an attempt that ended comes to, from what was seen of it.

One pure function, :func:`judge`, for every dispatch mode: the driver
(command mode, a worker's exit, its output and its confinement), the
external engine's ``collect`` (a lease, its expiry, what the lead said) and
recovery (an attempt a dead driver left). It reads only the facts it is
given and the run's rules for reading them; what follows (a halt, a park,
an attempt used or not) is the caller's to carry out, in that order, before
the attempt is recorded.

The order of the questions is the contract (tests/engine/test_verdict.py reads it
as a table): valid outputs decide first; then what says the environment,
not the task, failed (its directory taken away, a worker that could not
start, a lost node, a client's environment fault); then the API's refusals
(billing halts, a usage limit parks, a throttle backs off); then gitrun's
own stop; then the outputs as judged, timed out or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gitrun.definition.schema import Limits
from gitrun.engine.governor import BILLING, ENVIRONMENT, Halt, is_throttled, last_line
from gitrun.store import events
from gitrun.store.events import COUNTED, Outcome
from gitrun.visible import visible
from gitrun.workers.refusals import BILLING as BILLING_REFUSAL
from gitrun.workers.refusals import RESET_JUST_PASSED, Refusal, refusal_of

# seconds: the park of a run refused again, right after a park, with a reset
# it states as passed
REFUSED_AGAIN = 60.0


class Kind(StrEnum):
    """Why an attempt came to its outcome (the ledger records the outcome's word)."""

    VALID = Outcome.VALID  # every output valid: committed
    INVALID = (
        Outcome.INVALID
    )  # an output is there and fails its check (or could not be brought back)
    MISSING = Outcome.MISSING  # an output is not there
    TIMED_OUT = events.TIMED_OUT  # stopped at its timeout, outputs missing or invalid
    FAULT = "environment fault"  # its client showed an environment fault: the run halts
    UNSTARTED = Outcome.UNSTARTED  # its worker could not start: the run halts, no attempt used
    BILLING = "billing"  # the API refused to bill: the run halts, no attempt used
    PARKED = "parked"  # a usage limit: the run parks until its reset, no attempt used
    THROTTLED = Outcome.THROTTLED  # the API was busy: back off, no attempt used
    LOST = Outcome.LOST  # its node or worker died: no attempt used
    INTERRUPTED = (
        Outcome.INTERRUPTED
    )  # stopped by gitrun, or its directory taken away: no attempt used
    ABANDONED = Outcome.ABANDONED  # its lead or driver is gone: no attempt used


@dataclass(frozen=True)
class Facts:
    """What was seen of an attempt as it ended. Only ``outputs`` is always
    known; the rest is what its dispatch mode can see (a lease has no exit)."""

    outputs: str  # the outputs as judged from disk: valid, invalid or missing
    judged: str = ""  # why they are not valid, path by path
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False  # it ran past its timeout (a lease past its expiry)
    stopped: bool = False  # gitrun stopped it (Ctrl-C, SIGTERM)
    said: str = ""  # the worker's last lines of output
    fault: str = ""  # the environment fault its client showed (gitrun.workers.clients), a sentence
    lost: str = ""  # why its node or worker died
    unstarted: str = ""  # why its program could not be started
    not_back: str = ""  # the outputs not brought back from its node or scratch, and why
    sandboxed: bool = False  # it ran under bubblewrap (whose own refusal is an environment fault)
    displaced: tuple[str, ...] = ()  # its directories removed or replaced while it ran
    named_throttled: bool = False  # the lead named it throttled (external mode)
    abandoned: bool = False  # its lead session or driver is gone
    now: float = 0.0  # the wall clock as it ended (a usage limit's reset is a wall-clock time)
    parked_until: float = 0.0  # the run's park as it ended (wall clock; 0: not parked)


@dataclass(frozen=True)
class Rules:
    """How a run reads what its attempts said, and what its sentences name."""

    run_id: str
    limits: Limits = field(default_factory=Limits)
    client: str = "the worker"  # the worker's program, as a usage limit or billing names it


@dataclass(frozen=True)
class Park:
    """A park the verdict asks for: the run starts nothing until ``until``."""

    until: float  # wall clock
    reason: str  # "usage limit of claude"
    unread: str = ""  # the client's sentence, when its reset could not be read (a guess)


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    outcome: str  # the ledger's word for it (gitrun.store.ledger)
    reason: str = ""
    halt: Halt | None = None  # the run halts with this
    park: Park | None = None  # the run parks until then (None: no park, or a later one holds)

    @property
    def uses_attempt(self) -> bool:
        """Whether it counts against the task's attempts."""
        return self.outcome in COUNTED

    @property
    def retries(self) -> bool:
        """Whether the task is to be tried again (once its attempts allow and
        no halt holds the run)."""
        return self.outcome != Outcome.VALID


def judge(facts: Facts, rules: Rules) -> Verdict:
    """The outcome of an attempt, its reason and what follows."""
    if facts.outputs == Outcome.VALID:
        return Verdict(Kind.VALID, Outcome.VALID)
    outcome, reason = facts.outputs, facts.judged
    if facts.not_back:  # an output too big (or a link) to bring back from its node or scratch
        outcome, reason = Outcome.INVALID, facts.not_back
    refused = _confinement_refused(facts, rules)
    if facts.displaced and not refused:  # someone else took its directory: not the task's failure
        displaced = ", ".join(visible(d) for d in facts.displaced)
        why = f"{displaced} was removed or replaced in the work tree while it ran"
        return Verdict(Kind.INTERRUPTED, Outcome.INTERRUPTED, why)
    if refused and not facts.unstarted:  # bubblewrap could not start the worker
        halt = Halt(ENVIRONMENT, refused)
        return Verdict(Kind.UNSTARTED, Outcome.UNSTARTED, last_line(facts.said), halt)
    if facts.unstarted:  # its program is not there: no worker ran
        halt = Halt(ENVIRONMENT, _cannot_start(facts.unstarted))
        return Verdict(Kind.UNSTARTED, Outcome.UNSTARTED, facts.unstarted, halt)
    if facts.lost:  # its node or worker died: the environment's failure
        return Verdict(Kind.LOST, Outcome.LOST, facts.lost)
    if facts.fault:  # the client showed an environment fault: the attempt counts, the run halts
        return Verdict(Kind.FAULT, outcome, reason, Halt(ENVIRONMENT, facts.fault))
    limits = rules.limits
    refusal = refusal_of(facts.said, limits.quota_patterns, limits.billing_patterns, facts.now)
    if refusal is not None:
        return _refused(refusal, facts, rules)
    if facts.named_throttled or is_throttled(facts.exit_code, facts.said, limits.throttle_patterns):
        return Verdict(Kind.THROTTLED, Outcome.THROTTLED, reason)
    if facts.abandoned:
        return Verdict(Kind.ABANDONED, Outcome.ABANDONED, reason)
    if facts.stopped and not facts.timed_out:
        return Verdict(Kind.INTERRUPTED, Outcome.INTERRUPTED, reason)
    if facts.timed_out:
        return Verdict(Kind.TIMED_OUT, outcome, reason)
    return Verdict(Kind(outcome), outcome, reason)


def _refused(refusal: Refusal, facts: Facts, rules: Rules) -> Verdict:
    """An attempt the API refused for billing (the run halts at once) or for
    a usage limit (the run parks until its reset, or ``limits.park_default``
    when the reset cannot be read and no park holds already): no attempt used."""
    if refusal.kind == BILLING_REFUSAL:
        halt = Halt(
            BILLING,
            f"billing: {rules.client} said {refusal.said!r}: the API will not serve more "
            "until credit is added or the spend cap raised; then "
            f"`gitrun retry {rules.run_id}` and `gitrun resume {rules.run_id}`",
        )
        reason = f"the API refused to bill: {refusal.said}"
        return Verdict(Kind.BILLING, Outcome.UNSTARTED, reason, halt)
    until, unread = refusal.until, ""
    if (
        until is not None
        and until <= facts.now
        and facts.parked_until > facts.now - RESET_JUST_PASSED
    ):
        # Its stated reset has passed, and the run has just come out of a
        # park: the API refuses on (a clock ahead of the server's). Wait a
        # while rather than start attempts that are refused at once.
        until = facts.now + min(REFUSED_AGAIN, rules.limits.park_default)
    if until is None:
        if facts.parked_until > facts.now:  # parked already: a guess adds nothing
            return Verdict(Kind.PARKED, Outcome.THROTTLED, refusal.said)
        until, unread = facts.now + rules.limits.park_default, refusal.said
    park = None
    if until > facts.parked_until:
        park = Park(until, f"usage limit of {rules.client}", unread)
    return Verdict(Kind.PARKED, Outcome.THROTTLED, refusal.said, park=park)


def _confinement_refused(facts: Facts, rules: Rules) -> str:
    """When bubblewrap itself refused to start the attempt (it exits 1 and
    says why on its first line), the environment fault to halt with."""
    first = facts.said.lstrip().partition("\n")[0]
    if not facts.sandboxed or facts.exit_code != 1 or not first.startswith("bwrap: "):
        return ""
    if "execvp" in first:  # the program is not there: as when it cannot start
        return _cannot_start(first.removeprefix("bwrap: "))
    return (
        f"environment fault: bubblewrap could not confine an attempt ({visible(first)}); "
        "run where it can (user namespaces allowed), or set [executor] isolation = "
        '"scratch" (a scratch directory per attempt, no namespaces) or "none", then '
        f"`gitrun retry {rules.run_id}` and "
        f"`gitrun resume {rules.run_id}`"
    )


def _cannot_start(why: str) -> str:
    return (
        f"environment fault: the worker cannot start: {why}; install it or fix [executor] "
        "command (`gitrun check` says), then `gitrun retry` and `gitrun resume`"
    )


# -- the try after: continue its conversation, or start fresh ---------------------------------


def is_cut_off(outcome: str, timed_out: bool) -> bool:
    """Whether an attempt (as the ledger records it) was cut off mid-task:
    throttled (a usage limit's park too), timed out, stopped by gitrun, or
    left by a dead driver, with no valid outputs."""
    if outcome == Outcome.VALID:
        return False
    return timed_out or outcome in (Outcome.THROTTLED, Outcome.INTERRUPTED, Outcome.ABANDONED)


@dataclass(frozen=True)
class Tried:
    """What is known of a task's latest try, for the next one."""

    cut_off: bool  # it was cut off mid-task (:func:`is_cut_off`)
    conversation: str = ""  # its conversation's id ("": none known)
    resumed: bool = False  # it was itself a resumed try
    found: bool = False  # its client still keeps the conversation here
    turns: int = 0  # the turns the conversation holds (tool calls)
    size: int = 0  # its size in bytes
    max_bytes: int = 0  # the most its client reloads


@dataclass(frozen=True)
class NextTry:
    resume: bool  # continue the conversation
    why: str = ""  # why a try after a cut-off starts fresh ("": nothing to say)
    turns: int = 0  # the turns a continued conversation holds: what the try does not redo


def next_try(tried: Tried) -> NextTry:
    """Whether the next try continues the latest try's conversation; in this
    order: only a cut-off try with a known conversation is continued, never a
    resumed one that failed (no loop of resumes), never one its client no
    longer keeps (another machine, a cleared home), holds no turn of, or
    could not reload."""
    if not tried.cut_off or not tried.conversation:
        return NextTry(False)
    if tried.resumed:
        return NextTry(False, "the try before was a resumed one, and it failed")
    if not tried.found:
        return NextTry(False, f"its conversation {tried.conversation} is gone")
    if tried.size > tried.max_bytes:
        return NextTry(False, f"its conversation is too large to reload ({tried.size} bytes)")
    if tried.turns == 0:
        return NextTry(False)  # cut off before its first turn: nothing to continue
    return NextTry(True, turns=tried.turns)
