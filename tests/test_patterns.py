from __future__ import annotations

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.patterns import PatternError, intersect, literal_path, matches, parse

MEET = [
    ("out/a.json", "out/a.json", "out/a.json"),
    ("out", "out/x/y.md", "out/x/y.md"),
    ("out/", "out/x/y.md", "out/x/y.md"),
    ("out/*.json", "out/a.json", "out/a.json"),
    ("out/**", "out/x/y.md", "out/x/y.md"),
    ("out/a*.json", "out/*b.json", None),  # a witness exists; checked below
    ("**/*.md", "docs/x/TODO.md", "docs/x/TODO.md"),
    ("*.md", "./TODO.md", "TODO.md"),
    ("out/[a-c]?.json", "out/[!a]x.json", None),
    ("a/**/b", "a/c/d/b/e", "a/c/d/b/e"),
]
APART = [
    ("out/*.json", "out/*.md"),
    ("a/*", "b/*"),
    ("out/a.json", "out/b.json"),
    ("out/x", "outx"),
    ("out/[ab].json", "out/c.json"),
    ("*.md", "docs/*.txt"),
]


class _Oracle:
    """pathspec as the reference matcher, with gitrun's rule that a pattern
    owns what it matches and everything beneath."""

    def __init__(self, text: str) -> None:
        self.spec = pathspec.PathSpec.from_lines("gitignore", ["/" + parse(text).text])

    def match_file(self, path: str) -> bool:
        names = path.split("/")
        return any(self.spec.match_file("/".join(names[:n])) for n in range(1, len(names) + 1))


def _spec(text: str) -> _Oracle:
    return _Oracle(text)


@pytest.mark.parametrize(("a", "b", "expected"), MEET)
def test_patterns_that_meet_give_a_path_both_own(a: str, b: str, expected: str | None) -> None:
    for first, second in ((a, b), (b, a)):
        witness = intersect(parse(first), parse(second))
        assert witness is not None
        if expected is not None:
            assert witness == expected
        assert _spec(first).match_file(witness), (first, witness)
        assert _spec(second).match_file(witness), (second, witness)


@pytest.mark.parametrize(("a", "b"), APART)
def test_patterns_that_cannot_meet(a: str, b: str) -> None:
    assert intersect(parse(a), parse(b)) is None
    assert intersect(parse(b), parse(a)) is None


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("/etc/passwd", "outside-repo"),
        ("../outside", "outside-repo"),
        ("a/../../outside", "outside-repo"),
        ("~/notes", "outside-repo"),
        ("C:\\Windows", "outside-repo"),
        ("", "invalid-pattern"),
        ("!out/a", "invalid-pattern"),
        (".", "invalid-pattern"),
        ("*/../x", "invalid-pattern"),
    ],
)
def test_bad_patterns_are_refused_with_a_reason(text: str, code: str) -> None:
    with pytest.raises(PatternError) as info:
        parse(text)
    assert info.value.code == code
    assert info.value.reason


def test_normalisation_of_spellings() -> None:
    assert parse("./TODO.md").text == "TODO.md"
    assert parse("a//b/./c/").text == "a/b/c"
    assert parse("a/x/../b").text == "a/b"
    assert literal_path(parse("out/a.json")) == "out/a.json"
    assert literal_path(parse("out/*.json")) is None


def test_patterns_are_anchored_at_the_root() -> None:
    assert matches(parse("*.md"), "TODO.md")
    assert not matches(parse("*.md"), "docs/TODO.md")
    assert matches(parse("**/*.md"), "docs/TODO.md")
    assert matches(parse("out"), "out/deep/file")


# --- property: every witness is owned by both patterns, per pathspec ---------

_names = st.sampled_from(["a", "b", "out", "x.json", "y.md", "ab", ".git"])
_globs = st.sampled_from(["*", "*.json", "a*", "*b", "?", "[ab]", "[!a]*", "x.*", "**"])
_segment = st.one_of(_names, _globs)
_pattern = st.lists(_segment, min_size=1, max_size=4).map("/".join)
_path = st.lists(_names, min_size=1, max_size=4).map("/".join)


@settings(max_examples=400, deadline=None)
@given(_pattern, _pattern)
def test_witness_is_owned_by_both(a: str, b: str) -> None:
    witness = intersect(parse(a), parse(b))
    if witness is not None:
        assert _spec(a).match_file(witness)
        assert _spec(b).match_file(witness)


@settings(max_examples=400, deadline=None)
@given(_pattern, _path)
def test_a_matched_path_is_always_found(pattern: str, path: str) -> None:
    """No false negatives: when pathspec says a pattern owns a concrete path,
    the intersection with that path is found."""
    if _spec(pattern).match_file(path):
        assert intersect(parse(pattern), parse(path)) is not None
    assert matches(parse(pattern), path) == _spec(pattern).match_file(path)
