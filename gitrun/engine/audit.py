"""The stray-write audit: changes that appear outside every owned path during a run.

The work tree's changes are snapshotted (``git status``, untracked files
included) when driving starts, with each changed file's stat signature; later
audits compare both. A path that changes (newly, or again: a worker
overwriting a user's uncommitted edit, or reverting it) outside every owned
path is an ownership violation, reported with the tasks that were running
since the last audit. So is a change to what git runs or reads from
``.git/`` (``config``, ``hooks/``, ``info/``). A change to the run's own
definition (packet, task table, bundles and schemas in its folder) is an
*edit*: the user's, as a rule, so not a violation; it is recorded (a
``definition`` event, state ``changed``) and said once, and a driver goes
on with the definition it started with. The next ``gitrun resume`` takes it
only when asked (``--take-edits``), since a worker could have written it too. Only the ledger gitrun appends to is
exempt, and so is a client's atomic-write temporary of an owned path
(:mod:`gitrun.ownership.temporaries`). Such changes are never committed: the committer only takes
validated outputs and the definition as it was when driving started.

Other runs may be driven beside this one in the same work tree: what they
write is theirs, not a stray write of this run's tasks. Their own files
(packet, task table, ledger, bundles, schemas) and the paths owned by each
that has started are passed over (``Audit._of_runs_beside``); a change
outside every run's owned paths is a violation still.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitrun.definition.beside import is_any_run_file, runs_beside
from gitrun.definition.load import PACKET_NAME, RUNS_DIR, TASKS_NAME, RunDef
from gitrun.definition.runfiles import definition_paths, is_ledger_path
from gitrun.layout import run_ids
from gitrun.ownership.claims import OWNS, Claim, OwnerIndex
from gitrun.ownership.patterns import PatternError, escape, parse
from gitrun.ownership.temporaries import is_client_mark, target_of_temporary
from gitrun.store import events, git
from gitrun.store.branches import run_branches
from gitrun.store.records import VERSION, Fields, RecordInvalid
from gitrun.store.repo import common_git_dir
from gitrun.visible import visible


@dataclass(frozen=True)
class Violation:
    path: str
    tasks: list[str]  # tasks running while it appeared
    at: str
    # True for a change to the run's own definition: an edit, not a violation.
    edit: bool = False

    def describe(self) -> str:
        who = ", ".join(self.tasks) if self.tasks else "no task"
        # The record keeps the path as it is (JSON escapes it); every
        # sentence shows it visible: a worker chose the name.
        if self.edit:
            return (
                f"{visible(self.path)}, the run's definition, was edited while tasks ran "
                f"({who}); the running tasks keep what they read"
            )
        return f"{visible(self.path)} changed outside every owned path (running: {who})"

    def to_record(self) -> events.Violation | events.DefinitionEvent:
        if self.edit:
            return events.DefinitionEvent(self.path, events.CHANGED, self.tasks, self.at)
        return events.Violation(self.path, self.tasks, self.at)


Signature = tuple[int, int, int, int] | None


@dataclass(frozen=True)
class AuditState:
    """The audit's last look, kept between the commands of an external run
    (``.git/gitrun/<run>/audit.json``, a version-1 record): changed paths and
    the files of ``.git/`` it watches, with their stat signatures, and the
    tasks out since."""

    known: dict[str, Signature]
    git_files: dict[str, Signature]
    active: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "known": {p: list(s) if s else None for p, s in self.known.items()},
            "git_files": {p: list(s) if s else None for p, s in self.git_files.items()},
            "active": self.active,
        }

    @classmethod
    def from_json(cls, data: Fields) -> AuditState:
        return cls(
            _signatures(data.mapping("known"), "known"),
            _signatures(data.mapping("git_files"), "git_files"),
            data.strings("active"),
        )


def _signatures(items: dict[str, Any], name: str) -> dict[str, Signature]:
    out: dict[str, Signature] = {}
    for path, value in items.items():
        if value is None:
            out[path] = None
        elif isinstance(value, list) and len(value) == 4 and all(type(v) is int for v in value):
            out[path] = (value[0], value[1], value[2], value[3])
        else:
            raise RecordInvalid(name, f"holds {path!r} without a stat signature")
    return out


def _owned_claims(run: RunDef) -> list[Claim]:
    claims = []
    for task in run.tasks:
        for text in run.owns_of(task):
            try:
                claims.append(Claim(task.id, text, parse(text), OWNS))
            except PatternError:
                continue  # check_run reported it before launch
    return claims


class Audit:
    def __init__(self, run: RunDef, state: AuditState | None = None) -> None:
        self.run = run
        self.index = OwnerIndex(_owned_claims(run))
        self.definition = frozenset(definition_paths(run))
        self.git_dir = git.git_dir(run.repo)
        # A linked work tree's hooks, info/ and main config are the common ones.
        self.common_dir = Path(common_git_dir(str(self.git_dir)))
        self.seen_with: dict[str, list[str]] = {}  # owned path -> tasks out when it changed
        # The runs beside this one as last read, and the state they were read in.
        self._beside: tuple[tuple[object, ...], OwnerIndex] | None = None
        if state is None:
            self.known = {p: signature(run.repo / p) for p in git.changed_paths(run.repo)}
            self.git_files = self._git_files()
            self.active: set[str] = set()
        else:  # an external run's audit, picked up where the last command left it
            self.known = dict(state.known)
            self.git_files = dict(state.git_files)
            self.active = set(state.active)

    def state(self) -> AuditState:
        return AuditState(self.known, self.git_files, sorted(self.active))

    def running(self, task: str) -> None:
        self.active.add(task)

    def check(self, running: Iterable[str]) -> list[Violation]:
        """New stray changes since the last check."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        found = []
        changed = set(git.changed_paths(self.run.repo))
        for path in sorted(changed | self.known.keys()):
            now_is = signature(self.run.repo / path)
            if path in self.known and self.known[path] == now_is:
                continue  # as it was at the last look
            self.known[path] = now_is
            if is_ledger_path(self.run, path):
                continue
            if self._owned(path):
                # Who was out when it changed: a task's output another
                # task's worker wrote is found at that task's dispatch.
                self.seen_with[path] = sorted(self.active)
                continue
            if self._of_runs_beside(path):
                continue  # another run's driver or worker wrote it: that run's audit judges it
            found.append(Violation(path, sorted(self.active), now, path in self.definition))
        git_files = self._git_files()
        for path in sorted(git_files.keys() | self.git_files.keys()):
            if git_files.get(path) != self.git_files.get(path):
                found.append(Violation(path, sorted(self.active), now))
        self.git_files = git_files
        self.active = set(running)
        return found

    def _owned(self, path: str) -> bool:
        """Owned by a task, itself or as a client's atomic-write temporary
        of an owned path (:mod:`gitrun.ownership.temporaries`)."""
        return _covers(self.index, path)

    def _of_runs_beside(self, path: str) -> bool:
        """A file gitrun keeps for another run (its packet, task table or
        ledger, by name; its bundles and schemas), or a path owned by another
        run that has started here and not landed
        (:func:`gitrun.definition.beside.runs_beside`): what another driver
        and its workers write. A run merely defined gives its owned paths no
        cover: nothing may write them before it starts, so a worker cannot
        hide its writes behind a definition it wrote itself.

        The runs beside are read again only for a path the last reading does
        not explain, and only when a run was defined, changed its definition,
        or moved its branch since."""
        if is_any_run_file(path) and not path.startswith(self.run.dir + "/"):
            return True
        if self._beside is not None and _covers(self._beside[1], path):
            return True
        state = _runs_state(self.run.repo)
        if self._beside is not None and self._beside[0] == state:
            return False
        self._beside = (state, _beside_index(self.run))
        return _covers(self._beside[1], path)

    def _git_files(self) -> dict[str, Signature]:
        """Stat signatures of what git runs or reads from .git/ (a worker that
        plants a hook or a core.fsmonitor command there runs code later)."""
        found: dict[str, Signature] = {".git/config": None}
        for sub in ("", "hooks", "info"):
            folder = self.common_dir / sub
            names = ["config"] if not sub else _listing(folder)
            for name in names:
                if sub and is_client_mark(str(folder / name)):
                    continue  # Claude Code's sandbox makes it, empty, at each start
                shown = f".git/{sub + '/' if sub else ''}{name}"
                found[shown] = signature(folder / name)
        if self.common_dir != self.git_dir:  # a linked work tree's own settings
            found[".git/config.worktree"] = signature(self.git_dir / "config.worktree")
        return found


def _beside_index(run: RunDef) -> OwnerIndex:
    """What the runs beside ``run`` may write: the definition files of
    each, and the owned paths of each that has started."""
    claims: list[Claim] = []
    for other in runs_beside(run.repo, run.id):
        claims += [
            Claim(other.run.id, escape(p), parse(escape(p))) for p in definition_paths(other.run)
        ]
        if other.started:
            claims += _owned_claims(other.run)
    return OwnerIndex(claims)


def _runs_state(repo: Path) -> tuple[object, ...]:
    """What the runs beside a run follow from: the runs defined here (with
    the stat signatures of their packet and task table) and the tips of the
    runs' branches (one that starts or lands again moves its tip)."""
    defined = tuple(
        (
            r,
            signature(repo / RUNS_DIR / r / PACKET_NAME),
            signature(repo / RUNS_DIR / r / TASKS_NAME),
        )
        for r in run_ids(str(repo))
    )
    return defined, tuple(sorted((r, b.tip) for r, b in run_branches(repo).items()))


def _covers(index: OwnerIndex, path: str) -> bool:
    """Owned in ``index``, itself or as a client's atomic-write temporary of an owned path."""
    target = target_of_temporary(path)
    return bool(index.owners(path)) or (target is not None and bool(index.owners(target)))


def _listing(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def signature(path: Path) -> Signature:
    """What tells a file's content changed without reading it (None: gone).
    The change time is in it: a write can restore the size and mtime (utime),
    not the ctime the kernel sets."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
