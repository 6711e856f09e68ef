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
only: :func:`gitrun.ownership.patterns.intersect` still decides each candidate pair.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from gitrun.ownership.patterns import DSTAR, Pattern, Segment, segment_regex

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


# A rule with the head and the tail of its segment ("" for the other rules),
# worked out once per claim and depth.
Key = tuple[Rule, str, str]


def key_of(rule: Rule) -> Key:
    if isinstance(rule, str):
        return rule, "", ""
    head, tail = ends(rule)
    return rule, head, sys.intern(tail)  # globs in one directory share their tails


def ends(segment: Segment) -> tuple[str, str]:
    """The head and the tail of a segment; they never overlap in a name it matches
    (a segment without a wildcard is all head)."""
    size = len(segment)
    i = 0
    while i < size and type(segment[i]) is str:
        i += 1
    if i == size:
        return "".join(segment), ""  # type: ignore[arg-type]  # every token is a str here
    j = size
    while type(segment[j - 1]) is str:
        j -= 1
    return "".join(segment[:i]), "".join(segment[j:])  # type: ignore[arg-type]  # str tokens


# A head group of more members than this is indexed by tail; a smaller one is
# scanned (most heads are a task's own: `t00042-` in `cache/t00042-*.bin`).
SMALL_GROUP = 8


class _Tails(Generic[T]):
    """The members of one head group, by tail."""

    def __init__(self, members: Sequence[tuple[str, T]]) -> None:
        self.by_tail: dict[str, list[T]] = {}
        for tail, member in members:
            self.by_tail.setdefault(tail, []).append(member)
        self.lengths = sorted({len(t) for t in self.by_tail})
        self.reversed = sorted(t[::-1] for t in self.by_tail)

    def ending(self, name: str, room: int) -> Iterator[T]:
        """Members whose tail ends ``name`` and fits in its last ``room`` characters."""
        size = len(name)
        for m in self.lengths:
            if m > room:
                break
            yield from self.by_tail.get(name[size - m :], ())

    def around(self, tail: str) -> Iterator[T]:
        """Members whose tail is a suffix of ``tail``, or has ``tail`` as one."""
        yield from self.ending(tail, len(tail))
        backwards = tail[::-1]
        k = bisect_left(self.reversed, backwards)
        while k < len(self.reversed) and self.reversed[k].startswith(backwards):
            if len(self.reversed[k]) > len(tail):
                yield from self.by_tail[self.reversed[k][::-1]]
            k += 1


# The members of one head: a position, as most heads are one glob's own
# (`t00042-` in `cache/t00042-*.bin`), or a list of them (a list apiece
# would be 6 MB at 100,000 globs).
Members = int | list[int]


def _add(groups: dict[str, Members], head: str, position: int) -> None:
    members = groups.get(head)
    if members is None:
        groups[head] = position
    elif isinstance(members, int):
        groups[head] = [members, position]
    else:
        members.append(position)


class NameIndex(Generic[T]):
    """Items with a rule each, found by a name their rule may match, in their order."""

    def __init__(self, entries: Sequence[tuple[T, Key]]) -> None:
        self._entries = entries
        self._wild: list[int] = []
        self._heads: dict[str, Members] = {}  # head -> the positions of its members
        for position, (_, (rule, head, _tail)) in enumerate(entries):
            if isinstance(rule, str):
                if rule == ANY_NAME:
                    self._wild.append(position)
                continue
            _add(self._heads, head, position)
        self._head_lengths = sorted({len(head) for head in self._heads})
        self._big: dict[str, _Tails[int]] = {}  # made when first asked
        self._wild_items = tuple(entries[p][0] for p in self._wild)

    def matching(self, name: str) -> Sequence[T]:
        """The items whose rule may let ``name`` be the name at their depth."""
        if not self._heads:
            return self._wild_items
        entries = self._entries
        found = list(self._wild)
        size = len(name)
        for n in self._head_lengths:
            if n > size:
                break
            head = name[:n]
            members = self._heads.get(head)
            if members is None:
                continue
            group = (members,) if isinstance(members, int) else members
            if len(group) > SMALL_GROUP:
                tails = self._big.get(head)
                if tails is None:
                    tails = self._big[head] = _Tails([(entries[p][1][2], p) for p in group])
                candidates: Iterable[int] = tails.ending(name, size - n)
            else:
                candidates = [
                    p
                    for p in group
                    if len(entries[p][1][2]) <= size - n and name.endswith(entries[p][1][2])
                ]
            for position in candidates:
                segment = entries[position][1][0]
                assert isinstance(segment, tuple)
                if segment_regex(segment).fullmatch(name):
                    found.append(position)
        if not found:
            return ()
        found.sort()
        return tuple(entries[p][0] for p in found)


def candidate_pairs(keys: Sequence[Key]) -> set[tuple[int, int]]:
    """Pairs (i, j), i < j, of rules that may both let one name through: every
    pair with a rule that takes any name, and the pairs of segments whose heads
    and tails agree. Output-sensitive: pairs that cannot agree are not visited."""
    pairs: set[tuple[int, int]] = set()
    count = len(keys)
    groups: dict[str, Members] = {}  # head -> the positions of its members
    segments = 0
    for i, (rule, head, _tail) in enumerate(keys):
        if isinstance(rule, tuple):
            _add(groups, head, i)
            segments += 1
        elif rule == ANY_NAME:
            pairs.update(
                (min(i, j), max(i, j)) for j in range(count) if j != i and keys[j][0] != NO_NAME
            )
    if segments < 2:
        return pairs
    big: dict[str, _Tails[int]] = {}
    head_lengths = sorted({len(head) for head in groups})
    for i, (rule, head, tail) in enumerate(keys):
        if not isinstance(rule, tuple):
            continue
        for n in head_lengths:
            if n > len(head):
                break
            key = head[:n]
            members = groups.get(key)
            if members is None:
                continue
            group = (members,) if isinstance(members, int) else members
            if len(group) > SMALL_GROUP:
                tails = big.get(key)
                if tails is None:
                    tails = big[key] = _Tails([(keys[j][2], j) for j in group])
                found: Iterable[int] = tails.around(tail)
            else:
                found = [j for j in group if keys[j][2].endswith(tail) or tail.endswith(keys[j][2])]
            if n < len(head):  # a shorter head: this pair is found from here only
                pairs.update((min(i, j), max(i, j)) for j in found)
            else:  # the same head: found from both sides, kept from the first
                pairs.update((i, j) for j in found if j > i)
    return pairs
