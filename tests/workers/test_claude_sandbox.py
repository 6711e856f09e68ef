"""The claude worker's Bash is kept from writing around ownership:
``[executor] bash``, gitrun's ``--settings``, and what ``gitrun check`` says
before a launch. The real client's side is in tests/realclient/test_real_claude.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.definition.schema import Executor
from gitrun.proof.check import check_run
from gitrun.proof.clientcheck import settings_problems
from gitrun.workers.executor import claude_settings, command_template, render_command
from gitrun.workers.pointer import attempt_values
from tests.helpers import write_run

TASKS = [{"id": "t1", "outputs": ["out/t1.json"]}]


def _argv(repo: Path, bash: str) -> list[str]:
    write_run(repo, "r", TASKS, {"executor": {"preset": "claude", "bash": bash}})
    run = load_run(repo, "r")
    template = command_template(run.packet.executor)
    assert template is not None
    return render_command(template, attempt_values(run, run.tasks[0], 1))


def _settings(argv: list[str]) -> dict[str, object]:
    value = json.loads(argv[argv.index("--settings") + 1])
    assert isinstance(value, dict)
    return value


def test_by_default_bash_runs_in_the_sandbox_with_the_repository_read_only(
    git_repo: Path,
) -> None:
    argv = _argv(git_repo, "sandbox")
    sandbox = _settings(argv)["sandbox"]
    assert sandbox == {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": True,
        "filesystem": {"denyWrite": [os.path.realpath(git_repo)]},
    }
    assert "--disallowedTools" not in argv
    assert Executor().bash == "sandbox"


def test_deny_takes_bash_away_and_detect_leaves_it_to_the_audit(git_repo: Path) -> None:
    denied = _argv(git_repo, "deny")
    assert "sandbox" not in _settings(denied)
    assert denied[denied.index("--disallowedTools") + 1] == "Bash"
    detected = _argv(git_repo, "detect")
    assert "sandbox" not in _settings(detected) and "--disallowedTools" not in detected
    assert "hooks" in _settings(detected)


def test_gitrun_s_own_settings_pass_the_client_s_schema(git_repo: Path) -> None:
    assert settings_problems(claude_settings(git_repo)) == []
    assert settings_problems(claude_settings()) == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{hooks:", "is not valid JSON"),
        ("[]", "is not a JSON object"),
        ('{"sandbox": {"enabled": "yes"}}', "sandbox.enabled is not a boolean"),
        ('{"sandbox": {"filesystem": {"denyWrites": ["/r"]}}}', "denyWrites is no setting"),
        ('{"sandbox": {"filesystem": {"denyWrite": "/r"}}}', "is not a list of strings"),
        ('{"sandbox": {"excludeCommands": ["gitrun:*"]}}', "excludeCommands is no setting"),
        ('{"hooks": {"PreToolUses": []}}', "no hook event"),
        ('{"hooks": {"PreToolUse": [{"matcher": "Write"}]}}', 'has no "hooks" list'),
        ('{"hooks": {"PreToolUse": [{"hooks": [{"command": "x"}]}]}}', "is not {"),
        ('{"hooks": []}', '"hooks" is not an object'),
    ],
)
def test_settings_the_client_would_ignore_are_named(text: str, said: str) -> None:
    problems = settings_problems(text)
    assert len(problems) == 1 and said in problems[0], problems


@pytest.mark.usefixtures("clis")
def test_check_names_settings_the_client_would_ignore(git_repo: Path) -> None:
    wrong = '{"sandbox": {"enabled": true, "filesystem": {"denyWrites": ["/"]}}}'
    packet = {"executor": {"preset": "claude", "bash": "detect", "args": ["--settings", wrong]}}
    write_run(git_repo, "r", TASKS, packet)
    problems = [p for p in check_run(load_run(git_repo, "r")).problems if p.code != "dirty"]
    assert [p.code for p in problems] == ["claude-settings"], problems
    assert "denyWrites is no setting Claude Code knows" in problems[0].message
    assert problems[0].message.startswith(".gitrun/runs/r/packet.toml: [executor] the --settings")


@pytest.mark.parametrize("kind", ["claude", "external"])
def test_check_says_when_the_sandbox_cannot_start_and_how_to_fall_back(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A PATH with git and nothing else: no bwrap, no socat."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(_which("git"))
    executor = {"kind": "external"} if kind == "external" else {"preset": "claude"}
    write_run(git_repo, "r", TASKS, {"executor": executor})
    monkeypatch.setenv("PATH", str(bin_dir))
    problems = [p for p in check_run(load_run(git_repo, "r")).problems if p.code == "sandbox"]
    assert len(problems) == 1
    message = problems[0].message
    assert "bwrap and socat are not installed" in message
    assert 'bash = "deny"' in message and '"detect"' in message
    write_run(git_repo, "r", TASKS, {"executor": {**executor, "bash": "detect"}})
    assert not [p for p in check_run(load_run(git_repo, "r")).problems if p.code == "sandbox"]


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    assert found is not None
    return found
