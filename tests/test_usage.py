"""The usage record and a run's totals (issue 15): unknown is never zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun import ledger
from gitrun.ledger import AttemptRecord, LedgerWriter, read_ledger, usage_totals
from gitrun.records import Fields, RecordInvalid
from gitrun.usage import Usage, usage_of


def _attempt(task: str, n: int, outcome: str, usage: Usage | None, stage: str = "work") -> dict:
    return AttemptRecord(task, n, stage, 1.0, 2.0, outcome, 0, usage=usage).to_json()


def test_a_record_with_usage_round_trips_through_the_ledger_file(tmp_path: Path) -> None:
    writer = LedgerWriter(tmp_path)
    usage = Usage(1000, 50, 7000, 300, 0.0079, "claude-sonnet-4-5")
    writer.write(_attempt("t1", 1, ledger.VALID, usage))
    writer.write(_attempt("t2", 1, ledger.MISSING, None))
    writer.close()
    first, second = read_ledger(tmp_path)
    assert first["usage"] == {
        "input": 1000,
        "output": 50,
        "cache_read": 7000,
        "cache_write": 300,
        "cost_usd": 0.0079,
        "model": "claude-sonnet-4-5",
    }
    assert usage_of(first) == usage
    assert "usage" not in second and usage_of(second) is None  # unknown, not zero


def test_tokens_without_a_cost_keep_the_cost_unknown() -> None:
    usage = Usage(10, 2, model="gpt-mock")
    assert usage.to_json()["cost_usd"] is None
    assert usage_of({"usage": usage.to_json()}) == usage
    assert usage.tokens == 12


def test_two_reports_of_one_attempt_add_up_and_an_unknown_cost_stays_unknown() -> None:
    both = Usage(1, 2, 3, 4, 0.5, "a").plus(Usage(10, 20, 30, 40, 0.25, "b"))
    assert both == Usage(11, 22, 33, 44, 0.75, "b")
    assert Usage(1, cost_usd=0.5).plus(Usage(1)).cost_usd is None
    assert Usage(1, model="a").plus(Usage(1)).model == "a"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"input": -1}, "input"),
        ({"output": 1.5}, "output"),
        ({"cache_read": True}, "cache_read"),
        ({"cache_write": "3"}, "cache_write"),
        ({"cost_usd": -0.1}, "cost_usd"),
        ({"cost_usd": "0.1"}, "cost_usd"),
        ({"cost_usd": float("nan")}, "cost_usd"),
        ({"model": 4}, "model"),
    ],
)
def test_a_damaged_usage_is_refused_naming_the_field(data: dict, field: str) -> None:
    with pytest.raises(RecordInvalid, match=repr(field)):
        Usage.from_json(Fields(data))
    assert usage_of({"usage": data}) is None  # in a ledger record: unknown, never a crash


def test_a_usage_that_is_not_an_object_is_unknown() -> None:
    for value in ([1, 2], "12 tokens", 12, None):
        assert usage_of({"usage": value}) is None


def test_a_ledger_written_before_usage_loads_and_counts_every_attempt_as_unknown(
    tmp_path: Path,
) -> None:
    """An older run's ledger.jsonl: records of format 1 without usage, and one
    from before records had a version at all."""
    old = [
        {"v": 1, "task": "t1", "attempt": 1, "stage": "work", "outcome": "missing", "exit": 1},
        {"task": "t1", "attempt": 2, "stage": "work", "outcome": "valid", "exit": 0},
        {"event": "retry", "task": "t1"},
    ]
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    records = read_ledger(tmp_path)
    assert len(records) == 3
    totals = usage_totals(records)
    assert (totals.attempts, totals.reported, totals.unknown_cost) == (2, 0, 2)
    assert (totals.spent_usd, totals.tokens, totals.by_model) == (0.0, 0, {})
    assert (totals.wasted, totals.wasted_unknown, totals.wasted_usd) == (1, 1, 0.0)


def test_totals_sum_spend_tokens_by_model_unknowns_and_waste() -> None:
    records = [
        _attempt("t1", 1, ledger.INVALID, Usage(100, 10, 0, 0, 0.25, "sonnet")),
        _attempt("t1", 2, ledger.VALID, Usage(200, 20, 50, 5, 0.5, "sonnet")),
        _attempt("t2", 1, ledger.MISSING, None),  # the client reported nothing
        _attempt("t3", 1, ledger.VALID, Usage(7, 3, model="gpt-mock")),  # tokens, no cost
        _attempt("t4", 1, ledger.THROTTLED, Usage(1, 1, 0, 0, 0.125)),  # no model named
        _attempt("r1", 1, ledger.VALID, Usage(1, 1, 0, 0, 1.0, "opus"), stage="review"),
        {"event": "halt", "kind": "environment", "message": "x"},
        {"event": "retry", "task": "t2"},
    ]
    totals = usage_totals(records)
    assert totals.attempts == 6 and totals.reported == 5
    assert totals.spent_usd == pytest.approx(1.875)
    assert totals.unknown_cost == 2  # t2 (no report) and t3 (tokens only)
    assert totals.valid == 3 and totals.wasted == 3
    assert totals.wasted_usd == pytest.approx(0.375)  # t1/1 and t4; t2's is unknown
    assert totals.wasted_unknown == 1
    sonnet = totals.by_model["sonnet"]
    assert (sonnet.attempts, sonnet.input, sonnet.output, sonnet.cache_read) == (2, 300, 30, 50)
    assert (sonnet.cache_write, sonnet.cost_usd, sonnet.unknown_cost) == (5, 0.75, 0)
    assert totals.by_model["gpt-mock"].unknown_cost == 1
    assert totals.by_model["unknown"].cost_usd == 0.125
    assert totals.tokens == 110 + 275 + 10 + 2 + 2
    assert totals.median_cost("work") == 0.25  # of 0.25, 0.5, 0.125
    assert totals.median_cost("review") == 1.0
    assert totals.median_cost("other") is None
    assert totals.median_tokens("work") == 60  # of 110, 275, 10, 2
    shown = totals.to_json()
    assert shown["spent_usd"] == 1.875 and shown["unknown_cost"] == 2
    assert shown["by_model"]["sonnet"]["cache_write"] == 5
    json.dumps(shown)  # plain JSON for status --json
