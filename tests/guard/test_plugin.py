"""The gitrun plugin for Claude Code (``claude-plugin/``) and ``gitrun plugin``.

The plugin's files are the one definition of what both setups install:
``gitrun hooks install`` writes the plugin's hooks and agent into the
repository. The tests with the real CLI validate the plugin and install it
into a private HOME; they skip, with the reason, without the CLI
(``.ci/install-clients``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import gitrun
from gitrun.guard.install import claude_hooks, install_claude, plugin_dir
from gitrun.guard.plugin import marketplace_dir
from tests.forkserver import run_gitrun_call
from tests.helpers import run_gitrun
from tests.realclient.claude import claude_binary, gitrun_bin_dir

SKILL = plugin_dir() / "skills" / "lead" / "SKILL.md"
SKILLS = sorted(path.parent.name for path in (plugin_dir() / "skills").glob("*/SKILL.md"))


def _frontmatter(path: Path) -> dict[str, str]:
    head = path.read_text(encoding="utf-8").split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines())


def test_the_repository_hooks_are_the_plugin_s_hooks(git_repo: Path) -> None:
    """`hooks install` writes exactly the plugin's entries, only calling
    gitrun the way that runs here."""
    shipped = json.loads((plugin_dir() / "hooks" / "hooks.json").read_text())["hooks"]
    assert claude_hooks("gitrun") == shipped
    install_claude(git_repo, "gitrun")
    written = json.loads((git_repo / ".claude/settings.json").read_text())["hooks"]
    assert written == shipped
    other = claude_hooks("python3 -m gitrun")["PreToolUse"][0]["hooks"][0]["command"]
    assert other.startswith("python3 -m gitrun hook pre-write || ")
    assert other.endswith(shipped["PreToolUse"][0]["hooks"][0]["command"][len("gitrun") :])


def test_the_plugin_says_gitrun_s_version_and_the_marketplace_lists_it() -> None:
    manifest = json.loads((plugin_dir() / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "gitrun" and manifest["version"] == gitrun.__version__
    market = json.loads((marketplace_dir() / ".claude-plugin" / "marketplace.json").read_text())
    (listed,) = market["plugins"]
    assert listed["name"] == "gitrun" and (marketplace_dir() / listed["source"]) == plugin_dir()


def _allowed(path: Path) -> set[str]:
    """A skill's allowed-tools as what they let it run: `gitrun new` for
    ``Bash(gitrun new:*)``, `skill gitrun:lead` for ``Skill(gitrun:lead)``;
    any other entry as it is written, so it matches nothing a body says."""
    found = set()
    for entry in _frontmatter(path)["allowed-tools"].split(", "):
        command = re.fullmatch(r"Bash\(([a-z]+(?: [a-z]+)?):\*\)", entry)
        skill = re.fullmatch(r"Skill\((gitrun:[a-z]+)\)", entry)
        found.add(command[1] if command else f"skill {skill[1]}" if skill else entry)
    return found


def _named(path: Path) -> set[str]:
    """What a skill's body tells the session to run: the gitrun commands
    and `sleep` it quotes, the tools it names (the `SendMessage` tool), and
    the skills it hands over to."""
    body = path.read_text().split("---\n", 2)[2]
    commands = set(re.findall(r"`(gitrun [a-z]+|sleep)[ `]", body))
    commands |= set(re.findall(r"the `([A-Z][A-Za-z]+)` tool", body))
    return commands | {f"skill {name}" for name in re.findall(r"skill `(gitrun:[a-z]+)`", body)}


@pytest.mark.parametrize("name", SKILLS)
def test_a_skill_may_run_every_command_it_names_and_no_other(name: str) -> None:
    """A `-p` session runs only what it is allowed: a skill's allowed-tools
    are what it tells the session to run, so nothing it says is refused,
    and nothing else runs unasked."""
    path = plugin_dir() / "skills" / name / "SKILL.md"
    assert _frontmatter(path)["name"] == name
    assert _allowed(path) == _named(path), (_allowed(path), _named(path))


def test_next_help_is_the_lead_skill(git_repo: Path) -> None:
    body = SKILL.read_text().split("---\n", 2)[2].strip()
    proc = run_gitrun_call(
        ["next", "--help"], git_repo, env={**os.environ, "COLUMNS": "200"}, timeout=60
    )
    shown = " ".join(proc.stdout.split())
    for line in body.splitlines():
        assert " ".join(line.split()) in shown, line


def _gitrun(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_gitrun(cwd, *args, env=env)


def _shipped(cwd: Path) -> Path:
    """The plugin folder of the gitrun the commands run (the installed
    package's, which is not this checkout's in CI)."""
    said = _gitrun(cwd, "plugin", "path")
    assert said.returncode == 0, said.stderr
    folder = Path(said.stdout.strip())
    assert (folder / ".claude-plugin/plugin.json").is_file()
    return folder


def test_install_without_claude_says_how_to_get_it_and_writes_nothing(
    git_repo: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "gitrun").symlink_to(Path(gitrun_bin_dir()) / "gitrun")
    proc = _gitrun(
        git_repo, "plugin", "install", "--scope", "project", PATH=f"{bare}:/usr/bin:/bin"
    )
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.startswith("gitrun: error: Claude Code (`claude`) is not on PATH; install")
    assert f"claude --plugin-dir {_shipped(git_repo)}" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not (git_repo / ".claude").exists()


def test_install_refuses_when_the_hooks_could_not_call_gitrun(
    git_repo: Path, tmp_path: Path
) -> None:
    """The plugin's hooks call `gitrun`: where only `python3 -m gitrun` would
    run, an installed plugin would block every write."""
    claude = Path(claude_binary())
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "claude").symlink_to(claude)
    proc = _gitrun(git_repo, "plugin", "install", PATH=f"{bare}:/usr/bin:/bin", HOME=str(tmp_path))
    assert proc.returncode == 1, proc
    assert proc.stderr.startswith(
        "gitrun: error: `gitrun` does not run from PATH here, and an installed hook that "
        "cannot start blocks every write; put gitrun on PATH"
    ), proc.stderr
    assert not (tmp_path / ".claude").exists()


def _client_env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([gitrun_bin_dir(), str(Path(claude_binary()).parent), "/usr/bin:/bin"])
    return {"HOME": str(home), "PATH": path, "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"}


@pytest.mark.realclient
def test_the_plugin_and_its_marketplace_validate_strictly_with_the_real_cli(tmp_path: Path) -> None:
    for folder in (marketplace_dir(), plugin_dir()):
        proc = subprocess.run(
            [claude_binary(), "plugin", "validate", "--strict", str(folder)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **_client_env(tmp_path)},
        )
        assert proc.returncode == 0, (folder, proc.stdout[-3000:], proc.stderr[-2000:])
        assert "Validation passed" in proc.stdout
    provides = proc.stdout
    assert {"fanout", "lead"} <= set(SKILLS)
    skills = [f"skills: gitrun:{name}" for name in SKILLS]
    for part in ("hooks: PreToolUse", "hooks: SubagentStop", *skills):
        assert part in provides, provides
    assert "agents: gitrun:gitrun-worker" in provides


@pytest.mark.realclient
@pytest.mark.parametrize("scope", ["user", "project", "local"])
def test_plugin_install_puts_it_in_the_scope_loaded_in_place_and_twice_changes_nothing(
    git_repo: Path, tmp_path: Path, scope: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = _client_env(home)
    first = _gitrun(git_repo, "plugin", "install", "--scope", scope, **env)
    assert first.returncode == 0, first.stderr
    assert f"Successfully installed plugin: gitrun@gitrun (scope: {scope})" in first.stdout
    assert "/gitrun:lead RUN" in first.stdout
    again = _gitrun(git_repo, "plugin", "install", "--scope", scope, **env)
    assert again.returncode == 0 and "already installed" in again.stdout, again
    listed = subprocess.run(
        [claude_binary(), "plugin", "list", "--json"],
        cwd=git_repo,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    ours = [p for p in json.loads(listed.stdout) if p["id"] == "gitrun@gitrun"]
    assert [(p["scope"], p["enabled"]) for p in ours] == [(scope, True)], listed.stdout
    assert Path(ours[0]["readFromFolder"]) == _shipped(git_repo)
    where = {"user": home / ".claude/settings.json", "project": git_repo / ".claude/settings.json"}
    settings = where.get(scope, git_repo / ".claude/settings.local.json")
    assert json.loads(settings.read_text())["enabledPlugins"] == {"gitrun@gitrun": True}
    # Nothing of gitrun's own in the repository: no hooks, no agent file, no sandbox.
    assert not (git_repo / ".claude/agents").exists()
    for name in ("settings.json", "settings.local.json"):
        kept = git_repo / ".claude" / name
        assert not kept.exists() or set(json.loads(kept.read_text())) == {"enabledPlugins"}
    gone = _gitrun(git_repo, "plugin", "uninstall", "--scope", scope, **env)
    assert gone.returncode == 0 and "Successfully uninstalled" in gone.stdout, gone
    missing = _gitrun(git_repo, "plugin", "uninstall", "--scope", scope, **env)
    assert missing.returncode == 1 and missing.stderr.startswith(
        "gitrun: error: `claude plugin uninstall gitrun@gitrun` failed (exit 1): "
    ), missing.stderr
    assert missing.stderr.count("\n") == 1


def test_hooks_status_runs_the_plugin_s_hook_where_a_scope_enables_it(
    git_repo: Path, tmp_path: Path
) -> None:
    """A repository led with the plugin has no hook of gitrun's in its
    settings: `hooks status` runs the plugin's write hook instead, where the
    local, project or user settings enable it (the first that says wins)."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": os.pathsep.join([gitrun_bin_dir(), "/usr/bin:/bin"])}
    enabled = json.dumps({"enabledPlugins": {"gitrun@gitrun": True}})
    (home / ".claude/settings.json").write_text(enabled)
    user = _gitrun(git_repo, "hooks", "status", "--claude", **env)
    assert user.returncode == 0, user.stdout
    assert user.stdout.startswith(
        f"ok  the gitrun plugin (enabled in {home}/.claude/settings.json)"
    )
    assert "allows an owned write, denies one outside the task's owns" in user.stdout
    (git_repo / ".claude").mkdir()
    (git_repo / ".claude/settings.local.json").write_text(
        json.dumps({"enabledPlugins": {"gitrun@gitrun": False}})
    )
    off = _gitrun(git_repo, "hooks", "status", "--claude", **env)
    assert off.returncode == 1
    assert "no gitrun write hook; run `gitrun plugin install`" in off.stdout, off.stdout
