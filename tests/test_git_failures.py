"""When git cannot serve gitrun, the user reads one sentence naming the cause and the fix.

A shallow clone, a PATH without git, and a repository git refuses to open
(``safe.directory``), each with the real thing: a real ``git clone --depth 1``,
a real PATH, a real ownership check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gitrun.commands.session import start_run
from tests.helpers import build_tree, commit_all, git, one_task_run

quiet = lambda _line: None  # noqa: E731


def _gitrun(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitrun", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_sentence(proc: subprocess.CompletedProcess[str]) -> str:
    """gitrun's error, which must be one line, no traceback, and not exit 70."""
    assert proc.returncode not in (0, 70), (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gitrun: error: "), proc.stderr
    return lines[0]


def test_land_in_a_shallow_clone_names_the_shallow_history_and_the_fix(
    git_repo: Path, tmp_path: Path
) -> None:
    one_task_run(git_repo)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    build_tree(git_repo, {"later.txt": "later\n"})
    commit_all(git_repo, "later")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{git_repo}", str(clone))
    git(clone, "fetch", "-q", "--depth", "1", "origin", "gitrun/r:gitrun/r")
    assert git(clone, "rev-parse", "--is-shallow-repository").strip() == "true"
    said = _one_sentence(_gitrun(clone, "land", "r"))
    assert "shallow" in said and "`git fetch --unshallow`" in said, said
    assert "merge-tree" not in said and "unrelated histories" not in said, said
    git(clone, "fetch", "-q", "--unshallow")
    git(clone, "fetch", "-q", "origin", "gitrun/r:gitrun/r")  # the run branch's history too
    landed = _gitrun(clone, "land", "r")
    assert landed.returncode == 0, landed.stderr
    assert (clone / "out/t1.json").exists()
