"""Counts in sentences: a number and its noun agreeing ("1 attempt", "2 attempts")."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` and ``noun`` as a sentence says them: ``1 attempt``, ``2 attempts``,
    ``1,000 tasks``; ``plural`` for a noun whose plural is not ``noun + "s"``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
