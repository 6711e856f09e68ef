"""`gitrun new --preset NAME`: the packet names that CLI and a model of its family."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gitrun.commands.scaffold import new_run
from gitrun.definition.load import load_run
from gitrun.errors import UsageError
from gitrun.proof.check import check_run

FAMILIES = {
    "claude": "sonnet",
    "codex": "gpt-6.2-sol",
    "gemini": "gemini-2.5-pro",
    "aider": "sonnet",
}


@pytest.mark.usefixtures("clis")
@pytest.mark.parametrize("preset", sorted(FAMILIES))
def test_the_packet_s_model_comes_from_the_preset_s_family(git_repo: Path, preset: str) -> None:
    new_run(git_repo, "r", preset=preset)
    text = (git_repo / ".gitrun/runs/r/packet.toml").read_text()
    packet = tomllib.loads(text)
    assert packet["model"] == {"default": FAMILIES[preset]}
    assert packet["executor"] == {"kind": "command", "preset": preset}
    run = load_run(git_repo, "r", environ={})
    assert run.packet.model_for("work") == FAMILIES[preset]
    assert check_run(run).problems == []


def test_without_a_preset_the_packet_is_claude_s_and_external_keeps_its_model(
    git_repo: Path,
) -> None:
    new_run(git_repo, "a")
    assert tomllib.loads((git_repo / ".gitrun/runs/a/packet.toml").read_text())["model"] == {
        "default": "sonnet"
    }
    new_run(git_repo, "b", executor="external")
    packet = tomllib.loads((git_repo / ".gitrun/runs/b/packet.toml").read_text())
    assert packet["executor"] == {"kind": "external"} and packet["model"]["default"] == "sonnet"


def test_the_shell_preset_gets_a_script_to_replace(git_repo: Path) -> None:
    new_run(git_repo, "s", preset="shell")
    run = load_run(git_repo, "s", environ={})
    assert run.packet.executor.preset == "shell"
    assert run.packet.executor.shell is not None and "$GITRUN_POINTER" in run.packet.executor.shell
    assert run.packet.model.default == ""  # a script is not handed some client's model
    assert "$GITRUN_MODEL" in (git_repo / ".gitrun/runs/s/packet.toml").read_text()  # how to
    # Untouched, the script starts a placeholder: check says so.
    [problem] = check_run(run).problems
    assert problem.code == "program" and "shell starts `my-agent`" in problem.message


def test_an_unknown_preset_or_one_for_an_external_run_is_a_usage_error(git_repo: Path) -> None:
    with pytest.raises(UsageError, match="--preset must be one of claude, codex, gemini"):
        new_run(git_repo, "r", preset="cursor")
    with pytest.raises(UsageError, match="--preset picks the CLI gitrun launches"):
        new_run(git_repo, "r", executor="external", preset="codex")
    assert not (git_repo / ".gitrun/runs/r").exists()


def test_the_command_line_takes_preset(git_repo: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gitrun", "new", "g", "--preset", "gemini"],
        cwd=git_repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    packet = tomllib.loads((git_repo / ".gitrun/runs/g/packet.toml").read_text())
    assert packet["executor"]["preset"] == "gemini"
    assert packet["model"]["default"] == "gemini-2.5-pro"
