from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.commands.scaffold import init_repo, new_run
from gitrun.definition.load import load_run
from gitrun.errors import GitrunError, UsageError
from gitrun.proof.check import check_run
from gitrun.resources import template_text
from tests.helpers import build_tree, commit_all, run_gitrun


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


# `gitrun new ... -- COMMAND`: a ready run in one command.

WORKER = 'out=$1; shift\nprintf \'{"words": %d}\\n\' "$(cat "$@" | wc -w)" > "$out"\n'


def _notes(repo: Path) -> None:
    build_tree(repo, {"docs/a.md": "alpha beta\n", "docs/b.md": "gamma\n", "worker.sh": WORKER})
    commit_all(repo, "notes and a worker")


def _packet(repo: Path, run_id: str) -> dict[str, Any]:
    return tomllib.loads((repo / f".gitrun/runs/{run_id}/packet.toml").read_text())


def test_new_with_a_command_writes_a_packet_check_passes_unedited(git_repo: Path) -> None:
    """As a user types it, in a repository never given `gitrun init`; the
    options after `--` are the worker's, not gitrun's."""
    _notes(git_repo)
    argv = ["sh", "worker.sh", "--inputs", "{outputs}", "{inputs}"]
    proc = run_gitrun(
        git_repo, "new", "wc", "--inputs", "docs/*.md", "--output", "out/{stem}.json",
        "--rules", "Count the words.", "--validate", "json", "--model", "m1", "--", *argv,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "next: `gitrun start wc`" in proc.stdout
    packet = _packet(git_repo, "wc")
    assert packet["executor"] == {"kind": "command", "command": argv}
    assert packet["rules"]["text"] == "Count the words."
    assert packet["outputs"] == {"validators": ["json"]}
    assert packet["model"] == {"default": "m1"}
    proc = run_gitrun(git_repo, "check", "wc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run 'wc' is ready: 2 tasks" in proc.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["./worker.sh", "{task}", "{pointer}"],
        ["sh", "worker.sh", "{outputs}", "{inputs}"],
        ["sh", "worker.sh"],
    ],
    ids=["./script", "sh script placeholders", "sh script"],
)
def test_a_repository_script_as_the_command_checks_clean(git_repo: Path, argv: list[str]) -> None:
    _notes(git_repo)
    (git_repo / "worker.sh").chmod(0o755)
    commit_all(git_repo, "executable")
    new_run(git_repo, "r", inputs="docs/*.md", output="out/{stem}.json", command=argv)
    run = load_run(git_repo, "r", environ={})
    assert run.packet.executor.command == argv and run.packet.model.default == ""
    assert check_run(run).problems == []


def test_a_command_in_process_says_what_is_next(git_repo: Path) -> None:
    _notes(git_repo)
    result = CliRunner().invoke(
        app,
        [
            "new",
            "wc",
            "--inputs",
            "docs/*.md",
            "--output",
            "o/{stem}.json",
            "--",
            "sh",
            "worker.sh",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "created run 'wc' with 2 tasks" in result.output
    assert "next: `gitrun start wc`" in result.output and "edit the packet" not in result.output
    assert _packet(git_repo, "wc")["executor"]["command"] == ["sh", "worker.sh"]


@pytest.mark.usefixtures("clis")
@pytest.mark.parametrize("preset", ["claude", "codex", "gemini", "aider", None])
def test_a_preset_and_rules_are_all_a_run_needs(git_repo: Path, preset: str | None) -> None:
    _notes(git_repo)
    rules = 'Summarize each note in one "sentence".\nKeep its title.\n'
    new_run(git_repo, "s", inputs="docs/*.md", output="out/{stem}.json", preset=preset, rules=rules)
    run = load_run(git_repo, "s", environ={})
    assert run.packet.rules.text == rules
    assert run.packet.executor.preset == (preset or "claude")
    assert check_run(run).problems == []
    with_model = new_run(git_repo, "t", preset=preset, rules="x", model="opus")
    assert with_model.tasks == 1 and _packet(git_repo, "t")["model"] == {"default": "opus"}


def test_the_rules_file_lands_in_the_packet_as_written(git_repo: Path, tmp_path: Path) -> None:
    _notes(git_repo)
    text = "Count the words.\n\nWrite \"words\": N \\ nothing else.\n'''\n"
    (tmp_path / "rules.md").write_text(text)
    proc = run_gitrun(
        git_repo, "new", "r", "--rules-file", str(tmp_path / "rules.md"), "--", "sh", "worker.sh"
    )
    assert proc.returncode == 0, proc.stderr
    packet_text = (git_repo / ".gitrun/runs/r/packet.toml").read_text()
    assert tomllib.loads(packet_text)["rules"]["text"] == text
    assert "Count the words.\n\nWrite" in packet_text  # readable as it was written


def test_validate_a_schema_file_names_it_in_a_validator(git_repo: Path) -> None:
    _notes(git_repo)
    build_tree(git_repo, {"schemas/count.json": '{"type": "object", "required": ["words"]}'})
    commit_all(git_repo, "schema")
    new_run(
        git_repo, "r", inputs="docs/*.md", output="out/{stem}.json",
        command=["sh", "worker.sh", "{outputs}", "{inputs}"], validate="schemas/count.json",
    )  # fmt: skip
    packet = _packet(git_repo, "r")
    assert packet["outputs"] == {"validators": ["schema"]}
    assert packet["validators"] == {
        "schema": {"kind": "json_schema", "schema": "schemas/count.json"}
    }
    assert check_run(load_run(git_repo, "r", environ={})).problems == []


@pytest.mark.parametrize("kind", ["json", "jsonl", "toml"])
def test_validate_a_kind(git_repo: Path, kind: str) -> None:
    new_run(git_repo, "r", command=["sh", "worker.sh"], validate=kind)
    assert _packet(git_repo, "r")["outputs"] == {"validators": [kind]}
    assert "validators" not in _packet(git_repo, "r")


NEW = ["new", "r", "--inputs", "docs/*.md", "--output", "out/{stem}.json"]
CONFLICTS = [
    ([*NEW, "--preset", "codex", "--", "sh", "worker.sh"], "--preset"),
    ([*NEW, "--preset", "shell", "--", "sh", "worker.sh"], "--preset"),
    ([*NEW, "--executor", "external", "--", "sh", "worker.sh"], "--executor external"),
    ([*NEW, "--rules", "x", "--rules-file", "worker.sh", "--", "sh", "worker.sh"], "--rules-file"),
    ([*NEW, "--rules-file", "nowhere.md", "--", "sh", "worker.sh"], "--rules-file"),
    ([*NEW, "--rules", "", "--", "sh", "worker.sh"], "--rules"),
    ([*NEW, "--validate", "yaml", "--", "sh", "worker.sh"], "--validate 'yaml'"),
    ([*NEW, "--validate", "nowhere.json", "--", "sh", "worker.sh"], "--validate"),
    ([*NEW, "--validate", "docs/a.md", "--", "sh", "worker.sh"], "--validate"),
    ([*NEW, "--validate", "../x.json", "--", "sh", "worker.sh"], "--validate"),
    ([*NEW, "--model", " m ", "--", "sh", "worker.sh"], "--model"),
    ([*NEW, "--"], "--"),
    ([*NEW, "--", "sh", "worker.sh", "--out={outputs}"], "--out={outputs}"),
    ([*NEW, "--", "sh", "-c", "cat {inputs}"], "{inputs}"),
    ([*NEW, "--", "sh", "worker.sh", "{tsk}"], "{tsk}"),
    ([*NEW, "--", "sh", "worker.sh", "{model}"], "--model"),
    ([*NEW, "--", "claude", "-p", "{pointer}", "--model", "opus"], "'opus'"),
    (["new", "r", "--inputs", "docs/a.md", "docs/b.md", "--output", "o/{stem}"], "docs/b.md"),
]


@pytest.mark.parametrize(("args", "named"), CONFLICTS, ids=[" ".join(a[6:]) for a, _ in CONFLICTS])
def test_conflicting_options_are_one_sentence_usage_errors_that_write_nothing(
    git_repo: Path, args: list[str], named: str
) -> None:
    _notes(git_repo)
    proc = run_gitrun(git_repo, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    if lines[0].startswith("Usage: "):  # click's own: a usage line and then the sentence
        lines = [line for line in lines if line.startswith("Error: ")]
    [line] = lines
    assert line.startswith(("gitrun: error: ", "Error: ")) and named in line, line
    assert not (git_repo / ".gitrun").exists()


def test_a_rules_file_is_found_from_the_directory_of_dash_c(git_repo: Path, tmp_path: Path) -> None:
    """`-C DIR` runs as if started in DIR, so a relative --rules-file is read from there."""
    build_tree(git_repo, {"notes/rules.md": "Count the words.\n"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_gitrun(
        elsewhere, "-C", str(git_repo / "notes"), "new", "r", "--rules-file", "rules.md",
        "--", "sh", "worker.sh",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _packet(git_repo, "r")["rules"]["text"] == "Count the words.\n"


def test_an_external_run_takes_rules_validate_and_model(git_repo: Path) -> None:
    """What a session asked to fan out writes: an external run ready as it is."""
    _notes(git_repo)
    proc = run_gitrun(
        git_repo, "new", "ext", "--executor", "external", "--inputs", "docs/*.md",
        "--output", "out/{stem}.json", "--rules", "Summarize the note.", "--validate", "json",
        "--model", "haiku",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "next: `gitrun check ext`" in proc.stdout
    packet = _packet(git_repo, "ext")
    assert packet["executor"] == {"kind": "external"} and packet["model"] == {"default": "haiku"}
    assert packet["rules"]["text"] == "Summarize the note."
    assert packet["outputs"] == {"validators": ["json"]}
    assert check_run(load_run(git_repo, "ext", environ={})).problems == []
