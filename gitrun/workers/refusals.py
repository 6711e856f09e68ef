"""Three kinds of "no" from an API, told apart by what the client said.

- a **throttle** (the server is busy: ``limits.throttle_patterns``): back
  off and shrink the fan-out (gitrun.engine.governor);
- a **quota with a reset time** (a usage limit: ``limits.quota_patterns``):
  the run parks until the reset: no new starts, no attempt used;
- a **billing refusal or spend cap** (``limits.billing_patterns``): the run
  halts at once, with the client's sentence; retrying cannot help.

Billing is judged first (OpenAI's hard cap is a 429 that says "exceeded
your current quota ... billing details"), then the quota, then the throttle.
The reset time is read from the clients' own words and structured output:
Claude Code's ``rate_limit_event`` (``"resetsAt": <unix seconds>``) and its
result sentence ("You've hit your 5-hour limit · resets 10:51pm (UTC)"),
codex's "try again at 3:05 PM" or "try again in 2 hours", an HTTP
``retry-after``. A reset that cannot be read parks the run for
``limits.park_default`` and says so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gitrun.visible import last_lines

QUOTA = "quota"
BILLING = "billing"

_EPOCH = re.compile(r'"resets_?at"\s*:\s*"?(\d{9,11})', re.IGNORECASE)
# A clock time, after a date when the reset is on another day: codex says
# "try again at 3:05 PM" for today, "try again at Dec 7th, 2026 12:47 AM" else.
_CLOCK = re.compile(
    r"(?:resets?|try again)\s+(?:at\s+)?"
    r"(?:(?P<month>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{4}),?\s+"
    r"(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z_+\-/0-9]+)\))?",
    re.IGNORECASE,
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_IN = re.compile(
    r"(?:try again|resets?|retry) in\s+(\d{1,6})(?:\.\d+)?\s*"
    r"(second|sec|s|minute|min|m|hour|hr|h|day|d)s?\b",
    re.IGNORECASE,
)
_RETRY_AFTER = re.compile(r"retry[-_ ]after[\"':\s]+(\d{1,6})\b", re.IGNORECASE)
_UNIT = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
_UNIT.update({"h": 3600, "hr": 3600, "hour": 3600, "d": 86400, "day": 86400})


@dataclass(frozen=True)
class Refusal:
    kind: str  # QUOTA or BILLING
    said: str  # the client's sentence
    until: float | None = None  # the reset (epoch seconds), when it could be read


# seconds: a stated reset this recent has passed during the attempt, not long ago
RESET_JUST_PASSED = 300.0


def refusal_of(
    output: str, quota: list[str], billing: list[str], now: float, local: dt.tzinfo | None = None
) -> Refusal | None:
    """The quota or billing refusal ``output`` shows, or None (a throttle, or no refusal)."""
    for kind, patterns in ((BILLING, billing), (QUOTA, quota)):
        for line in reversed(output.splitlines()):
            if any(re.search(p, line, re.IGNORECASE) for p in patterns):
                until = reset_of(output, now, local) if kind == QUOTA else None
                return Refusal(kind, _sentence(line), until)
    return None


def reset_of(output: str, now: float, local: dt.tzinfo | None = None) -> float | None:
    """When the quota ``output`` speaks of resets (epoch seconds, no earlier
    than ``now``), or None. A stated instant that passed a little before
    ``now`` passed while the client went on or exited: the limit has reset,
    and the answer is ``now``; one long gone is no reset."""
    epoch = _EPOCH.search(output)
    if epoch and float(epoch[1]) > now - RESET_JUST_PASSED:
        return max(now, float(epoch[1]))
    wait = _IN.search(output)
    if wait:
        return now + int(wait[1]) * _UNIT[wait[2].lower()]
    after = _RETRY_AFTER.search(output)
    if after:
        return now + int(after[1])
    clock = _CLOCK.search(output)
    if clock:
        return _next_clock(clock, now, local)
    return None


def _next_clock(found: re.Match[str], now: float, local: dt.tzinfo | None) -> float | None:
    """The moment the clock time ``found`` names: on its date when it names
    one, else the next such moment after ``now``."""
    hour, minute = int(found["hour"]), int(found["minute"] or 0)
    half = (found["half"] or "").lower().replace(".", "")
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    zone: dt.tzinfo | None = local
    if found["zone"]:
        try:
            zone = dt.UTC if found["zone"].upper() == "UTC" else ZoneInfo(found["zone"])
        except (ZoneInfoNotFoundError, ValueError):
            zone = local
    # No zone named: the machine's own, which the client printed it in.
    at = (
        dt.datetime.fromtimestamp(now, zone)
        if zone
        else dt.datetime.fromtimestamp(now).astimezone()
    )
    if found["month"]:
        month = found["month"][:3].lower()
        if month not in _MONTHS:
            return None
        try:
            at = at.replace(
                year=int(found["year"]), month=_MONTHS.index(month) + 1, day=int(found["day"])
            )
        except ValueError:
            return None  # no such day
    reset = at.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if reset.timestamp() <= now:
        if found["month"]:
            return None  # a date gone by is no reset
        reset += dt.timedelta(days=1)
    return reset.timestamp()


def _sentence(line: str) -> str:
    """The client's sentence: from a JSON line, its ``result`` (claude) or
    ``message`` (codex) text."""
    found = re.search(r'"(?:result|message)"\s*:\s*"((?:[^"\\]|\\.)*)"', line)
    text = line
    if found:
        with contextlib.suppress(ValueError):
            text = str(json.loads(f'"{found[1]}"'))
    said = last_lines(text.strip(), 1)
    return said[0][:300] if said else ""
