from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.proof.check import Problem, check_run
from tests.helpers import build_tree, commit_all, git, write_run


def _task(tid: str, owns: list[str] | None = None, **extra: object) -> dict[str, object]:
    outputs = extra.pop("outputs", None) or [f"{tid}.out"]
    task: dict[str, object] = {"id": tid, "outputs": outputs, **extra}
    task["owns"] = owns if owns is not None else outputs
    return task


def _problems(repo: Path, tasks: list[dict[str, object]], **packet: object) -> list[Problem]:
    write_run(repo, "r", tasks, packet or None)
    return check_run(load_run(repo, "r", environ={})).problems


def _codes(problems: list[Problem]) -> list[str]:
    return [p.code for p in problems]


OVERLAPS = [
    ("out/a.json", "out/a.json", "out/a.json"),
    ("out", "out/x/y.md", "out/x/y.md"),
    ("out/*.json", "out/a.json", "out/a.json"),
    ("out/**", "out/x/y.md", "out/x/y.md"),
    ("out/a*.json", "out/*b.json", "out/ab.json"),
]


@pytest.mark.parametrize(("first", "second", "path"), OVERLAPS)
@pytest.mark.parametrize("flip", [False, True])
def test_overlapping_owners_are_reported_with_both_tasks_and_a_path(
    git_repo: Path, first: str, second: str, path: str, flip: bool
) -> None:
    a, b = (first, second) if not flip else (second, first)
    tasks = [
        _task("ta", [a, "ta.out"], outputs=["ta.out"]),
        _task("tb", [b, "tb.out"], outputs=["tb.out"]),
    ]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "overlap"]
    assert len(problems) == 1
    problem = problems[0]
    assert set(problem.tasks) == {"ta", "tb"}
    assert problem.path == path
    assert "ta" in problem.message and "tb" in problem.message and path in problem.message


@pytest.mark.parametrize(("a", "b"), [("out/*.json", "out/*.md"), ("a/*", "b/*")])
def test_globs_that_cannot_meet_are_not_reported(git_repo: Path, a: str, b: str) -> None:
    tasks = [_task("ta", [a, "ta.out"]), _task("tb", [b, "tb.out"])]
    assert "overlap" not in _codes(_problems(git_repo, tasks))


def test_a_task_may_own_overlapping_patterns_itself(git_repo: Path) -> None:
    tasks = [_task("ta", ["out/**", "out/a.json"], outputs=["out/a.json"])]
    assert _problems(git_repo, tasks) == []


@pytest.mark.parametrize("owned", ["/etc/passwd", "../elsewhere/x", "a/../../x"])
def test_owned_paths_outside_the_repository(git_repo: Path, owned: str) -> None:
    problems = _problems(git_repo, [_task("ta", [owned, "ta.out"])])
    assert "outside-repo" in _codes(problems)
    assert any(owned in p.message and "ta" in p.tasks for p in problems)


def test_owned_path_through_a_symlink_to_outside(git_repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, git_repo / "link")
    problems = _problems(git_repo, [_task("ta", ["link/out.json", "ta.out"])])
    [problem] = [p for p in problems if p.code == "symlink"]
    assert "symlink link" in problem.message and "outside the repository" in problem.message


def test_a_symlink_inside_the_repository_is_an_alias_too(git_repo: Path) -> None:
    """Two names for one file would let two tasks write it: owning a path
    through any symlink is a problem, not only one leading outside."""
    (git_repo / "real").mkdir()
    os.symlink(git_repo / "real", git_repo / "alias")
    problems = _problems(git_repo, [_task("ta", ["alias/out.json", "ta.out"])])
    assert [p.code for p in problems] == ["symlink"]


@pytest.mark.parametrize("owned", [".git/hooks/pre-commit", "**", "*", ".g*", ".gitrun/runs/r/x"])
def test_owning_git_or_gitrun_files_is_refused(git_repo: Path, owned: str) -> None:
    problems = _problems(git_repo, [_task("ta", [owned, "ta.out"])])
    assert "reserved-path" in _codes(problems)


@pytest.mark.parametrize("owned", ["TODO.md", "*.md", "PROGRESS.md", "[PT]*"])
def test_protected_files_cannot_be_owned(git_repo: Path, owned: str) -> None:
    problems = _problems(git_repo, [_task("ta", [owned, "ta.out"])])
    found = [p for p in problems if p.code == "protected"]
    assert found
    assert all(p.path in ("TODO.md", "PROGRESS.md") and p.tasks == ("ta",) for p in found)


def test_packet_protected_list_adds_to_the_defaults(git_repo: Path) -> None:
    tasks = [_task("ta", ["CHANGELOG.md", "ta.out"]), _task("tb", ["TODO.md", "tb.out"])]
    problems = _problems(git_repo, tasks, ownership={"protected": ["CHANGELOG.md"]})
    assert sorted(p.path or "" for p in problems if p.code == "protected") == [
        "CHANGELOG.md",
        "TODO.md",
    ]


def test_protected_file_in_a_subdirectory_is_not_the_root_one(git_repo: Path) -> None:
    assert _problems(git_repo, [_task("ta", ["docs/TODO.md", "ta.out"])]) == []


def test_output_must_be_owned_by_its_task(git_repo: Path) -> None:
    tasks = [{"id": "ta", "outputs": ["out/a.json", "out/b.json"], "owns": ["out/a.json"]}]
    [problem] = _problems(git_repo, tasks)
    assert problem.code == "output-not-owned"
    assert problem.path == "out/b.json"


def test_an_output_listed_in_owns_is_not_owned_when_the_entry_is_a_pattern(
    git_repo: Path,
) -> None:
    """`out/a[1].json` in owns is a pattern owning out/a1.json, not the output
    spelled the same: listing an output as is owns it only when it is literal."""
    outputs = ["out/a.json", "out/a[1].json"]
    tasks = [{"id": "ta", "outputs": outputs, "owns": outputs}]
    assert [(p.code, p.path) for p in _problems(git_repo, tasks)] == [
        ("output-not-owned", "out/a[1].json")
    ]


def test_outputs_are_owned_by_default(git_repo: Path) -> None:
    tasks = [{"id": "ta", "outputs": ["out/a.json"]}, {"id": "tb", "outputs": ["out/a.json"]}]
    assert _codes(_problems(git_repo, tasks)) == ["overlap"]


def test_output_with_a_wildcard_is_refused(git_repo: Path) -> None:
    tasks = [{"id": "ta", "outputs": ["out/*.json"], "owns": ["out/**"]}]
    assert _codes(_problems(git_repo, tasks)) == ["invalid-output"]


def test_dirty_owned_paths_are_reported(git_repo: Path) -> None:
    build_tree(git_repo, {"out/tracked.json": "{}", "other/free.txt": "x"})
    commit_all(git_repo)
    build_tree(git_repo, {"out/tracked.json": '{"edited": 1}', "out/new/untracked.json": "{}"})
    build_tree(git_repo, {"other/free.txt": "changed, but nobody owns it"})
    tasks = [_task("ta", ["out/tracked.json", "ta.out"]), _task("tb", ["out/new/*", "tb.out"])]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "dirty-owned"]
    assert {(p.path, p.tasks) for p in problems} == {
        ("out/tracked.json", ("ta",)),
        ("out/new/untracked.json", ("tb",)),
    }


def test_staged_change_in_an_owned_path_is_dirty(git_repo: Path) -> None:
    """Only a staged change: the work tree matches the index, not HEAD."""
    build_tree(git_repo, {"out/a.json": "{}"})
    commit_all(git_repo)
    build_tree(git_repo, {"out/a.json": '{"staged": true}'})
    git(git_repo, "add", "out/a.json")
    assert git(git_repo, "status", "--porcelain", "out").startswith("M  ")
    problems = _problems(git_repo, [_task("ta", ["out/a.json"], outputs=["out/a.json"])])
    assert _codes(problems) == ["dirty-owned"]


def test_pointer_over_two_lines(git_repo: Path) -> None:
    tasks = [_task("ta", note="first line\nsecond line")]
    [problem] = _problems(git_repo, tasks)
    assert problem.code == "pointer-lines"
    assert problem.tasks == ("ta",)


def test_the_payload_budget_bounds_one_next_batch(git_repo: Path) -> None:
    tasks = [_task(f"t{i:03d}", note="x" * 50) for i in range(40)]
    external = {"kind": "external"}
    limits = {"payload_budget": 2000, "concurrency": 2}
    assert _problems(git_repo, tasks, limits=limits, executor=external) == []
    limits["concurrency"] = 16  # sixteen pointers of ~250 bytes in one batch
    [problem] = _problems(git_repo, tasks, limits=limits, executor=external)
    assert problem.code == "payload-budget"
    assert "one `gitrun next` batch of 16 pointers" in problem.message
    assert "2,000" in problem.message and "limits.concurrency" in problem.message


@pytest.mark.usefixtures("clis")
def test_the_payload_budget_bounds_one_command_line(git_repo: Path) -> None:
    command = {"command": ["worker", "--task", "{task}", "{pointer}", "{outputs}"]}
    tasks = [_task(f"t{i:03d}", note="x" * 50) for i in range(40)]
    assert _problems(git_repo, tasks, limits={"payload_budget": 2000}, executor=command) == []
    tasks.append(_task("tlong", outputs=[f"out/{'o' * 200}/{n}.json" for n in range(10)]))
    [problem] = _problems(git_repo, tasks, limits={"payload_budget": 2000}, executor=command)
    assert problem.code == "payload-budget"
    assert "one attempt's command line takes" in problem.message


@pytest.mark.parametrize("size", [1000, 10000])
def test_big_generated_runs_pass_check_with_the_default_budget(git_repo: Path, size: int) -> None:
    tasks = [
        {"id": f"t{i:05d}", "inputs": [f"src/{i:05d}.txt"], "outputs": [f"out/{i:05d}.json"]}
        for i in range(size)
    ]
    assert "payload-budget" not in _codes(_problems(git_repo, tasks))


@pytest.mark.usefixtures("clis")
def test_literal_model_in_command(git_repo: Path) -> None:
    packet = {"executor": {"command": ["claude", "-p", "{pointer}", "--model", "claude-opus-4-1"]}}
    problems = _problems(git_repo, [_task("ta")], **packet)
    assert _codes(problems) == ["literal-model"]
    assert "claude-opus-4-1" in problems[0].message


@pytest.mark.usefixtures("clis")
def test_literal_model_in_overridden_preset_shell(git_repo: Path) -> None:
    packet = {"executor": {"preset": "shell", "shell": 'claude -p "$GITRUN_POINTER" --model opus'}}
    assert _codes(_problems(git_repo, [_task("ta")], **packet)) == ["literal-model"]


@pytest.mark.usefixtures("clis")
def test_no_model_configured(git_repo: Path) -> None:
    takes = {"command": ["worker", "--model", "{model}", "{pointer}"]}
    problems = _problems(git_repo, [_task("ta")], model={}, executor=takes)
    assert _codes(problems) == ["no-model"]
    script = {"preset": "shell", "shell": 'my-agent --model "$GITRUN_MODEL" "$GITRUN_POINTER"'}
    assert _codes(_problems(git_repo, [_task("ta")], model={}, executor=script)) == ["no-model"]


def test_a_command_that_takes_no_model_needs_none(git_repo: Path) -> None:
    for executor in (
        {"preset": "shell", "shell": './work.sh "$GITRUN_POINTER"'},
        {"command": ["python3", "work.py", "{pointer}"]},
    ):
        assert _problems(git_repo, [_task("ta")], model={}, executor=executor) == []


def test_unknown_validator_stage_and_duplicate_ids(git_repo: Path) -> None:
    tasks = [
        {"id": "ta", "outputs": [{"path": "a.json", "validators": ["jsn"]}]},
        {"id": "ta", "outputs": ["b.json"], "stage": "review"},
    ]
    codes = _codes(_problems(git_repo, tasks))
    assert sorted(codes) == ["duplicate-task", "unknown-stage", "unknown-validator"]


def test_input_written_by_another_task_of_the_same_stage(git_repo: Path) -> None:
    tasks = [
        _task("writer", ["out/a.json"], outputs=["out/a.json"]),
        _task("reader", inputs=["out/*.json"]),
    ]
    [problem] = _problems(git_repo, tasks)
    assert problem.code == "input-race"
    assert set(problem.tasks) == {"writer", "reader"}
    assert problem.path == "out/a.json"


def test_input_written_in_an_earlier_stage_is_fine(git_repo: Path) -> None:
    tasks = [
        _task("writer", ["out/a.json"], outputs=["out/a.json"]),
        _task("reader", inputs=["out/*.json"], stage="review"),
    ]
    stages = [{"name": "work"}, {"name": "review"}]
    assert _problems(git_repo, tasks, stages=stages) == []


def test_every_problem_is_listed_not_only_the_first(git_repo: Path) -> None:
    tasks = [
        _task("ta", ["out/**", "TODO.md", "/abs", "ta.out"]),
        _task("tb", ["out/x.json", "tb.out"]),
    ]
    takes = {"command": ["my-agent", "--model", "{model}", "{pointer}"]}
    codes = set(_codes(_problems(git_repo, tasks, model={}, executor=takes)))
    assert {"overlap", "protected", "outside-repo", "no-model"} <= codes


def test_many_tasks_sharing_a_directory_check_cleanly(git_repo: Path) -> None:
    tasks = [_task(f"t{i:04d}", [f"out/{i}.json"], outputs=[f"out/{i}.json"]) for i in range(500)]
    tasks.append(_task("logs", ["logs/**"], outputs=["logs/index.txt"]))
    tasks.append(_task("clash", ["out/4*.json"], outputs=["out/4x.json"]))
    problems = _problems(git_repo, tasks)
    clashing = sorted(t for p in problems for t in p.tasks if t != "clash")
    assert clashing == ["t0004"] + [f"t{i:04d}" for i in range(40, 50)] + [
        f"t{i:04d}" for i in range(400, 500)
    ]
