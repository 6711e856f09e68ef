"""The stray-write audit: changes that appear outside every owned path during a run.

The work tree's changes are snapshotted (``git status``, untracked files
included) when driving starts; later snapshots are compared with it. A new
changed path that no task owns and that is not gitrun's own is an ownership
violation, reported with the tasks that were running since the last audit.
Only the run's own files (the ledger gitrun appends to) are exempt.
Such paths are never committed: the committer only takes validated outputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitrun import git
from gitrun.ownership import OWNS, Claim, OwnerIndex
from gitrun.patterns import PatternError, parse
from gitrun.runfiles import is_ledger_path, own_paths
from gitrun.runs import RunDef


@dataclass(frozen=True)
class Violation:
    path: str
    tasks: list[str]  # tasks running while it appeared
    at: str

    def describe(self) -> str:
        who = ", ".join(self.tasks) if self.tasks else "no task"
        return f"{self.path} changed outside every owned path (running: {who})"

    def to_record(self) -> dict[str, Any]:
        return {"event": "violation", "path": self.path, "tasks": self.tasks, "at": self.at}


class Audit:
    def __init__(self, run: RunDef) -> None:
        self.run = run
        claims = []
        for task in run.tasks:
            for text in run.owns_of(task):
                try:
                    claims.append(Claim(task.id, text, parse(text), OWNS))
                except PatternError:
                    continue  # check_run reported it before launch
        self.index = OwnerIndex(claims)
        # Only the files gitrun itself writes during the run are exempt: a
        # worker writing .gitrun/config.toml or another run's files is reported.
        self.own = set(own_paths(run))
        self.known = set(git.changed_paths(run.repo))
        self.active: set[str] = set()

    def running(self, task: str) -> None:
        self.active.add(task)

    def check(self, running: Iterable[str]) -> list[Violation]:
        """New stray changes since the last check."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        found = []
        for path in git.changed_paths(self.run.repo):
            if path in self.known:
                continue
            self.known.add(path)
            if path in self.own or is_ledger_path(self.run, path) or self.index.owners(path):
                continue
            found.append(Violation(path, sorted(self.active), now))
        self.active = set(running)
        return found
