"""Executor presets render to their documented argv; the model comes from configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.check import check_run
from gitrun.executor import command_template, literal_models, render_command
from gitrun.runs import load_run
from gitrun.settings import Executor
from tests.helpers import write_run

VALUES = {
    "pointer": "gitrun run r, task t1: follow .gitrun/runs/r/packet.toml.\nInputs: a. Write only b.",
    "task": "t1",
    "run": "r",
    "model": "configured-model",
    "packet": ".gitrun/runs/r/packet.toml",
    "attempt": "1",
    "outputs": "out/a.json\nout/b.json",
    "stage": "work",
}
POINTER = VALUES["pointer"]

DOCUMENTED = {
    "codex": ["codex", "exec", "--model", "configured-model", "--sandbox", "workspace-write", POINTER],
    "gemini": ["gemini", "--model", "configured-model", "--yolo", "--prompt", POINTER],
    "aider": [
        "aider", "--model", "configured-model", "--no-auto-commits", "--yes-always",
        "--message", POINTER,
    ],
}  # fmt: skip


@pytest.mark.parametrize("preset", sorted(DOCUMENTED))
def test_presets_render_the_documented_argv(preset: str) -> None:
    template = command_template(Executor(preset=preset))
    assert template is not None
    assert render_command(template, VALUES) == DOCUMENTED[preset]


def test_claude_preset_passes_the_write_hooks() -> None:
    template = command_template(Executor(preset="claude"))
    assert template is not None
    argv = render_command(template, VALUES)
    assert argv[:8] == [
        "claude", "-p", POINTER, "--model", "configured-model",
        "--permission-mode", "acceptEdits", "--output-format",
    ]  # fmt: skip
    assert argv[9] == "--settings"
    hooks = json.loads(argv[10])["hooks"]
    assert "hook pre-write" in hooks["PreToolUse"][0]["hooks"][0]["command"]
    assert hooks["PreToolUse"][0]["matcher"] == "Write|Edit|MultiEdit|NotebookEdit"


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
def test_check_flags_a_literal_model(git_repo: Path, executor: dict[str, object]) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}], {"executor": executor})
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    assert [p.code for p in problems] == ["literal-model"]


def test_presets_name_no_model_themselves() -> None:
    for preset in ("claude", "codex", "gemini", "aider"):
        template = command_template(Executor(preset=preset))
        assert template is not None and literal_models(template) == []
