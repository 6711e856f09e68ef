"""The verdict, as a table: what was seen of an attempt, and what it comes to.

Each row reads: what was seen (on top of outputs missing, the worker gone
quiet at NOW) -> its kind, the ledger's word, the reason, and what follows
(a halt, a park until, an attempt used). The driver, the external engine's
collect and recovery all ask :func:`gitrun.engine.verdict.judge`; the rows
are the order of its questions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

import pytest

from gitrun.definition.schema import Limits
from gitrun.engine.governor import BILLING, ENVIRONMENT
from gitrun.engine.verdict import Facts, Kind, Rules, judge

NOW = dt.datetime(2026, 12, 3, 20, 0, tzinfo=dt.UTC).timestamp()
HOUR = 3600.0
RULES = Rules("r1", Limits(), client="claude")
GONE = "out.txt: does not exist"
BAD = "out.txt: not valid JSON"
QUOTA = '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":%d}}'
UNREAD_QUOTA = "You've hit your usage limit."
BILLING_SAID = '{"type":"result","is_error":true,"result":"Credit balance is too low"}'
BWRAP_NO_NS = "bwrap: No permissions to create new namespace"
BWRAP_NO_PROGRAM = "bwrap: execvp claude: No such file or directory"


@dataclass(frozen=True)
class Then:
    kind: Kind
    outcome: str
    reason: str = ""  # the reason, or "...text..." for a part of it
    halt: str | None = None  # the halt's kind
    park: float | None = None  # until (wall clock)
    uses_attempt: bool = False


MISSING = Facts("missing", GONE, exit_code=0, now=NOW)
INVALID = replace(MISSING, outputs="invalid", judged=BAD)

ROWS: list[tuple[str, Facts | dict[str, Any], Then]] = [
    # The outputs decide first: valid is valid, whatever else was seen.
    ("valid", Facts("valid", exit_code=0), Then(Kind.VALID, "valid")),
    (
        "valid even when it was stopped, timed out and throttled",
        Facts("valid", exit_code=75, stopped=True, timed_out=True, said="429"),
        Then(Kind.VALID, "valid"),
    ),
    ("missing outputs use an attempt", {}, Then(Kind.MISSING, "missing", GONE, uses_attempt=True)),
    (
        "invalid outputs use an attempt",
        INVALID,
        Then(Kind.INVALID, "invalid", BAD, uses_attempt=True),
    ),
    (
        "a crash by a signal is judged by its outputs",
        {"exit_code": None, "signal": 9},
        Then(Kind.MISSING, "missing", GONE, uses_attempt=True),
    ),
    (
        "an output not brought back is invalid, with why",
        {"not_back": "out.txt: over max_output_bytes"},
        Then(Kind.INVALID, "invalid", "out.txt: over max_output_bytes", uses_attempt=True),
    ),
    (
        "timed out: its outputs' outcome, an attempt used",
        {"timed_out": True, "stopped": True, "exit_code": None, "signal": 15},
        Then(Kind.TIMED_OUT, "missing", GONE, uses_attempt=True),
    ),
    (
        "an expired lease: timed out",
        replace(INVALID, exit_code=None, timed_out=True),
        Then(Kind.TIMED_OUT, "invalid", BAD, uses_attempt=True),
    ),
    # The environment, not the task.
    (
        "its directory taken away while it ran: interrupted",
        {"displaced": ("src", "docs")},
        Then(Kind.INTERRUPTED, "interrupted", "src, docs was removed or replaced in the work tree"),
    ),
    (
        "bubblewrap refused to confine it: unstarted, the run halts",
        {"sandboxed": True, "exit_code": 1, "said": BWRAP_NO_NS},
        Then(Kind.UNSTARTED, "unstarted", BWRAP_NO_NS, ENVIRONMENT),
    ),
    (
        "bubblewrap's refusal outranks a directory taken away",
        {"sandboxed": True, "exit_code": 1, "said": BWRAP_NO_NS, "displaced": ("src",)},
        Then(Kind.UNSTARTED, "unstarted", BWRAP_NO_NS, ENVIRONMENT),
    ),
    (
        "bubblewrap cannot find the program: unstarted, the run halts",
        {"sandboxed": True, "exit_code": 1, "said": BWRAP_NO_PROGRAM},
        Then(Kind.UNSTARTED, "unstarted", BWRAP_NO_PROGRAM, ENVIRONMENT),
    ),
    (
        "a bwrap line from an unconfined worker is only its output",
        {"exit_code": 1, "said": BWRAP_NO_NS},
        Then(Kind.MISSING, "missing", GONE, uses_attempt=True),
    ),
    (
        "its program could not start: unstarted, the run halts",
        {"exit_code": None, "unstarted": "`claude`: not found on PATH"},
        Then(Kind.UNSTARTED, "unstarted", "`claude`: not found on PATH", ENVIRONMENT),
    ),
    (
        "its node died: lost, no attempt used",
        {"exit_code": None, "lost": "node 10.0.0.2 died", "said": "429"},
        Then(Kind.LOST, "lost", "node 10.0.0.2 died"),
    ),
    (
        "its client showed an environment fault: the attempt counts, the run halts",
        {"exit_code": 1, "fault": "environment fault: claude is not logged in", "said": "429"},
        Then(Kind.FAULT, "missing", GONE, ENVIRONMENT, uses_attempt=True),
    ),
    # The API's refusals, in the client's words.
    (
        "billing: unstarted, the run halts at once",
        {"exit_code": 1, "said": BILLING_SAID},
        Then(
            Kind.BILLING, "unstarted", "the API refused to bill: Credit balance is too low", BILLING
        ),
    ),
    (
        "a usage limit with its reset: parked until then",
        {"exit_code": 1, "said": QUOTA % (NOW + 2 * HOUR)},
        Then(Kind.PARKED, "throttled", "...rejected...", park=NOW + 2 * HOUR),
    ),
    (
        "a usage limit whose reset is unread: parked for limits.park_default",
        {"exit_code": 1, "said": UNREAD_QUOTA},
        Then(Kind.PARKED, "throttled", UNREAD_QUOTA, park=NOW + Limits().park_default),
    ),
    (
        "a usage limit whose reset is unread, the run parked already: no new park",
        {"exit_code": 1, "said": UNREAD_QUOTA, "parked_until": NOW + HOUR},
        Then(Kind.PARKED, "throttled", UNREAD_QUOTA),
    ),
    (
        "a usage limit resetting before the park that holds: no new park",
        {"exit_code": 1, "said": QUOTA % (NOW + HOUR), "parked_until": NOW + 2 * HOUR},
        Then(Kind.PARKED, "throttled", "...rejected..."),
    ),
    (
        "a usage limit resetting after the park that holds: parked longer",
        {"exit_code": 1, "said": QUOTA % (NOW + 3 * HOUR), "parked_until": NOW + HOUR},
        Then(Kind.PARKED, "throttled", "...rejected...", park=NOW + 3 * HOUR),
    ),
    (
        "a usage limit whose stated reset passed during the attempt: parked until now",
        {"exit_code": 1, "said": QUOTA % (NOW - 4)},
        Then(Kind.PARKED, "throttled", "...rejected...", park=NOW),
    ),
    (
        "refused again with a reset stated as passed, right after a park: a minute, not a spin",
        {"exit_code": 1, "said": QUOTA % (NOW - 30), "parked_until": NOW - 20},
        Then(Kind.PARKED, "throttled", "...rejected...", park=NOW + 60),
    ),
    (
        "a reset stated as passed after a park long over: parked until now",
        {"exit_code": 1, "said": QUOTA % (NOW - 4), "parked_until": NOW - HOUR},
        Then(Kind.PARKED, "throttled", "...rejected...", park=NOW),
    ),
    (
        "exit 75: throttled, no attempt used",
        {"exit_code": 75},
        Then(Kind.THROTTLED, "throttled", GONE),
    ),
    (
        "a throttle in its output: throttled, no attempt used",
        {"exit_code": 1, "said": "API Error: 529 overloaded"},
        Then(Kind.THROTTLED, "throttled", GONE),
    ),
    (
        "the lead named it throttled: throttled",
        {"exit_code": None, "named_throttled": True},
        Then(Kind.THROTTLED, "throttled", GONE),
    ),
    (
        "a throttle outranks gitrun's stop",
        {"exit_code": 75, "stopped": True},
        Then(Kind.THROTTLED, "throttled", GONE),
    ),
    # Nobody to judge it.
    (
        "its lead or driver is gone: abandoned, no attempt used",
        replace(INVALID, exit_code=None, abandoned=True),
        Then(Kind.ABANDONED, "abandoned", BAD),
    ),
    (
        "stopped by gitrun before its timeout: interrupted, no attempt used",
        {"exit_code": None, "signal": 15, "stopped": True},
        Then(Kind.INTERRUPTED, "interrupted", GONE),
    ),
]


@pytest.mark.parametrize(("seen", "then"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_verdict(seen: Facts | dict[str, Any], then: Then) -> None:
    facts = seen if isinstance(seen, Facts) else replace(MISSING, **seen)
    verdict = judge(facts, RULES)
    assert (verdict.kind, verdict.outcome) == (then.kind, then.outcome)
    if then.reason.startswith("...") and then.reason.endswith("..."):
        assert then.reason.strip(".") in verdict.reason
    elif then.reason in (GONE, BAD, ""):
        assert verdict.reason == then.reason
    else:
        assert verdict.reason.startswith(then.reason)
    assert (verdict.halt.kind if verdict.halt else None) == then.halt
    assert (verdict.park.until if verdict.park else None) == then.park
    assert verdict.uses_attempt == then.uses_attempt
    assert verdict.retries == (then.outcome != "valid")


def test_every_kind_has_a_row() -> None:
    seen = {then.kind for _name, _facts, then in ROWS}
    assert seen == set(Kind)


def test_the_sentences_name_the_run_and_the_client() -> None:
    billing = judge(replace(MISSING, exit_code=1, said=BILLING_SAID), RULES)
    assert billing.halt is not None
    assert billing.halt.message.startswith("billing: claude said 'Credit balance is too low'")
    assert billing.halt.message.endswith("`gitrun retry r1` and `gitrun resume r1`")
    bwrap = judge(replace(MISSING, sandboxed=True, exit_code=1, said=BWRAP_NO_NS), RULES)
    assert bwrap.halt is not None and "`gitrun resume r1`" in bwrap.halt.message
    assert bwrap.halt.message.startswith("environment fault: bubblewrap could not confine")
    missing = judge(replace(MISSING, sandboxed=True, exit_code=1, said=BWRAP_NO_PROGRAM), RULES)
    assert missing.halt is not None
    assert missing.halt.message.startswith(
        "environment fault: the worker cannot start: execvp claude: No such file"
    )
    guessed = judge(replace(MISSING, exit_code=1, said=UNREAD_QUOTA), RULES)
    assert guessed.park is not None
    assert (guessed.park.reason, guessed.park.unread) == ("usage limit of claude", UNREAD_QUOTA)
    read = judge(replace(MISSING, exit_code=1, said=QUOTA % (NOW + HOUR)), RULES)
    assert read.park is not None and read.park.unread == ""


# -- the try after a cut-off: its conversation continued, or a fresh start ----------------

CUT = dict(cut_off=True, conversation="c0ffee00-0000", found=True, turns=3, size=900)
NEXT_ROWS: list[tuple[str, dict[str, Any], bool, str]] = [
    ("a cut-off try with turns done is continued", CUT, True, ""),
    ("a try that ended, not cut off, starts fresh", {**CUT, "cut_off": False}, False, ""),
    ("no conversation known: fresh", {**CUT, "conversation": ""}, False, ""),
    (
        "a resumed try that failed is followed by a fresh one, never another resume",
        {**CUT, "resumed": True},
        False,
        "the try before was a resumed one, and it failed",
    ),
    (
        "its client keeps the conversation no more (another machine, a cleared home)",
        {**CUT, "found": False},
        False,
        "its conversation c0ffee00-0000 is gone",
    ),
    (
        "a conversation too large to reload",
        {**CUT, "size": 10**9},
        False,
        "its conversation is too large to reload (1000000000 bytes)",
    ),
    ("cut off before its first turn: nothing to continue", {**CUT, "turns": 0}, False, ""),
]


@pytest.mark.parametrize(
    ("seen", "resumes", "why"), [r[1:] for r in NEXT_ROWS], ids=[r[0] for r in NEXT_ROWS]
)
def test_the_try_after(seen: dict[str, Any], resumes: bool, why: str) -> None:
    from gitrun.engine.verdict import Tried, next_try

    plan = next_try(Tried(**{"max_bytes": 32 * 2**20, **seen}))
    assert (plan.resume, plan.why) == (resumes, why)


@pytest.mark.parametrize(
    ("outcome", "timed_out", "cut"),
    [
        ("throttled", False, True),  # after its client's retries, or a usage limit's park
        ("missing", True, True),  # its timeout
        ("invalid", True, True),
        ("abandoned", False, True),  # its driver died
        ("interrupted", False, True),  # gitrun stopped it
        ("missing", False, False),  # it ended by itself without its outputs
        ("invalid", False, False),
        ("valid", True, False),
    ],
)
def test_what_counts_as_cut_off(outcome: str, timed_out: bool, cut: bool) -> None:
    from gitrun.engine.verdict import is_cut_off

    assert is_cut_off(outcome, timed_out) is cut
