"""Hostile paths: canonical spellings, symlinks, directory outputs, ignored and
foreign files. Each class failed on the code before it was fixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitrun.commands.land.landing import land_run
from gitrun.commands.session import CheckFailed, resume_run, start_run
from gitrun.definition.load import load_run
from gitrun.definition.outputs import OutputCheck, quarantine
from gitrun.definition.runfiles import definition_files
from gitrun.engine.committer import Committer, Landing, landing_message
from gitrun.errors import GitrunError
from gitrun.ownership.paths import canonical_problem
from gitrun.problem import Problem
from gitrun.proof.check import check_run
from gitrun.store.ledger import chunk_name
from gitrun.store.local import LocalPaths
from tests.helpers import build_tree, commit_all, fake_worker_run, git, write_run

quiet = lambda _line: None  # noqa: E731


def _problems(repo: Path, tasks: list[dict[str, object]], **packet: object) -> list[Problem]:
    write_run(repo, "r", tasks, packet or None)
    return check_run(load_run(repo, "r", environ={})).problems


def _branch_files(repo: Path, ref: str = "gitrun/r") -> set[str]:
    return set(git(repo, "ls-tree", "-r", "--name-only", ref).splitlines())


# -- 2. canonical paths ---------------------------------------------------------------

NOT_CANONICAL = [
    ("./out/a.json", "out/a.json"),
    ("out/./a.json", "out/a.json"),
    ("out//a.json", "out/a.json"),
    ("out/x/../a.json", "out/a.json"),
    ("out/a.json ", "out/a.json"),
    (" out/a.json", "out/a.json"),
    ("out/a.json/", "out/a.json"),
]
REFUSED = [".GIT/config", "out/.git./x", "out/git~1/x", "out/a\x00b.json", "out/a\nb.json"]
REFUSED += ["out/" + "x" * 256 + ".json", "../a.json", "/tmp/a.json", "."]


@pytest.mark.parametrize(("text", "fixed"), NOT_CANONICAL)
def test_a_non_canonical_output_is_a_problem_showing_the_canonical_form(
    git_repo: Path, text: str, fixed: str
) -> None:
    problems = _problems(git_repo, [{"id": "ta", "outputs": [text]}])
    [problem] = [p for p in problems if p.path == text]
    assert problem.code == "non-canonical-path"
    assert problem.tasks == ("ta",)
    assert ".gitrun/runs/r/tasks.toml" in problem.message
    assert repr(fixed) in problem.message


@pytest.mark.parametrize("text", REFUSED)
def test_paths_git_or_the_file_system_refuse_are_problems(git_repo: Path, text: str) -> None:
    problems = _problems(git_repo, [{"id": "ta", "outputs": [text]}])
    found = [p for p in problems if p.path == text]
    assert found and all(p.tasks == ("ta",) for p in found), problems
    assert found[0].code in ("non-canonical-path", "reserved-path", "outside-repo")


@pytest.mark.parametrize("field", ["owns", "inputs"])
@pytest.mark.parametrize(("text", "fixed"), NOT_CANONICAL[:5])
def test_non_canonical_owns_and_inputs_are_problems(
    git_repo: Path, field: str, text: str, fixed: str
) -> None:
    task: dict[str, object] = {"id": "ta", "outputs": ["ta.out"], "owns": ["ta.out"]}
    task[field] = [*task.get(field, []), text]  # type: ignore[misc]  # a list either way
    problems = _problems(git_repo, [task])
    [problem] = [p for p in problems if p.path == text]
    assert problem.code == "non-canonical-path" and repr(fixed) in problem.message


def test_a_non_canonical_protected_entry_is_a_problem_naming_the_packet(git_repo: Path) -> None:
    problems = _problems(
        git_repo, [{"id": "ta", "outputs": ["a.out"]}], ownership={"protected": ["./NOTES.md"]}
    )
    [problem] = [p for p in problems if p.path == "./NOTES.md"]
    assert "packet.toml" in problem.message and "'NOTES.md'" in problem.message


def test_a_trailing_slash_is_fine_in_a_pattern_but_not_in_an_output() -> None:
    assert canonical_problem("out/", is_file=False) is None
    assert canonical_problem("out/", is_file=True) is not None
    assert canonical_problem("docs/$(touch X).md", is_file=True) is None  # odd, but canonical


def test_the_committer_refuses_a_commit_missing_a_path_git_dropped(git_repo: Path) -> None:
    """git's update-index skips a name it refuses and exits 0; the commit must not
    go ahead without the file."""
    local = LocalPaths.of(git_repo, "r")
    committer = Committer(git_repo, "r", local)
    head = git(git_repo, "rev-parse", "HEAD").strip()
    committer.start_branch(head, {}, "start\n")
    tip = git(git_repo, "rev-parse", "gitrun/r").strip()
    landing = Landing("t1", 1, [OutputCheck("out/.GIT/x", "valid", data=b"{}\n")])
    with pytest.raises(GitrunError, match=r"git would not record 'out/\.GIT/x'"):
        committer.commit([landing], {}, landing_message("r", [landing]))
    assert git(git_repo, "rev-parse", "gitrun/r").strip() == tip


# -- 3. symlinks ------------------------------------------------------------------------


@pytest.fixture
def aliased(git_repo: Path) -> Path:
    """A committed symlink `alias -> .`: every path has a second name."""
    os.symlink(".", git_repo / "alias")
    commit_all(git_repo, "alias")
    return git_repo


def test_a_committed_symlink_cannot_alias_two_tasks_or_reach_a_protected_file(
    aliased: Path,
) -> None:
    tasks = [
        {"id": "ta", "outputs": ["alias/TODO.md"]},
        {"id": "tb", "outputs": ["alias/out/x.json"]},
        {"id": "tc", "outputs": ["out/x.json"]},
    ]
    problems = [p for p in _problems(aliased, tasks) if p.code == "symlink"]
    assert {p.tasks for p in problems} == {("ta",), ("tb",)}
    assert all("the symlink alias" in p.message for p in problems)


def test_start_refuses_a_run_whose_owns_pass_through_a_symlink(aliased: Path) -> None:
    write_run(aliased, "r", [{"id": "t01", "outputs": ["alias/out/t01.json"]}])
    with pytest.raises(CheckFailed, match="symlink"):
        start_run(aliased, "r", quiet)
    assert git(aliased, "branch", "--list", "gitrun/r").strip() == ""


def test_a_start_forks_from_the_commit_it_proved_while_head_moves_on(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit landing on HEAD while start proves the run (another terminal)
    does not become the fork point: the branch starts at the commit whose
    tree the proof read, never at one it did not see."""
    from gitrun.proof import check
    from gitrun.store.history import find_base

    fake_worker_run(git_repo, "r", 1, {"default": "ok"})
    commit_all(git_repo, "define")
    proved: list[str | None] = []
    real = check.BaseTree.of

    def read_then_commit(repo: Path, commit: str | None) -> check.BaseTree:
        proved.append(commit)
        tree = real(repo, commit)
        git(git_repo, "commit", "-q", "--allow-empty", "-m", "meanwhile")
        return tree

    monkeypatch.setattr(check.BaseTree, "of", read_then_commit)
    start_run(git_repo, "r", quiet)
    assert len(proved) == 1 and proved[0] is not None
    assert git(git_repo, "rev-parse", "HEAD").strip() != proved[0]  # HEAD moved on
    assert find_base(git_repo, "r") == proved[0]


def test_a_symlink_only_in_the_base_commit_still_counts(git_repo: Path) -> None:
    (git_repo / "d").mkdir()
    os.symlink("d", git_repo / "s")
    commit_all(git_repo, "s")
    (git_repo / "s").unlink()  # gone from the work tree, still at HEAD
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["s/a.json"]}])
    assert [p.code for p in problems] == ["symlink"]


def test_an_untracked_symlink_inside_an_owned_directory_counts(git_repo: Path) -> None:
    (git_repo / "out").mkdir()
    os.symlink("..", git_repo / "out" / "up")
    tasks = [{"id": "ta", "outputs": ["out/a.json"], "owns": ["out/"]}]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "symlink"]
    assert problems and problems[0].path == "out/up"


def test_an_ignored_symlink_on_the_way_counts(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    build_tree(git_repo, {".gitignore": "build\n"})
    commit_all(git_repo, "ignore build")
    os.symlink(tmp_path / "elsewhere", git_repo / "build")
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["build/a.json"]}])
    symlinks = [p for p in problems if p.code == "symlink"]
    assert symlinks and "outside the repository" in symlinks[0].message


def test_a_protected_entry_through_a_symlink_is_a_problem(aliased: Path) -> None:
    problems = _problems(
        aliased, [{"id": "ta", "outputs": ["a.out"]}], ownership={"protected": ["alias/NOTES.md"]}
    )
    [problem] = [p for p in problems if p.code == "symlink"]
    assert "packet.toml" in problem.message and "protected" in problem.message


def test_the_run_files_are_committed_only_as_regular_files(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", [{"id": "ta", "outputs": ["a.out"]}])
    secret = git_repo.parent / "secret.toml"
    secret.write_text("token = 'x'\n")
    chunk = run_dir / chunk_name(1)
    chunk.parent.mkdir(parents=True)
    chunk.symlink_to(secret)
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    assert [p.code for p in problems] == ["run-file"]
    with pytest.raises(GitrunError, match="is a symlink"):
        definition_files(load_run(git_repo, "r", environ={}))


# -- 4. outputs that name a directory -----------------------------------------------------


def test_an_output_naming_a_directory_is_a_problem(git_repo: Path) -> None:
    build_tree(git_repo, {"docs/guide.md": "# guide\n"})
    commit_all(git_repo)
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["docs"]}])
    assert [p.code for p in problems] == ["output-is-directory"]
    (git_repo / "docs/guide.md").unlink()
    (git_repo / "docs").rmdir()  # only in the base commit now (and a dirty deletion)
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["docs"]}])
    assert "output-is-directory" in [p.code for p in problems]


def test_an_output_beneath_a_file_is_a_problem(git_repo: Path) -> None:
    build_tree(git_repo, {"notes": "a file\n"})
    commit_all(git_repo)
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["notes/a.json"]}])
    assert [p.code for p in problems] == ["output-under-file"]


def _with_submodule(repo: Path, tmp_path: Path) -> None:
    """``vendor/lib``: a real submodule, committed."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    build_tree(lib, {"lib.py": "x = 1\n"})
    commit_all(lib, "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")
    git(repo, "commit", "-q", "-m", "vendor lib")


def test_an_output_inside_a_submodule_is_called_a_submodule(git_repo: Path, tmp_path: Path) -> None:
    """Not "a file": git records the submodule as a commit of another
    repository, where gitrun commits nothing."""
    _with_submodule(git_repo, tmp_path)
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["vendor/lib/out/a.json"]}])
    [problem] = [p for p in problems if p.path == "vendor/lib/out/a.json"]
    assert problem.code == "output-in-submodule"
    assert problem.message == (
        ".gitrun/runs/r/tasks.toml: task ta: output vendor/lib/out/a.json lies inside the "
        "submodule vendor/lib, another repository, where gitrun commits nothing; choose a path "
        "outside it (or run gitrun in the submodule's own repository)"
    )
    assert "which is a file" not in problem.message
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["vendor/lib"]}])
    [problem] = [p for p in problems if p.path == "vendor/lib"]
    assert problem.code == "output-in-submodule"
    assert "output vendor/lib is the submodule vendor/lib" in problem.message


def test_quarantine_never_moves_a_directory(git_repo: Path, tmp_path: Path) -> None:
    build_tree(git_repo, {"docs/guide.md": "# guide\n", "docs/notes.secret": "mine\n"})
    checks = [OutputCheck("docs", "invalid", "is a directory")]
    assert quarantine(git_repo, tmp_path / "q", checks) == []
    assert (git_repo / "docs/notes.secret").read_text() == "mine\n"
    assert not (tmp_path / "q").exists()


def test_quarantine_moves_a_symlink_output_but_not_its_target(
    git_repo: Path, tmp_path: Path
) -> None:
    build_tree(git_repo, {"keep.txt": "precious\n"})
    (git_repo / "out").mkdir()
    os.symlink("../keep.txt", git_repo / "out/a.json")
    checks = [OutputCheck("out/a.json", "invalid", "is a symlink, not a regular file")]
    assert quarantine(git_repo, tmp_path / "q", checks) == ["out/a.json"]
    assert (tmp_path / "q/out/a.json").is_symlink()
    assert (git_repo / "keep.txt").read_text() == "precious\n"


# -- 6. no secrets or foreign files committed ----------------------------------------------


def test_an_ignored_config_with_secrets_is_never_committed_nor_landed(git_repo: Path) -> None:
    build_tree(git_repo, {".gitignore": ".gitrun/config.toml\n"})
    commit_all(git_repo, "ignore the config")
    build_tree(git_repo, {".gitrun/config.toml": '[executor]\nenv = { API_TOKEN = "s3cret" }\n'})
    fake_worker_run(git_repo, "r", 2, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    files = _branch_files(git_repo)
    assert ".gitrun/config.toml" not in files
    assert "s3cret" not in git(git_repo, "log", "-p", "gitrun/r")
    land_run(git_repo, "r")
    assert ".gitrun/config.toml" not in _branch_files(git_repo, "HEAD")
    assert {"out/t01.json", "out/t02.json"} <= _branch_files(git_repo, "HEAD")


def test_dot_directories_and_links_in_the_run_directory_are_not_committed(
    git_repo: Path,
) -> None:
    fake_worker_run(git_repo, "r", 1, {})
    run_dir = git_repo / ".gitrun/runs/r"
    build_tree(run_dir, {".private/creds": "token\n", "notes/todo.md": "mine\n"})
    outside = git_repo.parent / "outside.txt"
    outside.write_text("not the run's\n")
    (run_dir / "link.txt").symlink_to(outside)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    files = {f for f in _branch_files(git_repo) if f.startswith(".gitrun/")}
    assert files == {
        ".gitrun/runs/r/packet.toml",
        ".gitrun/runs/r/tasks.toml",
        ".gitrun/runs/r/ledger/0000/000001.jsonl",  # the round's start
        ".gitrun/runs/r/ledger/0000/000002.jsonl",  # the driver's records
    }


def test_an_ignored_output_is_a_problem(git_repo: Path) -> None:
    build_tree(git_repo, {".gitignore": "out/\n*.secret\n"})
    commit_all(git_repo)
    tasks = [{"id": "ta", "outputs": ["out/a.json"]}, {"id": "tb", "outputs": ["b.secret"]}]
    problems = _problems(git_repo, tasks)
    assert sorted(p.code for p in problems) == ["ignored-output", "ignored-output"]
    assert any(".gitignore:1: out/" in p.message for p in problems)


def test_a_tracked_output_under_an_ignore_rule_is_not_ignored(git_repo: Path) -> None:
    """git ignores no tracked path: an output added with `git add -f` (a run
    landed it, say) is no problem, one beside it not tracked is."""
    build_tree(git_repo, {".gitignore": "out/\n", "out/a.json": "{}"})
    git(git_repo, "add", "-f", "out/a.json")
    commit_all(git_repo)
    tasks = [{"id": "ta", "outputs": ["out/a.json"]}, {"id": "tb", "outputs": ["out/b.json"]}]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "ignored-output"]
    assert [tuple(p.tasks) for p in problems] == [("tb",)]


def test_an_ignored_run_directory_is_a_problem(git_repo: Path) -> None:
    build_tree(git_repo, {".gitignore": ".gitrun/\n"})
    commit_all(git_repo)
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["a.out"]}])
    assert {p.code for p in problems} == {"run-file"}
    assert any("packet.toml is ignored by git" in p.message for p in problems)


@pytest.mark.parametrize(
    "owned", [".claude/settings.json", ".claude/", ".gitattributes", ".gitmodules", ".*"]
)
def test_files_that_change_how_tools_behave_are_protected(git_repo: Path, owned: str) -> None:
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["a.out"], "owns": [owned, "a.out"]}])
    assert "protected" in {p.code for p in problems}


def test_a_symlink_written_as_output_is_quarantined_and_the_task_retried(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {"tasks": {"t01": "symlink_then_write"}})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    moved = LocalPaths.of(git_repo, "r").quarantine_of("t01", 1) / "out/t01.json"
    assert moved.is_symlink()
    assert git(git_repo, "show", "gitrun/r:out/t01.json").startswith("{")
    assert (git_repo / "README.md").read_text() == "# sample\n"


def test_resume_is_not_blocked_by_a_symlink_a_worker_left_as_output(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 1, {"default": "nowrite"}, {"limits": {"max_attempts": 1}})
    assert start_run(git_repo, "r", quiet).exit_code == 3  # the canary wrote nothing
    os.symlink("../README.md", git_repo / "out/t01.json")  # a late worker's parting gift
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.status.tasks["t01"].status != "done"
    assert not os.path.lexists(git_repo / "out/t01.json")  # quarantined, not followed
    assert (git_repo / "README.md").read_text() == "# sample\n"


def test_outputs_differing_only_in_case_or_normal_form_overlap(git_repo: Path) -> None:
    tasks = [
        {"id": "ta", "outputs": ["out/Report.json"]},
        {"id": "tb", "outputs": ["out/report.json"]},
        {"id": "tc", "outputs": ["out/caf\u00e9.json"]},
        {"id": "td", "outputs": ["out/cafe\u0301.json"]},
        {"id": "te", "outputs": ["out/other.json"]},
    ]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "overlap"]
    assert sorted(p.tasks for p in problems) == [("ta", "tb"), ("tc", "td")]
    assert "case-insensitive" in problems[0].message


# -- symlinks made where check cannot see them, and outputs too big to hold -------------------

WORKER = """
import os, sys
from pathlib import Path
task = os.environ["GITRUN_TASK"]
action = {actions!r}.get(task, "write")
for out in os.environ["GITRUN_OUTPUTS"].splitlines():
    if action == "link_dir":  # replace a directory on the way with a link elsewhere
        link = Path(out).parent
        if link.is_dir() and not link.is_symlink():
            link.rmdir()
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath("private", link.parent), link)
    elif action == "huge":
        with open(out, "wb") as handle:
            handle.truncate(200 * 1024**3)  # sparse: no disk, 200 GiB to read
        continue
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    if action != "link_dir":
        Path(out).write_text('{{"task": "%s"}}\\n' % task)
"""


def _worker_run(repo: Path, tasks: list[dict[str, object]], actions: dict[str, str]) -> None:
    import sys

    script = repo.parent / "worker.py"
    script.write_text(WORKER.format(actions=actions))
    limits = {"canary": 0, "max_attempts": 1, "timeout": "60s"}
    write_run(
        repo, "r", tasks, {"executor": {"command": [sys.executable, str(script)]}, "limits": limits}
    )


def test_an_ignored_symlink_under_a_glob_is_found_by_check(git_repo: Path) -> None:
    build_tree(git_repo, {".gitignore": "out/ln\n", "data/.keep": ""})
    commit_all(git_repo)
    (git_repo / "out").mkdir()
    os.symlink("../data", git_repo / "out/ln")  # ignored: git status never shows it
    tasks = [
        {"id": "a", "owns": ["out/*/x.json"], "outputs": ["out/ln/x.json"]},
        {"id": "b", "outputs": ["data/x.json"]},
    ]
    _worker_run(git_repo, tasks, {})
    with pytest.raises(CheckFailed, match=r"task a owns 'out/\*/x\.json', which passes through"):
        start_run(git_repo, "r", quiet)


def test_a_symlink_made_during_the_run_stops_the_next_stage(git_repo: Path) -> None:
    """Stage one makes out/ln -> ../data; stage two owns out/*/x.json. The
    proof is made again before a stage starts: the run halts instead of
    letting c write b's file through the link."""
    import sys

    script = git_repo.parent / "linker.py"
    script.write_text(
        "import os, pathlib\n"
        "task = os.environ['GITRUN_TASK']\n"
        "if task == 'a':\n"
        "    os.symlink('../data', 'out/ln')\n"
        "for out in os.environ['GITRUN_OUTPUTS'].splitlines():\n"
        "    pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)\n"
        '    pathlib.Path(out).write_text(\'{"task": "%s"}\\n\' % task)\n'
    )
    tasks = [
        {"id": "a", "stage": "one", "owns": ["out/*"], "outputs": ["out/a.json"]},
        {"id": "b", "stage": "one", "outputs": ["data/x.json"]},
        {"id": "c", "stage": "two", "owns": ["out/*/x.json"], "outputs": ["out/ln/x.json"]},
    ]
    packet = {
        "executor": {"command": [sys.executable, str(script)]},
        "limits": {"canary": 0, "max_attempts": 1, "timeout": "60s"},
        "stages": [{"name": "one"}, {"name": "two"}],
    }
    write_run(git_repo, "r", tasks, packet)
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3 and outcome.halt is not None
    assert "symlink" in outcome.halt.message and "out/ln" in outcome.halt.message
    assert outcome.status.tasks["c"].status == "pending"  # never dispatched
    assert git(git_repo, "show", "gitrun/r:data/x.json") == '{"task": "b"}\n'
    assert (git_repo / "data/x.json").read_text() == '{"task": "b"}\n'


def test_a_worker_that_links_a_directory_to_a_secret_gets_nothing_committed_or_moved(
    git_repo: Path,
) -> None:
    build_tree(git_repo, {".gitignore": "private/\n"})
    commit_all(git_repo)
    build_tree(git_repo, {"private/a.json": '{"api_token": "sk-SECRET"}\n'})
    tasks = [{"id": "a", "owns": ["out/"], "outputs": ["out/sub/a.json"]}]
    _worker_run(git_repo, tasks, {"a": "link_dir"})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.tasks["a"].status == "failed"
    assert "sk-SECRET" not in git(git_repo, "log", "-p", "gitrun/r")
    assert (git_repo / "private/a.json").read_text() == '{"api_token": "sk-SECRET"}\n'


def test_a_huge_output_is_invalid_not_a_crash(git_repo: Path) -> None:
    tasks = [{"id": "a", "outputs": ["out/a.json"]}, {"id": "b", "outputs": ["out/b.json"]}]
    _worker_run(git_repo, tasks, {"a": "huge"})
    outcome = start_run(git_repo, "r", quiet)
    a = outcome.status.tasks["a"]
    assert a.status == "failed" and "over limits.max_output_bytes" in (a.reason or "")
    assert outcome.status.tasks["b"].status == "done"
    assert outcome.status.spawns == 2  # the attempt was recorded


@pytest.mark.parametrize(
    ("owned", "protected"),
    [
        ("todo.md", "TODO.md"),
        (".Claude/settings.json", ".claude/"),
        (".GITATTRIBUTES", ".gitattributes"),
    ],
)
def test_owning_a_protected_file_under_another_case_is_a_problem(
    git_repo: Path, owned: str, protected: str
) -> None:
    problems = _problems(git_repo, [{"id": "ta", "outputs": ["a.out"], "owns": [owned, "a.out"]}])
    [problem] = [p for p in problems if p.code == "protected"]
    assert "case-insensitive" in problem.message and protected in problem.message


def test_owns_that_differ_only_in_case_overlap_once(git_repo: Path) -> None:
    tasks = [
        {"id": "ta", "outputs": ["Docs/a.md"], "owns": ["Docs/"]},
        {"id": "tb", "outputs": ["docs/b.md"], "owns": ["docs/"]},
        {"id": "tc", "outputs": ["Docs/c.md"], "owns": ["Docs/c.md"]},  # overlaps ta as written
    ]
    problems = [p for p in _problems(git_repo, tasks) if p.code == "overlap"]
    pairs = sorted(p.tasks for p in problems)
    assert pairs == [("ta", "tb"), ("ta", "tc"), ("tb", "tc")]


def test_a_name_git_refuses_is_a_check_problem(git_repo: Path) -> None:
    tasks = [{"id": "a", "outputs": ["out/.git:a.json"]}, {"id": "b", "outputs": ["out/b.json"]}]
    problems = _problems(git_repo, tasks)
    assert [(p.code, p.tasks) for p in problems] == [("reserved-path", ("a",))]


def test_a_path_too_long_for_the_file_system_is_a_check_problem(git_repo: Path) -> None:
    path = "/".join(["d" * 250] * 20) + ".json"
    problems = _problems(git_repo, [{"id": "a", "outputs": [path]}])
    assert [p.code for p in problems] == ["non-canonical-path"]
    assert "shorten it" in problems[0].message


def test_outputs_that_cannot_both_exist_are_a_check_problem(git_repo: Path) -> None:
    tasks = [
        {"id": "a", "owns": ["out/*.json"], "outputs": ["out/a.json"]},
        {"id": "b", "owns": ["out/*/x"], "outputs": ["out/a.json/x"]},
    ]
    problems = _problems(git_repo, tasks)
    assert [(p.code, p.tasks) for p in problems] == [("output-under-file", ("a", "b"))]


def test_a_backslash_in_an_output_is_not_silently_turned_into_a_directory() -> None:
    problem = canonical_problem("out/back\\slash.json", is_file=True)
    assert problem is not None and problem.canonical is None


def test_a_symlink_left_at_an_output_path_is_moved_aside_before_the_attempt(
    git_repo: Path,
) -> None:
    """A task of an earlier stage plants out/a.json -> ../other/b.json; the task
    that owns out/a.json must write a file there, not into other/b.json."""
    import sys

    script = git_repo.parent / "planter.py"
    script.write_text(PLANTER)
    tasks = [
        {"id": "a", "stage": "one", "outputs": ["a.json"]},
        {"id": "b", "stage": "one", "outputs": ["other/b.json"]},
        {"id": "c", "stage": "two", "owns": ["out/*.json"], "outputs": ["out/a.json"]},
    ]
    packet = {
        "executor": {"command": [sys.executable, str(script)]},
        "limits": {"canary": 0, "concurrency": 1, "max_attempts": 1, "timeout": "60s"},
        "stages": [{"name": "one"}, {"name": "two"}],
    }
    write_run(git_repo, "r", tasks, packet)
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.tasks["c"].status == "done"
    assert (git_repo / "other/b.json").read_text() == '{"task": "b"}\n'
    assert not (git_repo / "out/a.json").is_symlink()
    assert git(git_repo, "show", "gitrun/r:out/a.json") == '{"task": "c"}\n'


PLANTER = """
import os, pathlib
task = os.environ["GITRUN_TASK"]
if task == "a":
    os.makedirs("out", exist_ok=True)
    os.symlink("../other/b.json", "out/a.json")
for out in os.environ["GITRUN_OUTPUTS"].splitlines():
    pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(out).write_text('{"task": "%s"}\\n' % task)
"""


def test_a_directory_swapped_for_a_link_after_the_look_is_never_followed(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The race of a worker that swaps out/ for a link to a secret between
    gitrun's look at the path and its read: the read itself walks the path
    without following links, so it refuses even when the look missed it."""
    import gitrun.definition.outputs as outputs

    build_tree(git_repo, {"secret/a.json": '{"token": "sk-SECRET"}\n'})
    os.symlink("secret", git_repo / "out")
    write_run(git_repo, "r", [{"id": "a", "outputs": ["out/a.json"]}])
    run = load_run(git_repo, "r", environ={})
    monkeypatch.setattr(outputs, "linked_parent", lambda *_args: None)  # the look saw a directory
    [check] = outputs.check_task(run, run.tasks[0]).outputs
    assert check.state == "invalid" and check.data is None
    assert "cannot be read safely" in check.reason
    moved = outputs.quarantine(git_repo, tmp_path / "q", [check])
    assert moved == [] and (git_repo / "secret/a.json").exists()


@pytest.mark.parametrize("path", ["sub/.gitattributes", "out/.gitignore", "x/.gitmodules"])
def test_an_output_that_changes_what_git_does_is_a_problem_at_any_depth(
    git_repo: Path, path: str
) -> None:
    problems = _problems(git_repo, [{"id": "a", "outputs": [path]}])
    assert [(p.code, p.path) for p in problems] == [("protected", path)]


def test_an_invisible_character_in_a_path_is_a_problem(git_repo: Path) -> None:
    problems = _problems(git_repo, [{"id": "a", "outputs": ["out/.g\u200cit/a.json"]}])
    assert [p.code for p in problems] == ["non-canonical-path"]
    assert "U+200C" in problems[0].message
