"""Who may write where: finding paths two tasks could both write, and owners of a path.

Comparing every pattern with every other is quadratic. Instead patterns are
put in a trie keyed by their leading literal segments (``out/*.json`` sits at
``out``; ``out/a.json`` at ``out/a.json``). Every path a pattern owns starts
with its literal segments, so two patterns can only meet when one sits at or
under the other's node: ``a/*`` and ``b/*`` never are, so they are never
compared. This holds for files-only globs too: ``out/*`` (at ``out``) meets the
literal ``out/a`` (at ``out/a``, below it) at the file ``out/a``. A walk of the
trie compares each claim with the claims at its own node and at the nodes
above it, which is linear in the number of claims for the usual fan-out (one
file per task in shared directories). Whether two claims meet, and where, is
:func:`gitrun.patterns.intersect`'s answer, so the semantics are the ones
documented in :mod:`gitrun.patterns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gitrun.patterns import DSTAR, Pattern, intersect, matches

OWNS = "owns"
READS = "reads"


@dataclass(frozen=True)
class Claim:
    """One pattern of one task: a path it owns (may write) or reads."""

    task: str
    text: str  # as the user wrote it
    pattern: Pattern
    kind: str = OWNS
    stage: str = ""


@dataclass(frozen=True)
class Meeting:
    """Two claims of different tasks that can name the same path."""

    first: Claim
    second: Claim
    witness: str


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    exact: list[Claim] = field(default_factory=list)  # wildcard-free, ends here
    globs: list[Claim] = field(default_factory=list)  # wildcard after this prefix


def _build_trie(claims: list[Claim]) -> _Node:
    root = _Node()
    for claim in claims:
        node = root
        for name in claim.pattern.literal_prefix:
            node = node.children.setdefault(name, _Node())
        (node.exact if claim.pattern.is_literal else node.globs).append(claim)
    return root


Conflicts = Callable[[Claim, Claim], bool]


def find_meetings(claims: list[Claim], conflicts: Conflicts) -> Iterator[Meeting]:
    """Every pair of claims for which ``conflicts(a, b)`` holds and a path exists
    that both name. ``conflicts`` is only asked about claims of different tasks
    where at least one of the two owns (two readers never conflict)."""
    root = _build_trie(claims)
    above: list[Claim] = []  # claims at the ancestors of the current node
    # Iterative depth-first walk: (node, how many claims of `above` to keep).
    stack: list[tuple[_Node, int]] = [(root, 0)]
    while stack:
        node, keep = stack.pop()
        del above[keep:]
        yield from _meetings_at(node, above, conflicts)
        depth = len(above)
        above.extend(c for c in node.exact + node.globs if c.kind == OWNS)
        above.extend(c for c in node.exact + node.globs if c.kind == READS)
        for child in node.children.values():
            stack.append((child, len(above)))
        if not node.children:
            del above[depth:]


def _meetings_at(node: _Node, above: list[Claim], conflicts: Conflicts) -> Iterator[Meeting]:
    here = node.exact + node.globs
    if not here:
        return
    # With the claims above: they may reach anything here (a glob above may own a
    # file that a literal here names), so intersect() decides each pair.
    for claim in here:
        for upper in above:
            if upper.task == claim.task or (upper.kind == READS and claim.kind == READS):
                continue
            if not conflicts(upper, claim):
                continue
            witness = intersect(upper.pattern, claim.pattern)
            if witness is not None:
                yield Meeting(upper, claim, witness)
    # At this node: owners against owners and readers; readers never against readers.
    # A cheap test first: the plain characters that start the first wildcard
    # segment must agree (``t01-*.bin`` and ``t02-*.bin`` cannot meet).
    heads = [_head(claim.pattern) for claim in here]
    for index, owner in enumerate(here):
        if owner.kind != OWNS:
            continue
        for position, other in enumerate(here):
            if other.task == owner.task:
                continue
            if other.kind == OWNS and position <= index:
                continue  # each pair of owners once
            if not conflicts(owner, other):
                continue
            ha, hb = heads[index], heads[position]
            if not (ha.startswith(hb) or hb.startswith(ha)):
                continue
            witness = intersect(owner.pattern, other.pattern)
            if witness is not None:
                yield Meeting(owner, other, witness)


def _head(pattern: Pattern) -> str:
    depth = len(pattern.literal_prefix)
    if depth >= len(pattern.segments):
        return ""
    segment = pattern.segments[depth]
    if segment == DSTAR:
        return ""
    chars: list[str] = []
    for token in segment:
        if not isinstance(token, str):
            break
        chars.append(token)
    return "".join(chars)


class OwnerIndex:
    """Answers "which claims own this concrete path?" without scanning them all."""

    def __init__(self, claims: list[Claim]) -> None:
        self._root = _build_trie([c for c in claims if c.kind == OWNS])

    def owners(self, path: str) -> list[Claim]:
        found: list[Claim] = []
        node: _Node | None = self._root
        names = path.split("/")
        for depth in range(len(names) + 1):
            assert node is not None
            # Exact claims here name the path or a directory above it; matches()
            # still refuses a path with an empty, `.` or `..` name.
            found += [c for c in node.exact + node.globs if matches(c.pattern, path)]
            if depth == len(names):
                break
            node = node.children.get(names[depth])
            if node is None:
                break
        return found
