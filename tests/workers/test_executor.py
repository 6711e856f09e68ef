"""Executor presets render to their documented argv; the model comes from configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from gitrun.definition.inputs import input_paths
from gitrun.definition.load import load_run
from gitrun.definition.schema import Executor
from gitrun.ownership.patterns import escape
from gitrun.proof.check import check_run
from gitrun.workers.executor import command_template, literal_models, render_command
from tests.helpers import build_tree, commit_all, write_run

VALUES = {
    "pointer": "gitrun run r, task t1: follow .gitrun/runs/r/packet.toml.\nInputs: a. Write only b.",
    "task": "t1",
    "run": "r",
    "model": "configured-model",
    "packet": ".gitrun/runs/r/packet.toml",
    "attempt": "1",
    "outputs": "out/a.json\nout/b.json",
    "inputs": "docs/a.md\ndocs/b c.md",
    "stage": "work",
    "repo": "/work/repo",
}
POINTER = VALUES["pointer"]

DOCUMENTED = {
    "codex": [
        "codex", "exec", "--model", "configured-model", "--sandbox", "workspace-write",
        "--json", POINTER,
    ],
    "gemini": [
        "gemini", "--model", "configured-model", "--skip-trust", "--approval-mode", "yolo",
        "--output-format", "json", "--prompt", POINTER, "--session-id", "",
    ],
    "aider": [
        "aider", "--model", "configured-model", "--no-git", "--no-gitignore", "--no-auto-commits",
        "--yes-always", "--chat-history-file", "/dev/null", "--input-history-file", "/dev/null",
        "--map-tokens", "0", "--no-check-update", "--no-detect-urls", "--no-show-release-notes",
        "--no-show-model-warnings", "--no-analytics", "--no-pretty", "--no-stream",
        "--no-fancy-input", "--no-suggest-shell-commands", "--read", ".gitrun/runs/r/packet.toml",
        "--read", "docs/a.md", "--read", "docs/b c.md", "--message", POINTER,
    ],
}  # fmt: skip


@pytest.mark.parametrize("preset", sorted(DOCUMENTED))
def test_presets_render_the_documented_argv(preset: str) -> None:
    template = command_template(Executor(preset=preset))
    assert template is not None
    assert render_command(template, VALUES) == DOCUMENTED[preset]


def test_a_preset_whose_attempts_may_be_resumed_keeps_its_conversation() -> None:
    """claude is given its conversation's id up front, codex saves its session
    (no --ephemeral) and names it; `resume = false` gives the plain argv, and
    a resumed try runs the client's resume command with the continuation."""
    values = {**VALUES, "conversation": "0c0ffee0-aaaa-bbbb-cccc-000000000001"}
    claude = render_command(command_template(Executor(preset="claude")) or [], values)
    assert claude[claude.index("--session-id") + 1] == values["conversation"]
    off = Executor(preset="codex", resume=False)
    assert "--ephemeral" in render_command(command_template(off) or [], values)
    resumed = command_template(Executor(preset="codex"), resumed=True) or []
    assert render_command(resumed, values) == [
        "codex", "exec", "resume", "--model", "configured-model", "-c",
        "sandbox_mode=workspace-write", "--json", values["conversation"], POINTER,
    ]  # fmt: skip
    confined = command_template(Executor(preset="codex"), confined=True, resumed=True) or []
    assert "sandbox_mode=danger-full-access" in confined
    resumed = command_template(Executor(preset="gemini"), resumed=True) or []
    argv = render_command(resumed, values)
    assert argv[-4:] == ["--resume", values["conversation"], "--prompt", POINTER]
    resumed = command_template(Executor(preset="claude"), resumed=True) or []
    argv = render_command(resumed, values)
    assert argv[:5] == ["claude", "-p", POINTER, "--resume", values["conversation"]]
    assert "--session-id" not in argv
    assert command_template(Executor(command=["claude", "-p", "{pointer}"]), resumed=True) == [
        "claude", "-p", "{pointer}",
    ]  # fmt: skip


def test_claude_preset_passes_the_write_hooks() -> None:
    template = command_template(Executor(preset="claude"))
    assert template is not None
    argv = render_command(template, VALUES)
    assert argv[:8] == [
        "claude", "-p", POINTER, "--model", "configured-model",
        "--permission-mode", "acceptEdits", "--output-format",
    ]  # fmt: skip
    assert argv[8] == "json"  # its closing object carries the usage
    assert argv[9] == "--session-id"  # its conversation, for a try that continues it
    assert argv[11] == "--settings"
    settings = json.loads(argv[12])
    hooks = settings["hooks"]
    assert settings["sandbox"]["filesystem"]["denyWrite"] == ["/work/repo"]
    assert "hook pre-write" in hooks["PreToolUse"][0]["hooks"][0]["command"]
    assert (
        hooks["PreToolUse"][0]["matcher"]
        == "Write|Edit|MultiEdit|NotebookEdit|Agent|Task|SendMessage|Bash"
    )


def test_shell_preset_passes_its_script_untouched() -> None:
    """The script gets its values from the GITRUN_* environment, never by substitution."""
    script = 'my-agent --task "$GITRUN_TASK" --out "$GITRUN_OUTPUTS" {"json": 1}'
    template = command_template(Executor(preset="shell", shell=script))
    assert template is not None
    assert render_command(template, VALUES) == ["sh", "-c", script]


def test_outputs_expand_to_one_argument_each() -> None:
    argv = render_command(["w", "--out", "{outputs}", "{task}"], {**VALUES, "outputs": "a b\nc"})
    assert argv == ["w", "--out", "a b", "c", "t1"]


def test_args_extend_a_preset_and_command_replaces_it() -> None:
    template = command_template(Executor(preset="codex", args=["--json"]))
    assert template is not None and template[-1] == "--json"
    assert command_template(Executor(preset="codex", command=["x", "{task}"])) == ["x", "{task}"]


@pytest.mark.parametrize(
    "executor",
    [
        {"preset": "claude", "args": ["--model", "claude-opus-4-1"]},
        {"preset": "codex", "command": ["codex", "exec", "-m", "gpt-5-codex", "{pointer}"]},
        {"command": ["claude", "-p", "{pointer}", "--model=opus"]},
        {"preset": "shell", "shell": 'gemini --model gemini-2.5-pro -p "$GITRUN_POINTER"'},
    ],
)
@pytest.mark.usefixtures("clis")
def test_check_flags_a_literal_model(git_repo: Path, executor: dict[str, object]) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}], {"executor": executor})
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    assert [p.code for p in problems] == ["literal-model"]


def test_presets_name_no_model_themselves() -> None:
    for preset in ("claude", "codex", "gemini", "aider"):
        template = command_template(Executor(preset=preset))
        assert template is not None and literal_models(template) == []


# -- {inputs} and the flag-repeating form ---------------------------------------------


def test_inputs_expand_to_one_argument_each_and_a_flag_repeats_before_each() -> None:
    template = ["w", "{inputs}", "{inputs:--read}", "{outputs:-o}", "{task}"]
    argv = render_command(template, {**VALUES, "inputs": "a b\nc", "outputs": "x.json"})
    assert argv == ["w", "a b", "c", "--read", "a b", "--read", "c", "-o", "x.json", "t1"]


def test_an_empty_list_expands_to_nothing_not_to_a_dangling_flag() -> None:
    argv = render_command(["w", "{inputs:--read}", "--go"], {**VALUES, "inputs": ""})
    assert argv == ["w", "--go"]


def test_list_values_are_never_split_or_read_as_options() -> None:
    """Each path is one argument, whatever it holds; one that starts with a
    dash goes as ./-name, so a program never reads an input as its option."""
    hostile = "$(touch pwned) ; rm -rf x\n--yes-always\n-rf\n`id` & echo {task}"
    argv = render_command(["w", "{inputs:--read}", "{inputs}"], {**VALUES, "inputs": hostile})
    items = ["$(touch pwned) ; rm -rf x", "./--yes-always", "./-rf", "`id` & echo {task}"]
    assert argv == ["w", *[a for i in items for a in ("--read", i)], *items]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["w", "{input}"], "command[1] is '{input}', which is not a placeholder gitrun knows"),
        (["w", "{task:--id}"], "only {inputs} and {outputs} take a flag to repeat"),
        (["w", "{inputs:read}"], "whose flag 'read' is not an option; write it with its dashes"),
        (["w", "--read={inputs}"], "embeds {inputs} in a longer string"),
        (["w", "--read={inputs:--read}"], "embeds {inputs:--read} in a longer string"),
        (["{inputs:--read}", "x"], "which is the program to run"),
        (["sh", "-c", "{inputs}"], "which is the script sh runs"),
    ],
)
def test_check_names_the_field_of_a_bad_placeholder(
    git_repo: Path, command: list[str], says: str
) -> None:
    write_run(
        git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}], {"executor": {"command": command}}
    )
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    assert [p.code for p in problems] == ["executor"], problems
    message = problems[0].message
    assert message.startswith(".gitrun/runs/r/packet.toml: [executor] command[")
    assert says in message
    assert message.count(". ") == 0 and "\n" not in message  # one sentence


def test_literal_braces_that_name_no_placeholder_pass_through() -> None:
    template = ["w", '{"json": 1}', "{}", "{x:>10}", "{a,b}"]
    assert render_command(template, VALUES) == template


@pytest.mark.usefixtures("clis")
def test_args_after_a_preset_are_named_in_check(git_repo: Path) -> None:
    executor = {"preset": "aider", "args": ["--verbose", "{inputz}"]}
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}], {"executor": executor})
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    assert len(problems) == 1 and "[executor] args[1] is '{inputz}'" in problems[0].message


def test_input_paths_unescape_plain_paths_and_expand_globs(git_repo: Path) -> None:
    build_tree(
        git_repo,
        {"docs/[x].md": "x", "docs/b.md": "b", "docs/a.md": "a", "docs/sub/c.md": "c", "n.txt": ""},
    )
    (git_repo / "docs" / "link.md").symlink_to("../README.md")
    inputs = [escape("docs/[x].md"), "docs/*.md", "n.txt", "docs/**/*.md", "[broken"]
    assert input_paths(git_repo, inputs) == [
        "docs/[x].md",
        "docs/a.md",
        "docs/b.md",
        "n.txt",
        "docs/sub/c.md",
    ]


def test_a_worker_gets_every_input_as_its_own_argument(git_repo: Path) -> None:
    """Through a real run: the driver hands {inputs:--read} and GITRUN_INPUTS
    to the worker, which writes what it received as its output."""
    import sys

    script = (
        "import json, os, sys; out = os.environ['GITRUN_OUTPUTS']; "
        "os.makedirs(os.path.dirname(out), exist_ok=True); "
        "json.dump({'argv': sys.argv[1:], 'env': os.environ['GITRUN_INPUTS']}, open(out, 'w'))"
    )
    build_tree(git_repo, {"docs/a b.md": "a", "docs/-c.md": "c"})
    commit_all(git_repo, "docs")
    task = {"id": "t1", "inputs": ["docs/a b.md", "docs/-c.md"], "outputs": ["out/t1.json"]}
    command = [sys.executable, "-c", script, "{inputs:--read}"]
    write_run(git_repo, "r", [task], {"executor": {"command": command}})
    assert start_run(git_repo, "r", lambda _line: None).exit_code == 0
    received = json.loads((git_repo / "out/t1.json").read_text())
    assert received["argv"] == ["--read", "docs/a b.md", "--read", "docs/-c.md"]
    assert received["env"] == "docs/a b.md\ndocs/-c.md"


def test_a_script_reading_the_model_from_the_environment_names_no_model() -> None:
    script = 'my-agent --model "$GITRUN_MODEL" --x --model=${GITRUN_MODEL} "$GITRUN_POINTER"'
    assert literal_models(["sh", "-c", script]) == []
    assert literal_models(["sh", "-c", "my-agent --model $MODEL"]) == ["$MODEL"]


def test_a_task_with_a_bundle_gets_the_bundle_file_as_its_pointer_says(git_repo: Path) -> None:
    """A bundle is for more inputs than one argument list or environment
    variable can carry (Linux refuses a single one over 128 KiB)."""
    from gitrun.commands.scaffold import new_run
    from gitrun.definition.inputs import task_inputs
    from gitrun.workers.pointer import attempt_values

    build_tree(git_repo, {f"docs/{'x' * 60}{i:05d}.md": "x" for i in range(3000)})
    new_run(git_repo, "b", inputs="docs/*.md", output="out/{task}.json", per_task=3000)
    run = load_run(git_repo, "b", environ={})
    (task,) = run.tasks
    assert task_inputs(run, task) == [".gitrun/runs/b/bundles/t0001.txt"]
    values = attempt_values(run, task, 1)
    assert values["inputs"] == ".gitrun/runs/b/bundles/t0001.txt"
    assert "listed in .gitrun/runs/b/bundles/t0001.txt" in values["pointer"]
