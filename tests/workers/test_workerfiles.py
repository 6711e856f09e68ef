"""The worker's own files are part of the job.

The repository files the executor's command runs (``sh worker.sh``, a
config it is given) and the validators' schemas and command files are
inputs of every task: editing one reruns every task, and ``check`` and
``start`` refuse one that is not committed, so a fresh clone resumes the
run. Real repositories, real ``gitrun`` processes, a real shell worker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from tests.helpers import build_tree, commit_all, git, gitrun_ok, ran_since, run_gitrun, write_run

# Deterministic: the output is the input upper-cased, as a JSON string; each
# task it ran is logged, so a test knows what was dispatched.
WORKER = """#!/bin/sh
printf '%s\\n' "$GITRUN_TASK" >> "$RAN_LOG"
case "$GITRUN_TASK" in t3) [ -e "$ALLOW" ] || exit 1;; esac
printf '{"text": "%s"}\\n' "$(tr a-z A-Z < "$GITRUN_INPUTS")" > "$GITRUN_OUTPUTS"
"""
SCHEMA = {"type": "object", "required": ["text"]}


def _define(repo: Path, count: int = 3, packet: dict[str, object] | None = None) -> Path:
    """A run ``r`` of ``count`` tasks whose executor is ``sh worker.sh``;
    nothing committed. Returns the log of the tasks that ran."""
    build_tree(repo, {f"docs/d{i}.txt": f"doc {i}\n" for i in range(1, count + 1)})
    build_tree(repo, {"worker.sh": WORKER})
    log = repo.parent / "ran.log"
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": [f"docs/d{i}.txt"], "outputs": [f"out/d{i}.json"]}
        for i in range(1, count + 1)
    ]
    data: dict[str, object] = {
        "executor": {
            "command": ["sh", "worker.sh"],
            "env": {"RAN_LOG": str(log), "ALLOW": str(repo.parent / "allow")},
        }
    }
    (repo.parent / "allow").touch()
    write_run(repo, "r", tasks, {**data, **(packet or {})})
    return log


def _round(repo: Path, log: Path) -> list[str]:
    gitrun_ok(repo, "start", "r", "-q")
    gitrun_ok(repo, "land", "r")
    return ran_since(log)


def test_editing_the_worker_script_reruns_every_task_and_an_input_one(git_repo: Path) -> None:
    log = _define(git_repo)
    commit_all(git_repo, "define r")
    assert _round(git_repo, log) == ["t1", "t2", "t3"]
    assert "3 of 3 tasks are up to date, 0 will run" in gitrun_ok(git_repo, "check", "r")
    # The worker changes (the same output, another script): every task runs.
    (git_repo / "worker.sh").write_text(WORKER + "# version 2\n")
    commit_all(git_repo, "worker, version 2")
    checked = gitrun_ok(git_repo, "check", "r")
    assert "up to date" not in checked, checked
    assert _round(git_repo, log) == ["t1", "t2", "t3"]
    assert "3 of 3 tasks are up to date, 0 will run" in gitrun_ok(git_repo, "check", "r")
    # One input changes: one task runs.
    (git_repo / "docs/d2.txt").write_text("doc two\n")
    commit_all(git_repo, "one input")
    assert "2 of 3 tasks are up to date, 1 will run" in gitrun_ok(git_repo, "check", "r")
    assert _round(git_repo, log) == ["t2"]


def test_editing_a_validators_schema_reruns_every_task(git_repo: Path) -> None:
    outputs = {"validators": ["shape"]}
    validators = {"shape": {"kind": "json_schema", "schema": "schemas/out.json"}}
    log = _define(git_repo, packet={"outputs": outputs, "validators": validators})
    build_tree(git_repo, {"schemas/out.json": json.dumps(SCHEMA)})
    commit_all(git_repo, "define r")
    assert _round(git_repo, log) == ["t1", "t2", "t3"]
    assert "3 of 3 tasks are up to date, 0 will run" in gitrun_ok(git_repo, "check", "r")
    (git_repo / "schemas/out.json").write_text(json.dumps({**SCHEMA, "title": "an output"}))
    commit_all(git_repo, "schema, version 2")
    assert "up to date" not in gitrun_ok(git_repo, "check", "r")
    assert _round(git_repo, log) == ["t1", "t2", "t3"]


def _leave_schema_untracked(repo: Path) -> str:
    validators = {"shape": {"kind": "json_schema", "schema": "schemas/out.json"}}
    _define(repo, packet={"outputs": {"validators": ["shape"]}, "validators": validators})
    commit_all(repo, "define r")
    build_tree(repo, {"schemas/out.json": json.dumps(SCHEMA)})
    return "schemas/out.json"


def _leave_worker_untracked(repo: Path) -> str:
    _define(repo)
    commit_all(repo, "define r")
    git(repo, "rm", "-q", "--cached", "worker.sh")
    git(repo, "commit", "-q", "-m", "the worker, untracked")
    return "worker.sh"


def _leave_worker_changed(repo: Path) -> str:
    _define(repo)
    commit_all(repo, "define r")
    (repo / "worker.sh").write_text(WORKER + "# not committed\n")
    return "worker.sh"


def _leave_worker_ignored(repo: Path) -> str:
    _define(repo)
    build_tree(repo, {".gitignore": "*.sh\n"})
    commit_all(repo, "define r, its worker ignored")
    assert "worker.sh" not in git(repo, "ls-files")
    return "worker.sh"


@pytest.mark.parametrize(
    ("leave", "add"),
    [
        (_leave_worker_untracked, "git add worker.sh && git commit"),
        (_leave_worker_changed, "git add worker.sh && git commit"),
        (_leave_worker_ignored, "git add -f worker.sh && git commit"),
        (_leave_schema_untracked, "git add schemas/out.json && git commit"),
    ],
)
def test_a_worker_file_not_committed_is_refused_by_check_and_start(
    git_repo: Path, leave: object, add: str
) -> None:
    path = leave(git_repo)  # type: ignore[operator]
    for command in ("check", "start"):
        proc = run_gitrun(git_repo, command, "r")
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0, said
        assert f"[worker-file] {path} " in said, said
        assert add in said, said
        assert "Traceback" not in said
    assert git(git_repo, "branch", "--list", "gitrun/r") == ""  # never half started


def test_a_declared_input_the_command_names_may_be_edited_like_any_input(
    git_repo: Path,
) -> None:
    # The command reads docs/in.md by name, and every task declares it: it is
    # task data (hashed as found at launch), not a worker file to refuse.
    build_tree(git_repo, {"docs/in.md": "base\n"})
    commit_all(git_repo, "input")
    (git_repo / "docs/in.md").write_text("edited, not committed\n")
    script = (
        "import os, pathlib; saw = pathlib.Path('docs/in.md').read_text(); "
        "pathlib.Path(os.environ['GITRUN_OUTPUTS']).write_text(saw)"
    )
    tasks: list[dict[str, object]] = [
        {"id": "t1", "inputs": ["docs/in.md"], "outputs": ["out/t1.md"]}
    ]
    write_run(git_repo, "r", tasks, {"executor": {"command": ["python3", "-c", script]}})
    proc = run_gitrun(git_repo, "check", "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (git_repo / "docs/in.py").write_text("x = 1\n")  # untracked, named, declared by none
    script2 = script + "; import runpy; runpy.run_path(pathlib.Path('docs/in.py'))"
    write_run(git_repo, "r", tasks, {"executor": {"command": ["python3", "-c", script2]}})
    proc = run_gitrun(git_repo, "check", "r")
    assert proc.returncode != 0
    assert "[worker-file] docs/in.py is untracked" in proc.stdout + proc.stderr


def test_a_fresh_clone_resumes_the_committed_run(git_repo: Path, tmp_path: Path) -> None:
    """The run that a start refused for its untracked worker, once the
    worker is committed: started here (t3 fails), pushed, and resumed on a
    fresh clone, whose worker is the committed file."""
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    log = _define(git_repo, packet={"limits": {"max_attempts": 1, "canary": 0}})
    (tmp_path / "allow").unlink()  # t3 fails here
    build_tree(git_repo, {".gitignore": "worker.sh\n"})
    commit_all(git_repo, "define r")
    refused = run_gitrun(git_repo, "start", "r")
    assert refused.returncode != 0 and "[worker-file] worker.sh" in refused.stderr
    git(git_repo, "add", "-f", "worker.sh")
    git(git_repo, "commit", "-q", "-m", "the worker")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stdout + started.stderr  # t3 failed
    assert ran_since(log) == ["t1", "t2", "t3"]
    git(git_repo, "push", "-q", "origin", "main", "gitrun/r")

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    (tmp_path / "allow").touch()
    gitrun_ok(clone, "retry", "r", "t3")
    resumed = run_gitrun(clone, "resume", "r")
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said
    assert "cannot open" not in said
    assert ran_since(log) == ["t3"]
    status = run_gitrun(clone, "status", "r", "--json")
    assert json.loads(status.stdout)["counts"]["done"] == 3, status.stdout


def _files(repo: Path, command: list[str] | None = None, **packet: object) -> dict[str, str]:
    from gitrun.workers.workerfiles import worker_files

    packet.setdefault("executor", {"command": command})
    write_run(repo, "w", [{"id": "t", "outputs": ["o.json"]}], packet)
    return worker_files(load_run(repo, "w"))


def test_which_arguments_name_the_workers_files(git_repo: Path, tmp_path: Path) -> None:
    """A table: each command line, and the repository files it names."""
    build_tree(
        git_repo,
        {
            "worker.sh": WORKER,
            "tools/w.py": "print()\n",
            "tools/real.sh": "true\n",
            "conf.toml": "",
            "true": "not the program\n",
            "docs/a.md": "a\n",
            "o.json": "{}\n",
        },
    )
    build_tree(tmp_path, {"outside.sh": "true\n"})
    os.chmod(git_repo / "worker.sh", 0o755)
    (git_repo / "link.sh").symlink_to("tools/real.sh")
    cases: list[tuple[list[str], list[str]]] = [
        (["sh", "worker.sh"], ["worker.sh"]),
        (["./worker.sh", "{pointer}"], ["worker.sh"]),
        ([str(git_repo / "worker.sh")], ["worker.sh"]),
        (["python3", "tools/w.py", "--config=conf.toml", "{task}"], ["conf.toml", "tools/w.py"]),
        (["python3", "tools/w.py", "conf.toml"], ["conf.toml", "tools/w.py"]),
        (["env", "A=1", "timeout", "60", "sh", "worker.sh"], ["worker.sh"]),
        (["sh", "-c", './worker.sh "$1" > /dev/null', "sh", "{pointer}"], ["worker.sh"]),
        (["sh", "link.sh"], ["link.sh", "tools/real.sh"]),
        (["true", "{pointer}"], []),  # found on PATH, outside the repository
        (["sh", "missing.sh"], []),
        (["cat", "docs"], []),  # a directory
        (["sh", "../outside.sh"], []),
        (["sh", str(tmp_path / "outside.sh")], []),
        (["sh", ".git/config"], []),
        (["sh", "worker.sh", "o.json"], ["worker.sh"]),  # the task's output: what it writes
    ]
    for command, expected in cases:
        assert sorted(_files(git_repo, command)) == expected, command
    shell = {"preset": "shell", "shell": 'sh worker.sh "$GITRUN_POINTER"'}
    assert list(_files(git_repo, executor=shell)) == ["worker.sh"]
    validators = {
        "shape": {"kind": "json_schema", "schema": "docs/a.md"},
        "lint": {"kind": "command", "command": ["python3", "tools/w.py"]},
    }
    found = _files(git_repo, ["true"], validators=validators)
    assert found == {
        "docs/a.md": "[validators.shape] schema",
        "tools/w.py": "[validators.lint] command",
    }


def test_a_neighbour_run_s_output_the_command_waits_for_is_no_worker_file(
    git_repo: Path,
) -> None:
    # Run b's worker waits for a/a1.json, which run a writes as it runs: the
    # file is there, untracked, when b starts, and it is a's output.
    script = "while [ ! -s a/a1.json ]; do sleep 0.05; done; echo '{}' > \"$GITRUN_OUTPUTS\""
    for run_id in ("a", "b"):
        tasks: list[dict[str, object]] = [
            {"id": f"{run_id}1", "outputs": [f"{run_id}/{run_id}1.json"]}
        ]
        write_run(git_repo, run_id, tasks, {"executor": {"command": ["sh", "-c", script]}})
    commit_all(git_repo, "define a and b")
    build_tree(git_repo, {"a/a1.json": "{}\n"})  # a's worker wrote it
    assert run_gitrun(git_repo, "check", "b").returncode == 0
    write_run(
        git_repo,
        "b",
        [{"id": "b1", "outputs": ["b/b1.json"]}],
        {"executor": {"command": ["sh", "-c", script.replace("a/a1", "c/c1")]}},
    )
    commit_all(git_repo, "b waits for c/c1.json")
    build_tree(git_repo, {"c/c1.json": "{}\n"})  # no run owns this one
    proc = run_gitrun(git_repo, "check", "b")
    assert proc.returncode != 0
    assert "[worker-file] c/c1.json is untracked" in proc.stdout + proc.stderr
