"""Who may write where: finding paths two tasks could both write, and owners of a path.

Comparing every pattern with every other is quadratic. Instead patterns are
put in a trie keyed by their leading literal segments (``out/*.json`` sits at
``out``; ``out/a.json`` at ``out/a.json``). Every path a pattern owns starts
with its literal segments, so two patterns can only meet when one sits at or
under the other's node: ``a/*`` and ``b/*`` never are, so they are never
compared. This holds for files-only globs too: ``out/*`` (at ``out``) meets the
literal ``out/a`` (at ``out/a``, below it) at the file ``out/a``.

Thousands of globs may share one directory (``cache/t0001-*.bin``,
``cache/t0002-*.bin``, ...) beside thousands of files. Every path such a glob
owns has, at the glob's first wildcard segment, a name that starts with the
segment's leading plain characters (its *head*) and ends with its trailing
ones (its *tail*). So two claims at one node can meet only when one head is a
prefix of the other and one tail a suffix of the other, and a claim above a
node reaches it only when its segment at that depth matches the node's name.
Both are looked up in indexes (:mod:`gitrun.ownership.nameindex`) instead of compared
pairwise, which keeps the walk near-linear in the number of claims. Whether
two candidate claims meet, and where, is :func:`gitrun.ownership.patterns.intersect`'s
answer, so the semantics are the ones documented in :mod:`gitrun.ownership.patterns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gitrun.ownership.nameindex import Key, NameIndex, candidate_pairs, key_of, name_rule
from gitrun.ownership.patterns import Pattern, intersect, matches

OWNS = "owns"
READS = "reads"


class Claim(NamedTuple):
    """One pattern of one task: a path it owns (may write) or reads (a named
    tuple: a run of 100,000 tasks makes 200,000 of them)."""

    task: str
    text: str  # as the user wrote it
    pattern: Pattern
    kind: str = OWNS
    stage: str = ""


@dataclass(frozen=True, slots=True)
class Meeting:
    """Two claims of different tasks that can name the same path."""

    first: Claim
    second: Claim
    witness: str


class _Node:
    """A directory of the trie. A run's trie has a leaf per owned file, most of
    them with one literal claim: such a leaf is that claim itself in its
    parent's ``children`` (a node costs ten times a dictionary entry), keyed
    by its whole path, which the claim's text already holds (a key of its own
    name alone would be a string more per file: 12 MB at 200,000 files); a
    node is keyed by its name, which has no ``/``. Under the root the two
    are the same. What a node lacks stays None, not empty."""

    __slots__ = ("_index", "children", "exact", "globs")

    def __init__(self, exact: list[Claim] | None = None) -> None:
        self.children: dict[str, _Node | Claim] | None = None
        self.exact = exact  # wildcard-free, ends here
        self.globs: list[Claim] | None = None  # wildcard after this prefix
        self._index: NameIndex[Claim] | None = None

    def claims(self) -> list[Claim]:
        if self.globs is None:
            return self.exact or []
        return self.globs if self.exact is None else self.exact + self.globs

    def child(self, names: Sequence[str], depth: int) -> _Node:
        """The node of ``names[depth]`` beneath this one (at ``depth``), made
        (or made of the bare leaf of its path) as needed."""
        if self.children is None:
            self.children = {}
        name = names[depth]
        found = self.children.get(name)
        if isinstance(found, _Node):
            return found
        if found is None and depth:
            found = self.children.pop("/".join(names[: depth + 1]), None)
            assert not isinstance(found, _Node)  # a key with a `/` is a bare leaf's
        node = self.children[name] = _Node(None if found is None else [found])
        return node

    def globs_by_name(self, depth: int) -> NameIndex[Claim]:
        """The globs here, indexed by what their segment at ``depth`` matches."""
        if self._index is None:
            globs = self.globs or []
            self._index = NameIndex([(c, key_of(name_rule(c.pattern, depth))) for c in globs])
        return self._index


def _name(key: str) -> str:
    """The name of a child of the trie from its key (a bare leaf's is its path)."""
    return key[key.rfind("/") + 1 :]


def _build_trie(claims: Iterable[Claim]) -> _Node:
    root = _Node()
    for claim in claims:
        node = root
        pattern = claim.pattern
        names = pattern.literal_prefix
        if not pattern.is_literal:
            for depth in range(len(names)):
                node = node.child(names, depth)
            if node.globs is None:
                node.globs = []
            node.globs.append(claim)
            continue
        last = len(names) - 1
        for depth in range(last):
            node = node.child(names, depth)
        if node.children is None:
            node.children = {}
        found = node.children.get(names[last])
        if isinstance(found, _Node):
            if found.exact is None:
                found.exact = []
            found.exact.append(claim)
            continue
        path = pattern.text if pattern.names is None else "/".join(names)
        if found is None and last:
            found = node.children.get(path)
            assert not isinstance(found, _Node)  # a key with a `/` is a bare leaf's
        if found is None:
            node.children[path] = claim  # a bare leaf
        else:  # a second claim of this path
            if last:
                del node.children[path]
            node.children[names[last]] = _Node([found, claim])
    return root


Conflicts = Callable[[Claim, Claim], bool]
_NONE: tuple[Claim, ...] = ()
_Frame = tuple[_Node | Claim, int, Sequence[Claim]]


def find_meetings(claims: Iterable[Claim], conflicts: Conflicts) -> Iterator[Meeting]:
    """Every pair of claims for which ``conflicts(a, b)`` holds and a path exists
    that both name. ``conflicts`` is only asked about claims of different tasks
    where at least one of the two owns (two readers never conflict). ``claims``
    is read once (a chain of lists needs no list of them all)."""
    root = _build_trie(claims)
    # Depth-first walk over frames (node, its depth, the claims above it that
    # can reach it: owners before readers at each level, top level first); a
    # node's children are visited last one first, each made when its turn comes.
    stack: list[Iterator[_Frame]] = [iter([(root, 0, _NONE)])]
    while stack:
        frame = next(stack[-1], None)
        if frame is None:
            stack.pop()
            continue
        node, depth, above = frame
        if not isinstance(node, _Node):  # a bare leaf: one literal claim
            yield from _meetings_with_above([node], above, conflicts)
            continue
        here = node.claims()
        # Each claim here with its key, one pair for both uses below (a pair
        # apiece again for the children would be 6 MB at 100,000 globs).
        keyed = [(c, key_of(name_rule(c.pattern, depth))) for c in here]
        if here:
            yield from _meetings_with_above(here, above, conflicts)
            yield from _meetings_at(here, [key for _, key in keyed], conflicts)
        if node.children is None:
            continue
        # The claims that may reach the children: those above, then the
        # owners here, then the readers here.
        reaching = [(c, key_of(name_rule(c.pattern, depth))) for c in above]
        reaching += [pair for pair in keyed if pair[0].kind == OWNS]
        reaching += [pair for pair in keyed if pair[0].kind == READS]
        stack.append(_frames(node.children, depth, reaching))


def _frames(
    children: dict[str, _Node | Claim], depth: int, reaching: list[tuple[Claim, Key]]
) -> Iterator[_Frame]:
    """The frames of a node's children, last child first, each with the claims
    (of ``reaching``, at and above the node) whose segment lets its name through."""
    if not reaching:
        for child in reversed(children.values()):
            yield child, depth + 1, _NONE
        return
    index = NameIndex(reaching)
    for key, child in reversed(children.items()):
        yield child, depth + 1, index.matching(_name(key))


def _meetings_with_above(
    here: list[Claim], above: Sequence[Claim], conflicts: Conflicts
) -> Iterator[Meeting]:
    # The claims above that reach this node may own anything here (a glob
    # above may own a file that a literal here names): intersect() decides.
    for claim in here:
        for upper in above:
            if upper.task == claim.task or (upper.kind == READS and claim.kind == READS):
                continue
            if not conflicts(upper, claim):
                continue
            witness = intersect(upper.pattern, claim.pattern)
            if witness is not None:
                yield Meeting(upper, claim, witness)


def _meetings_at(here: list[Claim], keys: list[Key], conflicts: Conflicts) -> Iterator[Meeting]:
    """Owners against owners and readers at one node; readers never against
    readers. Only pairs whose segments at the node's depth (``keys``) can match
    one name are compared, in the order owner by owner, then the other by position."""
    if len(here) < 2:
        return
    ordered: list[tuple[int, int]] = []
    for i, j in candidate_pairs(keys):
        a, b = here[i], here[j]
        if a.task == b.task:
            continue
        if a.kind == OWNS:
            ordered.append((i, j))
        elif b.kind == OWNS:
            ordered.append((j, i))
    ordered.sort()
    for i, j in ordered:
        owner, other = here[i], here[j]
        if not conflicts(owner, other):
            continue
        witness = intersect(owner.pattern, other.pattern)
        if witness is not None:
            yield Meeting(owner, other, witness)


class OwnerIndex:
    """Answers "which claims own this concrete path?" without scanning them all."""

    def __init__(self, claims: Sequence[Claim]) -> None:
        self._root = _build_trie([c for c in claims if c.kind == OWNS])

    def owners(self, path: str) -> list[Claim]:
        found: list[Claim] = []
        node = self._root
        names = path.split("/")
        for depth in range(len(names) + 1):
            # Exact claims here name the path or a directory above it; matches()
            # still refuses a path with an empty, `.` or `..` name.
            if node.exact is not None:
                found += [c for c in node.exact if matches(c.pattern, path)]
            if depth == len(names):
                break  # a glob here owns only paths with a name after its node
            if node.globs is not None:
                globs = node.globs_by_name(depth).matching(names[depth])
                found += [c for c in globs if matches(c.pattern, path)]
            if node.children is None:
                break
            child = node.children.get(names[depth])
            if child is None and depth:  # a bare leaf, keyed by its path
                child = node.children.get("/".join(names[: depth + 1]))
            if child is None:
                break
            if not isinstance(child, _Node):  # a bare leaf: one literal claim
                if matches(child.pattern, path):
                    found.append(child)
                break
            node = child
        return found
