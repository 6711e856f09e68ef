"""``gitrun retry``: new attempts for tasks that used theirs up, and a raised budget."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gitrun.commands.session import take_remote_branch
from gitrun.definition.load import RunDef, load_run
from gitrun.definition.provenance import reads_any
from gitrun.definition.runfiles import open_ledger
from gitrun.engine.budget import Budget, money
from gitrun.engine.states import FAILED, UP_TO_DATE
from gitrun.engine.status import RunStatus, read_status
from gitrun.errors import GitrunError, UsageError
from gitrun.layout import branch_ref
from gitrun.store import events, git
from gitrun.store.branches import refuse_checked_out
from gitrun.store.local import LocalPaths
from gitrun.store.lock import run_locked
from gitrun.store.usage import MAX_TOKENS, MAX_USD, is_dollars
from gitrun.visible import visible


@dataclass(frozen=True)
class Retried:
    tasks: list[str]  # given fresh attempts
    lifted: str | None = None  # the halt lifted, if the run was halted
    budget: Budget | None = None  # the run's budget now, when this call raised it


def retry_tasks(
    repo: Path,
    run_id: str,
    task_ids: list[str],
    budget_usd: float | None = None,
    tokens: int | None = None,
) -> Retried:
    """Give ``task_ids`` (default: every failed task, unless the call raises
    the budget) fresh attempts, set the run's spend budget to ``budget_usd``
    dollars and/or ``tokens`` tokens, and lift a halt that holds the run (a
    failed canary, an environment fault, a strict ownership violation, the
    spend budget)."""
    if budget_usd is not None:
        check_budget(budget_usd, f"{budget_usd:g}")
    if tokens is not None and not (type(tokens) is int and 0 < tokens <= MAX_TOKENS):
        raise UsageError(
            f"--tokens {tokens} is not a number of tokens gitrun holds; give a whole number "
            f"from 1 to {MAX_TOKENS:,}, such as `--tokens 2000000`"
        )
    run = load_run(repo, run_id)
    local = LocalPaths.of(repo, run_id)
    refuse_checked_out(local.common_git_dir, run_id)
    with run_locked(local, run_id):
        # A fresh clone: the ledger written here goes on from the committed one.
        take_remote_branch(repo, run_id, lambda _line: None)
        status = read_status(repo, run_id, run)
        unknown = [t for t in task_ids if t not in status.tasks]
        if unknown:
            raise GitrunError(
                f"run {run_id!r} has no task {', '.join(unknown)}; see `gitrun status {run_id}`"
            )
        _check_raise(status, budget_usd, tokens)
        raising = budget_usd is not None or tokens is not None
        failed = [t for t, s in status.tasks.items() if s.status == FAILED]
        chosen = task_ids or ([] if raising else failed)
        done = [t for t in chosen if status.tasks[t].status == "done"]
        if done:
            raise GitrunError(f"{', '.join(done)} already done; there is nothing to retry")
        at = datetime.now(UTC).isoformat(timespec="milliseconds")
        writer = open_ledger(run, git.rev_parse(repo, branch_ref(run_id)))
        try:
            if raising:
                writer.write(events.Budget(budget_usd, tokens, at))
            chosen += _readers_of(run, status, chosen)
            for tid in chosen:
                writer.write(events.Retry(tid, at))
            lifted = status.halt["message"] if status.halt else None
            if lifted is not None:
                writer.write(events.Lift(at))
        finally:
            writer.close()
        new = None
        if raising:
            old = status.budget
            new = Budget(
                old.cost_usd if budget_usd is None else budget_usd,
                old.tokens if tokens is None else tokens,
            )
        return Retried(chosen, lifted, new)


def retry_run(
    repo: Path,
    run_id: str,
    task_ids: list[str],
    budget: str | None,
    tokens: int | None,
    say: Callable[[str], None],
) -> None:
    """``gitrun retry``: :func:`retry_tasks` with ``--budget`` as typed, and
    what it did, a line each, ending with what to run next."""
    dollars = None if budget is None else parse_budget(budget)
    retried = retry_tasks(repo, run_id, task_ids, dollars, tokens)
    if retried.budget is not None:
        shown = []
        if retried.budget.cost_usd is not None:
            shown.append(f"max_cost_usd {money(retried.budget.cost_usd)}")
        if retried.budget.tokens is not None:
            shown.append(f"max_tokens {retried.budget.tokens:,}")
        say(f"the run's budget is now {' and '.join(shown)}")
    if retried.lifted:
        say(f"lifted the halt ({visible(retried.lifted)})")
    if retried.tasks:
        say(f"{', '.join(retried.tasks)}: fresh attempts granted")
    elif not retried.lifted and retried.budget is None:
        say(f"run {run_id!r} has no failed tasks and is not halted")
        return
    say(f"continue with `gitrun resume {run_id}`")


def parse_budget(text: str) -> float:
    """``--budget USD`` as typed: a finite amount of US dollars above 0 and at
    most :data:`~gitrun.store.usage.MAX_USD`, or a usage error naming it."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    check_budget(value, text.strip())
    return value


def check_budget(value: float, said: str) -> None:
    """Refuse a budget that is not a sane amount of money: nan, an infinity
    (or a number so large it reads as one, ``1e400``), zero or less, or over
    :data:`~gitrun.store.usage.MAX_USD`. The ledger is JSON: an infinite
    budget could not even be written there."""
    if not (is_dollars(value) and value > 0):
        raise UsageError(
            f"--budget {said} is not an amount of US dollars gitrun holds; give a finite "
            f"number above 0 and at most {money(MAX_USD)}, such as `--budget 25`"
        )


def _readers_of(run: RunDef, status: RunStatus, chosen: list[str]) -> list[str]:
    """The up-to-date tasks of later stages that read an output of a task
    given new attempts (or of such a reader, and so on): what they read will
    be made again, so they run too."""
    stages = run.stage_names
    by_id = run.tasks_by_id
    queue = list(chosen)
    later: list[str] = []
    for tid in queue:
        stage = stages.index(run.stage_of(by_id[tid]))
        outputs = run.output_paths(by_id[tid])
        for task in run.tasks:
            if (
                status.tasks[task.id].status == UP_TO_DATE
                and stages.index(run.stage_of(task)) > stage
                and task.id not in queue
                and reads_any(run, task, outputs)
            ):
                later.append(task.id)
                queue.append(task.id)
    return later


def _check_raise(status: RunStatus, budget_usd: float | None, tokens: int | None) -> None:
    """A budget the run has spent already would halt it again at once: refused."""
    spent = status.usage
    if budget_usd is not None and budget_usd <= spent.spent_usd:
        raise GitrunError(
            f"--budget {budget_usd:g} is not above the {money(spent.spent_usd)} run "
            f"{status.run!r} has spent already; give a larger amount in US dollars"
        )
    if tokens is not None and tokens <= spent.tokens:
        raise GitrunError(
            f"--tokens {tokens} is not above the {spent.tokens:,} tokens run {status.run!r} "
            "has used already; give a larger number"
        )
