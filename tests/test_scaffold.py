from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gitrun.commands.scaffold import init_repo, new_run
from gitrun.definition.load import load_run
from gitrun.errors import GitrunError, UsageError
from gitrun.proof.check import check_run
from gitrun.resources import template_text
from tests.helpers import build_tree


def test_init_writes_commented_defaults_once(git_repo: Path) -> None:
    assert init_repo(git_repo).paths == [".gitrun/config.toml"]
    text = (git_repo / ".gitrun/config.toml").read_text()
    assert tomllib.loads(text) == {"limits": {}, "model": {}, "executor": {}, "ownership": {}}
    assert "# concurrency = 4" in text
    (git_repo / ".gitrun/config.toml").write_text("[limits]\nconcurrency = 2\n")
    again = init_repo(git_repo)
    assert again.paths == [] and "already exists" in again.message
    assert "concurrency = 2" in (git_repo / ".gitrun/config.toml").read_text()


@pytest.mark.usefixtures("clis")
def test_new_scaffold_checks_clean(git_repo: Path) -> None:
    new_run(git_repo, "sample")
    run = load_run(git_repo, "sample", environ={})
    assert [t.id for t in run.tasks] == ["t0001"]
    assert check_run(run).problems == []


def test_new_external_scaffold(git_repo: Path) -> None:
    new_run(git_repo, "ext", executor="external")
    run = load_run(git_repo, "ext", environ={})
    assert run.packet.executor.kind == "external"
    assert check_run(run).problems == []


def test_new_refuses_an_existing_run_and_bad_ids(git_repo: Path) -> None:
    new_run(git_repo, "sample")
    with pytest.raises(GitrunError, match="already exists"):
        new_run(git_repo, "sample")
    with pytest.raises(GitrunError, match="not a valid run id"):
        new_run(git_repo, "Bad/Id")


@pytest.mark.usefixtures("clis")
def test_generator_one_task_per_input(git_repo: Path) -> None:
    build_tree(
        git_repo,
        {"docs/b.md": "b", "docs/a.md": "a", "docs/sub/c.md": "c", "docs/skip.txt": "x"},
    )
    created = new_run(git_repo, "sum", inputs="docs/**/*.md", output="out/{stem}.json")
    assert created.tasks == 3
    tasks = tomllib.loads((git_repo / ".gitrun/runs/sum/tasks.toml").read_text())["task"]
    assert tasks == [
        {"id": "t0001", "inputs": ["docs/a.md"], "outputs": ["out/a.json"], "owns": ["out/a.json"]},
        {"id": "t0002", "inputs": ["docs/b.md"], "outputs": ["out/b.json"], "owns": ["out/b.json"]},
        {
            "id": "t0003",
            "inputs": ["docs/sub/c.md"],
            "outputs": ["out/c.json"],
            "owns": ["out/c.json"],
        },
    ]
    assert check_run(load_run(git_repo, "sum", environ={})).problems == []


@pytest.mark.usefixtures("clis")
def test_generator_groups_inputs_into_bundles(git_repo: Path) -> None:
    build_tree(git_repo, {f"in/f{i:02d}.txt": str(i) for i in range(5)})
    new_run(git_repo, "grp", inputs="in/*.txt", output="out/{task}.json", per_task=2)
    run = load_run(git_repo, "grp", environ={})
    assert [t.inputs for t in run.tasks] == [
        ["in/f00.txt", "in/f01.txt"],
        ["in/f02.txt", "in/f03.txt"],
        ["in/f04.txt"],
    ]
    bundle = run.tasks[0].bundle
    assert bundle == ".gitrun/runs/grp/bundles/t0001.txt"
    assert (git_repo / bundle).read_text() == "in/f00.txt\nin/f01.txt\n"
    assert check_run(run).problems == []


def test_generator_refuses_colliding_outputs(git_repo: Path) -> None:
    build_tree(git_repo, {"a/x.md": "1", "b/x.md": "2"})
    with pytest.raises(UsageError, match=r"gives out/x.json for both t0001 and t0002"):
        new_run(git_repo, "col", inputs="*/x.md", output="out/{stem}.json")
    assert not (git_repo / ".gitrun/runs/col").exists()


def test_generator_errors(git_repo: Path) -> None:
    with pytest.raises(GitrunError, match="matches no files"):
        new_run(git_repo, "none", inputs="nothing/*.md", output="out/{stem}.json")
    build_tree(git_repo, {"d/a.md": "a"})
    with pytest.raises(UsageError, match="unknown placeholder"):
        new_run(git_repo, "ph", inputs="d/*.md", output="out/{nope}.json")
    with pytest.raises(UsageError, match="go together"):
        new_run(git_repo, "half", inputs="d/*.md")


@pytest.mark.usefixtures("clis")
def test_generated_tasks_escape_file_names_that_look_like_patterns(git_repo: Path) -> None:
    from gitrun.commands.scaffold import new_run
    from gitrun.definition.load import load_run
    from gitrun.proof.check import check_run
    from tests.helpers import build_tree

    build_tree(git_repo, {"docs/[x].md": "a\n", "docs/x.md": "b\n"})
    new_run(git_repo, "r", inputs="docs/*.md", output="out/{stem}.json")
    run = load_run(git_repo, "r", environ={})
    assert check_run(run, check_dirty=False).problems == []
    [first, _] = run.tasks
    assert first.owns == ["out/\\[x].json"] and first.inputs == ["docs/\\[x].md"]


def test_an_input_named_with_a_wildcard_is_a_usage_error(git_repo: Path) -> None:
    from gitrun.commands.scaffold import new_run
    from gitrun.errors import UsageError
    from tests.helpers import build_tree

    build_tree(git_repo, {"docs/*.md": "a\n"})
    with pytest.raises(UsageError, match=r"wildcard character"):
        new_run(git_repo, "r", inputs="docs/*.md", output="out/{stem}.json")


def test_the_templates_say_the_payload_budget_bounds_one_dispatch() -> None:
    for name in ("packet.toml", "config.toml"):
        (line,) = [ln for ln in template_text(name).splitlines() if "payload_budget" in ln]
        assert "one dispatch" in line and "all pointers" not in line, line
