from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import build_tree, commit_all, git_env

# A confined worker's /tmp is its own (gitrun.workers.sandbox): the files a
# test gives its workers (scripts, specs, gates, fake programs) live where
# every worker sees them, out of /tmp. Set before any temporary directory is
# made, and inherited by pytest-xdist's workers.
if "PYTEST_DEBUG_TEMPROOT" not in os.environ and os.path.isdir("/var/tmp"):
    os.environ["PYTEST_DEBUG_TEMPROOT"] = "/var/tmp"


def _built_once() -> None:
    """typer's CliRunner builds the click command from the app on each
    invoke (~40 ms of reading every command's signature); the in-process
    tests invoke it thousands of times. They get the command gitrun itself
    builds once a process (gitrun.cli.app.command)."""
    import typer.main
    import typer.testing

    from gitrun.cli.app import app, command

    def get_command(typer_app: typer.Typer) -> typer.core.TyperGroup | object:
        return command() if typer_app is app else typer.main.get_command(typer_app)

    typer.testing._get_command = get_command  # type: ignore[assignment]


_built_once()


@pytest.fixture(autouse=True)
def _isolated_git(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test talks to git with a pinned author and no user configuration,
    and without gitrun settings from the caller's environment."""
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith(("GIT_", "GITRUN_")):
            monkeypatch.delenv(key)
    for key, value in git_env(home).items():
        monkeypatch.setenv(key, value)


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load gate reads the machine's load average, which counts every
    process on a shared machine: in-process drivers see an idle machine and
    child processes a bound no load reaches, so no test depends on what else
    runs. The load-gate tests set their own."""
    from gitrun.engine import governor

    monkeypatch.setattr(governor, "read_load", lambda: 0.0)
    # gitrun run as a child process reads the real load: a bound no machine reaches.
    monkeypatch.setenv("GITRUN_MAX_LOAD", "1000000")


@pytest.fixture
def gitrun_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gitrun under test on PATH, first, as an activated virtual environment has it:
    installed hooks call `gitrun` from PATH, and `hooks install` refuses where it does not
    run. The suite itself runs unactivated (the README's command), so a test that needs it
    asks for this fixture."""
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/bin:/bin")]))


@pytest.fixture
def git_repo(tmp_path: Path) -> Iterator[Path]:
    """A real repository with one commit, its root as the current directory."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    build_tree(repo, {"README.md": "# sample\n"})
    commit_all(repo, "initial")
    cwd = Path.cwd()
    os.chdir(repo)
    try:
        yield repo
    finally:
        os.chdir(cwd)


@pytest.fixture
def clis(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent CLIs, ``srun`` and the scaffold's ``my-agent`` as stand-ins
    at the front of PATH, for tests of definitions that name them (``gitrun
    check`` requires the executor's program to resolve and a preset's to
    answer ``--version``)."""
    from tests.helpers import fake_programs

    folder = fake_programs(
        tmp_path_factory.mktemp("bin"),
        "claude",
        "codex",
        "gemini",
        "aider",
        "srun",
        "worker",
        "my-agent",
    )
    monkeypatch.setenv("PATH", os.pathsep.join([str(folder), os.environ.get("PATH", "")]))
    return folder
