"""``gitrun mcp``: gitrun's lead commands as an MCP server on stdio.

For leads in any agent client that speaks MCP (codex, Gemini CLI, Cursor,
Claude Code, an Agent SDK program): ``status``, ``check``, ``start`` and
``resume`` (of an external run), ``next``, ``collect``, ``retry`` and
``report`` are tools with typed input and output,
each the very function its command calls, so a lease made here is the
lease ``gitrun next`` makes (one engine, one record); a run's packet is the
resource ``gitrun://runs/{run}/packet.toml``. A failure is the command's
own sentence, as a tool error. A client is a model that reads task data:
``report`` writes only where :mod:`gitrun.mcp.confine` allows. Built on the
official ``mcp`` SDK, the ``gitrun[mcp]`` extra: nothing else in gitrun
imports this package.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

import gitrun
from gitrun.commands.check import check_data
from gitrun.commands.external import begin_external, collect_leases, lease
from gitrun.commands.report.page import (
    default_path,
    is_report_of,
    render_report,
    write_report,
)
from gitrun.commands.retry import retry_tasks
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.layout import PACKET_NAME, RUNS_DIR, check_run_id, run_id_problem
from gitrun.mcp.confine import confined_target, write_target
from gitrun.workers.scratch import read_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gitrun.engine.external import Batch, Collected

RunName = Annotated[str, Field(description="The run's id (its folder under .gitrun/runs/).")]
_T = TypeVar("_T")


class BatchOut(BaseModel):
    """A batch, as ``gitrun next --json`` prints it."""

    leased: dict[str, str] = Field(description="Each leased task's pointer, by task.")
    agent: str | None = Field(None, description="The subagent type to start each pointer with.")
    model: str | None = Field(None, description="The model the packet names for them.")
    usage: str | None = Field(
        None, description="Where a subagent's usage may be written ({task}, {attempt})."
    )
    attempts: dict[str, int] = Field(
        default_factory=dict, description="The attempt of each task past its first."
    )
    done: bool = Field(False, description="Every task is done: land the run.")
    halted: bool = Field(False, description="A halt holds the run: stop and report `reason`.")
    why: str | None = Field(None, description="What holds the batch back, when something does.")
    wait_s: float | None = Field(None, description="Seconds to wait before asking again.")
    reason: str = Field("", description="The sentence that says why, for a person.")
    violations: list[str] = Field(default_factory=list, description="Ownership violations found.")
    notices: list[str] = Field(default_factory=list, description="The spend budget's notices.")


class CollectedOut(BaseModel):
    """What ``gitrun collect --json`` prints: each leased task, judged from the disk."""

    done: list[str] = Field(description="Validated and committed.")
    missing: list[str] = Field(description="An output does not exist: released for a retry.")
    invalid: list[str] = Field(description="An output fails its validators: released.")
    throttled: list[str] = Field(description="Named throttled: back off, no attempt used.")
    abandoned: list[str] = Field(description="Leased to a lead that is gone: no attempt used.")
    failed: list[str] = Field(description="Used up their attempts now.")
    reasons: dict[str, str] = Field(description="Why, by task.")
    said: dict[str, list[str]] = Field(description="A subagent's last words, by task.")
    next: str = Field(description="What to do next.")
    halted: bool = Field(description="A halt holds the run.")
    violations: list[str] = Field(description="Ownership violations found.")
    notices: list[str] = Field(description="The spend budget's notices.")


class ProblemOut(BaseModel):
    code: str
    message: str
    tasks: list[str]
    path: str | None


class CheckOut(BaseModel):
    """What ``gitrun check`` proves: ready when there is no problem."""

    ready: bool
    summary: str = Field(description="What was checked, when the definition loaded.")
    tasks: int | None = Field(description="The run's tasks, when the definition loaded.")
    up_to_date: int | None = Field(
        description="Tasks whose outputs are current, so a start does not run them; "
        "null while there are problems."
    )
    will_run: int | None = Field(description="Tasks a start runs; null while there are problems.")
    problems: list[ProblemOut]


class RetriedOut(BaseModel):
    tasks: list[str] = Field(description="Given a fresh set of attempts.")
    lifted: str | None = Field(description="The halt lifted, if the run was halted.")
    max_cost_usd: float | None = Field(description="The run's spend budget now, when raised.")
    max_tokens: int | None = Field(description="The run's token budget now, when raised.")


class ReportOut(BaseModel):
    path: str = Field(description="The HTML page written.")


class StartedOut(BaseModel):
    """An external run started or resumed."""

    said: list[str] = Field(description="What the start or resume did, a line each.")
    collected: CollectedOut | None = Field(description="What a resume collected.")
    batch: BatchOut = Field(description="The first batch.")


def _batch(batch: Batch) -> BatchOut:
    data = {**batch.to_json(), "violations": batch.violations, "notices": batch.notices}
    return BatchOut.model_validate(data)


def _collected(collected: Collected) -> CollectedOut:
    return CollectedOut.model_validate(collected.to_json())


def build(repo: Path) -> MCPServer[Any]:
    """The server for the repository at ``repo``."""
    server: MCPServer[Any] = MCPServer(
        "gitrun",
        version=gitrun.__version__,
        instructions="Lead gitrun runs: `next` leases a batch of pointers, start one subagent "
        "per pointer with it as the whole prompt, `collect` judges them from the disk; repeat "
        "until `next` says done. Never judge a task by what its subagent said.",
        log_level="WARNING",
    )
    one_at_a_time = threading.Lock()  # the SDK runs each call on a thread of its own

    def call(what: Callable[[], _T]) -> _T:
        with one_at_a_time:
            try:
                return what()
            except GitrunError as exc:
                raise ToolError(exc.message) from exc

    @server.tool(description="A run's progress: its state, counts, attempts, spend and tasks.")
    def status(run: RunName) -> dict[str, Any]:
        return call(lambda: read_status(repo, run, landing=True).to_json())

    @server.tool(description="Prove a run is safe to launch: every problem, not only the first.")
    def check(run: RunName) -> CheckOut:
        return CheckOut.model_validate(call(lambda: check_data(repo, run)))

    def begun(run: str, resume: bool) -> StartedOut:
        said: list[str] = []
        collected, batch = begin_external(repo, run, resume, said.append)
        return StartedOut(
            said=said,
            collected=None if collected is None else _collected(collected),
            batch=_batch(batch),
        )

    @server.tool(
        description="Start an external run: check it, create its branch gitrun/RUN and lease "
        "the first batch (the canary, which runs alone)."
    )
    def start(run: RunName) -> StartedOut:
        return call(lambda: begun(run, resume=False))

    @server.tool(
        description="Resume an external run after a pause, a crash, another lead or another "
        "machine: collect what reached the disk (the leases of a lead that is gone come back "
        "abandoned, using no attempt) and lease the next batch."
    )
    def resume(run: RunName) -> StartedOut:
        return call(lambda: begun(run, resume=True))

    @server.tool(
        name="next",
        description="Lease the next batch of an external run: a pointer per task, each the "
        "whole prompt of one subagent. Nothing leased: `why` and `wait_s` say what it waits for.",
    )
    def next_batch(
        run: RunName,
        max: Annotated[int | None, Field(ge=1, description="Lease at most this many.")] = None,
    ) -> BatchOut:
        return _batch(call(lambda: lease(repo, run, max)))

    @server.tool(
        description="Judge every leased task of an external run from the disk: commit what "
        "validated, release the rest. Name the tasks whose subagent met a rate limit."
    )
    def collect(
        run: RunName,
        throttled: Annotated[
            list[str], Field(description="Tasks whose subagent reported a rate limit or overload.")
        ] = [],  # noqa: B006 - the SDK copies it into each call's arguments
    ) -> CollectedOut:
        return _collected(call(lambda: collect_leases(repo, run, list(throttled))))

    @server.tool(
        description="Give failed tasks a fresh set of attempts and lift a halt; with "
        "max_cost_usd or max_tokens, raise the run's spend budget. Then resume the run."
    )
    def retry(
        run: RunName,
        tasks: Annotated[
            list[str], Field(description="Tasks to retry; default every failed one.")
        ] = [],  # noqa: B006 - the SDK copies it into each call's arguments
        max_cost_usd: Annotated[float | None, Field(description="The new budget in USD.")] = None,
        max_tokens: Annotated[int | None, Field(ge=1, description="The new token budget.")] = None,
    ) -> RetriedOut:
        def retried() -> RetriedOut:
            done = retry_tasks(repo, run, list(tasks), max_cost_usd, max_tokens)
            budget = done.budget
            return RetriedOut(
                tasks=done.tasks,
                lifted=done.lifted,
                max_cost_usd=budget.cost_usd if budget is not None else None,
                max_tokens=budget.tokens if budget is not None else None,
            )

        return call(retried)

    @server.tool(
        description="Write a run's report, one self-contained HTML page: by default with the "
        "run's local state in the git directory, else in a new file of the repository or over "
        "an earlier report of the same run (never a tracked or other file)."
    )
    def report(
        run: RunName,
        output: Annotated[
            str | None,
            Field(
                description="Where, from the repository root; default with the run's local "
                "state in the git directory, outside the work tree."
            ),
        ] = None,
    ) -> ReportOut:
        return ReportOut(path=str(call(lambda: _write_report(repo, run, output))))

    @server.resource(
        "gitrun://runs/{run}/packet.toml",
        description="A run's packet: the shared rules every worker follows.",
        mime_type="application/toml",
    )
    def packet(run: str) -> str:
        wrong = run_id_problem(run)
        if wrong is not None:
            raise ResourceError(f"{run!r} is no run id: {wrong}")
        # Only a regular file reached without a link: a link could name any file.
        data = read_regular(repo, f"{RUNS_DIR}/{run}/{PACKET_NAME}")
        if data is None:
            raise ResourceError(f"run {run!r} has no packet here ({RUNS_DIR}/{run}/{PACKET_NAME})")
        return data.decode("utf-8", errors="replace")

    del status, check, start, resume, next_batch, collect, retry, report, packet  # registered
    return server


def _write_report(repo: Path, run: str, output: str | None) -> Path:
    """The report tool: the page where ``gitrun report`` puts it, with the
    run's local state (a place gitrun names, not the caller); or at the
    caller's place, confined as a worker's writes are
    (:mod:`gitrun.mcp.confine`), never over anything but an earlier report."""
    check_run_id(run)
    if output is None:
        return write_report(repo, run)
    fix = f"name a new file inside the repository, such as {default_path(run).as_posix()}"
    target = confined_target(
        repo,
        output,
        own=f"a report of run {run!r}",
        is_own=lambda head: is_report_of(head, run),
        fix=fix,
    )
    return write_target(repo, target, render_report(repo, run).encode("utf-8"), fix)


def serve(repo: Path) -> None:
    """Serve ``repo`` on stdin and stdout until the client closes them."""
    build(repo).run()
