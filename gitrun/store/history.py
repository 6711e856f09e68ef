"""The run's history, read from its branch: one ``git log`` call, trailers parsed by git."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gitrun.layout import branch_ref
from gitrun.store import git

_FIELD = "\x1f"
_RECORD = "\x1e"
_LIST = "\x1d"
_FORMAT = (
    _FIELD.join(
        [
            "%H",
            "%aI",
            "%s",
            "%(trailers:key=Gitrun-Task,valueonly,separator=%x1d)",
            "%(trailers:key=Gitrun-Attempt,valueonly,separator=%x1d)",
            "%(trailers:key=Gitrun-Base,valueonly)",
        ]
    )
    + _RECORD
)


@dataclass(frozen=True)
class HistoryEntry:
    commit: str
    date: str
    subject: str
    tasks: list[str] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    base: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "date": self.date,
            "subject": self.subject,
            "tasks": self.tasks,
            "attempts": self.attempts,
        }


def find_base(repo: Path, run_id: str, ref: str | None = None) -> str | None:
    """The commit the run forked from, recorded in its first commit (``ref``:
    another copy of the run's branch, such as a remote's)."""
    out = git.git(
        repo,
        "log",
        "--first-parent",
        "-1",
        "--grep=^Gitrun-Base: ",
        "--format=%(trailers:key=Gitrun-Base,valueonly)",
        ref or branch_ref(run_id),
    )
    return out.decode().strip() or None


def read_history(repo: Path, run_id: str, ref: str | None = None) -> list[HistoryEntry]:
    """The run's commits, newest first, back to (and including) its first commit."""
    ref = ref or branch_ref(run_id)
    base = find_base(repo, run_id, ref)
    span = f"{base}..{ref}" if base else ref
    out = git.git(repo, "log", "--first-parent", f"--format={_FORMAT}", span)
    entries = []
    for record in out.decode(errors="replace").split(_RECORD):
        record = record.strip("\n")
        if not record:
            continue
        commit, date, subject, tasks, attempts, base_value = record.split(_FIELD)
        parsed: dict[str, int] = {}
        for item in filter(None, attempts.split(_LIST)):
            task, _, number = item.partition("=")
            if number.strip().isdigit():
                parsed[task.strip()] = int(number)
        entries.append(
            HistoryEntry(
                commit,
                date,
                subject,
                [t.strip() for t in tasks.split(_LIST) if t.strip()],
                parsed,
                base_value.strip() or None,
            )
        )
    return entries
