"""What status and the report say of resumed tries, from the ledger's attempt records."""

from __future__ import annotations

from typing import Any

import pytest

from gitrun.engine.resumes import resumes_of

USAGE = {"input": 900, "output": 100, "cache_read": 0, "cache_write": 0, "model": "m"}


def _try(task: str, attempt: int, outcome: str, **fields: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "task": task,
        "attempt": attempt,
        "stage": "work",
        "started": "2026-01-01T00:00:00.000Z",
        "ended": "2026-01-01T00:00:01.000Z",
        "outcome": outcome,
        **fields,
    }


CUT = _try("t1", 1, "throttled", conversation="c1", usage=USAGE)
CUT_UNREPORTED = _try("t1", 1, "throttled", conversation="c1")
RESUMED = _try(
    "t1", 1, "valid", throttles=1, resumed_from={"attempt": 1, "throttles": 0}, resumed_turns=3
)
FRESH = _try("t2", 2, "valid", fresh_because="its conversation c2 is gone")

ROWS = [
    ("no resume: nothing said", [FRESH | {"fresh_because": ""}], None),
    (
        "tokens the client reported",
        [CUT, RESUMED],
        "resumed 1 try in a cut-off conversation: 3 turns not redone; the cut-off tries "
        "had spent 1,000 tokens",
    ),
    (
        "no report: not measured, never zero",
        [CUT_UNREPORTED, RESUMED],
        "resumed 1 try in a cut-off conversation: 3 turns not redone; tokens of the cut-off "
        "tries not measured (their clients reported none)",
    ),
    (
        "a fresh try after a cut-off, and why",
        [FRESH],
        "resumed no try; 1 try after a cut-off started fresh",
    ),
]


@pytest.mark.parametrize(("records", "said"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_what_resuming_saved(records: list[dict[str, Any]], said: str | None) -> None:
    found = resumes_of(records)
    assert (found.saved_text() if found else None) == said


def test_each_try_names_the_attempt_it_continued() -> None:
    found = resumes_of([CUT, FRESH, RESUMED])
    assert [t.describe() for t in found.tries] == [
        "t2: try 1 (attempt 2) started fresh: its conversation c2 is gone",
        "t1: try 2 (attempt 1) continued the conversation of attempt 1 (throttled); "
        "3 turns not redone",
    ]
    # A ledger without the try it names (a damaged copy): the attempt still said.
    alone = resumes_of([RESUMED]).to_json()["continued"][0]
    assert (alone["of_try"], alone["of_attempt"], alone["cut"]) == (None, 1, "")
