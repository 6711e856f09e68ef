"""Path patterns: parsing, and whether two patterns can name the same path.

Owned paths and inputs use .gitignore glob syntax (``*``, ``?``, ``[a-z]``,
``[!x]``, ``**`` for any number of directories, a trailing ``/`` for a
directory, ``\\`` to escape) but are always anchored at the repository root:
``*.md`` means the root's Markdown files, ``**/*.md`` every one. A pattern owns
what it matches and everything beneath it.

Matching a concrete path is pathspec's job (:func:`matches`). Whether two
*patterns* can meet is not something pathspec answers, so :func:`intersect`
walks the product of the two patterns, segment by segment and inside a segment
character by character, and returns one concrete path both own (a witness).
The test suite checks every witness against pathspec.
"""

from __future__ import annotations

import posixpath
import re
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

# A segment is either DSTAR (``**``: zero or more whole segments) or a tuple of
# tokens. A token is a literal character, ANY (``?``), STAR (``*``) or a CharClass.
DSTAR = "**"
ANY = ("?",)
STAR = ("*",)
_META = re.compile(r"[*?\[\\]")
# Characters tried when a witness needs one that fits a class or a wildcard.
_FALLBACK_CHARS = "xa0_-.zAZ9"


@dataclass(frozen=True)
class CharClass:
    negated: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def accepts(self, ch: str) -> bool:
        if ch == "/":
            return False
        inside = ch in self.chars or any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated

    def candidates(self) -> list[str]:
        out = sorted(self.chars)
        for lo, hi in self.ranges:
            out += [lo, hi]
        return out


Token = str | tuple[str] | CharClass
Segment = tuple[Token, ...]


class PatternError(ValueError):
    """A pattern that cannot be used; the message says why (no file context)."""

    def __init__(self, reason: str, code: str = "invalid-pattern") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class Pattern:
    """A parsed, normalised, root-anchored pattern."""

    text: str  # normalised text, without a trailing slash
    segments: tuple[Segment | str, ...]  # str only for DSTAR
    # The leading segments that are plain names (no wildcard), unescaped.
    literal_prefix: tuple[str, ...]
    is_literal: bool  # no wildcard at all


def normalize(text: str) -> tuple[str, bool]:
    """Clean a user-written path or pattern; returns (normalised, names_a_directory).

    Raises PatternError for absolute paths and ``..`` escaping the repository.
    """
    raw = text.strip()
    if not raw:
        raise PatternError("is empty")
    if raw.startswith("!"):
        raise PatternError("negation (`!`) is not supported; list only what the task may write")
    if raw.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", raw):
        raise PatternError(
            "is an absolute path, outside the repository; write it relative to the repository root",
            code="outside-repo",
        )
    is_dir = raw.endswith("/")
    parts: list[str] = []
    for part in raw.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PatternError(
                    "climbs out of the repository with `..`; write it relative to the "
                    "repository root",
                    code="outside-repo",
                )
            if _META.search(parts[-1]):
                raise PatternError("uses `..` after a wildcard; write the path without `..`")
            parts.pop()
            continue
        parts.append(part)
    if not parts:
        raise PatternError("names the whole repository; name the files or directories instead")
    return posixpath.join(*parts), is_dir


@lru_cache(maxsize=65536)
def parse(text: str) -> Pattern:
    """Parse a user-written pattern (see the module docstring for the syntax)."""
    norm, _ = normalize(text)
    segments: list[Segment | str] = []
    for part in norm.split("/"):
        if part == "**":
            if not segments or segments[-1] != DSTAR:
                segments.append(DSTAR)
        else:
            segments.append(_parse_segment(part))
    if segments[-1] == DSTAR:
        # A trailing `/**` matches everything *inside* (not the directory
        # itself); with subtree ownership that is exactly one more segment.
        segments[-1] = (STAR,)
    prefix: list[str] = []
    for seg in segments:
        if seg == DSTAR or not all(isinstance(t, str) for t in seg):
            break
        prefix.append("".join(t for t in seg if isinstance(t, str)))
    return Pattern(norm, tuple(segments), tuple(prefix), len(prefix) == len(segments))


def _parse_segment(part: str) -> Segment:
    tokens: list[Token] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "\\" and i + 1 < len(part):
            tokens.append(part[i + 1])
            i += 2
            continue
        if ch == "*":
            if not tokens or tokens[-1] != STAR:
                tokens.append(STAR)
            i += 1
            continue
        if ch == "?":
            tokens.append(ANY)
            i += 1
            continue
        if ch == "[":
            parsed = _parse_class(part, i)
            if parsed is not None:
                cls, i = parsed
                tokens.append(cls)
                continue
        tokens.append(ch)
        i += 1
    return tuple(tokens)


def _parse_class(part: str, start: int) -> tuple[CharClass, int] | None:
    """Parse ``[...]`` at ``start``; None when unterminated (then ``[`` is literal)."""
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    if negated:
        i += 1
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    first = True
    while i < len(part):
        ch = part[i]
        if ch == "]" and not first:
            return CharClass(negated, frozenset(chars), tuple(ranges)), i + 1
        first = False
        if ch == "\\" and i + 1 < len(part):
            i += 1
            ch = part[i]
        if i + 2 < len(part) and part[i + 1] == "-" and part[i + 2] != "]":
            hi = part[i + 2]
            if hi == "\\" and i + 3 < len(part):
                hi = part[i + 3]
                i += 1
            if ch <= hi:
                ranges.append((ch, hi))
            i += 3
            continue
        chars.add(ch)
        i += 1
    return None


def escape(path: str) -> str:
    """A pattern that matches exactly ``path`` (its wildcard characters escaped)."""
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def literal_path(pattern: Pattern) -> str | None:
    """The plain path a wildcard-free pattern names (escapes removed), else None."""
    if not pattern.is_literal:
        return None
    return "/".join(pattern.literal_prefix)


def matches(pattern: Pattern, path: str) -> bool:
    """Whether ``pattern`` owns ``path``: matches it or a directory above it.

    pathspec matches one path at a time (and ``/a/*`` does not match
    ``a/b/c`` there), so the ancestors are asked explicitly.
    """
    names = path.split("/")
    if pattern.is_literal:
        prefix = pattern.literal_prefix
        return tuple(names[: len(prefix)]) == prefix
    matcher = _compiled(pattern.text)
    return any(matcher.match_file("/".join(names[:n])) for n in range(1, len(names) + 1))


@lru_cache(maxsize=65536)
def _compiled(text: str) -> _Matcher:
    import pathspec  # lazy: only commands that match paths pay for it

    return _Matcher(pathspec.PathSpec.from_lines("gitignore", ["/" + text]))


class _Matcher:
    def __init__(self, spec: object) -> None:
        self._spec = spec

    def match_file(self, path: str) -> bool:
        return bool(self._spec.match_file(path))  # type: ignore[attr-defined]  # pathspec is untyped here


# --- intersection -----------------------------------------------------------


def intersect(a: Pattern, b: Pattern) -> str | None:
    """One concrete path that both patterns own, or None when they cannot meet.

    Both patterns own their matches and everything beneath, so each is
    extended by a final ``**``; the search is breadth-first over pairs of
    positions, so the witness is short.
    """
    if a.is_literal and b.is_literal:
        pa, pb = a.literal_prefix, b.literal_prefix
        shorter, longer = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
        return "/".join(longer) if longer[: len(shorter)] == shorter else None
    sa = (*a.segments, DSTAR)
    sb = (*b.segments, DSTAR)
    end = (len(sa), len(sb))
    parent: dict[tuple[int, int], tuple[tuple[int, int], str | None]] = {}
    queue: deque[tuple[int, int]] = deque([(0, 0)])
    seen = {(0, 0)}
    while queue:
        state = queue.popleft()
        if state == end:
            return _rebuild(parent, state) or "x"
        i, j = state
        for nxt, emitted in _segment_moves(sa, sb, i, j):
            if nxt not in seen:
                seen.add(nxt)
                parent[nxt] = (state, emitted)
                queue.append(nxt)
    return None


def _segment_moves(
    sa: tuple[Segment | str, ...], sb: tuple[Segment | str, ...], i: int, j: int
) -> list[tuple[tuple[int, int], str | None]]:
    moves: list[tuple[tuple[int, int], str | None]] = []
    a = sa[i] if i < len(sa) else None
    b = sb[j] if j < len(sb) else None
    if a == DSTAR:
        moves.append(((i + 1, j), None))
        if b is not None and b != DSTAR:
            name = segment_intersection(b, (STAR,))
            if name is not None:
                moves.append(((i, j + 1), name))
    if b == DSTAR:
        moves.append(((i, j + 1), None))
        if a is not None and a != DSTAR:
            name = segment_intersection(a, (STAR,))
            if name is not None:
                moves.append(((i + 1, j), name))
    if a is not None and b is not None and a != DSTAR and b != DSTAR:
        name = segment_intersection(a, b)
        if name is not None:
            moves.append(((i + 1, j + 1), name))
    return moves


def _rebuild(
    parent: dict[tuple[int, int], tuple[tuple[int, int], str | None]], state: tuple[int, int]
) -> str:
    names: list[str] = []
    while state in parent:
        state, emitted = parent[state]
        if emitted is not None:
            names.append(emitted)
    return "/".join(reversed(names))


@lru_cache(maxsize=65536)
def segment_intersection(a: Segment, b: Segment) -> str | None:
    """A non-empty file name (not ``.`` or ``..``) matched by both segments, or None."""
    start = (0, 0, False)
    parent: dict[tuple[int, int, bool], tuple[tuple[int, int, bool], str]] = {}
    queue: deque[tuple[int, int, bool]] = deque([start])
    seen = {start}
    while queue:
        state = queue.popleft()
        i, j, nonempty = state
        if i == len(a) and j == len(b) and nonempty:
            chars: list[str] = []
            while state in parent:
                state, ch = parent[state]
                chars.append(ch)
            name = "".join(reversed(chars))
            if name not in (".", ".."):
                return name
            continue
        for nxt, ch in _char_moves(a, b, i, j, nonempty):
            if nxt not in seen:
                seen.add(nxt)
                if ch:
                    parent[nxt] = (state, ch)
                elif state in parent:
                    parent[nxt] = parent[state]
                queue.append(nxt)
    return None


def _char_moves(
    a: Segment, b: Segment, i: int, j: int, nonempty: bool
) -> list[tuple[tuple[int, int, bool], str]]:
    ta = a[i] if i < len(a) else None
    tb = b[j] if j < len(b) else None
    moves: list[tuple[tuple[int, int, bool], str]] = []
    if ta == STAR:
        moves.append(((i + 1, j, nonempty), ""))
    if tb == STAR:
        moves.append(((i, j + 1, nonempty), ""))
    if ta == STAR and tb == STAR:
        moves.append(((i, j, True), "x"))
    elif ta == STAR and tb is not None:
        ch = _common_char(tb, ANY)
        if ch:
            moves.append(((i, j + 1, True), ch))
    elif tb == STAR and ta is not None:
        ch = _common_char(ta, ANY)
        if ch:
            moves.append(((i + 1, j, True), ch))
    elif ta is not None and tb is not None:
        ch = _common_char(ta, tb)
        if ch:
            moves.append(((i + 1, j + 1, True), ch))
    return moves


def _accepts(token: Token, ch: str) -> bool:
    if isinstance(token, CharClass):
        return token.accepts(ch)
    if token == ANY:
        return ch != "/"
    return token == ch


def _common_char(x: Token, y: Token) -> str | None:
    """A character both single-character tokens accept."""
    candidates: list[str] = []
    for token in (x, y):
        if isinstance(token, str):
            candidates.append(token)
        elif isinstance(token, CharClass):
            candidates += token.candidates()
    candidates += list(_FALLBACK_CHARS)
    for ch in candidates:
        if _accepts(x, ch) and _accepts(y, ch):
            return ch
    return None
