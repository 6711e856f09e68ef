"""The index behind the ownership walk: it may over-approximate, never miss.

Each property is checked against brute force: segment_intersection for
pairs, a regular-expression match for one name, the oracle for the name a
pattern puts at each depth, and pairwise intersect() for whole walks over
many globs that share one directory.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.ownership.claims import OWNS, READS, Claim, OwnerIndex, find_meetings
from gitrun.ownership.nameindex import (
    ANY_NAME,
    NO_NAME,
    NameIndex,
    Rule,
    candidate_pairs,
    ends,
    key_of,
    name_rule,
)
from gitrun.ownership.patterns import Segment, intersect, matches, parse, segment_intersection
from tests.pattern_oracle import (
    LEVELS,
    TOKENS,
    OraclePattern,
    Universe,
    name_matches,
    names_up_to,
    random_pattern,
)

# Heads and tails of several lengths that extend one another: `t`, `t0`, `t01-`, ...
_PIECES = ("t", "t0", "t01", "t01-", "t1", "-", ".bin", "n", "bin", "b", "a", ".")
_piece_segment = st.builds(
    lambda head, middle, tail: head + middle + tail,
    st.sampled_from(["", *_PIECES]),
    st.sampled_from(["*", "?", "[a-b]", "*[!.]*", "**x", "\\*", "*?"]),
    st.sampled_from(["", *_PIECES]),
).filter(lambda s: s not in (".", "..") and s.strip("*") != "")
_token_segment = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map("".join)
_segment = st.one_of(_piece_segment, _token_segment).filter(lambda s: s not in (".", "..", "**"))


def _parsed(text: str) -> Segment:
    segment = parse(text).segments[0]
    assert isinstance(segment, tuple)
    return segment


_rule: st.SearchStrategy[Rule] = st.one_of(
    _segment.map(_parsed), st.sampled_from([ANY_NAME, NO_NAME])
)
_NAMES = [*names_up_to("t01-.bn", 3), "t01-x.bin", "t0.bin", "t01-", "t1-a.bin", "x.bin"]


@settings(max_examples=120, deadline=None)
@given(st.lists(_rule, min_size=2, max_size=40), st.sampled_from([0, 8]))
def test_candidate_pairs_holds_every_pair_that_shares_a_name(
    rules: list[Rule], small_group: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # 0: every head group indexed by tail
        patch.setattr("gitrun.ownership.nameindex.SMALL_GROUP", small_group)
        pairs = candidate_pairs([key_of(r) for r in rules])
    assert all(i < j for i, j in pairs)
    for i, a in enumerate(rules):
        for j in range(i + 1, len(rules)):
            b = rules[j]
            if NO_NAME in (a, b):
                assert (i, j) not in pairs
            elif ANY_NAME in (a, b):
                assert (i, j) in pairs
            else:
                assert isinstance(a, tuple) and isinstance(b, tuple)
                if segment_intersection(a, b) is not None:
                    assert (i, j) in pairs, (a, b)


@settings(max_examples=120, deadline=None)
@given(st.lists(_rule, min_size=1, max_size=40), st.sampled_from([0, 8]))
def test_name_index_finds_exactly_the_rules_a_name_passes(
    rules: list[Rule], small_group: int
) -> None:
    index = NameIndex([(i, key_of(r)) for i, r in enumerate(rules)])
    texts = {i: "".join(t if isinstance(t, str) else "" for t in r) for i, r in enumerate(rules)}
    with pytest.MonkeyPatch.context() as patch:  # 0: every head group indexed by tail
        patch.setattr("gitrun.ownership.nameindex.SMALL_GROUP", small_group)
        for name in _NAMES:
            expected = []
            for i, rule in enumerate(rules):
                if rule == ANY_NAME or (
                    isinstance(rule, tuple)
                    and name not in (".", "..")
                    and segment_intersection(rule, tuple(name)) is not None
                ):
                    expected.append(i)
            assert list(index.matching(name)) == expected, (name, texts)


def test_ends_never_overlap() -> None:
    assert ends(_parsed("t01-*.bin")) == ("t01-", ".bin")
    assert ends(_parsed("abc")) == ("abc", "")
    assert ends(_parsed("a*a")) == ("a", "a")
    assert ends(_parsed("*")) == ("", "")
    assert ends(_parsed("x[ab]")) == ("x", "")


_PATHS = [p for p in Universe(LEVELS).paths if p.count("/") < 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=40, max_size=40))
def test_name_rule_holds_for_every_path_a_pattern_owns(stream: list[int]) -> None:
    text = random_pattern(stream)
    pattern = parse(text)
    oracle = OraclePattern.read(pattern.text + ("/" if text.endswith("/") else ""))
    for path in _PATHS:
        if not oracle.owns(path):
            continue
        for depth, name in enumerate(path.split("/")):
            rule = name_rule(pattern, depth)
            assert rule != NO_NAME, (text, path, depth)
            if isinstance(rule, tuple):
                assert segment_intersection(rule, tuple(name)) is not None, (text, path, depth)


# --- whole walks where many globs share one directory ------------------------

_shared_dir_pattern = st.one_of(
    _segment.map(lambda s: f"d/{s}"),
    st.sampled_from(["t01-x.bin", "t0.bin", "t1-a.bin", "t01-", "x.bin", "n"]).map(
        lambda s: f"d/{s}"
    ),
    st.tuples(st.sampled_from(["t01-x", "t0", "n"]), _segment).map(lambda p: f"d/{p[0]}/{p[1]}"),
    st.sampled_from(["d/**/t01-*", "d/*/", "d/t0*/**", "d", "*/t0*"]),
)
_claim = st.tuples(
    st.sampled_from(["t1", "t2", "t3", "t4", "t5", "t6"]),
    _shared_dir_pattern,
    st.sampled_from([OWNS, OWNS, READS]),
    st.sampled_from(["s1", "s2"]),
)


def _conflicts(a: Claim, b: Claim) -> bool:  # as gitrun.proof.check has it
    return (a.kind == OWNS and b.kind == OWNS) or a.stage == b.stage


@settings(max_examples=150, deadline=None)
@given(st.lists(_claim, min_size=2, max_size=40))
def test_globs_sharing_a_directory_meet_exactly_as_pairwise(
    drawn: list[tuple[str, str, str, str]],
) -> None:
    claims = [Claim(task, text, parse(text), kind, stage) for task, text, kind, stage in drawn]
    expected = set()
    for i, a in enumerate(claims):
        for j in range(i + 1, len(claims)):
            b = claims[j]
            if a.task == b.task or (a.kind == READS and b.kind == READS):
                continue
            if _conflicts(a, b) and intersect(a.pattern, b.pattern) is not None:
                expected.add(frozenset((i, j)))
    index = {id(c): n for n, c in enumerate(claims)}
    found = []
    for meeting in find_meetings(claims, _conflicts):
        assert matches(meeting.first.pattern, meeting.witness)
        assert matches(meeting.second.pattern, meeting.witness)
        found.append(frozenset((index[id(meeting.first)], index[id(meeting.second)])))
    assert len(found) == len(set(found)), "a pair reported twice"
    assert set(found) == expected
    owners = OwnerIndex(claims)
    for path in ["d/t01-x.bin", "d/t0.bin", "d/t01-x/t01-.bin", "d/n/a", "d/t0/x/y", "d/x.bin"]:
        assert sorted(map(id, owners.owners(path))) == sorted(
            id(c) for c in claims if c.kind == OWNS and matches(c.pattern, path)
        ), path


def test_thousands_of_globs_in_one_directory_are_not_compared_pairwise() -> None:
    """2,000 tasks each own `cache/tNNNN-*.bin` and the file `cache/tNNNN-x.bin`,
    and one owns `cache/*.log`: each glob could meet only its own file, so the
    walk asks about a handful of pairs per task, not the 8 million there are."""
    n = 2000
    claims = [Claim("log", "cache/*.log", parse("cache/*.log"))]
    for i in range(n):
        for text in (f"cache/t{i:04d}-*.bin", f"cache/t{i:04d}-x.bin"):
            claims.append(Claim(f"t{i:04d}", text, parse(text)))
    asked = 0

    def conflicts(a: Claim, b: Claim) -> bool:
        nonlocal asked
        asked += 1
        return True

    assert list(find_meetings(claims, conflicts)) == []
    assert asked <= 2 * n
    owners = OwnerIndex(claims).owners("cache/t0007-x.bin")
    assert sorted(c.text for c in owners) == ["cache/t0007-*.bin", "cache/t0007-x.bin"]


def test_a_glob_above_reaches_only_the_directories_its_segment_matches() -> None:
    """`out/t0001-*/` of one task against 2,000 directories `out/tNNNN-a/` of
    others: only the one it matches is compared."""
    n = 2000
    claims = [Claim("g", "out/t0001-*/", parse("out/t0001-*/"))]
    for i in range(n):
        text = f"out/t{i:04d}-a/x.json"
        claims.append(Claim(f"t{i:04d}", text, parse(text)))
    asked: list[tuple[str, str]] = []

    def conflicts(a: Claim, b: Claim) -> bool:
        asked.append((a.task, b.task))
        return True

    [meeting] = list(find_meetings(claims, conflicts))
    assert meeting.witness == "out/t0001-a/x.json"
    assert asked == [("g", "t0001")]


def test_name_matches_agrees_on_the_shared_names() -> None:
    # The oracle's one-name matcher and the index agree on a sample (a sanity
    # check that the strategies above draw segments the oracle reads alike).
    for text in ("t01-*.bin", "t0?", "*[!.]*", "t1*"):
        index = NameIndex([(text, key_of(name_rule(parse(f"d/{text}"), 1)))])
        for name in _NAMES:
            if name not in (".", ".."):
                assert (list(index.matching(name)) == [text]) == name_matches(text, name)
