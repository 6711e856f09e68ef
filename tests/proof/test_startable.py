"""`gitrun check` proves a run can start: its program, its inputs, a first commit.

Each of these passed `check` ("ready") and failed only at `start`, or
worse, one attempt at a time: the executor's program not installed (on a
one-task run a "retry storm"), a misspelt input, a repository without a
commit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.problem import Problem
from gitrun.proof.check import check_run
from tests.helpers import build_tree, commit_all, fake_programs, run_gitrun, write_run


def _check(repo: Path, tasks: list[dict[str, object]], **packet: object) -> list[Problem]:
    write_run(repo, "r", tasks, packet or None)
    return check_run(load_run(repo, "r", environ={})).problems


def _task(tid: str, **extra: object) -> dict[str, object]:
    return {"id": tid, "outputs": [f"out/{tid}.json"], **extra}


def _counting_cli(folder: Path, name: str, answer: str, status: int = 0) -> Path:
    """A CLI whose every `--version` call is counted in ``folder/calls``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "$@" >> "{folder}/calls"\necho "{answer}"\nexit {status}\n')
    path.chmod(0o755)
    return path


def test_a_preset_whose_cli_is_not_installed_is_a_problem_naming_the_install(
    git_repo: Path, tmp_path: Path
) -> None:
    write_run(git_repo, "r", [_task("t1")], {"executor": {"preset": "claude"}})
    commit_all(git_repo, "run r")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    path = os.pathsep.join([str(empty), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    for command in ("check", "start"):
        proc = run_gitrun(git_repo, command, "r", env={"PATH": path})
        assert proc.returncode != 0, proc.stdout
        said = proc.stdout + proc.stderr
        assert "[executor] starts `claude`, which is not found on PATH" in said
        assert "npm install -g @anthropic-ai/claude-code" in said
        assert "Traceback" not in said and "retry storm" not in said
    assert not (git_repo / ".git/gitrun/r/logs").exists()  # nothing was spawned


def test_a_preset_cli_s_version_is_in_the_summary_and_asked_once(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _counting_cli(bin_dir, "codex", "codex-cli 9.9.9")
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    write_run(git_repo, "r", [_task("t1")], {"executor": {"preset": "codex"}})
    for _ in range(3):
        report = check_run(load_run(git_repo, "r", environ={}))
        assert report.problems == []
        assert "; workers run codex-cli 9.9.9" in report.summary
    assert (bin_dir / "calls").read_text() == "--version\n"
    # Another binary (upgraded in place) is asked again.
    _counting_cli(bin_dir, "codex", "codex-cli 10.0.0")
    assert check_run(load_run(git_repo, "r", environ={})).version == "codex-cli 10.0.0"


def test_a_cli_that_does_not_answer_version_is_a_problem(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _counting_cli(bin_dir, "gemini", "gemini: cannot find module 'node:sqlite'", status=1)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    [problem] = _check(git_repo, [_task("t1")], executor={"preset": "gemini"})
    assert problem.code == "program"
    assert "`gemini --version` exited 1: gemini: cannot find module 'node:sqlite'" in (
        problem.message
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (None, "`bin/agent`, which does not exist"),
        ("plain", "`bin/agent`, which is not executable (chmod +x it)"),
        ("folder", "`bin/agent`, which is not a file"),
    ],
)
def test_a_command_program_named_by_path_must_be_an_executable_file(
    git_repo: Path, make: str | None, said: str
) -> None:
    if make == "plain":
        build_tree(git_repo, {"bin/agent": "#!/bin/sh\n"})
    elif make == "folder":
        (git_repo / "bin/agent").mkdir(parents=True)
    [problem] = _check(git_repo, [_task("t1")], executor={"command": ["bin/agent", "{pointer}"]})
    assert problem.code == "program" and said in problem.message, problem.message


def test_an_input_that_names_nothing_is_a_problem_naming_the_task(git_repo: Path) -> None:
    build_tree(git_repo, {"docs/b1.txt": "b", "notes/n.md": "n", "bundle.txt": "docs/b2.txt\n"})
    tasks = [
        _task("t1", inputs=["docs/b1.text"]),  # misspelt
        _task("t2", inputs=["docs/*.md"]),  # a glob that matches nothing
        _task("t3", inputs=["docs/b1.txt", "notes/*.md", "README.md"]),  # all there
        _task("t4", bundle="bundle.txt"),  # a bundle naming a missing file
    ]
    problems = _check(git_repo, tasks)
    assert [(p.code, p.tasks, p.path) for p in problems] == [
        ("input", ("t1",), "docs/b1.text"),
        ("input", ("t2",), "docs/*.md"),
        ("input", ("t4",), "docs/b2.txt"),
    ]
    assert "task t1 reads 'docs/b1.text', which does not exist in the work tree" in (
        problems[0].message
    )
    assert "task t2 reads 'docs/*.md', which matches no file" in problems[1].message


def test_inputs_the_run_itself_makes_are_not_missing(git_repo: Path) -> None:
    """A later stage reads an earlier one's outputs, by path, by glob or by folder."""
    tasks = [
        _task("a1"),
        {"id": "g1", "outputs": ["gen/x/one.md"], "owns": ["gen/x/**"]},
        {"id": "r1", "outputs": ["rev/r1.md"], "stage": "review", "inputs": ["out/a1.json"]},
        {"id": "r2", "outputs": ["rev/r2.md"], "stage": "review", "inputs": ["out/*.json"]},
        {"id": "r3", "outputs": ["rev/r3.md"], "stage": "review", "inputs": ["out", "gen/x/a/b"]},
        {"id": "r4", "outputs": ["rev/r4.md"], "stage": "review", "inputs": ["gen/x/*.md"]},
    ]
    stages = [{"name": "work"}, {"name": "review"}]  # in order: review after work
    assert _check(git_repo, tasks, stages=stages) == []


def test_an_input_only_at_the_base_commit_is_there(git_repo: Path) -> None:
    build_tree(git_repo, {"docs/a.md": "a"})
    commit_all(git_repo, "docs")
    (git_repo / "docs/a.md").unlink()  # deleted in the work tree, not committed
    assert _check(git_repo, [_task("t1", inputs=["docs/a.md", "docs/*.md"])]) == []


def test_a_repository_without_a_commit_is_one_sentence(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write_run(repo, "r", [_task("t1")])
    proc = run_gitrun(repo, "check", "r", env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 1
    assert "[no-commit] the repository has no commit yet" in proc.stdout
    assert "git add -A && git commit" in proc.stdout


def test_the_stand_ins_resolve_so_definition_tests_need_no_real_client(tmp_path: Path) -> None:
    folder = fake_programs(tmp_path / "bin", "claude")
    proc = subprocess.run([folder / "claude", "--version"], capture_output=True, text=True)
    assert proc.stdout == "claude 0.0.0-test\n"
    assert subprocess.run([folder / "claude", "-p", "x"], capture_output=True).returncode == 1


@pytest.mark.parametrize(
    ("script", "flagged"),
    [
        ('my-agent --task "$GITRUN_TASK" "$GITRUN_POINTER"', True),  # the scaffold's line
        ('sh worker.sh "$GITRUN_POINTER"', False),
        ('cd docs && my-agent "$GITRUN_POINTER"', False),  # a builtin first: cannot tell
        ('./work.sh "$GITRUN_POINTER"', False),  # a path the script runs: its own business
        ('FOO=1 my-agent "$GITRUN_POINTER"', False),  # an assignment first: cannot tell
    ],
)
def test_a_shell_script_s_first_program_must_be_on_path(
    git_repo: Path, script: str, flagged: bool
) -> None:
    problems = _check(git_repo, [_task("t1")], executor={"preset": "shell", "shell": script})
    if flagged:
        [problem] = problems
        assert "[executor] shell starts `my-agent`, which is not found on PATH" in (problem.message)
    else:
        assert problems == []
