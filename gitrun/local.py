"""Machine-local state of a run under ``.git/gitrun/<run>/``.

Never committed and never needed for correctness after a crash: the run lock
and its owner record, records of running attempts (so a new driver can stop
the workers of a dead one), worker logs and quarantined outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitrun import git


@dataclass(frozen=True)
class LocalPaths:
    root: Path

    @classmethod
    def of(cls, repo: Path, run_id: str) -> LocalPaths:
        return cls(git.git_dir(repo) / "gitrun" / run_id)

    @property
    def lock(self) -> Path:
        return self.root / "driver.lock"

    @property
    def owner(self) -> Path:
        return self.root / "driver.json"

    @property
    def commit_lock(self) -> Path:
        return self.root / "commit.lock"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def tip(self) -> Path:
        """The last commit gitrun published on the run's branch: a deleted
        branch takes its reflog with it, this record stays."""
        return self.root / "tip"

    @property
    def running(self) -> Path:
        """Journal of attempts started and ended, so a new driver can stop the
        workers of a dead one."""
        return self.root / "running.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    def log_of(self, task: str, attempt: int) -> Path:
        return self.logs / f"{task}.{attempt}.log"

    def quarantine_of(self, task: str, attempt: int) -> Path:
        return self.quarantine / task / str(attempt)
