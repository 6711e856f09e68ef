from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.definition.load import load_run
from gitrun.ownership.claims import OWNS, READS, Claim, OwnerIndex, find_meetings
from gitrun.ownership.patterns import intersect, matches, parse
from gitrun.problem import Problem
from gitrun.proof.check import check_run
from tests.helpers import write_run
from tests.pattern_oracle import DSTAR, LEVELS, NAMES, TOKENS, OraclePattern, Universe

# --- through `gitrun check`, in a real repository -----------------------------

# Pairs of owns that two tasks can both write; each was reported as "no overlaps".
SHARED = [
    ("out/", "out/*.*"),
    ("out/*", "out/*.*"),
    ("out/**", "out/*.*"),
    ("out/*.*", "out/*.*"),
    ("out/?*", "out/.*"),
    ("data/**/*.*", "data/a/"),
    ("out/*", "out/a"),  # the file out/a
]


def _problems(repo: Path, tasks: list[dict[str, object]], **packet: object) -> list[Problem]:
    write_run(repo, "r", tasks, packet or None)
    return check_run(load_run(repo, "r", environ={})).problems


def _owned_by(text: str, path: str) -> bool:
    return OraclePattern.read(parse(text).text + ("/" if text.endswith("/") else "")).owns(path)


@pytest.mark.parametrize(("first", "second"), SHARED)
def test_check_reports_every_pair_that_can_write_one_path(
    git_repo: Path, first: str, second: str
) -> None:
    tasks: list[dict[str, object]] = [
        {"id": "ta", "outputs": ["ta.out"], "owns": [first, "ta.out"]},
        {"id": "tb", "outputs": ["tb.out"], "owns": [second, "tb.out"]},
    ]
    [problem] = [p for p in _problems(git_repo, tasks) if p.code == "overlap"]
    assert set(problem.tasks) == {"ta", "tb"}
    assert problem.path is not None and problem.path in problem.message
    assert _owned_by(first, problem.path) and _owned_by(second, problem.path), problem.path


@pytest.mark.parametrize(
    ("protected", "owned"), [("notes/*.*", "notes/"), ("notes/.*", "notes/?*")]
)
def test_check_reports_a_task_owning_a_protected_glob(
    git_repo: Path, protected: str, owned: str
) -> None:
    tasks: list[dict[str, object]] = [
        {"id": "ta", "outputs": ["ta.out"], "owns": [owned, "ta.out"]}
    ]
    found = [
        p
        for p in _problems(git_repo, tasks, ownership={"protected": [protected]})
        if p.code == "protected"
    ]
    assert found and found[0].tasks == ("ta",)
    path = found[0].path
    assert path is not None and _owned_by(protected, path) and _owned_by(owned, path)


@pytest.mark.parametrize(
    ("first", "second"),
    [("docs/**/*.json", "docs/**/*.md"), ("out/*", "out/sub/x"), ("out/*.json", "out/*/*.json")],
)
def test_files_only_globs_do_not_own_what_lies_beneath(
    git_repo: Path, first: str, second: str
) -> None:
    tasks: list[dict[str, object]] = [
        {"id": "ta", "outputs": ["ta.out"], "owns": [first, "ta.out"]},
        {"id": "tb", "outputs": ["tb.out"], "owns": [second, "tb.out"]},
    ]
    assert [p for p in _problems(git_repo, tasks) if p.code == "overlap"] == []


def test_an_output_beneath_a_files_only_glob_is_not_owned(git_repo: Path) -> None:
    tasks: list[dict[str, object]] = [
        {"id": "ta", "outputs": ["out/sub/a.json"], "owns": ["out/*"]}
    ]
    assert [p.code for p in _problems(git_repo, tasks)] == ["output-not-owned"]


def test_an_escaped_literal_is_reported_by_the_path_it_names(git_repo: Path) -> None:
    tasks: list[dict[str, object]] = [
        {"id": "ta", "outputs": ["ta.out"], "owns": ["out/a\\*b", "ta.out"]},
        {"id": "tb", "outputs": ["tb.out"], "owns": ["out/a\\*b", "tb.out"]},
    ]
    [problem] = [p for p in _problems(git_repo, tasks) if p.code == "overlap"]
    assert problem.path == "out/a*b"


# --- the trie walk against every pair ----------------------------------------

_token = st.sampled_from(TOKENS)
_glob = st.lists(_token, min_size=1, max_size=3).map("".join)
_segment = st.one_of(st.just(DSTAR), st.sampled_from(NAMES), st.sampled_from(NAMES), _glob).filter(
    lambda s: s not in (".", "..")
)
_pattern = st.builds(
    lambda segments, suffix: "/".join(segments) + (suffix if segments[-1] != DSTAR else ""),
    st.lists(_segment, min_size=1, max_size=4),
    st.sampled_from(["", "", "/", "/**"]),
).filter(lambda text: text.strip("/*") != "")
_claim = st.tuples(
    st.sampled_from(["t1", "t2", "t3", "t4", "t5"]),
    _pattern,
    st.sampled_from([OWNS, OWNS, READS]),
    st.sampled_from(["s1", "s2"]),
)


def _conflicts(a: Claim, b: Claim) -> bool:  # as gitrun.proof.check has it
    return (a.kind == OWNS and b.kind == OWNS) or a.stage == b.stage


@settings(max_examples=150, deadline=None)
@given(st.lists(_claim, min_size=2, max_size=30))
def test_find_meetings_finds_exactly_the_pairs_that_meet(
    drawn: list[tuple[str, str, str, str]],
) -> None:
    """The trie compares only candidate pairs; the pairs it reports must be
    exactly those that pairwise comparison with intersect() finds."""
    claims = [Claim(task, text, parse(text), kind, stage) for task, text, kind, stage in drawn]
    expected = set()
    for i, a in enumerate(claims):
        for j in range(i + 1, len(claims)):
            b = claims[j]
            if a.task == b.task or (a.kind == READS and b.kind == READS):
                continue
            if _conflicts(a, b) and intersect(a.pattern, b.pattern) is not None:
                expected.add(frozenset((i, j)))
    found = []
    index = {id(c): n for n, c in enumerate(claims)}
    for meeting in find_meetings(claims, _conflicts):
        assert matches(meeting.first.pattern, meeting.witness)
        assert matches(meeting.second.pattern, meeting.witness)
        found.append(frozenset((index[id(meeting.first)], index[id(meeting.second)])))
    assert len(found) == len(set(found)), "a pair reported twice"
    assert set(found) == expected


_PATHS = [p for p in Universe(LEVELS).paths if p.count("/") < 3]


@settings(max_examples=40, deadline=None)
@given(st.lists(_claim, min_size=1, max_size=20))
def test_owner_index_finds_exactly_the_owners(drawn: list[tuple[str, str, str, str]]) -> None:
    claims = [Claim(task, text, parse(text), OWNS, stage) for task, text, _, stage in drawn]
    index = OwnerIndex(claims)
    for path in _PATHS[::7]:
        expected = [c for c in claims if matches(c.pattern, path)]
        assert sorted(map(id, index.owners(path))) == sorted(map(id, expected)), path
