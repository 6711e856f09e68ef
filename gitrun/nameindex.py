"""Which patterns can put a given name at a given depth: the index behind the trie walk.

Every path a pattern owns has, at a depth where no ``**`` came before, a name
matching the pattern's segment there. Such a name starts with the segment's
leading plain characters (its *head*) and ends with its trailing ones after
the last wildcard (its *tail*). So:

- a pattern reaches a directory named ``n`` at that depth only if ``n``
  starts with its head, ends with its tail and matches the segment;
- two patterns can put one name there only if one head is a prefix of the
  other and one tail a suffix of the other.

:class:`NameIndex` answers the first question by looking up the prefixes and
suffixes of ``n`` in a dictionary of heads and tails, and
:func:`candidate_pairs` the second by looking up, for each pattern, the heads
its head extends and the tails around its tail. Both are necessary conditions
only: :func:`gitrun.patterns.intersect` still decides each candidate pair.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from gitrun.patterns import DSTAR, Pattern, Segment, segment_regex

# A rule for the name at one depth: a segment it must match, or one of these.
ANY_NAME = "any name"  # a `**` came first, or the pattern owns the tree here
NO_NAME = "no name"  # every path the pattern owns ends above this depth
Rule = Segment | str

T = TypeVar("T")


def name_rule(pattern: Pattern, depth: int) -> Rule:
    """What the name at index ``depth`` of a path ``pattern`` owns must match."""
    if pattern.is_literal:  # it owns the tree beneath its names
        names = pattern.literal_prefix
        return tuple(names[depth]) if depth < len(names) else ANY_NAME
    segments = pattern.wild_segments
    if DSTAR in segments[:depth]:
        return ANY_NAME
    if depth >= len(segments):
        return ANY_NAME if pattern.owns_subtree else NO_NAME
    segment = segments[depth]
    return ANY_NAME if isinstance(segment, str) else segment


def ends(segment: Segment) -> tuple[str, str]:
    """The head and the tail of a segment; they never overlap in a name it matches
    (a segment without a wildcard is all head)."""
    head: list[str] = []
    for token in segment:
        if not isinstance(token, str):
            break
        head.append(token)
    if len(head) == len(segment):
        return "".join(head), ""
    tail: list[str] = []
    for token in reversed(segment):
        if not isinstance(token, str):
            break
        tail.append(token)
    return "".join(head), "".join(reversed(tail))


class NameIndex(Generic[T]):
    """Items with a rule each, found by a name their rule may match, in their order."""

    def __init__(self, entries: Sequence[tuple[T, Rule]]) -> None:
        self._items = [item for item, _ in entries]
        self._wild: list[int] = []
        # head -> tail -> (position, segment)
        self._heads: dict[str, dict[str, list[tuple[int, Segment]]]] = {}
        for position, (_, rule) in enumerate(entries):
            if isinstance(rule, str):
                if rule == ANY_NAME:
                    self._wild.append(position)
                continue
            head, tail = ends(rule)
            self._heads.setdefault(head, {}).setdefault(tail, []).append((position, rule))
        self._head_lengths = sorted({len(head) for head in self._heads})
        self._tail_lengths = {
            head: sorted({len(tail) for tail in tails}) for head, tails in self._heads.items()
        }
        self._wild_items = tuple(self._items[p] for p in self._wild)

    def matching(self, name: str) -> Sequence[T]:
        """The items whose rule may let ``name`` be the name at their depth."""
        if not self._heads:
            return self._wild_items
        found = list(self._wild)
        size = len(name)
        for n in self._head_lengths:
            if n > size:
                break
            head = name[:n]
            tails = self._heads.get(head)
            if tails is None:
                continue
            for m in self._tail_lengths[head]:
                if n + m > size:
                    break
                for position, segment in tails.get(name[size - m :], ()):
                    if segment_regex(segment).fullmatch(name):
                        found.append(position)
        if not found:
            return ()
        found.sort()
        return tuple(self._items[p] for p in found)


class _Tails:
    """The members of one head group, by tail."""

    def __init__(self) -> None:
        self.by_tail: dict[str, list[int]] = {}

    def add(self, position: int, tail: str) -> None:
        self.by_tail.setdefault(tail, []).append(position)

    def freeze(self) -> None:
        self.lengths = sorted({len(t) for t in self.by_tail})
        self.reversed = sorted(t[::-1] for t in self.by_tail)

    def around(self, tail: str) -> Iterator[int]:
        """Members whose tail is a suffix of ``tail``, or has ``tail`` as one."""
        size = len(tail)
        for m in self.lengths:
            if m > size:
                break
            yield from self.by_tail.get(tail[size - m :], ())
        backwards = tail[::-1]
        k = bisect_left(self.reversed, backwards)
        while k < len(self.reversed) and self.reversed[k].startswith(backwards):
            if len(self.reversed[k]) > size:
                yield from self.by_tail[self.reversed[k][::-1]]
            k += 1


def candidate_pairs(rules: Sequence[Rule]) -> set[tuple[int, int]]:
    """Pairs (i, j), i < j, of rules that may both let one name through: every
    pair with a rule that takes any name, and the pairs of segments whose heads
    and tails agree. Output-sensitive: pairs that cannot agree are not visited."""
    pairs: set[tuple[int, int]] = set()
    count = len(rules)
    keyed: list[tuple[int, str, str]] = []
    for i, rule in enumerate(rules):
        if isinstance(rule, tuple):
            keyed.append((i, *ends(rule)))
        elif rule == ANY_NAME:
            pairs.update(
                (min(i, j), max(i, j)) for j in range(count) if j != i and rules[j] != NO_NAME
            )
    if len(keyed) < 2:
        return pairs
    groups: dict[str, _Tails] = {}
    for i, head, tail in keyed:
        groups.setdefault(head, _Tails()).add(i, tail)
    for tails in groups.values():
        tails.freeze()
    head_lengths = sorted({len(head) for head in groups})
    for i, head, tail in keyed:
        for n in head_lengths:
            if n > len(head):
                break
            group = groups.get(head[:n])
            if group is None:
                continue
            if n < len(head):  # a shorter head: this pair is found from here only
                pairs.update((min(i, j), max(i, j)) for j in group.around(tail))
            else:  # the same head: found from both sides, kept from the first
                pairs.update((i, j) for j in group.around(tail) if j > i)
    return pairs
