"""Write-time ownership: the hooks agents and git run while workers write.

- ``pre_write``: the Claude Code PreToolUse hook (Write, Edit, MultiEdit,
  NotebookEdit, Agent/Task, Bash). The task comes from ``GITRUN_RUN``/
  ``GITRUN_TASK`` (a worker gitrun launched) or, for a subagent of a lead
  session, from the Agent call that dispatched it (:mod:`gitrun.guard.subagents`).
  A task's writes outside its owns are denied; any subagent is denied the
  protected files of a started run; a subagent whose task cannot be told,
  though it claims one, is denied. The lead's Agent calls carrying a pointer
  and Bash calls go to :mod:`gitrun.guard.lead`. With no gitrun context at
  all it allows everything, so unrelated sessions never break. In a task's
  context (and for any subagent) its own failures block (fail closed, so
  a broken hook never lets a stray write through): exit 2, the only code
  Claude Code treats as "block".
- ``subagent_stop``: blocks a subagent's stop while its task's outputs are
  missing or invalid (once: ``stop_hook_active`` lets it go).
- ``pre_commit``: a git pre-commit hook rejecting a worker's commit of paths
  outside its owns or of protected files.

Each returns (exit code, stdout, stderr) for the CLI to emit.
"""

from __future__ import annotations

import json
import os
import stat
import time

from gitrun.guard.context import (
    AGENT_TOOLS,
    SEND_TOOLS,
    SHELL_TOOLS,
    WRITE_TOOLS,
    HookFailure,
    HookResult,
    claims_task,
    deny,
    repo_of,
    task_context,
)
from gitrun.guard.lead import pre_agent, pre_bash, pre_send
from gitrun.guard.rules import protected_of, started_runs
from gitrun.guard.subagents import Unresolved, is_subagent, leased_try, meta_path
from gitrun.layout import GITRUN_DIR, run_ids
from gitrun.store.local import LEASES, LOGS, LocalPaths, denials_name, run_home

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

    from gitrun.guard.rules import TaskRules
    from gitrun.store.repo import Repo

__all__ = ["HookFailure", "HookResult", "blocked", "claims_task", "pre_commit", "pre_write"]


def _relative(repo: Repo, target: str, cwd: str | None) -> str | None:
    """The path relative to the repository root, or None when it lies outside."""
    path = target if os.path.isabs(target) else os.path.join(cwd or os.getcwd(), target)
    resolved = os.path.realpath(path)
    root = repo.root  # a real path already
    if resolved == root:
        return "."
    if not resolved.startswith(root.rstrip("/") + "/"):
        return None
    return resolved[len(root.rstrip("/")) + 1 :]


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
    tool = data.get("tool_name")
    try:
        if tool in AGENT_TOOLS or tool in SHELL_TOOLS:
            return (pre_agent if tool in AGENT_TOOLS else pre_bash)(data, environ)
        if tool in SEND_TOOLS:
            return pre_send(data, environ)
        if tool not in WRITE_TOOLS:
            return HookResult(0)
        return _judge_write(data, environ)
    except Unresolved as exc:
        return deny(f"gitrun cannot tell this subagent's task: {exc}")


# Where a write tool's input names its file: NotebookEdit's is notebook_path.
TARGET_KEYS = ("file_path", "notebook_path")


def _judge_write(data: dict[str, Any], environ: dict[str, str]) -> HookResult:
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    tool_input = data.get("tool_input")
    # Every path the input names is judged: a tool reads the key it knows,
    # and another key may name a second file.
    targets: list[object] = []
    if isinstance(tool_input, dict):
        targets = [tool_input[key] for key in TARGET_KEYS if tool_input.get(key)]
    repo = repo_of(cwd)
    context = task_context(repo, data, environ)
    if context is None:
        for target in targets:
            judged = _check_protected_for_subagents(repo, data, target, cwd)
            if judged.code or judged.stdout:  # blocked, or denied
                return judged
        return HookResult(0)
    assert repo is not None
    if not targets:
        raise HookFailure(f"{data.get('tool_name')} input names no file_path")
    for target in targets:
        reason = _judge_target(repo, context, target, cwd)
        if reason is not None:
            shown = _relative(repo, str(target), cwd) or str(target)
            keep_denials(repo, context, [shown], str(data.get("tool_name")), reason, environ)
            return deny(reason)
    return HookResult(0)


def _judge_target(repo: Repo, rules: TaskRules, target: object, cwd: str | None) -> str | None:
    """Why the task may not write ``target``; None when it may."""
    if not isinstance(target, str):
        raise HookFailure(f"the file to write is {type(target).__name__}, not a path")
    owns = ", ".join(rules.owns)
    task_id = rules.task_id
    path = _relative(repo, target, cwd)
    if path is None:
        return f"gitrun task {task_id} may write only {owns}; {target} is outside the repository"
    if path == ".git" or path.startswith((".git/", GITRUN_DIR + "/")) or path == GITRUN_DIR:
        return f"gitrun task {task_id} may write only {owns}; {path} belongs to git or gitrun"
    if rules.protects(path):
        return f"gitrun task {task_id} may not write the shared file {path}; write only {owns}"
    if not rules.owns_path(path):
        return f"gitrun task {task_id} may write only {owns}; {path} is not among them"
    return None


# Bytes of denied writes kept for one attempt: a worker that tries again and
# again is told each time, and its first tries are what a person reads.
MAX_DENIALS_BYTES = 1 << 16


def keep_denials(
    repo: Repo, rules: TaskRules, paths: list[str], tool: str, reason: str, environ: dict[str, str]
) -> None:
    """Keep writes this hook denied a task's attempt beside its log, one JSON
    line each: when the attempt ends they go to the ledger
    (:func:`gitrun.engine.strays.fold_denials`), so ``status`` and the report
    name them after the run, on any clone. The attempt is the environment's
    (a worker gitrun started) or the lease's (a lead's subagent). Best
    effort: the write is denied whatever is kept here."""
    # deferred: only a denied write pays for these (the write hook's <= 3x `python -c pass`)
    import stat
    import time

    from gitrun.store.events import FORMAT, Denied

    home = run_home(repo.git_dir, rules.run_id)  # os.path only: this is the write hook
    number = environ.get("GITRUN_ATTEMPT", "") if environ.get("GITRUN_TASK") else ""
    if number.isdigit():
        attempt = int(number)
    else:
        leased = leased_try(os.path.join(home, LEASES), rules.task_id)
        if leased is None:
            return
        attempt = leased[0]
    at = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    task = rules.task_id
    text = "".join(
        json.dumps(
            {"v": FORMAT} | Denied(task, attempt, p, tool, reason, at).to_json(), allow_nan=False
        )
        + "\n"
        for p in paths
    )
    where = os.path.join(home, LOGS, denials_name(task, attempt))
    try:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(where, flags, 0o666)
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_size < MAX_DENIALS_BYTES:
                os.write(fd, text.encode(errors="replace"))
        finally:
            os.close(fd)
    except OSError:
        return


def _check_protected_for_subagents(
    repo: Repo | None, data: dict[str, Any], target: object, cwd: str | None
) -> HookResult:
    """No task context: only a subagent writing a started run's protected file is denied."""
    if repo is None or not data.get("agent_type") or not isinstance(target, str):
        return HookResult(0)
    path = _relative(repo, target, cwd)
    if path is None:
        return HookResult(0)

    runs = run_ids(repo.root)
    started = started_runs(repo) if runs else set()
    for run_id in runs:
        if run_id not in started:
            continue
        if protected_of(repo, run_id)[1].fullmatch(path):
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
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    repo = repo_of(cwd)

    # A subagent that made no tool call may stop before the client has
    # written its meta file, which names its task: give the client a moment.
    deadline = time.monotonic() + META_WAIT
    while True:
        try:
            context = task_context(repo, data, environ)
            break
        except Exception:  # an unknown subagent: outputs are judged on disk anyway
            try:
                pending = is_subagent(data) and not os.path.lexists(meta_path(data))
            except Exception:  # its input names no meta file at all
                pending = False
            if not pending or time.monotonic() >= deadline:
                return HookResult(0)
            time.sleep(0.05)
    if context is None:
        return HookResult(0)
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from pathlib import Path

    from gitrun.definition.load import load_run
    from gitrun.definition.outputs import check_task
    from gitrun.store.events import Outcome

    assert repo is not None  # a task context has a repository
    run = load_run(Path(repo.root), context.run_id)
    task = next((t for t in run.tasks if t.id == context.task_id), None)
    if task is None:
        return HookResult(0)  # edited away since: outputs are judged on disk anyway
    check = check_task(run, task)
    if check.outcome == Outcome.VALID:
        return HookResult(0)
    keep_last_words(repo, context.run_id, task.id, data.get("last_assistant_message"))
    if data.get("stop_hook_active"):
        return HookResult(0)  # it was held once already: never loop
    outputs = ", ".join(o.path for o in run.outputs_of(task))
    reason = (
        f"gitrun task {task.id} is not done: {check.reason}. Write {outputs} as "
        f"{run.packet_path} asks, then stop."
    )
    return HookResult(0, json.dumps({"decision": "block", "reason": reason}, allow_nan=False))


# Seconds a SubagentStop hook waits for the client to write the subagent's meta file.
META_WAIT = 5.0
# Bytes of a subagent's last messages kept in its attempt's log.
MAX_WORDS_BYTES = 1 << 20
# The line before each message there: what follows the last one is what it said last.
WORDS_HEADER = "[gitrun: the subagent stopped, saying:]\n"


def keep_last_words(repo: Repo, run_id: str, task_id: str, message: object) -> None:
    """Append what a dispatched subagent said last, stopping without its
    outputs, to its attempt's log (the leased attempt's): ``collect`` quotes
    it and ``gitrun logs`` prints it, as for a worker gitrun started. Best
    effort: the outputs decide, whatever is kept here."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from pathlib import Path

    if not isinstance(message, str) or not message.strip():
        return
    local = LocalPaths.under(Path(repo.git_dir), run_id)
    leased = leased_try(str(local.leases), task_id)
    if leased is None:
        return  # not an external run's lease: a worker gitrun started has its own log
    log = local.log_of(task_id, leased[0])
    text = f"{WORDS_HEADER}{message.rstrip()}\n"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(log, flags, 0o666)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_size < MAX_WORDS_BYTES:
                os.write(fd, text.encode(errors="replace")[:MAX_WORDS_BYTES])
        finally:
            os.close(fd)
    except OSError:
        return


def pre_commit(environ: dict[str, str]) -> HookResult:
    """Reject a worker's commit (GITRUN_RUN or GITRUN_TASK set) that touches
    paths outside its owns, or any commit when its task cannot be identified."""
    if not (environ.get("GITRUN_TASK") or environ.get("GITRUN_RUN")):
        return HookResult(0)
    repo = repo_of(None)
    try:
        context = task_context(repo, None, environ)
    except Exception as exc:
        return HookResult(1, stderr=f"gitrun: cannot check this commit ({exc}); commit rejected\n")
    if context is None or repo is None:
        return HookResult(
            1, stderr="gitrun: GITRUN_RUN/GITRUN_TASK name no task here; commit rejected\n"
        )
    rules = context
    # The index being committed: git exports GIT_INDEX_FILE to the hook (for
    # `git commit <paths>` it is a temporary one), so keep the environment.
    staged = _git_output(
        ["git", "-C", repo.root, "diff", "--cached", "--name-only", "-z", "--no-renames"],
        dict(os.environ),
    )
    outside = [p for p in staged.split("\0") if p and (rules.protects(p) or not rules.owns_path(p))]
    if not outside:
        return HookResult(0)
    owns = ", ".join(rules.owns)
    shown = "\n".join(f"  {p}" for p in outside)
    why = f"commit rejected: task {rules.task_id} may write only {owns}"
    keep_denials(repo, rules, outside, "git commit", why, environ)
    return HookResult(
        1,
        stderr=f"gitrun: {why}; these paths are outside its owns or protected:\n{shown}\n",
    )


def _git_output(argv: list[str], env: dict[str, str]) -> str:
    """What git prints, started with posix_spawn rather than subprocess
    (whose import alone is a quarter of a hook call's budget)."""
    read, write = os.pipe()
    try:
        pid = os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, write, 1),
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            ],
        )
    except OSError:
        os.close(read)
        raise
    finally:
        os.close(write)
    chunks = []
    with open(read, "rb") as out:
        while chunk := out.read(65536):
            chunks.append(chunk)
    status = os.waitpid(pid, 0)[1]
    if os.waitstatus_to_exitcode(status) != 0:
        raise HookFailure(f"{' '.join(argv[:1] + argv[3:])} failed")
    return b"".join(chunks).decode(errors="surrogateescape")
