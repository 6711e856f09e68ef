"""Inputs in the pre-launch proof: a read is kept for the overlap walk only
when an owner could meet it, and no race is lost by leaving the others out."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.ownership.patterns import matches, parse
from gitrun.problem import Problem
from gitrun.proof.check import _claims, check_run
from tests.helpers import write_run


def _problems(repo: Path, tasks: list[dict[str, object]]) -> list[Problem]:
    write_run(repo, "r", tasks)
    return check_run(load_run(repo, "r", environ={})).problems


# (owned by the writer, read by the reader)
RACES = [
    ("out/a.json", "out"),  # a directory read
    ("*/a.json", "docs/a.json"),  # an owner with no first name
    ("out/a.json", "*/a.json"),  # a reader with none
    ("[o]ut/a.json", "out/a.json"),  # a class first
    ("\\out/a.json", "out/a.json"),  # an escape: the name is `out`
    ("out/a.json", "\\out/a.json"),
]


@pytest.mark.parametrize(("owned", "read"), RACES)
def test_a_read_an_owner_can_meet_is_still_a_race(git_repo: Path, owned: str, read: str) -> None:
    tasks = [
        {"id": "writer", "outputs": ["w.out"], "owns": [owned, "w.out"]},
        {"id": "reader", "outputs": ["r.out"], "inputs": ["docs/x.md", read]},
    ]
    [race] = [p for p in _problems(git_repo, tasks) if p.code == "input-race"]
    assert set(race.tasks) == {"writer", "reader"}
    assert race.path is not None and matches(parse(read), race.path)


def test_reads_apart_from_every_owner_are_left_out(git_repo: Path) -> None:
    tasks = [
        {"id": f"t{i}", "outputs": [f"out/t{i}.json"], "inputs": [f"docs/{i}.md", "out"]}
        for i in range(3)
    ]
    write_run(git_repo, "r", tasks)
    owned, read = _claims(load_run(git_repo, "r", environ={}), [])
    assert [c.text for c in owned] == ["out/t0.json", "out/t1.json", "out/t2.json"]
    assert [(c.task, c.text) for c in read] == [("t0", "out"), ("t1", "out"), ("t2", "out")]


def test_claim_problems_keep_the_order_of_the_tasks(git_repo: Path) -> None:
    tasks = [
        {"id": f"t{i}", "outputs": [f"t{i}.out"], "owns": [f"t{i}.out", "/abs"], "inputs": ["../x"]}
        for i in range(2)
    ]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "outside-repo"]
    said = [(p.tasks, "owns" if " owns " in p.message else "reads") for p in problems]
    assert said == [(("t0",), "owns"), (("t0",), "reads"), (("t1",), "owns"), (("t1",), "reads")]
