"""The spend budget: a run halts before it overspends, says so in one
sentence, holds until `gitrun retry --budget` raises it, and loses nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gitrun.definition.schema import Limits
from gitrun.engine.budget import Budget, SpendGate, budget_of, money, spend_text
from gitrun.store import ledger
from gitrun.store.ledger import AttemptRecord, usage_totals
from gitrun.store.usage import Usage, UsageTotals, usage_of
from tests.helpers import commit_all, committed_ledger, ledger_records, user_env, write_run

# Every attempt writes its output and reports what it cost: $COST dollars
# (default 0.25) and 1000 tokens, through $GITRUN_USAGE as any worker may.
WORKER = """
mkdir -p out && printf '{"ok": 1}' > "out/$GITRUN_TASK.json"
sleep "${PAUSE:-0.2}"
printf '{"input": 800, "output": 200, "cost_usd": %s, "model": "m"}' "${COST:-0.25}" \\
  > "$GITRUN_USAGE"
"""


def _gitrun(repo: Path, *args: str) -> Any:

    from tests.realclient.clis import gitrun

    return gitrun(repo, user_env(), *args)


def _command_run(repo: Path, tasks: int, limits: dict[str, Any], cost: str = "0.25") -> None:
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    packet = {
        "executor": {
            "kind": "command",
            "preset": "shell",
            "shell": WORKER,
            "env": {"COST": cost},
        },
        "limits": {"timeout": "60s", **limits},
    }
    write_run(repo, "r", table, packet)
    commit_all(repo, "run r")


def _never_over(records: list[dict[str, Any]], budget: float) -> None:
    """At every attempt's start, what had ended plus every attempt out then
    (itself included), at the cost each came to, is within the budget."""
    attempts = ledger.attempt_records(records)
    for a in attempts:
        ended = sum(
            usage_of(b).cost_usd or 0.0  # type: ignore[union-attr]
            for b in attempts
            if b["ended"] <= a["started"]
        )
        out = sum(
            usage_of(b).cost_usd or 0.0  # type: ignore[union-attr]
            for b in attempts
            if b["started"] <= a["started"] < b["ended"]
        )
        assert ended + out <= budget + 1e-9, (a["task"], ended, out)


def test_the_run_halts_before_the_budget_and_retry_budget_then_resume_finishes_it(
    git_repo: Path,
) -> None:
    _command_run(
        git_repo, 8, {"concurrency": 2, "canary": 1, "max_cost_usd": 1.0, "max_projection": 10}
    )
    first = _gitrun(git_repo, "start", "r")
    assert first.returncode == 3, first.stdout + first.stderr
    sentence = (
        "spend budget reached: $1.00 spent and the next attempt is expected to cost ~$0.25, "
        "against max_cost_usd $1.00; raise it with `gitrun retry r --budget USD`, then "
        "`gitrun resume r`"
    )
    assert f"halted: {sentence}" in first.stdout
    assert "canary cost $0.25; 8 tasks at this rate: ~$2.00; budget $1.00" in first.stderr
    records = committed_ledger(git_repo)
    attempts = ledger.attempt_records(records)
    assert len(attempts) == 4 and {a["outcome"] for a in attempts} == {"valid"}
    assert usage_totals(records).spent_usd == pytest.approx(1.0)  # never past $1.00
    _never_over(records, 1.0)
    halts = [r for r in records if r.get("event") == "halt"]
    assert [(r["kind"], r["message"]) for r in halts] == [("spend budget", sentence)]

    held = _gitrun(git_repo, "resume", "r")  # the halt holds: nothing starts
    assert held.returncode == 3 and sentence in held.stdout
    assert len(ledger.attempt_records(ledger_records(git_repo))) == 4

    status = _gitrun(git_repo, "status", "r")
    assert "spent $1.00; $0.25 per usable output; budget $1.00" in status.stdout
    assert "tokens 4,000: m 4,000 (input 3,200, output 800)" in status.stdout

    low = _gitrun(git_repo, "retry", "r", "--budget", "0.5")
    assert low.returncode == 1 and "not above the $1.00 run 'r' has spent" in low.stderr
    raised = _gitrun(git_repo, "retry", "r", "--budget", "2.5")
    assert raised.returncode == 0, raised.stderr
    assert "the run's budget is now max_cost_usd $2.50" in raised.stdout
    assert "lifted the halt (spend budget reached" in raised.stdout

    done = _gitrun(git_repo, "resume", "r", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    final = json.loads(done.stdout)
    assert final["counts"]["done"] == 8
    assert final["spend"]["spent_usd"] == 2.0 and final["spend"]["budget"]["max_cost_usd"] == 2.5
    records = committed_ledger(git_repo)
    attempts = ledger.attempt_records(records)
    # Nothing lost, nothing done twice: each task one valid attempt, the first
    # four's records kept from before the halt.
    assert sorted(a["task"] for a in attempts) == sorted(f"t{i}" for i in range(1, 9))
    assert all(a["attempt"] == 1 and a["outcome"] == "valid" for a in attempts)
    assert budget_of(Limits(max_cost_usd=1.0), records) == Budget(2.5, None)
    _never_over(records, 2.5)


def test_the_canary_s_projection_halts_before_the_fan_out_widens(git_repo: Path) -> None:
    _command_run(git_repo, 20, {"concurrency": 4, "canary": 1, "max_cost_usd": 2.0})
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 3, run.stdout + run.stderr
    said = "canary cost $0.25; 20 tasks at this rate: ~$5.00; budget $2.00"
    assert said in run.stderr  # said as it happened
    assert (
        f"halted: {said}, more than 1.5 x the budget: raise it with `gitrun retry r --budget "
        "USD` (or limits.max_projection), then `gitrun resume r`" in run.stdout
    )
    assert len(ledger.attempt_records(committed_ledger(git_repo))) == 1  # the canary alone
    assert _gitrun(git_repo, "resume", "r").returncode == 3


def test_a_projection_within_the_factor_is_said_and_the_run_goes_on(git_repo: Path) -> None:
    _command_run(git_repo, 4, {"concurrency": 2, "canary": 1, "max_cost_usd": 0.8})
    run = _gitrun(git_repo, "start", "r")  # ~$1.00 projected: over $0.80, within 1.5 x
    assert "canary cost $0.25; 4 tasks at this rate: ~$1.00; budget $0.80" in run.stderr
    assert run.returncode == 3  # the in-flight budget stops it at $0.75 instead
    assert usage_totals(committed_ledger(git_repo)).spent_usd == pytest.approx(0.75)


def test_a_token_budget_halts_the_same_way(git_repo: Path) -> None:
    _command_run(
        git_repo, 6, {"concurrency": 2, "canary": 1, "max_tokens": 3500, "max_projection": 10}
    )
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 3
    assert (
        "halted: token budget reached: 3,000 tokens used and the next attempt is expected to "
        "use ~1,000, against max_tokens 3,500; raise it with `gitrun retry r --tokens N`"
        in run.stdout
    )
    assert usage_totals(committed_ledger(git_repo)).tokens == 3000
    assert _gitrun(git_repo, "retry", "r", "--tokens", "10000").returncode == 0
    assert _gitrun(git_repo, "resume", "r").returncode == 0


def test_a_budget_no_attempt_reports_against_is_said_once_not_passed_silently(
    git_repo: Path,
) -> None:
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)]
    packet = {
        "executor": {
            "kind": "command",
            "preset": "shell",
            "shell": 'mkdir -p out && printf 1 > "out/$GITRUN_TASK.json"',
        },
        "limits": {"timeout": "60s", "concurrency": 2, "max_cost_usd": 1.0},
    }
    write_run(git_repo, "r", table, packet)
    commit_all(git_repo, "run r")
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 0, run.stdout + run.stderr
    warning = "warning: limits.max_cost_usd cannot be enforced: the one attempt so far did not report a cost"
    assert run.stderr.count("limits.max_cost_usd cannot be enforced") == 1, run.stderr
    assert warning in run.stderr
    assert "spend unknown: none of the 4 attempts reported a cost; budget $1.00" in run.stdout


# -- external mode ----------------------------------------------------------------------------


def test_next_refuses_to_lease_past_the_budget_and_halts(git_repo: Path) -> None:
    """The orchestrator writes each subagent's usage to the lease's usage file;
    `next` leases only what fits, then halts; retry --budget lets it go on."""
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 7)]
    limits = {"canary": 0, "concurrency": 4, "max_cost_usd": 1.0}
    write_run(git_repo, "e", tasks, {"executor": {"kind": "external"}, "limits": limits})
    commit_all(git_repo, "run e")

    def work(batch: list[dict[str, Any]]) -> None:
        for item in batch:
            out = git_repo / item["outputs"][0]
            out.parent.mkdir(exist_ok=True)
            out.write_text('{"ok": 1}')
            Path(item["usage"]).write_text(json.dumps({"output": 10, "cost_usd": 0.3}))

    first = _gitrun(git_repo, "start", "e", "--json", "--full")
    batch = json.loads(first.stdout)["leased"]
    assert [b["task"] for b in batch] == ["t1"]  # nothing known yet: one at a time
    again = _gitrun(git_repo, "next", "e")
    assert again.returncode == 0 and "(t1)" in again.stdout  # leased, no more beside it: a wait
    work(batch)
    assert _gitrun(git_repo, "collect", "e").returncode == 0
    second = json.loads(_gitrun(git_repo, "next", "e", "--json", "--full").stdout)["leased"]
    assert [b["task"] for b in second] == ["t2", "t3"]  # $0.30 + 2 x $0.30 <= $1.00
    refused = _gitrun(git_repo, "next", "e", "--json", "--full")
    assert refused.returncode == 0  # the run is healthy: it waits for what is out
    said = json.loads(refused.stdout)
    assert said["leased"] == [] and said["why"] == "budget" and said["wait_s"] is None
    assert "the spend budget allows no more at once; 2 leased (t2, t3)" in said["reason"]
    work(second)
    assert _gitrun(git_repo, "collect", "e").returncode == 0
    halted = _gitrun(git_repo, "next", "e")
    assert halted.returncode == 3
    assert "halted: spend budget reached: $0.90 spent" in halted.stdout
    assert "against max_cost_usd $1.00" in halted.stdout
    records = committed_ledger(git_repo, "gitrun/e", "e")  # the halt is committed
    assert [r["kind"] for r in records if r.get("event") == "halt"] == ["spend budget"]
    assert usage_totals(records).spent_usd == pytest.approx(0.9)
    assert _gitrun(git_repo, "next", "e").returncode == 3  # it holds
    assert _gitrun(git_repo, "retry", "e", "--budget", "5").returncode == 0
    third = json.loads(_gitrun(git_repo, "next", "e", "--json", "--full").stdout)["leased"]
    assert [b["task"] for b in third] == ["t4", "t5", "t6"]


# -- the arithmetic, directly ---------------------------------------------------------------------


def _totals(*costs: float | None, stage: str = "work") -> UsageTotals:
    totals = UsageTotals()
    for cost in costs:
        totals.add(Usage(10, 10, cost_usd=cost), valid=True, stage=stage)
    return totals


def test_the_gate_counts_running_attempts_at_the_stage_median() -> None:
    gate = SpendGate("r", Budget(1.0), _totals(0.1, 0.3, 0.2), 10, 1.5)
    assert gate.expected_cost("work") == pytest.approx(0.2)
    # $0.60 spent: $0.40 left is two attempts at $0.20, less those out.
    assert gate.room("work", 0, 4) == 2
    assert gate.room("work", 1, 4) == 1
    assert gate.room("work", 2, 4) == 0
    # A stage with no finished attempt goes by every finished one.
    assert gate.expected_cost("review") == pytest.approx(0.2)


def test_before_any_attempt_one_runs_at_a_time_and_a_spent_budget_lets_none() -> None:
    gate = SpendGate("r", Budget(1.0), UsageTotals(), 10, 1.5)
    assert gate.room("work", 0, 4) == 1 and gate.room("work", 1, 4) == 0
    spent = SpendGate("r", Budget(0.5), _totals(0.5), 10, 1.5)
    assert spent.room("work", 0, 4) == 0


def test_unknown_costs_are_not_zero_and_only_unknown_cannot_be_enforced() -> None:
    gate = SpendGate("r", Budget(1.0), _totals(None, None), 10, 1.5)
    assert gate.room("work", 0, 4) == 4  # cannot be enforced ...
    assert gate.room("work", 0, 4) == 4
    [said] = gate.take_notices()  # ... said once
    assert "cannot be enforced: none of the 2 attempts so far reported a cost" in said
    mixed = _totals(0.5, None)
    assert "$0.50 (1 attempt of unknown cost not counted)" in spend_text(mixed, 2, Budget(1.0))


def test_a_retry_budget_event_overrides_the_packet_and_a_later_one_wins() -> None:
    records = [
        {"event": "budget", "max_cost_usd": 3.0, "max_tokens": None},
        {"event": "budget", "max_cost_usd": None, "max_tokens": 500},
        {"event": "budget", "max_cost_usd": "lots"},  # damaged: ignored
    ]
    assert budget_of(Limits(max_cost_usd=1.0, max_tokens=100), records) == Budget(3.0, 500)
    assert budget_of(Limits(), []) == Budget(None, None)


def test_money_reads_as_people_write_it() -> None:
    assert [money(x) for x in (0.0079, 0.12, 1.5, 60.0, 1234.5)] == [
        "$0.0079",
        "$0.12",
        "$1.50",
        "$60",
        "$1,234.50",
    ]


def test_the_budget_comes_from_the_environment_too(git_repo: Path) -> None:
    from gitrun.definition.load import load_run

    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}])
    environ = {"GITRUN_MAX_COST_USD": "12.5", "GITRUN_MAX_TOKENS": "100000"}
    limits = load_run(git_repo, "r", environ=environ).packet.limits
    assert (limits.max_cost_usd, limits.max_tokens, limits.max_projection) == (12.5, 100000, 1.5)


def test_a_record_of_old_form_counts_as_unknown_in_the_gate() -> None:
    record = AttemptRecord("t1", 1, "work", 1.0, 2.0, "valid", 0).to_json()
    totals = usage_totals([record])
    assert totals.unknown_cost == 1 and not totals.stage_costs


# -- showing spend ------------------------------------------------------------------------------


def test_status_the_summary_and_the_html_report_show_the_same_spend(git_repo: Path) -> None:
    """Two attempts cost $0.25 each, one of them wasted (its output invalid),
    and one reports nothing: every view says so, from the committed ledger."""
    from gitrun.commands.report.page import render_report
    from tests.commands.test_htmlreport import numbers, parse

    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 4)]
    script = """
mkdir -p out
if [ "$GITRUN_TASK" = t3 ]; then printf '{"ok": 1}' > out/t3.json; exit 0; fi
if [ "$GITRUN_TASK" = t2 ] && [ "$GITRUN_ATTEMPT" = 1 ]; then printf 'not json' > out/t2.json
else printf '{"ok": 1}' > "out/$GITRUN_TASK.json"; fi
printf '{"input": 800, "output": 200, "cost_usd": 0.25, "model": "m"}' > "$GITRUN_USAGE"
"""
    packet = {
        "executor": {"kind": "command", "preset": "shell", "shell": script},
        "limits": {"timeout": "60s", "canary": 0, "max_cost_usd": 40},
    }
    write_run(git_repo, "r", table, packet)
    commit_all(git_repo, "run r")
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 0, run.stdout + run.stderr
    spend = (
        "spent $0.75 (1 attempt of unknown cost not counted); $0.25 per usable output; "
        "wasted $0.25 on 1 attempt that did not validate; budget $40"
    )
    assert spend in run.stdout  # the end summary
    assert "tokens 3,000: m 3,000 (input 2,400, output 600)" in run.stdout
    text = _gitrun(git_repo, "status", "r").stdout
    assert f"  {spend}" in text
    assert "r: started; 3 done" in _gitrun(git_repo, "status").stdout
    assert spend in _gitrun(git_repo, "status").stdout  # one line per run
    data = json.loads(_gitrun(git_repo, "status", "r", "--json").stdout)["spend"]
    assert data["spent_usd"] == 0.75 and data["unknown_cost"] == 1
    assert data["per_usable_usd"] == 0.25 and data["wasted_usd"] == 0.25
    assert data["wasted"] == 1 and data["tokens"] == 3000
    assert data["by_model"]["m"]["output"] == 600
    assert data["budget"] == {"max_cost_usd": 40.0, "max_tokens": None}
    page = parse(render_report(git_repo, "r"))
    got = numbers(page)
    assert (got["spent"], got["per_usable"], got["wasted"]) == ("$0.75", "$0.25", "$0.25")
    assert (got["unknown_cost"], got["tokens"]) == ("1", "3,000")
    spend_p = [p.all_text() for p in page.find("p") if "spend" in p.classes]
    assert spend_p == ["S" + spend[1:] + "."]


def test_the_live_view_shows_spend_against_the_budget() -> None:
    import io

    from rich.console import Console

    from gitrun.commands.live import LiveView
    from gitrun.engine.driver import Progress

    totals = _totals(0.5, 0.25, None)
    totals.add(Usage(5, 5, cost_usd=0.25), valid=False, stage="work")
    view = LiveView("r")
    view.progress(
        Progress(
            counts={"done": 3, "running": 0, "pending": 1, "failed": 0},
            running=[],
            concurrency=2,
            max_concurrency=2,
            backoff=0,
            waiting_for_load=False,
            canary=[],
            spawns=4,
            usable=3,
            eta=None,
            usage=totals,
            budget=Budget(2.0, None),
        )
    )
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(view)
    assert (
        "spent $1.00 of $2.00 (1 unknown); $0.33/usable; wasted $0.25; 70 tokens" in out.getvalue()
    )


def test_the_demo_shows_a_spend_line(tmp_path: Path) -> None:
    """gitrun demo's simulated agents report usage, so its story ends with the spend."""
    import re

    where = tmp_path / "demo"
    proc = _gitrun(tmp_path, "demo", "--dir", str(where), "--tasks", "6", "--seed", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"\nSpent \$\d+\.\d+.*; \$\d+\.\d+ per usable output", proc.stdout)
    assert re.search(r"\nTokens [\d,]+: \S+ [\d,]+ \(input", proc.stdout), proc.stdout[-1500:]


@pytest.mark.realclient
def test_the_real_claude_client_s_stated_cost_halts_the_run_at_its_budget(
    git_repo: Path,
) -> None:
    """claude -p against the mock model: the cost the client states is what the
    budget counts. A budget below one attempt's cost lets the first attempt run
    (nothing is known before it) and halts before the second; retry --budget
    and resume finish the run."""
    import os

    from tests.realclient.claude import INSTALLED, claude_binary, claude_env
    from tests.realclient.clis import gitrun
    from tests.realclient.mockmodel import MockModel, Turn, say, write
    from tests.realclient.mockmodel import Usage as Served

    claude_binary()  # skip, with the reason, when the client is missing
    packet = {
        "executor": {"preset": "claude", "bash": "deny"},
        "model": {"default": "claude-mock-1"},
        "limits": {
            "canary": 1,
            "concurrency": 1,
            "timeout": "60s",
            "max_cost_usd": 0.000001,
            "max_projection": 1e9,
        },
    }
    tasks = [{"id": f"c{i}", "outputs": [f"out/c{i}.json"]} for i in (1, 2)]
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    (git_repo.parent / "home").mkdir()

    def drive(*args: str, task: str) -> subprocess.CompletedProcess[str]:
        script = [
            Turn(write(str(git_repo / f"out/{task}.json"), '{"ok": 1}').blocks, Served(900, 40)),
            Turn(say("Done.").blocks, Served(1000, 10)),
        ]
        with MockModel(script) as model:
            env = claude_env(git_repo.parent / "home", model.url)
            env["PATH"] = os.pathsep.join([str(INSTALLED.parent), env["PATH"]])
            return gitrun(git_repo, env, *args)

    first = drive("start", "r", task="c1")
    assert first.returncode == 3, (first.stdout[-2000:], first.stderr[-2000:])
    [record] = ledger.attempt_records(committed_ledger(git_repo))
    stated = usage_of(record).cost_usd  # type: ignore[union-attr]
    assert record["outcome"] == "valid" and stated and stated > 0
    assert f"halted: spend budget reached: {money(stated)} spent" in first.stdout
    assert _gitrun(git_repo, "retry", "r", "--budget", "100").returncode == 0
    second = drive("resume", "r", task="c2")
    assert second.returncode == 0, (second.stdout[-2000:], second.stderr[-2000:])
    attempts = ledger.attempt_records(committed_ledger(git_repo))
    assert [(a["task"], a["outcome"]) for a in attempts] == [("c1", "valid"), ("c2", "valid")]
