"""The write hooks' fast path: finding the repository without git, the cached
rules, and the subagent records.

Each part is held to the reference way: git's own discovery, the rules loaded
from the definition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitrun.definition.sources import source_key
from gitrun.guard.rules import refresh, rules_of
from gitrun.guard.subagents import dispatch_of, leased_try
from gitrun.guard.write import pre_write
from gitrun.store.local import LocalPaths
from gitrun.store.repo import Repo, find_repo
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, git, write_run

WORKER = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}


def _git_finds(cwd: Path) -> tuple[str, str] | None:
    if not cwd.is_dir():
        return None  # git cannot start there
    proc = subprocess.run(
        ["git", "rev-parse", "--show-toplevel", "--absolute-git-dir"],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return None
    top, git_dir = proc.stdout.splitlines()
    return os.path.realpath(top), os.path.realpath(git_dir)


def _found(cwd: Path) -> tuple[str, str] | None:
    repo = find_repo(str(cwd))
    return None if repo is None else (repo.root, repo.git_dir)


# -- finding the repository ----------------------------------------------------


def test_the_walk_finds_what_git_finds(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "a" / "b").mkdir(parents=True)
    git(git_repo, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    (tmp_path / "wt" / "sub").mkdir()
    os.symlink(git_repo / "a", tmp_path / "link")
    (tmp_path / "outside").mkdir()
    places = [
        git_repo,
        git_repo / "a" / "b",
        tmp_path / "link" / "b",  # through a symbolic link
        tmp_path / "wt",  # a worktree: .git is a `gitdir:` file
        tmp_path / "wt" / "sub",
        git_repo / ".git",  # inside the git directory: no work tree
        git_repo / ".git" / "refs",
        tmp_path / "outside",
        git_repo / "README.md",  # a file, not a directory
        git_repo / "nowhere",  # does not exist
    ]
    for place in places:
        assert _found(place) == _git_finds(place), place
    assert _found(tmp_path / "wt") is not None
    assert _found(tmp_path / "outside") is None


def test_a_submodule_is_its_own_repository(git_repo: Path, tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "f").write_text("x\n")
    commit_all(inner, "inner")
    git(git_repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sub")
    assert (git_repo / "sub" / ".git").is_file()
    assert _found(git_repo / "sub") == _git_finds(git_repo / "sub")
    assert _found(git_repo / "sub")[0] == str(git_repo / "sub")  # type: ignore[index]


def test_git_variables_that_change_discovery_are_left_to_git(
    git_repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    found = find_repo(str(tmp_path / "elsewhere"), {"GIT_DIR": str(git_repo / ".git")})
    # git takes GIT_DIR with the current directory as the work tree
    assert found is not None and found.git_dir == str(git_repo / ".git")
    ceiling = {"GIT_CEILING_DIRECTORIES": str(git_repo)}
    (git_repo / "a").mkdir()
    assert find_repo(str(git_repo / "a"), ceiling) is None


def test_git_asked_for_a_repository_whose_path_holds_newlines_answers_it_whole(
    tmp_path: Path,
) -> None:
    """Each path git prints ends with a newline and may hold more: asked one
    path a call, the answer is the path, whole."""
    repo = tmp_path / "re\npo\n"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    found = find_repo(str(repo), {"GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo)})
    assert found is not None
    assert (found.root, found.git_dir) == (str(repo), str(repo / ".git"))


# -- the cached rules ----------------------------------------------------------


def _write(repo: Path, path: str, env: dict[str, str] | None = None) -> str:
    payload = {
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(repo / path)},
    }
    result = pre_write(json.dumps(payload), WORKER if env is None else env)
    if result.code != 0:
        return f"blocked: {result.stderr}"
    if not result.stdout:
        return "allow"
    return str(json.loads(result.stdout)["hookSpecificOutput"]["permissionDecision"])


def _cache(repo: Path) -> Path:
    return LocalPaths.of(repo, "r").hook_rules


@pytest.fixture
def run_repo(git_repo: Path) -> Path:
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}, {"id": "t2", "outputs": ["out/t2.json"]}],
    )
    commit_all(git_repo, "define r")
    return git_repo


def test_next_writes_the_rules_and_a_hook_call_uses_them(git_repo: Path) -> None:
    tasks = [{"id": "t1", "outputs": ["out/t1.json"]}]
    write_run(git_repo, "r", tasks, {"executor": {"kind": "external"}})
    commit_all(git_repo, "define r")
    proc = run_gitrun_call(["start", "r"], git_repo)
    assert proc.returncode == 0, proc.stderr
    header = json.loads(_cache(git_repo).read_text().splitlines()[0])
    assert header["key"] == source_key(str(git_repo), "r")
    assert _write(git_repo, "out/t1.json") == "allow"
    assert _write(git_repo, "README.md") == "deny"


def test_an_edited_definition_is_judged_by_its_new_rules(run_repo: Path) -> None:
    assert _write(run_repo, "out/t1.json") == "allow"
    assert _cache(run_repo).exists()
    write_run(run_repo, "r", [{"id": "t1", "outputs": ["out/renamed.json"]}])
    assert _write(run_repo, "out/t1.json") == "deny"
    assert _write(run_repo, "out/renamed.json") == "allow"
    # the protected files of the packet count as well
    write_run(
        run_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"], "owns": ["out/"]}],
        {"ownership": {"protected": ["out/shared.md"]}},
    )
    assert _write(run_repo, "out/t1.json") == "allow"
    assert _write(run_repo, "out/shared.md") == "deny"
    # and the repository's config.toml
    (run_repo / ".gitrun" / "config.toml").write_text('[ownership]\nprotected = ["out/t1.json"]\n')
    assert _write(run_repo, "out/t1.json") == "deny"


@pytest.mark.parametrize(
    "damage",
    [
        "garbage",
        "empty",
        "cut at a line",
        "cut mid-line",
        "other version",
        "other key",
        "no file",
        "a damaged task line",
        "a task line that is no list",
    ],
)
def test_a_damaged_cache_is_written_again(run_repo: Path, damage: str) -> None:
    assert _write(run_repo, "out/t2.json", {"GITRUN_RUN": "r", "GITRUN_TASK": "t2"}) == "allow"
    cache = _cache(run_repo)
    text = cache.read_text()
    lines = text.splitlines(keepends=True)
    header = json.loads(lines[0])
    damaged = {
        "garbage": "\x00\xff not json\n",
        "empty": "",
        "cut at a line": lines[0] + lines[1],  # t2's line and the end marker are gone
        "cut mid-line": text[: len(lines[0]) + len(lines[1]) + 10],
        "other version": json.dumps({**header, "v": 2}) + "\n" + "".join(lines[1:]),
        "other key": json.dumps({**header, "key": "0" * 64}) + "\n" + "".join(lines[1:]),
        "no file": None,
        "a damaged task line": lines[0] + lines[1] + '"t2"\t["x", \n' + "".join(lines[3:]),
        "a task line that is no list": lines[0] + lines[1] + '"t2"\t7\n' + "".join(lines[3:]),
    }[damage]
    if damaged is None:
        cache.unlink()
    else:
        cache.write_text(damaged)
    assert _write(run_repo, "out/t2.json", {"GITRUN_RUN": "r", "GITRUN_TASK": "t2"}) == "allow"
    assert _write(run_repo, "out/t1.json", {"GITRUN_RUN": "r", "GITRUN_TASK": "t2"}) == "deny"
    assert cache.read_text() == text


def test_a_definition_that_does_not_load_blocks_a_task_write(run_repo: Path) -> None:
    assert _write(run_repo, "out/t1.json") == "allow"
    (run_repo / ".gitrun" / "runs" / "r" / "tasks.toml").write_text("[[task]\nid = \n")
    assert _write(run_repo, "out/t1.json").startswith("blocked: gitrun: cannot check this write")


def test_a_task_the_run_does_not_have_is_blocked(run_repo: Path) -> None:
    got = _write(run_repo, "out/t1.json", {"GITRUN_RUN": "r", "GITRUN_TASK": "t9"})
    assert got.startswith("blocked:") and "has no task 't9'" in got


def test_a_symbolic_link_as_definition_is_refused_not_cached(run_repo: Path) -> None:
    tasks = run_repo / ".gitrun" / "runs" / "r" / "tasks.toml"
    real = run_repo / "elsewhere.toml"
    real.write_text(tasks.read_text())
    tasks.unlink()
    tasks.symlink_to(real)
    assert _write(run_repo, "out/t1.json").startswith("blocked:")


def test_a_fifo_as_definition_blocks_at_once_rather_than_hanging(run_repo: Path) -> None:
    """The key is hashed on every call: a FIFO where the task table should be
    must not make the hook wait for a writer (Claude Code waits on the hook)."""
    tasks = run_repo / ".gitrun" / "runs" / "r" / "tasks.toml"
    tasks.unlink()
    os.mkfifo(tasks)
    payload = json.dumps(
        {"cwd": str(run_repo), "tool_name": "Write", "tool_input": {"file_path": "out/t1.json"}}
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}, **WORKER}
    proc = run_gitrun_call(["hook", "pre-write"], run_repo, env=env, stdin=payload, timeout=60)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_refresh_keeps_current_caches_and_keys_them_by_what_was_loaded(run_repo: Path) -> None:
    from gitrun.definition.load import load_run

    local = LocalPaths.of(run_repo, "r")
    run = load_run(run_repo, "r")
    refresh(local, run)
    written = local.hook_rules.stat().st_mtime_ns
    refresh(local, run)
    assert local.hook_rules.stat().st_mtime_ns == written
    # The definition changes after the load: what the old load writes is
    # keyed by the old files, so neither the hook nor status takes it.
    tasks = run_repo / ".gitrun" / "runs" / "r" / "tasks.toml"
    tasks.write_text(tasks.read_text().replace("out/t1.json", "out/t1-new.json"))
    local.hook_rules.unlink()
    refresh(local, run)
    rules = rules_of(Repo(str(run_repo), str(run_repo / ".git")), "r", "t1")
    assert rules.owns_path("out/t1-new.json") and not rules.owns_path("out/t1.json")
    from gitrun.engine.status import read_status

    assert read_status(run_repo, "r").tasks["t1"].missing == ["out/t1-new.json"]


def test_rules_of_judges_temporaries_like_the_audit(run_repo: Path) -> None:
    rules = rules_of(Repo(str(run_repo), str(run_repo / ".git")), "r", "t1")
    assert rules.owns_path("out/t1.json")
    assert rules.owns_path("out/t1.json.tmp.123.abc0")
    assert not rules.owns_path("out/t1.json.evil")
    assert not rules.owns_path("out/t2.json")
    assert rules.protects(".claude/settings.json")


# -- the hook path imports little ----------------------------------------------

_IMPORTS = """
import io, json, sys
sys.argv = ["gitrun", "hook", sys.argv[1]]
sys.stdin = io.TextIOWrapper(io.BytesIO({payload!r}.encode()))
from gitrun.cli.entry import main
code = main()
heavy = sorted(
    name for name in sys.modules
    if name.split(".")[0] in ("typer", "click", "rich", "pydantic", "subprocess", "pathlib",
                              "dataclasses", "typing", "tomllib")
    or name in ("gitrun.definition.load", "gitrun.cli.main", "gitrun.store.git")
)
sys.stderr.write(json.dumps({{"code": code, "heavy": heavy}}) + "\\n")
"""


def _imports(repo: Path, hook: str, payload: str, env: dict[str, str]) -> dict[str, Any]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS.format(payload=payload), hook],
        cwd=repo,
        env=full,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_a_warm_hook_call_imports_neither_the_cli_nor_pydantic(run_repo: Path) -> None:
    assert _write(run_repo, "out/t1.json") == "allow"  # the rules are written
    owned = json.dumps(
        {"cwd": str(run_repo), "tool_name": "Write", "tool_input": {"file_path": "out/t1.json"}}
    )
    lead = json.dumps(
        {"cwd": str(run_repo), "tool_name": "Write", "tool_input": {"file_path": "x"}}
    )
    bash = json.dumps({"cwd": str(run_repo), "tool_name": "Bash", "tool_input": {"command": "ls"}})
    git(run_repo, "add", "README.md")
    for hook, payload, env in [
        ("pre-write", owned, WORKER),
        ("pre-write", owned.replace("out/t1", "out/t2"), WORKER),
        ("pre-write", lead, {}),
        ("pre-write", bash, WORKER),
        ("pre-commit", "", WORKER),
    ]:
        found = _imports(run_repo, hook, payload, env)
        assert found["heavy"] == [], (hook, payload, found)


# -- the subagent records, read by their own typed readers ----------------------


def test_the_records_a_subagents_hook_reads_import_nothing_heavy() -> None:
    code = (
        "import sys, json\n"
        "import gitrun.guard.subagents, gitrun.store.leases, gitrun.store.dispatches\n"
        "heavy = [m for m in ('pathlib', 'dataclasses', 'typing', 'tempfile', 'gitrun.store.git')"
        " if m in sys.modules]\n"
        "print(json.dumps(heavy))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(proc.stdout) == []


def test_a_subagents_dispatch_and_lease_are_what_the_records_hold(tmp_path: Path) -> None:
    local = LocalPaths(tmp_path)
    local.leases.write_text(
        json.dumps(
            {
                "v": 1,
                "leases": [
                    {"task": "t1", "attempt": 2, "leased": 1.0, "expires": 9.0, "before": {}}
                ],
            }
        )
    )
    local.dispatches.write_text(
        json.dumps(
            {
                "v": 1,
                "dispatches": [
                    {"tool_use_id": "toolu_1", "task": "t1", "attempt": 2, "at": 1.0},
                    {"tool_use_id": "toolu_2", "task": "t2", "attempt": "1", "at": 1.0},
                ],
            }
        )
    )
    assert dispatch_of(str(local.dispatches), "toolu_1") == ("t1", 2, 0)
    assert dispatch_of(str(local.dispatches), "toolu_2") is None  # damaged: identifies nothing
    assert leased_try(str(local.leases), "t1") == (2, 0)
    assert leased_try(str(local.leases), "t2") is None
    local.leases.write_text("{not json")
    assert leased_try(str(local.leases), "t1") is None


def test_a_hook_that_cannot_decide_in_its_budget_denies(run_repo: Path) -> None:
    """Whatever keeps a hook from deciding (here its input never ends; a
    state file that never answers or a stuck git would do the same), a
    client that kills the hook lets the write through: the hook's own budget
    runs out first, and it denies (exit 2)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}, **WORKER}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "hook", "pre-write"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=run_repo,
        env={**env, "GITRUN_HOOK_BUDGET": "2"},
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write('{"cwd": ')  # and never the rest, nor the end of input
        proc.stdin.flush()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert code == 2, (code, stderr)
    assert "could not decide within its 2 s budget" in stderr


def test_notebook_edit_is_judged_by_every_path_it_names(git_repo: Path) -> None:
    """NotebookEdit names its file in notebook_path; a file_path beside it
    naming the task's own output must not let a write of another task's pass."""
    tasks = [{"id": "t1", "outputs": ["out/t1.json"]}, {"id": "t2", "outputs": ["out/t2.json"]}]
    write_run(git_repo, "r", tasks, {"executor": {"kind": "external"}})
    commit_all(git_repo, "define r")
    started = run_gitrun_call(["start", "r"], git_repo)
    assert started.returncode == 0, started.stderr
    run_repo = git_repo

    def edit(tool_input: dict[str, str]) -> str:
        payload = {"cwd": str(run_repo), "tool_name": "NotebookEdit", "tool_input": tool_input}
        result = pre_write(json.dumps(payload), WORKER)
        if result.code != 0:
            return "blocked"
        if not result.stdout:
            return "allow"
        return str(json.loads(result.stdout)["hookSpecificOutput"]["permissionDecision"])

    own, other = str(run_repo / "out/t1.json"), str(run_repo / "out/t2.json")
    assert edit({"notebook_path": other}) == "deny"
    assert edit({"file_path": own, "notebook_path": other}) == "deny"
    assert edit({"notebook_path": own, "file_path": other}) == "deny"
    assert edit({"notebook_path": own}) == "allow"
