"""Machine-local state of a run under ``.git/gitrun/<run>/``: the one home of its paths.

Never committed and never needed for a run's correctness after a crash: the
run lock and its owner record, records of running attempts (so a new driver
can stop the workers of a dead one), leases, the governor's state, caches,
worker logs, quarantined outputs, retired ledgers, the last HTML report; and the journal of a
``land`` with the files it stages, from which the next ``land`` finishes one
that was stopped half way. Every file and directory there is named by a
property of :class:`LocalPaths` and nowhere else (a test greps the package
for paths built by hand); the JSON files are typed, versioned records
(:mod:`gitrun.store.records`).
"""

from __future__ import annotations

import contextlib
import os

from gitrun.store.repo import common_git_dir

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path

HOME = "gitrun"  # under the repository's git directory
# Logs a task keeps: those of its last attempts (docs/ledger.md, "Local state").
KEEP_LOGS = 5
# The files the write hooks read, named once for the properties below and for
# the hooks, which find them with os.path alone (see run_home).
LEASES = "leases.json"
DISPATCHES = "dispatches.json"
BOUND = "bound"  # one file per dispatch: the agent_id of the subagent that took it
HOOK_RULES = "hook-rules.jsonl"
LOGS = "logs"  # the workers' logs, and the writes the write hook denied them


class LocalPaths:
    """The paths of one run's local state (a plain class: the write hooks
    import it, and must not pay for dataclasses or the git door)."""

    __slots__ = ("here", "root")

    def __init__(self, root: Path, here: Path | None = None) -> None:
        # root: under the git directory all work trees share, so one run has
        # one lock, one journal and one set of leases wherever it is driven
        # from; here: under this work tree's own git directory, for what is
        # about this work tree's index and files (a landing).
        self.root = root
        self.here = root if here is None else here

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalPaths) and (other.root, other.here) == (self.root, self.here)

    def __hash__(self) -> int:
        return hash((self.root, self.here))

    def __repr__(self) -> str:
        return f"LocalPaths(root={self.root!r})"

    @classmethod
    def of(cls, repo: Path, run_id: str) -> LocalPaths:
        # deferred: the write hook (<= 3x `python -c pass`) needs it only here
        from gitrun.store import git

        return cls.under(git.git_dir(repo), run_id)

    @classmethod
    def under(cls, git_dir: Path, run_id: str) -> LocalPaths:
        """For a caller that knows the git directory (and spares a git process)."""
        # deferred: the write hook (<= 3x `python -c pass`) needs it only here
        from pathlib import Path

        return cls(Path(common_git_dir(str(git_dir))) / HOME / run_id, git_dir / HOME / run_id)

    @property
    def common_git_dir(self) -> Path:
        """The git directory all work trees share (``root`` is ``gitrun/<run>`` under it)."""
        return self.root.parent.parent

    @property
    def buckets(self) -> Path:
        """What the runs of this repository last learnt of each model bucket
        (:mod:`gitrun.engine.memory`), shared by its runs and work trees."""
        return self.root.parent / "buckets.json"

    @property
    def lock(self) -> Path:
        return self.root / "driver.lock"

    @property
    def owner(self) -> Path:
        """Who holds the lock, and the driver's live state (:class:`gitrun.store.lock.Owner`)."""
        return self.root / "driver.json"

    @property
    def commit_lock(self) -> Path:
        return self.root / "commit.lock"

    @property
    def index(self) -> Path:
        """The committer's private index file."""
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
    def leases(self) -> Path:
        """Tasks an external run handed out and has not collected (:mod:`gitrun.store.leases`)."""
        return self.root / LEASES

    @property
    def bound(self) -> Path:
        """Per dispatched Agent call, the first subagent that used it
        (:func:`gitrun.guard.subagents.bind`): no second one gets its task."""
        return self.root / BOUND

    @property
    def dispatches(self) -> Path:
        """Which Agent call of the lead dispatched which leased task, so a
        subagent's hooks know its task (:mod:`gitrun.store.dispatches`)."""
        return self.root / DISPATCHES

    @property
    def governor(self) -> Path:
        """The concurrency governor's state between the commands of an external run."""
        return self.root / "governor.json"

    @property
    def audit(self) -> Path:
        """The stray-write audit's last look at the work tree, between the
        commands of an external run (:class:`gitrun.engine.audit.AuditState`)."""
        return self.here / "audit.json"

    @property
    def budget_warnings(self) -> Path:
        """The spend budget's warnings an external run has said already, so
        `next` and `collect` say each once (:class:`gitrun.engine.budget.SaidWarnings`)."""
        return self.root / "budget-warnings.json"

    @property
    def hook_rules(self) -> Path:
        """What the write hooks judge each task by (:mod:`gitrun.guard.rules`)."""
        return self.root / HOOK_RULES

    @property
    def land_aside(self) -> Path:
        """Untracked copies an earlier gitrun's ``land`` moved out of ``git
        merge``'s way; the next ``land`` puts them back or drops them."""
        return self.here / "land-aside"

    @property
    def land_journal(self) -> Path:
        """How far a ``gitrun land`` got, and who runs it: JSON lines, one
        per step (:class:`gitrun.commands.land.journal.Landing`)."""
        return self.here / "land.jsonl"

    @property
    def land_lock(self) -> Path:
        """Held by a ``gitrun land`` for the whole landing."""
        return self.here / "land.lock"

    @property
    def land_index(self) -> Path:
        """The copy of the user's index a ``gitrun land`` updates, then renames over it."""
        return self.here / "land-index"

    @property
    def land_index_lock(self) -> Path:
        """git's lock of :attr:`land_index` while a git command writes it."""
        return self.here / "land-index.lock"

    @property
    def land_claim(self) -> Path:
        """The file a ``gitrun land`` hard-links as git's ``index.lock``, so
        the lock's inode, journaled, proves whose it is."""
        return self.here / "land-claim"

    @property
    def land_staging(self) -> Path:
        """The files a ``gitrun land`` writes before it renames them into the work tree."""
        return self.here / "land-new"

    @property
    def logs(self) -> Path:
        return self.root / LOGS

    @property
    def report(self) -> Path:
        """Where ``gitrun report RUN`` writes the run's page when told no
        other place: with the run's local state, never in the work tree."""
        return self.root / "report.html"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def sandboxes(self) -> Path:
        """The confined attempts' own folders (gitrun.workers.sandbox), one per attempt id."""
        return self.root / "sandbox"

    def log_of(self, task: str, attempt: int) -> Path:
        return self.logs / f"{task}.{attempt}.log"

    def denials_of(self, task: str, attempt: int) -> Path:
        """The writes the write hook denied an attempt, one JSON line each, kept
        beside its log (a confined worker's hook can write there) until its end
        moves them to the ledger (:mod:`gitrun.engine.strays`)."""
        return self.logs / denials_name(task, attempt)

    def prune_logs(self, task: str, attempt: int) -> None:
        """Attempt ``attempt`` of ``task`` starts: the log of its attempt
        :data:`KEEP_LOGS` before goes (a task keeps its last ones; nothing
        to do for the first attempts, the usual case)."""
        if attempt > KEEP_LOGS:
            with contextlib.suppress(OSError):
                os.unlink(self.log_of(task, attempt - KEEP_LOGS))

    def quarantine_of(self, task: str, attempt: int) -> Path:
        return self.quarantine / task / str(attempt)

    def retired(self, name: str, stamp: int) -> Path:
        """Where a run file ``name`` (the ``ledger`` directory) left by an
        earlier run of the same id is kept: ``ledger.<stamp>``."""
        return self.root / f"{name}.{stamp}"


def denials_name(task: str, attempt: int) -> str:
    """The name of :meth:`LocalPaths.denials_of` in the run's ``logs``
    folder, for the write hook, which finds it with os.path alone."""
    return f"{task}.{attempt}.denied.jsonl"


def run_home(git_dir: str, run_id: str) -> str:
    """``LocalPaths.under(git_dir, run_id).root`` as text, for the write hooks,
    which must not pay for importing pathlib on every call."""
    return os.path.join(common_git_dir(git_dir), HOME, run_id)


def local_runs(repo: Path) -> list[str]:
    """The runs that have local state here (a directory under ``.git/gitrun/``).

    None readable (or none yet) is an empty list: each run says what is wrong
    with its own state when it is inspected."""
    # deferred: the write hook (<= 3x `python -c pass`) needs it only here
    from gitrun.store import git

    return local_runs_under(git.git_dir(repo))


def local_runs_under(git_dir: Path) -> list[str]:
    """:func:`local_runs` for a caller that knows the git directory."""
    found: set[str] = set()
    for home in {git_dir / HOME, type(git_dir)(common_git_dir(str(git_dir))) / HOME}:
        with contextlib.suppress(OSError):
            found.update(p.name for p in home.iterdir() if p.is_dir())
    return sorted(found)
