"""Which task a Claude Code subagent works on, from its hook input.

Inside a subagent, PreToolUse carries ``agent_id`` (the lead's calls carry
none), and the client has written ``<transcript without .jsonl>/subagents/
agent-<agent_id>.meta.json`` by the subagent's first tool call. Its
``toolUseId`` is the id of the lead's Agent call, which the lead's hook
recorded with the task it dispatched (:mod:`gitrun.store.dispatches`). Environment
variables cannot tell subagents apart: the hook's environment is the lead's.

Anything that cannot be resolved for a subagent that claims a task (an agent
type with gitrun's prefix, a gitrun description) or whose meta file cannot be
read is :class:`Unresolved`, and the hooks deny its call with the reason.
"""

from __future__ import annotations

import json
import os
import re

from gitrun.guard.rules import NoSuchTask, rules_of
from gitrun.store.local import BOUND, DISPATCHES, HOME, LEASES, run_home
from gitrun.store.regular import NotRegular, read_regular
from gitrun.store.repo import common_git_dir

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

    from gitrun.guard.rules import TaskRules
    from gitrun.store.repo import Repo

PREFIX = "gitrun-"  # agent types gitrun makes: they claim a task
_AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")  # a UUID, as Claude Code makes them


# A meta file is a few hundred bytes; one larger than this is not the client's.
MAX_META_BYTES = 1 << 20


class Unresolved(Exception):
    """A subagent whose task cannot be found; the message is the reason the model reads."""


class Subagent:
    """What the client's meta file says of a subagent."""

    __slots__ = ("agent_id", "agent_type", "description", "tool_use_id")

    def __init__(self, agent_id: str, agent_type: str, tool_use_id: str, description: str) -> None:
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.tool_use_id = tool_use_id
        self.description = description


def is_subagent(data: dict[str, Any]) -> bool:
    return "agent_id" in data


def meta_path(data: dict[str, Any]) -> str:
    """``<transcript without .jsonl>/subagents/agent-<agent_id>.meta.json``,
    where the transcript is the session's own (``<session_id>.jsonl``) and
    the meta file lies inside the session's folder once links are resolved."""
    agent_id, transcript = data.get("agent_id"), data.get("transcript_path")
    session = data.get("session_id")
    if not isinstance(agent_id, str) or _AGENT_ID.fullmatch(agent_id) is None:
        raise Unresolved(f"the hook input's agent_id {agent_id!r} is not one Claude Code makes")
    if not isinstance(transcript, str) or not transcript.endswith(".jsonl"):
        raise Unresolved("the hook input names no session transcript, so the subagent is unknown")
    if (
        not isinstance(session, str)
        or _SESSION_ID.fullmatch(session) is None
        or os.path.basename(transcript) != f"{session}.jsonl"
    ):
        raise Unresolved(
            "the hook input's transcript_path is not its session's own transcript, so the "
            "subagent is unknown"
        )
    folder = transcript.removesuffix(".jsonl")
    path = os.path.join(folder, "subagents", f"agent-{agent_id}.meta.json")
    inside = os.path.realpath(folder) + os.sep
    if not os.path.realpath(path).startswith(inside):
        raise Unresolved("this subagent's meta file lies outside its session's folder")
    return path


def read_subagent(data: dict[str, Any]) -> Subagent:
    path = meta_path(data)
    try:  # a FIFO in its place must not hang the hook: regular files only
        meta = json.loads(read_regular(path, follow=False, limit=MAX_META_BYTES))
    except (OSError, ValueError) as exc:
        if isinstance(exc, NotRegular):
            why = f"it is {exc.kind}"
        elif isinstance(exc, OSError) and exc.strerror:
            why = exc.strerror
        else:
            why = type(exc).__name__
        raise Unresolved(
            f"cannot read this subagent's {os.path.basename(path)} ({why}), so gitrun cannot tell its task"
        ) from None
    tool_use_id = meta.get("toolUseId") if isinstance(meta, dict) else None
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise Unresolved(f"this subagent's {os.path.basename(path)} names no toolUseId")
    agent_type = meta.get("agentType") or data.get("agent_type") or ""
    description = meta.get("description") or ""
    return Subagent(str(data["agent_id"]), str(agent_type), tool_use_id, str(description))


def claims_a_task(data: dict[str, Any], sub: Subagent | None = None) -> bool:
    """Whether a subagent presents itself as a gitrun worker (gitrun's agent
    type, or the description gitrun gives dispatched tasks)."""

    types = [data.get("agent_type"), sub.agent_type if sub else None]
    if any(isinstance(t, str) and t.startswith(PREFIX) for t in types):
        return True
    return sub is not None and sub.description.startswith("gitrun ")


def task_of_subagent(repo: Repo, data: dict[str, Any]) -> TaskRules | None:
    """The run and task a subagent was dispatched for; None for a subagent no
    gitrun task concerns (launched without a pointer). Raises
    :class:`Unresolved` when it cannot tell, or when the dispatch is stale."""
    try:
        runs = sorted(os.listdir(os.path.join(common_git_dir(repo.git_dir), HOME)))
    except OSError:
        runs = []
    homes = [(run_id, run_home(repo.git_dir, run_id)) for run_id in runs]
    homes = [
        (run_id, home) for run_id, home in homes if os.path.isfile(os.path.join(home, DISPATCHES))
    ]
    if not homes:  # no lead dispatched anything here: no subagent has a task
        if claims_a_task(data):
            raise Unresolved(
                "this subagent has gitrun's agent type, but no gitrun pointer was dispatched "
                "here; the lead must dispatch the exact pointer `gitrun next` printed, as the "
                "whole prompt of one subagent"
            )
        return None
    sub = read_subagent(data)
    for run_id, home in homes:
        dispatch = dispatch_of(os.path.join(home, DISPATCHES), sub.tool_use_id)
        if dispatch is None:
            continue
        task_id, attempt, throttles = dispatch
        bind(home, sub, task_id)
        try:
            rules = rules_of(repo, run_id, task_id)
        except NoSuchTask:
            raise Unresolved(f"run {run_id!r} has no task {task_id!r} any more") from None
        if leased_try(os.path.join(home, LEASES), task_id) != (attempt, throttles):
            raise Unresolved(
                f"gitrun task {task_id} (attempt {attempt}) is no longer handed out: "
                "it was collected or handed out again, so nothing this subagent writes counts; "
                "stop now"
            )
        return rules
    if claims_a_task(data, sub):
        raise Unresolved(
            f"this subagent ({sub.agent_type or 'no type'}: {sub.description!r}) was not "
            "dispatched with a leased gitrun pointer; the lead must dispatch the exact pointer "
            "`gitrun next` printed, as the whole prompt of one subagent"
        )
    return None


_TOOL_USE_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def bind(home: str, sub: Subagent, task_id: str) -> None:
    """Bind the dispatch ``sub`` names to ``sub``'s agent_id, the first time
    a subagent uses it; a different subagent naming the same dispatch (its
    meta file copied or forged) is refused."""
    if _TOOL_USE_ID.fullmatch(sub.tool_use_id) is None:
        raise Unresolved(
            f"this subagent's toolUseId {sub.tool_use_id!r} is not one Claude Code makes"
        )
    folder = os.path.join(home, BOUND)
    path = os.path.join(folder, sub.tool_use_id)
    try:
        try:  # every call after a dispatch's first: one read
            first = read_regular(path, follow=False, limit=256).decode(errors="replace")
        except FileNotFoundError:
            first = None
        if first is None:
            first = _take(folder, path, sub.agent_id)
    except OSError as exc:
        raise Unresolved(f"cannot tell who took gitrun task {task_id}'s dispatch ({exc})") from None
    if first != sub.agent_id:
        raise Unresolved(
            f"gitrun task {task_id}'s dispatch was taken by another subagent ({first}); this "
            "one was not dispatched for it, so nothing it writes counts: stop now"
        )


def _take(folder: str, path: str, agent_id: str) -> str:
    """Record ``agent_id`` at ``path`` unless another got there first; the
    agent_id recorded there."""
    os.makedirs(folder, exist_ok=True)
    # Written whole, then linked in place: a reader sees no name or the whole id.
    draft = f"{path}.{os.getpid()}.draft"
    with open(draft, "w", encoding="utf-8") as handle:
        handle.write(agent_id)
    try:
        os.link(draft, path)
        return agent_id
    except FileExistsError:
        return read_regular(path, follow=False, limit=256).decode(errors="replace")
    finally:
        os.unlink(draft)


def _quiet(_line: str) -> None:
    """A damaged record only identifies fewer subagents; the hook says nothing else."""


def dispatch_of(path: str, tool_use_id: str) -> tuple[str, int, int] | None:
    """(task, attempt, throttles) the dispatch record at ``path`` holds for ``tool_use_id``."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from gitrun.store.dispatches import read_dispatches_at

    found = read_dispatches_at(path, warn=_quiet).get(tool_use_id)
    return (found.task, *found.try_of) if found is not None else None


def leased_try(path: str, task_id: str) -> tuple[int, int] | None:
    """The try (attempt, throttles) the lease record at ``path`` holds for ``task_id``."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from gitrun.store.leases import read_leases_at

    found = read_leases_at(path, warn=_quiet).get(task_id)
    return found.try_of if found is not None else None
