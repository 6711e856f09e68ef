"""The usage record and a run's totals: unknown is never zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.store import ledger
from gitrun.store.ledger import AttemptRecord, LedgerWriter, read_ledger, usage_totals
from gitrun.store.records import Fields, RecordInvalid
from gitrun.store.usage import Usage, usage_of


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
    """Records of format 1 without usage, and one from before records had a
    version at all, in a chunk on disk."""
    old = [
        {"v": 1, "task": "t1", "attempt": 1, "stage": "work", "outcome": "missing", "exit": 1},
        {"task": "t1", "attempt": 2, "stage": "work", "outcome": "valid", "exit": 0},
        {"event": "retry", "task": "t1"},
    ]
    chunk = tmp_path / ledger.chunk_name(1)
    chunk.parent.mkdir(parents=True)
    chunk.write_text("".join(json.dumps(r) + "\n" for r in old))
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


# -- through a real run ------------------------------------------------------------------

WORKER_SCRIPT = """
mkdir -p out && printf '{"ok": 1}' > "out/$GITRUN_TASK.json"
case "$GITRUN_TASK" in
  t1) printf '{"input": 1200, "output": 300, "cache_read": 7, "cost_usd": 0.01, "model": "m"}' \\
        > "$GITRUN_USAGE" ;;
  t2) printf '{"input": ' > "$GITRUN_USAGE" ;;
esac
"""


def test_a_worker_s_usage_file_reaches_the_committed_ledger_and_a_bad_one_warns(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gitrun.commands.session import start_run
    from tests.helpers import commit_all, committed_ledger, write_run

    tasks = [{"id": t, "outputs": [f"out/{t}.json"]} for t in ("t1", "t2", "t3")]
    packet = {
        "executor": {"kind": "command", "preset": "shell", "shell": WORKER_SCRIPT},
        "limits": {"canary": 0, "timeout": "60s"},
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    assert start_run(git_repo, "r", lambda _line: None).exit_code == 0
    warned = capsys.readouterr().err
    assert "t2 attempt 1: the usage file $GITRUN_USAGE" in warned
    assert "is not a JSON object" in warned and "its usage is unknown" in warned
    records = {r["task"]: r for r in ledger.attempt_records(committed_ledger(git_repo))}
    assert usage_of(records["t1"]) == Usage(1200, 300, 7, 0, 0.01, "m")
    assert "usage" not in records["t2"] and "usage" not in records["t3"]
    totals = usage_totals(committed_ledger(git_repo))
    assert (totals.spent_usd, totals.unknown_cost, totals.reported) == (0.01, 2, 1)


FAKE_CLAUDE = """#!{python}
import sys
sys.stderr.write("[claude-code:unrecognized_model] {{}}\\n")
print({line!r})
sys.exit({code})
"""


def _fake_client(tmp_path: Path, name: str, line: str, code: int) -> Path:
    import sys

    program = tmp_path / "bin" / name
    program.parent.mkdir(exist_ok=True)
    program.write_text(FAKE_CLAUDE.format(python=sys.executable, line=line, code=code))
    program.chmod(0o755)
    return program


def _one_attempt(tmp_path: Path, argv: list[str]):
    import os
    import time

    from gitrun.workers.attempt import Monitor

    monitor = Monitor()
    monitor.launch("t1", 1, argv, dict(os.environ), tmp_path, tmp_path / "t1.1.log", 60)
    deadline = time.monotonic() + 60
    ended = []
    while not ended and time.monotonic() < deadline:
        ended = monitor.poll(0.5)
    monitor.close()
    [end] = ended
    return end


def test_claude_s_result_is_the_tail_so_a_throttle_still_reads_as_one(tmp_path: Path) -> None:
    from gitrun.definition.schema import Limits
    from gitrun.engine.governor import is_throttled

    refused = json.dumps(
        {
            "type": "result",
            "is_error": True,
            "subtype": "success",
            "total_cost_usd": 0,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "modelUsage": {},
            "result": "API Error: Request rejected (429) · Server is temporarily limiting "
            "requests (not your usage limit)",
        }
    )
    claude = _fake_client(tmp_path, "claude", refused, 1)
    end = _one_attempt(tmp_path, [str(claude), "-p", "x", "--model", "sonnet"])
    assert end.tail.startswith("API Error: Request rejected (429)")
    assert is_throttled(end.exit_code, end.tail, Limits().throttle_patterns)
    assert end.usage == Usage(0, 0, 0, 0, 0.0, "sonnet")  # reported: zero, not unknown
    assert '"type": "result"' in (tmp_path / "t1.1.log").read_text()  # the log keeps it all


def test_an_unknown_program_reports_nothing_and_its_output_is_the_tail(tmp_path: Path) -> None:
    worker = _fake_client(tmp_path, "worker", "Tokens: 100 sent, 20 received.", 0)
    end = _one_attempt(tmp_path, [str(worker)])
    assert end.usage is None and "Tokens: 100 sent" in end.tail


def test_the_simulated_agent_reports_usage_so_the_demo_has_spend(git_repo: Path) -> None:
    """Attempts of gitrun.workers.simagent that reached their model write $GITRUN_USAGE;
    the flaky first attempts (a dropped connection) report nothing."""
    import sys

    from gitrun.commands.session import start_run
    from gitrun.workers.simagent import temperament
    from tests.helpers import commit_all, write_run

    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 7)]
    argv = [sys.executable, "-m", "gitrun.workers.simagent", "--seed", "3", "--think", "0", "0.05"]
    packet = {
        "model": {"default": "sim-model"},
        "executor": {"kind": "command", "command": argv},
        "limits": {"canary": 0, "timeout": "60s", "max_attempts": 3},
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    start_run(git_repo, "r", lambda _line: None)
    records = ledger.attempt_records(read_ledger(git_repo / ".gitrun/runs/r"))
    kinds = {t["id"]: temperament(3, str(t["id"]), False) for t in tasks}
    for record in records:
        usage = usage_of(record)
        died = kinds[record["task"]] == "flaky" and record["attempt"] == 1
        assert (usage is None) == died, record
        if usage is not None:
            assert usage.model == "sim-model" and usage.cost_usd and usage.tokens > 0
    totals = usage_totals(records)
    assert totals.spent_usd > 0 and totals.reported == len(records) - totals.unknown_cost
    assert totals.unknown_cost == 1  # t5 (flaky) attempt 1
    assert totals.wasted_usd > 0  # t1 (sloppy) attempt 1 wrote invalid JSON, and paid


@pytest.mark.parametrize(
    "name", ["evil\x1b[31mRED", "a\nFAKE LINE", "tab\there", "x" * 201, "\u202etxt.exe"]
)
def test_a_model_name_that_is_not_printable_text_is_unknown(name: str) -> None:
    """A worker chose this name in its usage file (or its client printed it):
    status and the live view show it, so control characters would reach the
    user's terminal. Such a name is dropped: the model is unknown."""
    assert Usage(input=3, model=name).model is None
    assert Usage(input=3, model="claude-sonnet-4.5 (eu)").model == "claude-sonnet-4.5 (eu)"
