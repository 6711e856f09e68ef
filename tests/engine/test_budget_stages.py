"""The spend projection of a run with stages: each stage is projected
at its own rate, once its first output validates (the first stage's is the
canary's), and a stage whose rate is not known yet is said not to be
projected, never priced at another stage's rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitrun.engine.budget import Budget, SpendGate
from gitrun.store import ledger
from gitrun.store.usage import Usage, UsageTotals
from tests.helpers import commit_all, committed_ledger, user_env, write_run

# Work tasks (w*) and review tasks (r*) write their output and report what they
# cost through $GITRUN_USAGE: $WORK and $REVIEW dollars, 1000 and 100 tokens.
WORKER = """
mkdir -p out && printf '{"ok": 1}' > "out/$GITRUN_TASK.json"
case "$GITRUN_TASK" in r*) cost=$REVIEW tokens=100 ;; *) cost=$WORK tokens=1000 ;; esac
printf '{"output": %s, "cost_usd": %s, "model": "m"}' "$tokens" "$cost" > "$GITRUN_USAGE"
"""


def _gitrun(repo: Path, *args: str) -> Any:
    from tests.realclient.clis import gitrun

    return gitrun(repo, user_env(), *args)


def _staged_run(
    repo: Path, work: int, review: int, costs: tuple[str, str], limits: dict[str, Any]
) -> None:
    table: list[dict[str, object]] = [
        {"id": f"w{i}", "stage": "work", "outputs": [f"out/w{i}.json"]} for i in range(1, work + 1)
    ]
    table += [
        {"id": f"r{i}", "stage": "review", "outputs": [f"out/r{i}.json"]}
        for i in range(1, review + 1)
    ]
    packet = {
        "stages": [{"name": "work"}, {"name": "review"}],
        "executor": {
            "kind": "command",
            "preset": "shell",
            "shell": WORKER,
            "env": {"WORK": costs[0], "REVIEW": costs[1]},
        },
        "limits": {"timeout": "60s", "canary": 1, "concurrency": 2, **limits},
    }
    write_run(repo, "r", table, packet)
    commit_all(repo, "run r")


def test_an_expensive_first_stage_does_not_price_the_cheap_reviews_and_the_run_finishes(
    git_repo: Path,
) -> None:
    """4 work tasks at $1.00 and 8 reviews at $0.10 come to $4.80 of a $5
    budget. At the canary's rate every task would be $12, past 1.5 x $5: a
    projection that priced the reviews so halted a run that fits."""
    _staged_run(git_repo, 4, 8, ("1.00", "0.10"), {"max_cost_usd": 5})
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "canary cost $1.00; stage work's 4 tasks at this rate: ~$4.00 (not projected yet: "
        "stage review's 8 tasks, until the first of them validates); budget $5.00"
    ) in run.stderr
    assert (
        "stage review cost $0.10 per usable output so far; its 8 tasks at this rate: ~$0.80, "
        "the run ~$4.80 with the $4.00 spent before it; budget $5.00"
    ) in run.stderr
    assert run.stderr.count("at this rate") == 2  # each stage projected once
    records = committed_ledger(git_repo)
    assert ledger.usage_totals(records).spent_usd == pytest.approx(4.8)
    assert not [r for r in records if r.get("event") == "halt"]


def test_expensive_reviews_are_projected_when_their_first_output_validates(
    git_repo: Path,
) -> None:
    """8 work tasks at $0.10 and 4 reviews at $1.00 come to $4.80: the canary
    (at $0.10) cannot know it, and says the reviews are not projected yet;
    the first review's cost projects them, past 1.5 x the $3 budget, and the
    run halts there rather than at the budget, its reviews half done."""
    _staged_run(git_repo, 8, 4, ("0.10", "1.00"), {"max_cost_usd": 3})
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 3, run.stdout + run.stderr
    assert (
        "canary cost $0.10; stage work's 8 tasks at this rate: ~$0.80 (not projected yet: "
        "stage review's 4 tasks, until the first of them validates); budget $3.00"
    ) in run.stderr
    said = (
        "stage review cost $1.00 per usable output so far; its 4 tasks at this rate: ~$4.00, "
        "the run ~$4.80 with the $0.80 spent before it; budget $3.00"
    )
    assert said in run.stderr
    assert (
        f"halted: {said}, more than 1.5 x the budget: raise it with `gitrun retry r --budget "
        "USD` (or limits.max_projection), then `gitrun resume r`"
    ) in run.stdout
    attempts = ledger.attempt_records(committed_ledger(git_repo))
    reviews = [a for a in attempts if a["task"].startswith("r")]
    assert len(attempts) - len(reviews) == 8 and 1 <= len(reviews) <= 2  # those out finished
    # Raised past the projection, the run finishes.
    assert _gitrun(git_repo, "retry", "r", "--budget", "6").returncode == 0
    done = _gitrun(git_repo, "resume", "r")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ledger.usage_totals(committed_ledger(git_repo)).spent_usd == pytest.approx(4.8)


def test_a_token_budget_is_projected_per_stage_too(git_repo: Path) -> None:
    _staged_run(git_repo, 2, 4, ("0.10", "0.10"), {"max_tokens": 10000})
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "canary tokens 1,000; stage work's 2 tasks at this rate: ~2,000 (not projected yet: "
        "stage review's 4 tasks, until the first of them validates); max_tokens 10,000"
    ) in run.stderr
    assert (
        "stage review used 100 tokens per usable output so far; its 4 tasks at this rate: "
        "~400, the run ~2,400 with the 2,000 used before it; max_tokens 10,000"
    ) in run.stderr


def test_a_run_without_a_canary_projects_no_stage() -> None:
    """The projection is the canary's: with limits.canary = 0 no stage is
    projected (the in-flight budget still holds every start)."""
    from gitrun.definition.schema import Limits
    from gitrun.engine.governor import Governor

    totals = UsageTotals()
    limits = Limits(canary=0, max_cost_usd=1.0)
    governor = Governor(limits, tasks=4, spawns=0, canary=[])
    governor.spend = SpendGate("r", Budget(1.0), totals, 4, 1.5)
    totals.add(Usage(0, 10, cost_usd=5.0), valid=True, stage="review")
    governor.output_valid("review", canary_passed=False)
    assert governor.halt is None and governor.take_notices() == []


def test_every_later_stage_is_named_and_one_without_a_known_cost_is_not_priced(
    git_repo: Path,
) -> None:
    from gitrun.definition.load import load_run

    stages = ["work", "review", "check"]
    table = [
        {"id": f"{stage[0]}{i}", "stage": stage, "outputs": [f"out/{stage[0]}{i}.json"]}
        for stage, count in zip(stages, (3, 2, 1), strict=True)
        for i in range(1, count + 1)
    ]
    write_run(git_repo, "r", table, {"stages": [{"name": s} for s in stages]})
    run = load_run(git_repo, "r")
    totals = UsageTotals()
    gate = SpendGate("r", Budget(10.0), totals, len(table), 1.5, shape=run)
    totals.add(Usage(0, 10, cost_usd=0.5), valid=False, stage="work")  # wasted, still counted
    totals.add(Usage(0, 10, cost_usd=0.5), valid=True, stage="work")
    assert gate.project("work") is None
    assert gate.take_notices() == [
        "canary cost $1.00; stage work's 3 tasks at this rate: ~$3.00 (not projected yet: "
        "stage review's 2 tasks and stage check's 1 task, each until the first of its tasks "
        "validates); budget $10"
    ]
    # A review that states no cost gives its stage no rate: nothing is projected,
    # and nothing is priced at the work stage's rate either.
    totals.add(Usage(0, 10), valid=True, stage="review")
    assert gate.is_first_output("review") and gate.project("review", canary=False) is None
    assert gate.take_notices() == []
    # The check stage's first output projects it past 1.5 x the budget.
    totals.add(Usage(0, 10, cost_usd=20.0), valid=True, stage="check")
    halt = gate.project("check", canary=False)
    said = (
        "stage check cost $20 per usable output so far (1 attempt of unknown cost not "
        "counted); its 1 task at this rate: ~$20, the run ~$21 with the $1.00 spent before "
        "it; budget $10"
    )
    assert gate.take_notices() == [said]
    assert halt is not None and halt.startswith(f"{said}, more than 1.5 x the budget")
