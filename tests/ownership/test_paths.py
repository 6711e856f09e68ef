"""canonical_problem's one-match fast path decides exactly as its full rules do."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.ownership.paths import canonical_problem

_text = st.text(st.sampled_from(list("aZ09_.-/*?[]!^ ~:\\\t\u200b\u00e9gitG~1")), max_size=14)


@settings(max_examples=400, deadline=None)
@given(_text, st.booleans())
def test_the_fast_path_agrees_with_the_full_rules(text: str, is_file: bool) -> None:
    fast = canonical_problem(text, is_file=is_file)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("gitrun.ownership.paths._PLAIN", re.compile(r"(?!)"))  # never taken
        full = canonical_problem(text, is_file=is_file)
    assert fast == full, text


@pytest.mark.parametrize(
    "text", ["cache/t00001-*.bin", "out/*.json", "docs/**/*.md", "a/[!x]?/b", "?x/y[0-9]"]
)
def test_globs_are_canonical(text: str) -> None:
    assert canonical_problem(text, is_file=False) is None
