"""Loading a run: schema errors, TOML errors and configuration precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.definition.schema import parse_duration
from gitrun.errors import DefinitionError, GitrunError
from tests.helpers import build_tree, write_run

TASKS = [{"id": "t1", "outputs": ["out/t1.json"]}]


def _load_error(repo: Path) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        load_run(repo, "r", environ={})
    return info.value.lines


def test_toml_syntax_error_names_file_line_and_column(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    (run_dir / "packet.toml").write_text('[run]\nid = "r"\n[limits]\nconcurrency = = 4\n')
    [line] = _load_error(git_repo)
    assert line.startswith(".gitrun/runs/r/packet.toml:4:")
    assert "invalid TOML" in line


def test_unknown_field_names_line_dotted_path_and_suggestion(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    (run_dir / "packet.toml").write_text(
        '[run]\nid = "r"\n\n[limits]\nconcurency = 4\n\n[model]\ndefault = "m"\n'
    )
    [line] = _load_error(git_repo)
    assert line == (
        ".gitrun/runs/r/packet.toml:5: limits.concurency: unknown field; remove it or fix "
        "the spelling (did you mean 'concurrency'?)"
    )


def test_every_broken_field_is_listed(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    (run_dir / "packet.toml").write_text(
        '[run]\nid = "r"\n[limits]\nconcurrency = 0\ntimeout = "soon"\n'
    )
    lines = _load_error(git_repo)
    assert len(lines) == 2
    assert any("limits.concurrency" in ln and ":4:" in ln for ln in lines)
    assert any("limits.timeout" in ln and "'soon' is not a duration" in ln for ln in lines)


def test_task_errors_name_the_task(git_repo: Path) -> None:
    write_run(git_repo, "r", [*TASKS, {"id": "Bad Id", "outputs": []}, {"id": "t3"}])
    lines = _load_error(git_repo)
    assert any(
        ln.startswith(".gitrun/runs/r/tasks.toml:8: task[1] (id 'Bad Id').id: 'Bad Id' is not")
        for ln in lines
    )
    assert any(":9: task[1] (id 'Bad Id').outputs: needs at least one entry" in ln for ln in lines)
    assert any(":11: task[2] (id 't3').outputs: required field is missing" in ln for ln in lines)
    assert all(ln.startswith(".gitrun/runs/r/tasks.toml:") for ln in lines)


def test_run_id_must_match_directory(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS, {"run": {"id": "other"}})
    [line] = _load_error(git_repo)
    assert "run.id is 'other' but the run directory is 'r'" in line


def test_missing_run_names_existing_ones(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS)
    with pytest.raises(GitrunError, match=r"no run 'nope'.*runs here: r.*gitrun new nope"):
        load_run(git_repo, "nope", environ={})


def test_invalid_validator_kind_and_regex(git_repo: Path) -> None:
    validators = {"a": {"kind": "jsn"}, "b": {"kind": "regex", "pattern": "("}}
    write_run(git_repo, "r", TASKS, {"validators": validators})
    lines = _load_error(git_repo)
    assert any("validators.a" in ln and "unknown validator kind 'jsn'" in ln for ln in lines)
    assert any("validators.b.pattern" in ln and "regular expression" in ln for ln in lines)


def test_precedence_env_over_packet_over_config_over_defaults(git_repo: Path) -> None:
    build_tree(
        git_repo,
        {
            ".gitrun/config.toml": "[limits]\nconcurrency = 2\ncanary = 2\nmax_attempts = 5\n"
            '[model]\ndefault = "config-model"\n'
        },
    )
    write_run(git_repo, "r", TASKS, {"limits": {"concurrency": 3, "canary": 0}})
    run = load_run(git_repo, "r", environ={})
    limits = run.packet.limits
    assert (limits.concurrency, limits.canary, limits.max_attempts) == (3, 0, 5)
    assert limits.payload_budget == 65536  # built-in default
    assert run.packet.model.default == "test-model"  # the packet beats the config
    env = {"GITRUN_CONCURRENCY": "7", "GITRUN_MODEL": "env-model", "GITRUN_TIMEOUT": "90s"}
    run = load_run(git_repo, "r", environ=env)
    assert run.packet.limits.concurrency == 7
    assert run.packet.model.default == "env-model"
    assert run.packet.limits.timeout == 90


def test_bad_environment_value_names_the_variable(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS)
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={"GITRUN_CONCURRENCY": "lots"})
    assert "GITRUN_CONCURRENCY='lots'" in info.value.lines[0]


def test_config_file_errors_name_the_config(git_repo: Path) -> None:
    build_tree(git_repo, {".gitrun/config.toml": "[limits]\nmax_atempts = 2\n"})
    write_run(git_repo, "r", TASKS)
    [line] = _load_error(git_repo)
    assert line.startswith(".gitrun/config.toml:2: limits.max_atempts: unknown field")


@pytest.mark.parametrize(
    ("text", "seconds"), [("20m", 1200), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), (45, 45)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "-5", "0", "10x", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_big_task_tables_are_read_again_when_changed(git_repo: Path) -> None:
    tasks = [{"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]} for i in range(1500)]
    run_dir = write_run(git_repo, "r", tasks)
    assert len(load_run(git_repo, "r", environ={}).tasks) == 1500
    assert not (git_repo / ".git/gitrun/r").exists()  # loading keeps nothing
    text = (run_dir / "tasks.toml").read_text()
    (run_dir / "tasks.toml").write_text(text.replace('id = "t00000"', 'id = "renamed"'))
    assert load_run(git_repo, "r", environ={}).tasks[0].id == "renamed"
    (run_dir / "tasks.toml").write_text(text.replace('id = "t00000"', 'id = "Not Valid"'))
    with pytest.raises(DefinitionError, match="not a valid id"):
        load_run(git_repo, "r", environ={})


def test_an_error_in_a_big_task_table_names_its_line(git_repo: Path) -> None:
    """A big table is read by the fast reader; an error still names the line
    it is on, the same as when tomllib reads it."""
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]} for i in range(1500)
    ]
    tasks[700]["outputs"] = []
    write_run(git_repo, "r", tasks)
    [line] = _load_error(git_repo)
    assert line.startswith(".gitrun/runs/r/tasks.toml:") and "[700] (id 't00700')" in line
    assert line.split(":")[1].isdigit()


def _big_table(n: int) -> list[dict[str, object]]:
    tasks: list[dict[str, object]] = []
    for i in range(n):
        task: dict[str, object] = {"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]}
        if i % 3 == 0:
            task["owns"] = [f"out/t{i:05d}.json", f"cache/t{i:05d}-*"]
        if i % 5 == 0:
            task["outputs"] = [{"path": f"out/t{i:05d}.json", "validators": ["json"]}]
            task["note"] = "n"
        tasks.append(task)
    return tasks


def test_a_big_table_validated_task_by_task_loads_the_same_tasks(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(git_repo, "r", _big_table(3000))
    monkeypatch.setattr("gitrun.definition.load.VALIDATE_EACH_ABOVE", 10**9)
    whole = load_run(git_repo, "r", environ={}).tasks
    monkeypatch.setattr("gitrun.definition.load.VALIDATE_EACH_ABOVE", 100)
    each = load_run(git_repo, "r", environ={}).tasks
    assert each == whole and len(each) == 3000


def test_errors_in_a_big_table_read_as_in_a_small_one(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validated task by task, a table with errors is validated whole again:
    every error, with its line, as the whole-table validation gives them."""
    tasks = _big_table(3000)
    tasks[1700]["outputs"] = []
    tasks[2900]["id"] = "Not Valid"
    write_run(git_repo, "r", tasks)
    monkeypatch.setattr("gitrun.definition.load.VALIDATE_EACH_ABOVE", 10**9)
    whole = _load_error(git_repo)
    monkeypatch.setattr("gitrun.definition.load.VALIDATE_EACH_ABOVE", 100)
    assert _load_error(git_repo) == whole
    assert len(whole) == 2 and all(line.split(":")[1].isdigit() for line in whole)


def test_deeply_nested_arrays_are_one_sentence(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    with (run_dir / "packet.toml").open("a") as handle:
        handle.write("[rules]\nacceptance = " + "[" * 5000 + "]" * 5000 + "\n")
    [line] = _load_error(git_repo)
    assert line == (
        ".gitrun/runs/r/packet.toml: arrays or tables nested too deeply to read; flatten them"
    )


@pytest.mark.parametrize("name", ["packet.toml", "tasks.toml"])
def test_a_definition_file_that_is_a_directory(git_repo: Path, name: str) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    (run_dir / name).unlink()
    (run_dir / name).mkdir()
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={})
    [line] = info.value.lines
    assert line.startswith(f".gitrun/runs/r/{name}: is not a regular file"), line


@pytest.mark.parametrize("name", ["packet.toml", "tasks.toml", ""])
def test_a_definition_that_is_a_symlink(git_repo: Path, tmp_path: Path, name: str) -> None:
    elsewhere = write_run(tmp_path, "r", TASKS)
    run_dir = write_run(git_repo, "r", TASKS)
    link = run_dir / name if name else run_dir
    if name:
        link.unlink()
    else:
        import shutil

        shutil.rmtree(run_dir)
    link.symlink_to(elsewhere / name if name else elsewhere)
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={})
    [line] = info.value.lines
    shown = f".gitrun/runs/r/{name}" if name else ".gitrun/runs/r"
    assert line.startswith(f"{shown}: is a symlink;"), line


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\xef\xbb\xbf[run]\n", ":1: starts with a byte order mark"),
        (b'[run]\nid = "\xff"\n', ":2: is not UTF-8 text"),
        (b"", "packet.toml: run: required field is missing"),
        (b"[run]\r\nid = 'r'\r\nbogus = 1\r\n", ":3: run.bogus: unknown field"),
        (b"[run]\nid = 'r'\n[run]\n", ":3:5: invalid TOML (Cannot declare"),
    ],
)
def test_broken_packet_bytes(git_repo: Path, data: bytes, expected: str) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    (run_dir / "packet.toml").write_bytes(data)
    lines = _load_error(git_repo)
    assert any(ln.startswith(".gitrun/runs/r/packet.toml") and expected in ln for ln in lines), (
        lines
    )
