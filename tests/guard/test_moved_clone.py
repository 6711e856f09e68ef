"""A clone moved (``mv``) or copied (``cp -a``) after ``gitrun hooks install``.

The Bash sandbox in ``.claude/settings.local.json`` names the clone's
absolute path; after a move it names the old place and Bash may write
anywhere in the new one. ``hooks status`` and ``check`` name the stale
entry, and ``hooks install`` replaces its own, never the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.guard.sandbox import missing_sandbox_tools
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, write_run

LOCAL = ".claude/settings.local.json"
USER_KEYS = {"permissions": {"allow": ["Bash(ls:*)"]}, "env": {"MY_VAR": "1"}}

pytestmark = pytest.mark.skipif(
    bool(missing_sandbox_tools()), reason="gitrun installs no sandbox without bwrap and socat"
)


def _gitrun(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gitrun in ``repo`` as a user runs it: this installation first on PATH
    (installed hooks call ``gitrun`` from PATH), no gitrun variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return run_gitrun_call(list(args), repo, env=env, timeout=300)


def _local(repo: Path) -> dict[str, object]:
    data = json.loads((repo / LOCAL).read_text())
    assert isinstance(data, dict)
    return data


def _deny_write(repo: Path) -> object:
    sandbox = _local(repo)["sandbox"]
    assert isinstance(sandbox, dict)
    return sandbox["filesystem"]["denyWrite"]


@pytest.fixture
def installed(git_repo: Path) -> Path:
    """A clone with an external run and gitrun's hooks and sandbox installed,
    and settings of the user's own beside gitrun's sandbox."""
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"kind": "external"}},
    )
    commit_all(git_repo, "run r")
    done = _gitrun(git_repo, "hooks", "install")
    assert done.returncode == 0, done.stdout + done.stderr
    local = _local(git_repo)
    (git_repo / LOCAL).write_text(json.dumps({**USER_KEYS, **local}, indent=2))
    assert _deny_write(git_repo) == [os.path.realpath(git_repo)]
    os.chdir(git_repo.parent)  # the test moves the clone away from under the current directory
    return git_repo


def _stale_sentence(old: Path, new: Path) -> str:
    return (
        f"{LOCAL}: gitrun's Bash sandbox: sandbox.filesystem.denyWrite names "
        f"{os.path.realpath(old)}, not this clone ({os.path.realpath(new)}), so the clone was "
        "moved or copied and Bash may write anywhere in it; run `gitrun hooks install`"
    )


def test_a_moved_clone_s_stale_sandbox_is_reported_and_repaired(installed: Path) -> None:
    moved = installed.parent / "moved"
    os.rename(installed, moved)  # what `mv` does within one file system
    said = _stale_sentence(installed, moved)
    status = _gitrun(moved, "hooks", "status", "--claude")
    assert status.returncode == 1, status.stdout + status.stderr
    assert f"FAIL  {said}" in status.stdout.splitlines(), status.stdout
    check = _gitrun(moved, "check", "r")
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"  [sandbox] {said}" in check.stdout.splitlines(), check.stdout
    repaired = _gitrun(moved, "hooks", "install")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"{LOCAL}: gitrun's Bash sandbox named {os.path.realpath(installed)}" in repaired.stdout
    assert _deny_write(moved) == [os.path.realpath(moved)]
    local = _local(moved)
    assert {k: local[k] for k in USER_KEYS} == USER_KEYS  # the user's own settings, untouched
    again = _gitrun(moved, "hooks", "status", "--claude")
    assert again.returncode == 0, again.stdout
    assert f"ok  {LOCAL}: Bash runs in the sandbox with this clone read-only" in again.stdout
    assert _gitrun(moved, "check", "r").returncode == 0


def test_a_copied_clone_is_reported_and_repaired_and_the_original_is_left_alone(
    installed: Path,
) -> None:
    copy = installed.parent / "copy"
    subprocess.run(["cp", "-a", str(installed), str(copy)], check=True, timeout=60)
    original = (installed / LOCAL).read_bytes()
    status = _gitrun(copy, "hooks", "status", "--claude")
    assert status.returncode == 1
    assert f"FAIL  {_stale_sentence(installed, copy)}" in status.stdout.splitlines()
    assert _gitrun(installed, "hooks", "status", "--claude").returncode == 0
    assert _gitrun(copy, "hooks", "install", "--claude").returncode == 0
    assert _deny_write(copy) == [os.path.realpath(copy)]
    assert {k: _local(copy)[k] for k in USER_KEYS} == USER_KEYS
    assert (installed / LOCAL).read_bytes() == original
    assert _gitrun(copy, "hooks", "status", "--claude").returncode == 0


def test_a_sandbox_the_user_changed_is_reported_but_never_rewritten(installed: Path) -> None:
    from gitrun.errors import GitrunError
    from gitrun.guard.install import install_sandbox, uninstall_sandbox
    from gitrun.guard.probe import sandbox_status

    local = _local(installed)
    sandbox = local["sandbox"]
    assert isinstance(sandbox, dict)
    sandbox["filesystem"]["denyWrite"].append("/srv/secrets")  # the user's own entry
    (installed / LOCAL).write_text(json.dumps(local, indent=2))
    copy = installed.parent / "copy"
    shutil.copytree(installed, copy, symlinks=True)
    before = (copy / LOCAL).read_bytes()
    status = sandbox_status(copy)
    assert status is not None and not status.ok
    assert f"names {os.path.realpath(installed)} and /srv/secrets, not this clone" in status.says
    with pytest.raises(
        GitrunError, match=r"settings of its own, and its sandbox.filesystem.denyWrite names /"
    ):
        install_sandbox(copy)
    assert "no gitrun sandbox" in uninstall_sandbox(copy)
    assert (copy / LOCAL).read_bytes() == before
