"""Path patterns: parsing, which paths a pattern owns, and whether two patterns meet.

Syntax. Owned, output, input and protected paths use .gitignore glob syntax,
always anchored at the repository root: ``*`` matches any run of characters
but ``/`` (none included), ``?`` one character but ``/``, ``[a-z]`` and
``[!x]`` (or ``[^x]``) one character in or not in the class (never ``/``),
``\\`` takes the next character literally, and a whole segment ``**``
matches any number of directories (zero included). ``*.md`` is the root's
Markdown files, ``**/*.md`` every one. A lone trailing ``\\``, an unclosed
``[`` and a reversed range such as ``[z-a]`` are errors.

Ownership. A path is a sequence of names, none of them empty, ``.`` or
``..``. A pattern owns the paths it matches; a pattern that owns a subtree
also owns every path beneath one of those. A pattern owns a subtree when it
has no wildcard at all (``out``, ``out/a.json``), ends in ``/`` (``out/``,
``out/*/``), ends in ``/**`` (``out/**`` matches everything inside ``out``, so
owns all of it but not a file named ``out``), or has a plain last segment
after a wildcard (``a/*/b`` owns the trees beneath every ``a/X/b``). A pattern
whose last segment has a wildcard (``out/*.json``, ``docs/**/*.md``,
``out/*``) owns matching files only: ``out/*`` owns ``out/x`` but not
``out/x/y``, and ``docs/**/*.json`` and ``docs/**/*.md`` never meet.

Two patterns overlap when some path is owned by both. :func:`intersect`
returns such a path (a witness) or None when there is none; :func:`matches`
says whether a pattern owns one concrete path. Both follow the one definition
above, and so do check, the pre-write hook, the git pre-commit hook and the
stray-write audit, which all ask these two functions.

How: :func:`matches` compiles a pattern into a regular expression.
:func:`intersect` searches the product of the two patterns segment by segment,
and inside a segment character by character over exact character sets
(:mod:`gitrun.ownership.charset`), remembering whether the name so far is empty, ``.``
or ``..`` so that those are never used as names. The search is complete: the
test suite compares it with brute force over a universe of paths.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from functools import lru_cache
from typing import NamedTuple, TypeVar

from gitrun.ownership.charset import ANY_CHAR, CharSet

# A segment is either DSTAR (``**``: zero or more whole names) or a tuple of
# tokens. A token is a literal character (a str), STAR (``*``) or a CharSet
# (``?`` and bracket classes).
DSTAR = "**"
STAR = ("*",)
ANY = ANY_CHAR
_META = re.compile(r"[*?\[\\]")
_STARS = re.compile(r"\*\*+")  # one `*` matches what several in a row match
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
# A normal plain path: names that start with a letter, a digit or '_' (so never
# '.', '..' or empty) and hold no wildcard, space or separator but '/'.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=,@%-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+=,@%-]*)*")
# The same with `*` and `?` too: a normal glob (no escape, no bracket, no trailing `/`).
_PLAIN_GLOB = re.compile(
    r"[A-Za-z0-9_*?][A-Za-z0-9_.+=,@%*?-]*(?:/[A-Za-z0-9_*?][A-Za-z0-9_.+=,@%*?-]*)*"
)
# A path with an empty, `.` or `..` name, or a trailing slash: owned by nothing.
_NOT_CANONICAL = re.compile(r"(?:^|/)\.{0,2}(?:/|$)")

Token = str | tuple[str] | CharSet
Segment = tuple[Token, ...]


class PatternError(ValueError):
    """A pattern that cannot be used; the message says why (no file context)."""

    def __init__(self, reason: str, code: str = "invalid-pattern") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class Pattern(NamedTuple):
    """A parsed, normalised, root-anchored pattern (a named tuple: immutable, and
    built in a fraction of a frozen dataclass's time, for runs of 100,000s)."""

    text: str  # normalised text, without a trailing slash
    # The segments of a pattern with a wildcard (see `segments`); () for a literal,
    # whose segments are its names (kept once: runs have 100,000s of literals).
    wild_segments: tuple[Segment | str, ...]
    # The leading names (see `literal_prefix`); None when they are the text's
    # names as written, as for most of a big run's patterns (kept once).
    names: tuple[str, ...] | None
    is_literal: bool  # no wildcard at all
    owns_subtree: bool = True  # also owns everything beneath what it matches

    @property
    def literal_prefix(self) -> tuple[str, ...]:
        """The leading segments that are plain names (no wildcard), unescaped."""
        return tuple(self.text.split("/")) if self.names is None else self.names

    @property
    def segments(self) -> tuple[Segment | str, ...]:
        """The segments (str only for DSTAR); a trailing `/**` is stored as a
        last `*` segment that owns a subtree."""
        if self.is_literal:
            return tuple(tuple(name) for name in self.literal_prefix)
        return self.wild_segments


def normalize(text: str) -> tuple[str, bool]:
    """Clean a user-written path or pattern; returns (normalised, names_a_directory).

    Raises PatternError for absolute paths and ``..`` escaping the repository.
    """
    raw = text.strip()
    if not raw:
        raise PatternError("is empty")
    if raw.startswith("!"):
        raise PatternError("negation (`!`) is not supported; list only what the task may write")
    if raw.startswith(("/", "~")) or _DRIVE.match(raw):
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
    return "/".join(parts), is_dir


def parse(text: str) -> Pattern:
    """Parse a user-written pattern (see the module docstring for the syntax)."""
    if _PLAIN.fullmatch(text):  # the common case, already normal: one match decides
        return Pattern(text, (), None, True, True)
    if _PLAIN_GLOB.fullmatch(text):  # normal already, wildcards `*` and `?` only
        return _glob_pattern(text, False)
    return _parse_glob(text)


@lru_cache(maxsize=4096)
def _parse_glob(text: str) -> Pattern:
    norm, is_dir = normalize(text)
    if not _META.search(norm):  # a plain path
        return Pattern(norm, (), None, True, True)
    return _glob_pattern(norm, is_dir)


def _glob_pattern(norm: str, is_dir: bool) -> Pattern:
    """The pattern of a normalised text with a wildcard."""
    segments: list[Segment | str] = []
    prefix: list[str] = []  # the leading plain names, unescaped
    for part in norm.split("/"):
        if part == "**":
            if not segments or segments[-1] != DSTAR:
                segments.append(DSTAR)
            continue
        plain = _META.search(part) is None
        segment = _plain_segment(part) if plain else _parse_segment(part)
        if len(prefix) == len(segments) and (plain or all(type(t) is str for t in segment)):
            prefix.append(part if plain else "".join(segment))  # type: ignore[arg-type]  # all str
        segments.append(segment)
    last = segments[-1]
    if last == DSTAR:
        # A trailing `/**` matches everything *inside* (not the directory
        # itself); owning a subtree, that is exactly one more segment.
        segments[-1] = (STAR,)
    is_literal = len(prefix) == len(segments)
    subtree = is_dir or last == DSTAR or all(type(t) is str for t in last)
    names = _shared_names(tuple(prefix))
    return Pattern(norm, () if is_literal else tuple(segments), names, is_literal, subtree)


@lru_cache(maxsize=4096)
def _shared_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The first copy of these leading names: globs that share a directory
    share one tuple and its strings (100,000 globs under `work/` would else
    hold 100,000 tuples and 100,000 strings `work`, 10 MB)."""
    return names


@lru_cache(maxsize=1024)
def _plain_segment(part: str) -> Segment:
    """The segment of a plain name; one copy for the globs that share a
    directory (100,000 globs under `cache/` hold one `cache`)."""
    return tuple(part)


def _parse_segment(part: str) -> Segment:
    if "[" not in part and "\\" not in part:  # the common case, one token a character
        return tuple(STAR if c == "*" else ANY if c == "?" else c for c in _STARS.sub("*", part))
    tokens: list[Token] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "\\":
            if i + 1 == len(part):
                raise PatternError(
                    "ends a name with a lone `\\` (it matches nothing); remove it, or write "
                    "`\\\\` for a backslash"
                )
            tokens.append(part[i + 1])
            i += 2
        elif ch == "*":
            if not tokens or tokens[-1] != STAR:
                tokens.append(STAR)
            i += 1
        elif ch == "?":
            tokens.append(ANY)
            i += 1
        elif ch == "[":
            cls, i = _parse_class(part, i)
            tokens.append(cls)
        else:
            tokens.append(ch)
            i += 1
    return tuple(tokens)


def _parse_class(part: str, start: int) -> tuple[CharSet, int]:
    """Parse the bracket expression at ``start``; returns it and the index after it."""
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    if negated:
        i += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while i < len(part):
        ch = part[i]
        if ch == "]" and not first:
            return CharSet.of(ranges, negated=negated), i + 1
        first = False
        if ch == "\\" and i + 1 < len(part):
            i += 1
            ch = part[i]
        if i + 2 < len(part) and part[i + 1] == "-" and part[i + 2] != "]":
            hi = part[i + 2]
            if hi == "\\" and i + 3 < len(part):
                hi = part[i + 3]
                i += 1
            if ch > hi:
                raise PatternError(
                    f"has the reversed range `{ch}-{hi}` in `{part}` (it matches nothing); "
                    f"write `{hi}-{ch}`"
                )
            ranges.append((ord(ch), ord(hi)))
            i += 3
            continue
        ranges.append((ord(ch), ord(ch)))
        i += 1
    raise PatternError(f"has an unclosed `[` in `{part}`; close it with `]`, or write `\\[`")


def escape(path: str) -> str:
    """A pattern that matches exactly ``path`` (its wildcard characters escaped)."""
    return _META.sub(r"\\\g<0>", path) if _META.search(path) else path


def first_name(pattern: Pattern) -> str | None:
    """The first of the pattern's leading plain names, or None when it starts
    with a wildcard: two patterns whose first names differ never meet."""
    if pattern.names is None:
        return pattern.text.partition("/")[0]
    return pattern.names[0] if pattern.names else None


def literal_path(pattern: Pattern) -> str | None:
    """The plain path a wildcard-free pattern names (escapes removed), else None."""
    if not pattern.is_literal:
        return None
    return pattern.text if pattern.names is None else "/".join(pattern.names)


# --- owning one concrete path ------------------------------------------------


def matches(pattern: Pattern, path: str) -> bool:
    """Whether ``pattern`` owns ``path`` (see the module docstring).

    ``path`` is relative to the repository root; one with an empty, ``.`` or
    ``..`` name is owned by no pattern, so a caller that did not canonicalise
    a path is refused rather than let through.
    """
    if _NOT_CANONICAL.search(path):
        return False
    if pattern.is_literal:
        literal = pattern.text if pattern.names is None else "/".join(pattern.names)
        return path == literal or path.startswith(literal + "/")
    return _compiled(pattern).fullmatch(path) is not None


def owner_regex(texts: Iterable[str]) -> str:
    """One regular expression whose full match (with ``re.DOTALL``) is a path
    some pattern of ``texts`` owns, exactly as :func:`matches` judges it,
    canonical check included; patterns that do not parse are left out (``check``
    reports them). The write hooks keep it in their cache (:mod:`gitrun.guard.rules`)
    and need no pattern parser to judge a write."""
    parts = []
    for text in texts:
        try:
            pattern = parse(text)
        except PatternError:
            continue
        if pattern.is_literal:
            literal = pattern.text if pattern.names is None else "/".join(pattern.names)
            parts.append(re.escape(literal) + "(?:/.*)?")
        else:
            parts.append(_regex_text(pattern))
    if not parts:
        return "(?!)"
    # No empty, `.` or `..` name anywhere (the lookahead is _NOT_CANONICAL's search).
    return "(?!.*(?:^|/)\\.{0,2}(?:/|$))(?:" + "|".join(parts) + ")"


_REGEXES: dict[tuple[str, bool], re.Pattern[str]] = {}


def _compiled(pattern: Pattern) -> re.Pattern[str]:
    key = (pattern.text, pattern.owns_subtree)
    regex = _REGEXES.get(key)
    if regex is None:
        regex = _REGEXES[key] = re.compile(_regex_text(pattern), re.DOTALL)
    return regex


def _regex_text(pattern: Pattern) -> str:
    parts: list[str] = []
    last = len(pattern.segments) - 1
    for index, segment in enumerate(pattern.segments):
        if isinstance(segment, str):  # DSTAR, never last: a trailing `**` became `*`
            parts.append("(?:[^/]+/)*")
            continue
        parts.append(_segment_text(segment))
        if index < last:
            parts.append("/")
    if pattern.owns_subtree:
        parts.append("(?:/.+)?")
    return "".join(parts)


def _segment_text(segment: Segment) -> str:
    parts: list[str] = []
    for token in segment:
        if token == STAR:
            parts.append("[^/]*")
        elif isinstance(token, CharSet):
            parts.append(token.regex())
        else:
            assert isinstance(token, str)
            parts.append(re.escape(token))
    return "".join(parts)


@lru_cache(maxsize=16384)
def segment_regex(segment: Segment) -> re.Pattern[str]:
    """A regular expression whose full match is a name the segment matches
    (it also takes ``.`` and ``..``, which no owned path holds)."""
    return re.compile(_segment_text(segment), re.DOTALL)


# --- intersection -----------------------------------------------------------


def intersect(a: Pattern, b: Pattern) -> str | None:
    """One concrete path that both patterns own, or None when there is none.

    A pattern that owns a subtree is searched as if it ended in ``/**``. The
    search is over pairs of positions in the two patterns, consuming one name
    at a time, shortest witness first.
    """
    pa, pb = a.literal_prefix, b.literal_prefix
    common = min(len(pa), len(pb))
    if pa[:common] != pb[:common]:
        return None
    if a.is_literal and b.is_literal:
        longer = pa if len(pa) >= len(pb) else pb
        return "/".join(longer) if all(n not in (".", "..") for n in longer) else None
    sa = (*a.segments, DSTAR) if a.owns_subtree else a.segments
    sb = (*b.segments, DSTAR) if b.owns_subtree else b.segments

    def moves(state: tuple[int, int]) -> Iterable[tuple[tuple[int, int], str | None]]:
        i, j = state
        x = sa[i] if i < len(sa) else None
        y = sb[j] if j < len(sb) else None
        if isinstance(x, str):  # DSTAR: match no more names
            yield (i + 1, j), None
        if isinstance(y, str):
            yield (i, j + 1), None
        if x is None or y is None:
            return
        name: str | None = None
        if isinstance(x, str) and isinstance(y, str):
            return  # both take any name: skipping either reaches everything
        if isinstance(x, str):
            name, nxt = segment_intersection(y, (STAR,)), (i, j + 1)
        elif isinstance(y, str):
            name, nxt = segment_intersection(x, (STAR,)), (i + 1, j)
        else:
            name, nxt = segment_intersection(x, y), (i + 1, j + 1)
        if name is not None:
            yield nxt, name

    names = _shortest((0, 0), (len(sa), len(sb)), moves)
    return None if names is None else "/".join(names)


@lru_cache(maxsize=65536)
def segment_intersection(a: Segment, b: Segment) -> str | None:
    """The shortest name matched by both segments (never empty, ``.`` or ``..``), or None.

    The state is the position in each segment plus what the name is so far:
    0 empty, 1 ``.``, 2 ``..``, 3 anything else. Only state 3 may end a name,
    and the search branches on "the next character is ``.``" versus "some
    other character" while the name is still one of the first three.
    """

    def moves(state: tuple[int, int, int]) -> Iterable[tuple[tuple[int, int, int], str | None]]:
        i, j, kind = state
        x = a[i] if i < len(a) else None
        y = b[j] if j < len(b) else None
        if x == STAR:
            yield (i + 1, j, kind), None
        if y == STAR:
            yield (i, j + 1, kind), None
        if x is None or y is None:
            return
        if x == STAR and y == STAR:
            chars, nxt = ANY_CHAR, (i, j)
        elif x == STAR:
            chars, nxt = _chars(y), (i, j + 1)
        elif y == STAR:
            chars, nxt = _chars(x), (i + 1, j)
        else:
            chars, nxt = _chars(x) & _chars(y), (i + 1, j + 1)
        if kind >= 2:
            if chars:
                yield (*nxt, 3), chars.pick()
            return
        if "." in chars:
            yield (*nxt, kind + 1), "."
        others = chars.without_dot()
        if others:
            yield (*nxt, 3), others.pick()

    found = _shortest((0, 0, 0), (len(a), len(b), 3), moves)
    return None if found is None else "".join(found)


def _chars(token: Token) -> CharSet:
    if isinstance(token, CharSet):
        return token
    assert isinstance(token, str)
    return CharSet.char(token)


_State = TypeVar("_State", bound=Hashable)


def _shortest(
    start: _State,
    goal: _State,
    moves: Callable[[_State], Iterable[tuple[_State, str | None]]],
) -> list[str] | None:
    """The labels along a shortest path from ``start`` to ``goal``, or None.

    A move labelled None is free (skipping a wildcard that matches nothing);
    a labelled move costs one. Breadth-first with free moves at the front
    (0-1 BFS), over a finite state space, so the search always ends.
    """
    cost = {start: 0}
    parent: dict[_State, tuple[_State, str | None]] = {}
    queue: deque[_State] = deque([start])
    done: set[_State] = set()
    while queue:
        state = queue.popleft()
        if state in done:
            continue
        done.add(state)
        if state == goal:
            labels: list[str] = []
            while state in parent:
                state, label = parent[state]
                if label is not None:
                    labels.append(label)
            return labels[::-1]
        for nxt, label in moves(state):
            step = 0 if label is None else 1
            if nxt not in cost or cost[state] + step < cost[nxt]:
                cost[nxt] = cost[state] + step
                parent[nxt] = (state, label)
                if step:
                    queue.append(nxt)
                else:
                    queue.appendleft(nxt)
    return None
