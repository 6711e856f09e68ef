"""The kinds of value a definition's fields hold, each with the rule that reads it.

A duration (``"20m"``, ``"1h30m"``, 90), a size (``"4GiB"``, 4294967296), an
id, a model name, text that reaches a command line, a regular expression, a
halt policy (``"fail=5"``, ``"fail=10%"``). Each is an ``Annotated`` type that
pydantic enforces with the validator beside it; a validator's ``ValueError``
is the sentence the user reads after the file and the field
(:mod:`gitrun.definition.messages`), so it quotes the value and says the fix.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from gitrun.layout import ID_PATTERN

Identifier = Annotated[str, Field(pattern=ID_PATTERN)]

# -- durations -----------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Longer than any sane attempt, and far from what clocks and timers overflow on.
MAX_DURATION = 30 * 86400.0


def parse_duration(value: object) -> float:
    """Seconds from "90s", "20m", "1h30m", "1.5h" or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError('expected a duration such as "20m" or "90s"')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif text and _DURATION.sub("", text) == "":
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
        else:
            raise ValueError(f'{value!r} is not a duration; write it like "20m", "90s" or "1h30m"')
    else:
        raise ValueError('expected a duration such as "20m" or "90s"')
    if not math.isfinite(seconds):
        raise ValueError(f'{value!r} is not a finite duration; write it like "20m" or "90s"')
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than 30 days; write a shorter duration")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]

# -- sizes ---------------------------------------------------------------------

_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgt]i?b?|b)?", re.IGNORECASE)
# "4G" and "4GiB" are binary (what Ray and Kubernetes users mean); "4GB" decimal.
_SIZE_UNITS = {"": 1, "b": 1} | {
    f"{unit}{suffix}": (1000 if suffix == "b" else 1024) ** power
    for power, unit in enumerate("kmgt", start=1)
    for suffix in ("", "ib", "b")
}


def parse_bytes(value: object) -> int:
    """Bytes from 4294967296, "4GiB", "512MiB", "2GB" or "100k"."""
    if isinstance(value, bool):
        raise ValueError('expected a size such as "4GiB" or 4294967296')
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (found := _SIZE.fullmatch(value.strip().replace(" ", ""))):
        size = int(float(found[1]) * _SIZE_UNITS[(found[2] or "").lower()])
    else:
        raise ValueError(f'{value!r} is not a size; write it like "4GiB", "512MiB" or 4294967296')
    if size < 0:
        raise ValueError("must not be negative")
    return size


Size = Annotated[int, BeforeValidator(parse_bytes)]

# -- text ----------------------------------------------------------------------


def _has_control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def check_model_name(value: str) -> str:
    if not value.strip():
        raise ValueError('the model name is blank; write one such as "sonnet"')
    if _has_control(value):
        raise ValueError(f"{value!r} contains a control character; write the model name alone")
    if value != value.strip():
        raise ValueError(f"{value!r} has spaces around it; write the model name alone")
    return value


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{value!r} contains a NUL character, which no command line can carry")
    return value


ModelName = Annotated[str, AfterValidator(check_model_name)]
# Text that reaches a command line or an environment variable: never a NUL.
ArgText = Annotated[str, AfterValidator(_no_nul)]

# -- patterns ------------------------------------------------------------------


def check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression ({exc})") from exc
    return pattern


Regex = Annotated[str, AfterValidator(check_regex)]

HALT_POLICY = re.compile(r"fail=([0-9]{1,18})(%?)")  # matched whole (fullmatch)


def check_halt(value: str) -> str:
    if not HALT_POLICY.fullmatch(value.replace(" ", "")):
        raise ValueError(f'{value!r} is not a halt policy; write "fail=5" or "fail=10%"')
    return value


HaltPolicy = Annotated[str, AfterValidator(check_halt)]
