"""Write-time ownership: the hooks agents and git run while workers write.

- ``pre_write``: the Claude Code PreToolUse hook (Write, Edit, MultiEdit,
  NotebookEdit, Agent/Task, Bash). The task comes from ``GITRUN_RUN``/
  ``GITRUN_TASK`` (a worker gitrun launched) or, for a subagent of a lead
  session, from the Agent call that dispatched it (:mod:`gitrun.subagents`).
  A task's writes outside its owns are denied; any subagent is denied the
  protected files of a started run; a subagent whose task cannot be told,
  though it claims one, is denied. The lead's Agent calls carrying a pointer
  and Bash calls go to :mod:`gitrun.agenthooks`. With no gitrun context at
  all it allows everything, so unrelated sessions never break. In a task's
  context (and for any subagent) its own failures block (fail closed,
  DESIGN rule 10): exit 2, the only code Claude Code treats as "block".
- ``subagent_stop``: blocks a subagent's stop while its task's outputs are
  missing or invalid (once: ``stop_hook_active`` lets it go).
- ``pre_commit``: a git pre-commit hook rejecting a worker's commit of paths
  outside its owns or of protected files.

Each returns (exit code, stdout, stderr) for the CLI to emit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gitrun.hookcontext import (
    AGENT_TOOLS,
    SHELL_TOOLS,
    WRITE_TOOLS,
    HookFailure,
    HookResult,
    claims_task,
    deny,
    repo_of,
    task_context,
)
from gitrun.patterns import PatternError, matches, parse
from gitrun.runs import GITRUN_DIR, RunDef, Task, list_runs, load_run

__all__ = ["HookFailure", "HookResult", "blocked", "claims_task", "pre_commit", "pre_write"]


def _relative(repo: Path, target: str, cwd: str | None) -> str | None:
    """The path relative to the repository root, or None when it lies outside."""
    path = Path(target)
    if not path.is_absolute():
        path = Path(cwd or os.getcwd()) / path
    resolved = Path(os.path.realpath(path))
    root = Path(os.path.realpath(repo))
    if not resolved.is_relative_to(root):
        return None
    return resolved.relative_to(root).as_posix()


def _covered(patterns: list[str], path: str) -> bool:
    for text in patterns:
        try:
            if matches(parse(text), path):
                return True
        except PatternError:
            continue  # `gitrun check` reports it
    return False


def _owned(run: RunDef, task: Task, path: str) -> bool:
    """``path`` is owned by ``task``, itself or as a client's atomic-write
    temporary of an owned path (as the audit judges it)."""
    from gitrun.temporaries import target_of_temporary

    owns = run.owns_of(task)
    target = target_of_temporary(path)
    return _covered(owns, path) or (target is not None and _covered(owns, target))


def _protected(run: RunDef, path: str) -> bool:
    return _covered(run.packet.protected, path)


def blocked(what: str, exc: BaseException) -> str:
    """The one line a blocking hook prints: what it could not do, and why."""
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    return f"gitrun: cannot check this {what} ({reason}); {what} blocked"


def pre_write(stdin: str, environ: dict[str, str]) -> HookResult:
    try:
        data = json.loads(stdin)
        if not isinstance(data, dict):
            raise ValueError("the hook input is not a JSON object")
    except Exception as exc:  # also RecursionError from absurdly nested input
        if claims_task(None, environ, stdin):
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            return HookResult(2, stderr=f"gitrun: malformed hook input ({reason}); write blocked")
        return HookResult(0)  # not ours to judge
    try:
        return _pre_write(data, environ)
    except Exception as exc:
        if claims_task(data, environ):
            return HookResult(2, stderr=blocked("write", exc))
        return HookResult(0)


def _pre_write(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    from gitrun.subagents import Unresolved

    tool = data.get("tool_name")
    try:
        if tool in AGENT_TOOLS or tool in SHELL_TOOLS:
            from gitrun.agenthooks import pre_agent, pre_bash

            return (pre_agent if tool in AGENT_TOOLS else pre_bash)(data, environ)
        if tool not in WRITE_TOOLS:
            return HookResult(0)
        return _judge_write(data, environ)
    except Unresolved as exc:
        return deny(f"gitrun cannot tell this subagent's task: {exc}")


def _judge_write(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    tool_input = data.get("tool_input")
    target = None
    if isinstance(tool_input, dict):
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
    repo = repo_of(cwd)
    context = task_context(repo, data, environ)
    if context is None:
        return _check_protected_for_subagents(repo, data, target, cwd)
    run, task = context
    assert repo is not None
    if not isinstance(target, str) or not target:
        raise HookFailure(f"{data.get('tool_name')} input names no file_path")
    owns = ", ".join(run.owns_of(task))
    path = _relative(repo, target, cwd)
    if path is None:
        return deny(
            f"gitrun task {task.id} may write only {owns}; {target} is outside the repository"
        )
    if path == ".git" or path.startswith((".git/", GITRUN_DIR + "/")) or path == GITRUN_DIR:
        return deny(f"gitrun task {task.id} may write only {owns}; {path} belongs to git or gitrun")
    if _protected(run, path):
        return deny(
            f"gitrun task {task.id} may not write the shared file {path}; write only {owns}"
        )
    if not _owned(run, task, path):
        return deny(f"gitrun task {task.id} may write only {owns}; {path} is not among them")
    return HookResult(0)


def _check_protected_for_subagents(
    repo: Path | None, data: dict[str, Any], target: object, cwd: str | None
) -> HookResult:
    """No task context: only a subagent writing a started run's protected file is denied."""
    if repo is None or not data.get("agent_type") or not isinstance(target, str):
        return HookResult(0)
    path = _relative(repo, target, cwd)
    if path is None:
        return HookResult(0)
    from gitrun.committer import branch_ref
    from gitrun.git import rev_parse

    for run_id in list_runs(repo):
        if rev_parse(repo, branch_ref(run_id)) is None:
            continue
        run = load_run(repo, run_id)
        if _protected(run, path):
            return deny(
                f"{path} is a protected shared file of the gitrun run {run_id!r}; subagents may not "
                "write it (the lead updates it)"
            )
    return HookResult(0)


def subagent_stop(stdin: str, environ: dict[str, str]) -> HookResult:
    try:
        data = json.loads(stdin)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except ValueError:
        return HookResult(0)
    if data.get("stop_hook_active"):
        return HookResult(0)  # it was held once already: never loop
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    repo = repo_of(cwd)
    try:
        context = task_context(repo, data, environ)
    except Exception:  # an unknown subagent: outputs are judged on disk anyway
        return HookResult(0)
    if context is None:
        return HookResult(0)
    run, task = context
    from gitrun.outputs import check_task

    check = check_task(run, task)
    if check.outcome == "valid":
        return HookResult(0)
    outputs = ", ".join(o.path for o in run.outputs_of(task))
    reason = (
        f"gitrun task {task.id} is not done: {check.reason}. Write {outputs} as "
        f"{run.packet_path} asks, then stop."
    )
    return HookResult(0, json.dumps({"decision": "block", "reason": reason}))


def pre_commit(environ: dict[str, str]) -> HookResult:
    """Reject a worker's commit (GITRUN_RUN or GITRUN_TASK set) that touches
    paths outside its owns, or any commit when its task cannot be identified."""
    if not (environ.get("GITRUN_TASK") or environ.get("GITRUN_RUN")):
        return HookResult(0)
    from gitrun.proc import run_cmd

    repo = repo_of(None)
    try:
        context = task_context(repo, None, environ)
    except Exception as exc:
        return HookResult(1, stderr=f"gitrun: cannot check this commit ({exc}); commit rejected\n")
    if context is None or repo is None:
        return HookResult(
            1, stderr="gitrun: GITRUN_RUN/GITRUN_TASK name no task here; commit rejected\n"
        )
    run, task = context
    # The index being committed: git exports GIT_INDEX_FILE to the hook (for
    # `git commit <paths>` it is a temporary one), so keep the environment.
    staged = run_cmd(
        ["git", "diff", "--cached", "--name-only", "-z", "--no-renames"],
        repo,
        env=dict(os.environ),
        check=False,
    ).stdout.decode(errors="surrogateescape")
    outside = [
        p for p in staged.split("\0") if p and (_protected(run, p) or not _owned(run, task, p))
    ]
    if not outside:
        return HookResult(0)
    owns = ", ".join(run.owns_of(task))
    shown = "\n".join(f"  {p}" for p in outside)
    return HookResult(
        1,
        stderr=f"gitrun: commit rejected: task {task.id} may write only {owns}; these paths are "
        f"outside its owns or protected:\n{shown}\n",
    )
