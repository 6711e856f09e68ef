"""The proof across runs: no path may be owned by a run and by a run beside it.

Two runs driven at once in one work tree are safe when no path is owned by
both; which other runs count is :func:`gitrun.definition.beside.runs_beside`'s
answer. The proof is the task-vs-task one (:func:`gitrun.ownership.claims.find_meetings`)
with each claim standing for its run instead of its task, so it finds a path
both would own the same way, exact, nested or through a glob.
"""

from __future__ import annotations

from gitrun.definition.beside import RunBeside, has_started, runs_beside
from gitrun.definition.load import RunDef
from gitrun.ownership.claims import OWNS, Claim, OwnerIndex, find_meetings
from gitrun.ownership.paths import canonical_problem
from gitrun.ownership.patterns import PatternError, parse
from gitrun.problem import Problem


def beside_problems(run: RunDef, owned: list[Claim]) -> list[Problem]:
    """One problem for each run beside ``run`` that owns a path ``run``
    owns too (``owned``: its owned claims, as the check parsed them), naming
    both runs, a path both would own, and the task of each that owns it."""
    others = runs_beside(run.repo, run.id)
    if others and has_started(run.repo, run.id):  # a run merely defined yields to it
        others = [other for other in others if other.started]
    if not others or not owned:
        return []
    # Each claim stands for its run: find_meetings then pairs claims of two runs only.
    claims = [Claim(run.id, c.text, c.pattern) for c in owned]
    theirs = {other.run.id: _owned_claims(other.run) for other in others}
    for other_id, other_claims in theirs.items():
        claims += [Claim(other_id, c.text, c.pattern) for c in other_claims]

    def conflicts(a: Claim, b: Claim) -> bool:
        return run.id in (a.task, b.task)  # two runs beside this one are not its business

    by_id = {other.run.id: other for other in others}
    out: list[Problem] = []
    met: set[str] = set()
    for meeting in find_meetings(claims, conflicts):
        other = meeting.second.task if meeting.first.task == run.id else meeting.first.task
        if other in met:
            continue
        met.add(other)
        out.append(_overlap(run, owned, by_id[other], theirs[other], meeting.witness))
    return out


def owned_beside(run: RunDef, paths: list[str]) -> set[str]:
    """Those of ``paths`` a run beside ``run`` owns: another run's outputs,
    which appear in the work tree while it runs."""
    if not paths:
        return set()
    index = OwnerIndex(
        [c for other in runs_beside(run.repo, run.id) for c in _owned_claims(other.run)]
    )
    return {path for path in paths if index.owners(path)}


def _owned_claims(run: RunDef) -> list[Claim]:
    """The owned claims of ``run``'s tasks; an unusable pattern is left out
    (that run's own check names it)."""
    out: list[Claim] = []
    for task in run.tasks:
        for text in run.owns_of(task):
            if canonical_problem(text, is_file=False) is not None:
                continue
            try:
                out.append(Claim(task.id, text, parse(text), OWNS))
            except PatternError:
                continue
    return out


def _overlap(
    run: RunDef, owned: list[Claim], other: RunBeside, theirs: list[Claim], path: str
) -> Problem:
    mine = OwnerIndex(owned).owners(path)[0]
    its = OwnerIndex(theirs).owners(path)[0]
    name = other.run.id
    if other.started:
        fix = f"or start {run.id} once {name} has landed (`gitrun land {name}`)"
    else:
        fix = f"or remove run {name} (`gitrun rm {name}`)"
    return Problem(
        "run-overlap",
        f"{run.tasks_path}: runs {run.id} and {name} can both write {path} (task {mine.task} "
        f"of {run.id} owns {mine.text!r}, task {its.task} of {name} owns {its.text!r}), and "
        f"run {name} {other.state}; give every path to one run only, {fix}",
        (mine.task,),
        path,
    )
