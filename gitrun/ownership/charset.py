"""Exact sets of characters, as the single-character parts of a glob see them.

A set is a tuple of sorted, disjoint, non-adjacent code point intervals. It
never holds ``/``: no wildcard or bracket matches the path separator. Sets are
intersected exactly (no sampling of candidate characters), so a search built on
them is complete for character classes with ranges and negations.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CODE_POINT = 0x10FFFF
SLASH = ord("/")
DOT = ord(".")
# Characters a witness prefers, so that reported paths read naturally.
_PREFERRED = tuple(ord(c) for c in "xa0_-")


@dataclass(frozen=True)
class CharSet:
    intervals: tuple[tuple[int, int], ...]

    @staticmethod
    def of(intervals: list[tuple[int, int]], *, negated: bool = False) -> CharSet:
        """The set of the given (inclusive) intervals, or of everything else when
        ``negated``; ``/`` is always left out."""
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(i for i in intervals if i[0] <= i[1]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        if negated:
            complement: list[tuple[int, int]] = []
            start = 0
            for lo, hi in merged:
                if lo > start:
                    complement.append((start, lo - 1))
                start = hi + 1
            if start <= MAX_CODE_POINT:
                complement.append((start, MAX_CODE_POINT))
            merged = complement
        return CharSet(_remove(tuple(merged), SLASH))

    @staticmethod
    def char(ch: str) -> CharSet:
        return CharSet.of([(ord(ch), ord(ch))])

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __contains__(self, ch: str) -> bool:
        cp = ord(ch)
        return any(lo <= cp <= hi for lo, hi in self.intervals)

    def __and__(self, other: CharSet) -> CharSet:
        out: list[tuple[int, int]] = []
        a, b = self.intervals, other.intervals
        i = j = 0
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return CharSet(tuple(out))

    def without_dot(self) -> CharSet:
        return CharSet(_remove(self.intervals, DOT))

    def pick(self) -> str:
        """One member, preferring plain printable characters. The set must not be empty."""
        for cp in _PREFERRED:
            if any(lo <= cp <= hi for lo, hi in self.intervals):
                return chr(cp)
        for lo, hi in self.intervals:  # the first printable ASCII member, if any
            cp = max(lo, 0x21)
            if cp <= hi and cp < 0x7F:
                return chr(cp)
        for lo, hi in self.intervals:  # then anything past the control characters
            cp = max(lo, 0xA1)
            if cp <= hi:
                return chr(cp)
        return chr(self.intervals[0][0])

    def regex(self) -> str:
        """A regular-expression bracket expression for exactly this set."""
        if not self.intervals:
            return "(?!)"
        parts = [
            f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in self.intervals
        ]
        return "[" + "".join(parts) + "]"


def _remove(intervals: tuple[tuple[int, int], ...], cp: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in intervals:
        if lo <= cp <= hi:
            if lo < cp:
                out.append((lo, cp - 1))
            if cp < hi:
                out.append((cp + 1, hi))
        else:
            out.append((lo, hi))
    return tuple(out)


ANY_CHAR = CharSet.of([(0, MAX_CODE_POINT)])
