"""An independent reference for pattern ownership, and a universe of paths to brute-force.

The oracle does not use gitrun's parser, regular expressions or search. It is
written from the rules in the docstring of ``gitrun.ownership.patterns``:

- one name is matched against one segment of a pattern by pathspec's
  gitignore translation of that segment alone (names never hold ``/``, so
  pathspec's bracket expressions, which would match ``/`` inside a longer
  path, are exact here);
- a path is matched by a plain nondeterministic automaton over names, where a
  ``**`` segment takes any number of names and a trailing ``/**`` means "one
  name or more";
- a pattern owns the paths it matches, and the whole tree beneath them when it
  has a plain last segment, ends in ``/`` or ends in ``/**``;
- no name of an owned path is empty, ``.`` or ``..``.

:class:`Universe` is a prefix-closed set of concrete paths; :meth:`Universe.owned`
gives the set of its paths a pattern owns as a bit mask, so two patterns meet
inside the universe exactly when their masks share a bit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import product

DSTAR = "**"


@cache
def _segment_regex(segment: str) -> re.Pattern[str]:
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    regex, _ = GitIgnoreSpecPattern.pattern_to_regex("/" + segment)
    assert regex is not None
    return re.compile(regex)


@cache
def name_matches(segment: str, name: str) -> bool:
    """Whether the one name matches the one (non-``**``) segment."""
    found = _segment_regex(segment).match(name)
    return found is not None and found.end() == len(name)


def _has_wildcard(segment: str) -> bool:
    i = 0
    while i < len(segment):
        if segment[i] == "\\":
            i += 2
            continue
        if segment[i] in "*?[":
            return True
        i += 1
    return False


@dataclass
class OraclePattern:
    """A pattern as the oracle reads it: segments (``**`` kept as is) and ownership."""

    text: str
    segments: tuple[str, ...]
    subtree: bool
    _steps: dict[tuple[int, str], int] = field(default_factory=dict, repr=False)

    @staticmethod
    def read(text: str) -> OraclePattern:
        """Read a canonical pattern (no ``.``, ``..`` or empty segments; a trailing ``/`` allowed)."""
        is_dir = text.endswith("/")
        segments: list[str] = []
        for part in text.rstrip("/").split("/"):
            assert part not in ("", ".", ".."), text
            if not (part == DSTAR and segments and segments[-1] == DSTAR):
                segments.append(part)
        subtree = is_dir or segments[-1] == DSTAR or not _has_wildcard(segments[-1])
        if segments[-1] == DSTAR:
            segments[-1] = "*"  # `x/**` is everything inside x: one name or more
        return OraclePattern(text, tuple(segments), subtree)

    @property
    def end(self) -> int:
        return 1 << len(self.segments)

    def _closure(self, states: int) -> int:
        for i, segment in enumerate(self.segments):
            if states >> i & 1 and segment == DSTAR:
                states |= 1 << (i + 1)
        return states

    def start(self) -> int:
        return self._closure(1)

    def step(self, states: int, name: str) -> int:
        """The positions reachable after one more name (a bit per position)."""
        key = (states, name)
        found = self._steps.get(key)
        if found is None:
            nxt = 0
            if name not in ("", ".", ".."):
                for i, segment in enumerate(self.segments):
                    if not states >> i & 1:
                        continue
                    if segment == DSTAR:
                        nxt |= 1 << i
                    elif name_matches(segment, name):
                        nxt |= 1 << (i + 1)
            found = self._steps[key] = self._closure(nxt)
        return found

    def owns(self, path: str) -> bool:
        states, owned = self.start(), False
        for name in path.split("/"):
            states = self.step(states, name)
            if self.subtree and states & self.end:
                owned = True
            if not states and not owned:
                return False
        return owned if self.subtree else bool(states & self.end)


@dataclass
class Universe:
    """A prefix-closed set of paths in depth-first order. ``levels[d]`` is the pair
    (names at depth d + 1, those of them that have children)."""

    levels: Sequence[tuple[Sequence[str], Sequence[str]]]
    paths: list[str] = field(default_factory=list)
    _nodes: list[tuple[str, int, int]] = field(default_factory=list)  # name, depth, end

    def __post_init__(self) -> None:
        def add(prefix: str, depth: int) -> None:
            names, inner = self.levels[depth]
            for name in names:
                path = f"{prefix}/{name}" if prefix else name
                index = len(self._nodes)
                self._nodes.append((name, depth, 0))
                self.paths.append(path)
                if depth + 1 < len(self.levels) and name in inner:
                    add(path, depth + 1)
                self._nodes[index] = (name, depth, len(self._nodes))

        add("", 0)

    def owned(self, pattern: OraclePattern) -> int:
        """The paths of the universe that ``pattern`` owns, as a bit mask."""
        mask = 0
        states = [pattern.start()] + [0] * len(self.levels)
        nodes, end, subtree = self._nodes, pattern.end, pattern.subtree
        i = 0
        while i < len(nodes):
            name, depth, after = nodes[i]
            here = pattern.step(states[depth], name)
            if here & end:
                if subtree:  # this path and everything beneath it
                    mask |= ((1 << (after - i)) - 1) << i
                    i = after
                    continue
                mask |= 1 << i
            if not here:  # no extension can match: skip the subtree
                i = after
                continue
            states[depth + 1] = here
            i += 1
        return mask

    def first(self, mask: int) -> str:
        return self.paths[(mask & -mask).bit_length() - 1]


def names_up_to(alphabet: str, length: int) -> list[str]:
    """Every name of 1..length characters over ``alphabet`` (``.`` and ``..`` left out)."""
    out = []
    for n in range(1, length + 1):
        out += ["".join(chars) for chars in product(alphabet, repeat=n)]
    return [name for name in out if name not in (".", "..")]


# Names that provoke the edge cases: dot names, names with wildcard characters
# (matched by escapes), `x` for a character no pattern names. Every name of up
# to three characters at depth 1; fewer, and fewer with children, deeper down.
_INNER = ("a", "b", "x", ".a", "a.", ".x", "x.", "..a", "a.b", "...", "ab", "ba", "*", "?")
LEVELS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (
        tuple([*names_up_to(".abx*?", 3), "....", "a.b.", ".a.b", "..ab", "x.x.", ".xx"]),
        (*_INNER, "a*", ".*", "*.", "?.", "*a", "..x", "a.*"),
    ),
    (
        tuple([*names_up_to(".abx*?", 2), "..a", "a.b", "...", ".ab", "a..", "b.a", "a.*", ".xa"]),
        ("a", "b", "x", ".a", "a.", "..a", "a.b", "*", "ab", ".x", "...", "?"),
    ),
    (tuple([*names_up_to(".abx", 2), "..a", "a.b", "*", "?"]), ("a", "x", ".a", "a.b", "*")),
    (("a", "b", "x", ".a", "a.", "..a", "a.b", "*"), ()),
)

# The alphabet patterns are drawn from.
TOKENS = ("a", "b", ".", "*", "?", "[a-b]", "[!a]", "[.]", "\\*", "\\.", "\\a", "\\?")
NAMES = ("a", "b", ".a", "a.b", "ab", "..a", "*")


def valid_witness(path: str) -> bool:
    return all(name not in ("", ".", "..") for name in path.split("/"))


def random_pattern(draw_int: Iterable[int], max_segments: int = 3) -> str:
    """A pattern built from a stream of integers (hypothesis or random supplies them)."""
    it = iter(draw_int)
    segments: list[str] = []
    for _ in range(1 + next(it) % max_segments):
        kind = next(it) % 10
        if kind < 2:
            segments.append(DSTAR)
        elif kind < 4:
            segments.append(NAMES[next(it) % len(NAMES)])
        else:
            while True:
                segment = "".join(TOKENS[next(it) % len(TOKENS)] for _ in range(1 + next(it) % 3))
                if segment not in (".", "..", "**"):
                    break
            segments.append(segment)
    text = "/".join(segments)
    suffix = next(it) % 6
    if suffix == 0 and not text.endswith(DSTAR):
        text += "/"
    elif suffix == 1 and not text.endswith(DSTAR):
        text += "/**"
    return text


# --- every path over short names, decided exactly ----------------------------

# Every name of one to four characters from these: 1,554 names, and so every
# path of any depth built from them (billions of paths up to depth 4 alone).
CANDIDATES = tuple(names_up_to(".abx*?", 4))


class Signed:
    """A pattern whose segments are known as bit masks over :data:`CANDIDATES`:
    bit i of ``sigs[k]`` says whether segment i matches candidate name k."""

    def __init__(self, pattern: OraclePattern) -> None:
        self.pattern = pattern
        segments = pattern.segments
        self.end = pattern.end
        self.dstar = sum(1 << i for i, s in enumerate(segments) if s == DSTAR)
        self.sigs = [
            sum(1 << i for i, s in enumerate(segments) if s != DSTAR and name_matches(s, name))
            for name in CANDIDATES
        ]
        self.closure = [pattern._closure(states) for states in range(1 << (len(segments) + 1))]
        self.start = pattern.start()

    def step(self, states: int, sig: int) -> int:
        return self.closure[(states & self.dstar) | ((states & sig) << 1)]


def common_path(a: Signed, b: Signed) -> str | None:
    """A path over :data:`CANDIDATES`, of any depth, owned by both; None when none is.

    Exhaustive without listing the paths: names with the same pair of
    signatures are interchangeable for both patterns, and so are paths that
    end in the same pair of automaton states (positions, and whether a prefix
    already gave ownership of the subtree), so one of each is tried.
    """
    kinds: dict[tuple[int, int], int] = {}
    for k, pair in enumerate(zip(a.sigs, b.sigs, strict=True)):
        kinds.setdefault(pair, k)
    pa, pb = a.pattern, b.pattern
    start = (a.start, b.start, False, False)
    parent: dict[tuple[int, int, bool, bool], tuple[tuple[int, int, bool, bool], int]] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt_frontier = []
        for state in frontier:
            sa, sb, oa, ob = state
            for (ga, gb), k in kinds.items():
                na, nb = a.step(sa, ga), b.step(sb, gb)
                ta = oa or bool(pa.subtree and na & a.end)
                tb = ob or bool(pb.subtree and nb & b.end)
                if (not na and not ta) or (not nb and not tb):
                    continue  # one of them can own nothing below
                nxt = (na, nb, ta, tb)
                if nxt in seen:
                    continue
                seen.add(nxt)
                parent[nxt] = (state, k)
                owned_a = ta if pa.subtree else bool(na & a.end)
                owned_b = tb if pb.subtree else bool(nb & b.end)
                if owned_a and owned_b:
                    names = []
                    while nxt in parent:
                        nxt, k = parent[nxt]
                        names.append(CANDIDATES[k])
                    return "/".join(reversed(names))
                nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return None
