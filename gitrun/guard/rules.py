"""What the write hooks judge a task by, kept where a hook call finds it fast.

Claude Code runs gitrun's PreToolUse hook before every write of every agent,
and git runs the pre-commit hook on every commit, so a call must cost little
more than starting the interpreter. A call needs the repository (found here
by walking up from the working directory, without a git process) and, of one
run, its protected patterns and one task's owned patterns. ``gitrun start``
and ``gitrun next`` write them to :attr:`gitrun.store.local.LocalPaths.hook_rules`
(and a hook call that finds them missing or stale writes them), each task's
patterns compiled into one regular expression
(:func:`gitrun.ownership.patterns.owner_regex`)::

    {"v": 1, "key": "<sha256>", "protected": [...], "protected_regex": "..."}
    "t0001"\t["<regex>", ["out/t0001.json"]]

one header line, then one line per task, so a call on a 100,000-task run
decodes one line. The key is the SHA-256 of the files the rules come from
(the repository's config.toml, the run's packet.toml and tasks.toml), read
on every call: rules of an edited definition are never used, and a
definition that does not load makes a task's hook block, as before.

Nothing here imports more than json, os, re and hashlib: a hook call never
loads typer, pydantic or the command line. The rules are what
``RunDef.owns_of`` and ``packet.protected`` say (:func:`build`), so the hooks
judge exactly as ``check`` and the audit do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from gitrun.definition.sources import source_key
from gitrun.layout import branch_ref
from gitrun.ownership.temporaries import target_of_temporary
from gitrun.store.local import HOOK_RULES, run_home
from gitrun.store.regular import read_regular
from gitrun.store.repo import Repo as Repo
from gitrun.store.repo import find_repo as find_repo

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Iterator

    from gitrun.definition.load import RunDef
    from gitrun.store.local import LocalPaths

VERSION = 1
BRANCHES = branch_ref("")  # every run's branch starts so
_END = b"\n# end of the hook rules\n"  # a file cut short does not end so


def started_runs(repo: Repo) -> set[str]:
    """The runs whose branch exists (``layout.branch_ref``), in one git call."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    import subprocess

    proc = subprocess.run(
        ["git", "for-each-ref", f"--format=%(refname:lstrip={BRANCHES.count('/')})", BRANCHES],
        cwd=repo.root,
        capture_output=True,
        check=True,
    )
    return set(proc.stdout.decode("utf-8", "surrogateescape").splitlines())


def rules_path(repo: Repo, run_id: str) -> str:
    return os.path.join(run_home(repo.git_dir, run_id), HOOK_RULES)


class TaskRules:
    """One task's owned patterns and its run's protected ones, compiled."""

    __slots__ = ("_owned", "_protected", "owns", "run_id", "task_id")

    def __init__(
        self, run_id: str, task_id: str, owns: list[str], owned_regex: str, protected_regex: str
    ) -> None:
        self.run_id = run_id
        self.task_id = task_id
        self.owns = owns
        self._owned = re.compile(owned_regex, re.DOTALL)
        self._protected = re.compile(protected_regex, re.DOTALL)

    def owns_path(self, path: str) -> bool:
        """``path`` is owned by the task, itself or as a client's atomic-write
        temporary of an owned path (as the audit judges it)."""
        if self._owned.fullmatch(path) is not None:
            return True
        target = target_of_temporary(path)
        return target is not None and self._owned.fullmatch(target) is not None

    def protects(self, path: str) -> bool:
        return self._protected.fullmatch(path) is not None


class NoSuchTask(Exception):
    """The run loads, but has no such task."""


def rules_of(repo: Repo, run_id: str, task_id: str) -> TaskRules:
    """The rules of ``task_id`` in ``run_id`` (from the cache, written first
    when it is missing or stale). Raises :class:`NoSuchTask`, or what loading
    a broken definition raises."""
    header, task = _current(repo, run_id, task_id)
    if task is None:
        raise NoSuchTask(f"run {run_id!r} has no task {task_id!r}")
    regex, owns = task
    return TaskRules(run_id, task_id, owns, regex, str(header["protected_regex"]))


def protected_of(repo: Repo, run_id: str) -> tuple[list[str], re.Pattern[str]]:
    """A run's protected patterns, as texts and compiled (see :func:`rules_of`)."""
    header = _current(repo, run_id, None)[0]
    texts = header["protected"]
    assert isinstance(texts, list)
    return texts, re.compile(str(header["protected_regex"]), re.DOTALL)


def refresh(local: LocalPaths, run: RunDef) -> None:
    """Write a loaded run's hook rules, unless they are cached. ``start``,
    ``resume`` and ``next`` call it, so a run's first hook call is fast too.
    They are keyed by what ``run`` was loaded from, not by the files as they
    are now (an edit since is seen by the next call). A failure only leaves
    the work to the next call."""
    key, path = run.key, str(local.hook_rules)
    if key and _cached(path, key, None) is None:
        with contextlib.suppress(OSError, ValueError):
            _write(path, key, run)


def _current(
    repo: Repo, run_id: str, task_id: str | None, path: str | None = None
) -> tuple[dict[str, object], tuple[str, list[str]] | None]:
    key = source_key(repo.root, run_id)
    path = path or rules_path(repo, run_id)
    found = _cached(path, key, task_id)
    if found is not None:
        return found
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from pathlib import Path

    from gitrun.definition.load import load_run

    run = load_run(Path(repo.root), run_id, environ={})
    if run.key != key:
        raise OSError(f"the definition of run {run_id!r} changed while it was read; try again")
    _write(path, key, run)
    found = _cached(path, key, task_id)
    if found is None:  # pragma: no cover - the cache was just written with this key
        raise OSError(f"cannot read back {path}")
    return found


def _cached(
    path: str, key: str, task_id: str | None
) -> tuple[dict[str, object], tuple[str, list[str]] | None] | None:
    """(header, the task's (regex, owned patterns)) from the cache when it holds
    ``key``; None when the cache is missing, stale or damaged (it is then
    written again)."""
    try:
        # Not a regular file (a FIFO would make the hook wait for a writer
        # until the client kills it, and lets the write through): written again.
        data = read_regular(path, limit=2**30)
    except OSError:
        return None
    end = data.find(b"\n")
    try:
        header = json.loads(data[:end])
        if not isinstance(header, dict) or header.get("v") != VERSION or header.get("key") != key:
            return None
        if not (
            isinstance(header.get("protected"), list)
            and isinstance(header.get("protected_regex"), str)
        ):
            return None
    except ValueError:
        return None
    if not data.endswith(_END):
        return None  # cut short: it proves nothing
    if task_id is None:
        return header, None
    marker = b"\n" + json.dumps(task_id, allow_nan=False).encode() + b"\t"
    start = data.find(marker)
    if start < 0:
        return header, None
    start += len(marker)
    try:
        regex, owns = json.loads(data[start : data.find(b"\n", start)])
        if not (isinstance(regex, str) and isinstance(owns, list)):
            return None
    except (ValueError, TypeError):  # an edited or damaged line: written again
        return None
    return header, (regex, owns)


def _write(path: str, key: str, run: RunDef) -> None:
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from pathlib import Path

    from gitrun.store.tomlfile import write_atomic

    body = "\n".join(_lines(run, key)) + _END.decode()
    write_atomic(Path(path), body.encode(), durable=False)


def _lines(run: RunDef, key: str) -> Iterator[str]:
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from gitrun.ownership.patterns import owner_regex

    protected = run.packet.protected
    header = {
        "v": VERSION,
        "key": key,
        "protected": protected,
        "protected_regex": owner_regex(protected),
    }
    yield json.dumps(header, allow_nan=False)
    for task in run.tasks:
        owns = run.owns_of(task)
        yield f"{json.dumps(task.id, allow_nan=False)}\t{json.dumps([owner_regex(owns), owns], allow_nan=False)}"
