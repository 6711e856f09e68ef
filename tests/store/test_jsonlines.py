"""parse_lines reads a whole file in one call when every line is whole, and
line by line when one is not: the records are the same either way."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.store.jsonlines import line_of, parse_lines


def _one_by_one(text: str) -> list[dict[str, Any]]:
    """The reference: each line on its own, skipped when it is not a record."""
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and (
            isinstance(value.get("task"), str) or isinstance(value.get("event"), str)
        ):
            found.append(value)
    return found


_record = st.fixed_dictionaries(
    {"task": st.sampled_from(["t1", "t2", "a-much-longer-task-name-0001"])},
    optional={
        "outcome": st.sampled_from(["valid", "invalid", "x" * 40]),
        "attempt": st.integers(1, 3),
        "event": st.just("halt"),
        "n": st.none(),
    },
)
_line = st.one_of(
    _record.map(line_of),
    _record.map(lambda r: line_of(r)[: len(line_of(r)) // 2] + "\n"),  # cut short by a crash
    st.sampled_from(["\n", "   \n", "[1, 2]\n", "7\n", '{"other": 1}\n', "{}\n", "\ufffd\n"]),
    st.tuples(_record, _record).map(lambda p: line_of(p[0]).strip() + "," + line_of(p[1])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_line, max_size=8))
def test_whole_file_and_line_by_line_agree(lines: list[str]) -> None:
    text = "".join(lines)
    assert parse_lines(text) == _one_by_one(text)


def test_short_texts_are_kept_once() -> None:
    text = "".join(line_of({"task": f"t{i}", "outcome": "valid"}) for i in range(3))
    records = parse_lines(text)
    assert [r["task"] for r in records] == ["t0", "t1", "t2"]
    assert records[0]["outcome"] is records[2]["outcome"]
