"""The lines gitrun appends (ledger chunks, the running journal): the same
text ``json.dumps`` gives, each line on disk the moment it is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.errors import GitrunError
from gitrun.store.jsonlines import LineWriter, line_of, read_lines

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),  # not JSON: line_of refuses them
    st.text(),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(), inner)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _value, max_size=6))
def test_a_line_is_what_json_dumps_gives(record: dict[str, Any]) -> None:
    strict = json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert line_of(record) == strict + "\n"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_line_never_holds_what_json_cannot(value: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        line_of({"nested": [{"cost_usd": value}]})


def test_each_line_is_on_disk_once_written(tmp_path: Path) -> None:
    """Nothing waits in a buffer of the process: a reader (a resume after
    the driver was killed) sees every line written so far."""
    path = tmp_path / "deep" / "journal.jsonl"
    writer = LineWriter(path)
    try:
        writer.write({"task": "t1", "note": "caf\u00e9 \u2014 \U0001f600"})
        assert read_lines(path) == [{"task": "t1", "note": "caf\u00e9 \u2014 \U0001f600"}]
        writer.write({"task": "t2"})
        assert [r["task"] for r in read_lines(path)] == ["t1", "t2"]
    finally:
        writer.close()
    again = LineWriter(path)  # appends, never truncates
    again.write({"task": "t3"})
    again.close()
    assert [r["task"] for r in read_lines(path)] == ["t1", "t2", "t3"]


def test_a_write_after_close_is_a_sentence(tmp_path: Path) -> None:
    writer = LineWriter(tmp_path / "journal.jsonl")
    writer.close()
    writer.close()  # twice is fine
    with pytest.raises(GitrunError, match=r"journal\.jsonl: cannot write it"):
        writer.write({"task": "t1"})
