"""The runs beside a run: the other runs of its work tree whose paths it must keep clear of.

Several runs may be driven at once in one work tree when no path is owned by
two of them. Which other runs count is decided here, once, for the proof
(``gitrun check`` and ``start`` refuse a run whose owned paths meet theirs)
and for the stray-write audit (a driver does not report what they write):

- a run being driven now (a live process holds its driver lock) counts;
- so does every run defined in the work tree (``.gitrun/runs/<run>/``) that
  has not landed: not started yet, or started and its branch not in HEAD.
  A run that landed is done: a new run may redo its paths.

A run merely defined counts against a run that has not started either (of
two such runs, whichever starts first is refused until the other is removed
or narrowed), never against one that has: a definition written later does
not stop the resume of a run under way; it is refused itself when it starts.

A landed run is one whose branch ``gitrun/<run>`` is in HEAD (merged or
squashed, :func:`gitrun.store.branches.landed`), or that has no branch here
and whose ledger HEAD holds (it landed, and its branch went since). A run
whose definition does not load is passed over: it cannot start until it
does, and its own check then sees this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitrun.definition.load import PACKET_NAME, RUNS_DIR, TASKS_NAME, RunDef, load_run
from gitrun.errors import GitrunError
from gitrun.layout import is_run_id, run_ids
from gitrun.store import git, ledger
from gitrun.store.branches import landed, run_branches
from gitrun.store.local import LocalPaths
from gitrun.store.lock import is_locked


@dataclass(frozen=True)
class RunBeside:
    run: RunDef
    driven: bool  # a live process holds its driver lock now
    started: bool  # it has a branch here, or is being driven

    @property
    def state(self) -> str:
        """Why it counts, as a clause: ``is being driven now``."""
        if self.driven:
            return "is being driven now"
        if self.started:
            return "has started and has not landed"
        return "is defined here and has not started"


def runs_beside(repo: Path, run_id: str) -> list[RunBeside]:
    """The other runs of the work tree at ``repo`` that ``run_id`` must keep
    clear of (see the module's docstring), by id. Costs nothing but a
    directory listing when no other run is defined."""
    others = [other for other in run_ids(str(repo)) if other != run_id]
    if not others:
        return []
    branches = run_branches(repo)
    git_dir = git.git_dir(repo)
    head = git.rev_parse(repo, "HEAD")
    # Runs without a branch here: does HEAD hold a ledger of theirs? One listing for all.
    unbranched = [other for other in others if other not in branches]
    held = _ledgers_in(repo, head, unbranched) if head and unbranched else set()
    found: list[RunBeside] = []
    for other in others:
        driven = is_locked(LocalPaths.under(git_dir, other))
        branch = branches.get(other)
        if not driven:
            if branch is not None and head and landed(repo, other, branch.tip, git_dir):
                continue
            if branch is None and other in held:
                continue
        try:
            run = load_run(repo, other)
        except GitrunError:
            continue  # it cannot start as it is; its own check will see this run
        found.append(RunBeside(run, driven, driven or branch is not None))
    return found


def has_started(repo: Path, run_id: str) -> bool:
    """Whether ``run_id`` has a branch here that has not landed in HEAD."""
    branch = run_branches(repo).get(run_id)
    if branch is None or git.rev_parse(repo, "HEAD") is None:
        return branch is not None
    return landed(repo, run_id, branch.tip, git.git_dir(repo)) is None


def _ledgers_in(repo: Path, head: str, runs: list[str]) -> set[str]:
    """Those of ``runs`` whose ledger HEAD's tree holds."""
    paths = [f"{RUNS_DIR}/{r}/{ledger.CHUNK_DIR}" for r in runs]
    return {path.split("/")[2] for path in git.ls_tree(repo, head, paths)}


def is_any_run_file(path: str) -> bool:
    """Whether ``path`` (repository-relative) is, by its name, one of the
    files gitrun keeps for some run: its packet, its task table or its
    ledger, in ``.gitrun/runs/<run>/``."""
    prefix = RUNS_DIR + "/"
    if not path.startswith(prefix):
        return False
    run_id, _, name = path[len(prefix) :].partition("/")
    if not is_run_id(run_id):
        return False
    return name in (PACKET_NAME, TASKS_NAME) or ledger.is_ledger_name(name)
