"""check asks git a fixed number of questions, however many tasks and tracked
files it proves: a per-path (or per-chunk-of-paths) git call over the index
made check of 100,000 landed outputs take minutes. Counted with a real `git`
on PATH that logs each call before it runs the real one; nothing is timed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, commit_all, git, write_run


def _git_calls(repo: Path, tmp: Path, *args: str) -> list[str]:
    """The git subcommands ``gitrun args`` runs in ``repo``, in order."""
    real = shutil.which("git")
    assert real
    shim = tmp / "shim"
    shim.mkdir(exist_ok=True)
    log = tmp / "git-calls.log"
    log.write_text("")
    wrapper = shim / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    proc = run_gitrun_call([*args], repo, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()


def _landed_run(repo: Path, n: int) -> None:
    """A run of ``n`` tasks whose inputs and outputs are all tracked, the
    outputs under a directory .gitignore names (landed, then ignored)."""
    files = {f"docs/ch{i:05d}.md": f"chapter {i}\n" for i in range(n)}
    files |= {f"out/ch{i:05d}.json": "{}\n" for i in range(n)}
    build_tree(repo, files)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:05d}", "inputs": [f"docs/ch{i:05d}.md"], "outputs": [f"out/ch{i:05d}.json"]}
        for i in range(n)
    ]
    write_run(repo, "r", tasks)
    commit_all(repo, "the run, landed")
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore the outputs")
    assert len(git(repo, "ls-files", "out").split()) == n


def test_check_runs_as_many_git_calls_for_1200_tracked_outputs_as_for_3(
    tmp_path: Path,
) -> None:
    counts = {}
    for n in (3, 1200):
        repo = tmp_path / f"repo{n}"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        _landed_run(repo, n)
        calls = _git_calls(repo, tmp_path, "check", "r")
        counts[n] = [c for c in calls if "ls-files" in c or "check-ignore" in c]
        assert len(calls) < 40, calls
    assert len(counts[1200]) == len(counts[3]), counts
