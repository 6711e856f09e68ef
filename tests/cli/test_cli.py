"""The command line, in-process and as the real installed program."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.store.ledger import chunk_name
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, write_run

runner = CliRunner()


def _gitrun(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # `--show-completion SHELL` takes the shell named, not the one typer finds
    # among the test's parent processes (none, under some process managers).
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    return run_gitrun_call(list(args), cwd, env=env)


def _all_commands() -> list[list[str]]:
    """Every command and subcommand of the real command line, as argv prefixes."""
    import typer.main

    found: list[list[str]] = []

    def walk(group: object, prefix: list[str]) -> None:
        for name, command in getattr(group, "commands", {}).items():
            found.append([*prefix, name])
            walk(command, [*prefix, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _all_commands()


def test_the_command_list_is_the_real_one() -> None:
    names = {" ".join(c) for c in COMMANDS}
    assert {
        "start",
        "resume",
        "check",
        "next",
        "collect",
        "hook pre-write",
        "hooks install",
    } <= names
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    summary = next(ln for ln in result.output.splitlines()[1:] if ln.strip())
    assert not summary.lstrip().startswith(("Options", "Arguments", "╭")), result.output
    assert "[[" not in result.output.splitlines()[0], result.output  # an optional said once


@pytest.mark.parametrize("group", [[], ["hook"], ["hooks"]], ids=["gitrun", "hook", "hooks"])
def test_a_groups_help_lists_each_summary_whole(group: list[str]) -> None:
    """At 80 columns click cut every summary with "..."; each is a whole sentence."""
    result = runner.invoke(app, [*group, "--help"], terminal_width=80)
    listed = result.output.split("Commands:", 1)[1]
    assert "..." not in listed, listed
    entries = re.split(r"\n  (?=\S)", listed.strip())
    assert len(entries) >= 3 and all(entry.rstrip().endswith((".", ")")) for entry in entries)


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("gitrun ")


def test_init_outside_a_repository_refuses_politely(tmp_path: Path) -> None:
    proc = _gitrun("init", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("gitrun: error: ")
    assert "not inside a git repository" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_usage_error_exits_2(git_repo: Path) -> None:
    proc = _gitrun("check", cwd=git_repo)
    assert proc.returncode == 2
    proc = _gitrun("new", "x", "--inputs", "*.md", cwd=git_repo)
    assert proc.returncode == 2
    assert "gitrun: error: --inputs and --output go together" in proc.stderr


@pytest.mark.usefixtures("clis")
def test_new_then_check_as_a_user_would(git_repo: Path) -> None:
    build_tree(git_repo, {"docs/one.md": "1", "docs/two.md": "2"})
    proc = _gitrun(
        "new", "sums", "--inputs", "docs/*.md", "--output", "out/{stem}.json", cwd=git_repo
    )
    assert proc.returncode == 0, proc.stderr
    proc = _gitrun("check", "sums", cwd=git_repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run 'sums' is ready: 2 tasks in 1 stage" in proc.stdout


def test_check_lists_problems_and_exits_1(git_repo: Path) -> None:
    tasks = [
        {"id": "ta", "outputs": ["out/a.json"], "owns": ["out/*.json"]},
        {"id": "tb", "outputs": ["out/a.json"]},
    ]
    write_run(git_repo, "r", tasks)
    result = runner.invoke(app, ["check", "r"])
    assert result.exit_code == 1
    assert (
        "[overlap] .gitrun/runs/r/tasks.toml: tasks ta and tb can both write out/a.json"
        in result.output
    )
    result = runner.invoke(app, ["check", "r", "--json"])
    assert result.exit_code == 1
    [problem] = json.loads(result.output)["problems"]
    assert problem["code"] == "overlap"
    assert problem["tasks"] == ["ta", "tb"] and problem["path"] == "out/a.json"


def test_check_json_on_a_broken_packet(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    (run_dir / "packet.toml").write_text("[run\n")
    result = runner.invoke(app, ["check", "r", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert (data["ready"], data["summary"], data["tasks"]) == (False, "", None)
    [problem] = data["problems"]
    assert problem["code"] == "definition"
    assert problem["message"].startswith(".gitrun/runs/r/packet.toml:1:")


def test_broken_packet_is_one_sentence_per_field_without_traceback(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    (run_dir / "packet.toml").write_text('[run]\nid = "r"\n[limits]\nconcurrency = "four"\n')
    proc = _gitrun("check", "r", cwd=git_repo)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "gitrun: error: .gitrun/runs/r/packet.toml:4: limits.concurrency: expected a whole "
        "number such as 4 (got 'four')"
    )


def test_dash_c_runs_elsewhere(git_repo: Path, tmp_path: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}])
    proc = _gitrun("-C", str(git_repo), "check", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


# --- property: random mutations of a valid run never produce a traceback ------

_VALID_PACKET: dict[str, object] = {
    "run": {"id": "r", "description": "d"},
    "rules": {"text": "t", "acceptance": ["a"]},
    "limits": {"concurrency": 4, "timeout": "20m", "payload_budget": 65536},
    "model": {"default": "m", "stages": {"work": "m2"}},
    "executor": {"kind": "command", "preset": "claude"},
    "ownership": {"protected": ["CHANGELOG.md"]},
    "stages": [{"name": "work"}],
    "validators": {"v": {"kind": "regex", "pattern": "x"}},
}
_VALID_TASKS: dict[str, object] = {
    "task": [
        {"id": "t1", "inputs": ["docs/a.md"], "owns": ["out/*.json"], "outputs": ["out/a.json"]},
        {"id": "t2", "outputs": [{"path": "out2/b.json", "validators": ["v"]}], "note": "n"},
    ]
}
_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.text(max_size=12),
    st.lists(st.text(max_size=6), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
    st.sampled_from(["/etc/x", "../up", "**", ".git/x", "TODO.md", "a\nb", "{model}", "20x"]),
)


def _mutate(value: object, data: st.DataObject, depth: int = 0) -> object:
    if isinstance(value, dict) and value and depth < 4:
        out = dict(value)
        key = data.draw(st.sampled_from(sorted(out)))
        action = data.draw(st.sampled_from(["drop", "replace", "recurse", "add"]))
        if action == "drop":
            del out[key]
        elif action == "replace":
            out[key] = data.draw(_junk)
        elif action == "add":
            out[data.draw(st.text(min_size=1, max_size=8))] = data.draw(_junk)
        else:
            out[key] = _mutate(out[key], data, depth + 1)
        return out
    if isinstance(value, list) and value and depth < 4:
        out_list = list(value)
        index = data.draw(st.integers(0, len(out_list) - 1))
        out_list[index] = _mutate(out_list[index], data, depth + 1)
        return out_list
    return data.draw(_junk)


def _toml(value: object) -> str:
    try:
        return tomli_w.dumps(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "garbage = [\n"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_mutated_runs_never_produce_a_traceback(git_repo: Path, data: st.DataObject) -> None:
    packet = _mutate(_VALID_PACKET, data) if data.draw(st.booleans()) else _VALID_PACKET
    tasks = _mutate(_VALID_TASKS, data) if data.draw(st.booleans()) else _VALID_TASKS
    run_dir = git_repo / ".gitrun" / "runs" / "r"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "packet.toml").write_text(_toml(packet))
    text = _toml(tasks)
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(text)))
        text = (
            text[:cut] + data.draw(st.sampled_from(["", "=", "[", '"', "\x00", "]]"])) + text[cut:]
        )
    (run_dir / "tasks.toml").write_text(text)
    for args in (["check", "r"], ["check", "r", "--json"]):
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 1), (result.output, result.exception)
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        if "--json" in args:
            json.loads(result.output)


def _complete(words: str, cwd: Path) -> list[str]:
    """What the shell's completion offers for ``words`` (bash's protocol)."""
    env = os.environ | {
        "_GITRUN_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    }
    proc = run_gitrun_call([], cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_shell_completes_commands_and_run_ids(git_repo: Path, tmp_path: Path) -> None:
    script = _gitrun("--show-completion", "bash", cwd=git_repo)
    assert script.returncode == 0 and "_GITRUN_COMPLETE=complete_bash" in script.stdout
    for run_id in ("alpha", "also", "beta"):
        assert _gitrun("new", run_id, cwd=git_repo).returncode == 0
    assert _complete("gitrun st", git_repo) == ["start", "status", "stop"]
    assert _complete("gitrun status al", git_repo) == ["alpha", "also"]
    assert _complete("gitrun next ", git_repo) == ["alpha", "also", "beta"]
    assert _complete(f"gitrun -C {git_repo} resume b", tmp_path) == ["beta"]
    assert _complete("gitrun check ", tmp_path) == []  # no repository here: nothing, no error


def test_installed_console_script_finds_templates(git_repo: Path) -> None:
    """The real `gitrun` program (as installed) scaffolds from its shipped templates."""
    exe = Path(sys.executable).parent / "gitrun"
    if not exe.exists():
        pytest.skip("no gitrun console script next to this interpreter")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(exe), "new", "tpl"], cwd=git_repo, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert (git_repo / ".gitrun/runs/tpl/packet.toml").is_file()


def test_demo_runs_offline_and_tells_the_story(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    path = os.environ.get("PATH", "").split(os.pathsep)
    without_gitrun = os.pathsep.join(
        d for d in path if not os.path.exists(os.path.join(d, "gitrun"))
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gitrun",
            "demo",
            "--dir",
            str(where),
            "--tasks",
            "8",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": without_gitrun},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "The session is lost now: driver killed with SIGKILL" in out
    # Its last line is a command to paste: it works with no gitrun on the PATH.
    look = out.rstrip().splitlines()[-1].removeprefix("Look around: ")
    pasted = subprocess.run(
        ["sh", "-c", look],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": without_gitrun, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert pasted.returncode == 0 and "run 'demo': landed in" in pasted.stdout, pasted.stderr
    assert "spawns for 8 usable outputs" in out
    assert "Gitrun-Task: t0001" in out and "Gitrun-Attempt:" in out
    assert f"The repository is {where}" in out
    assert f"every attempt: {where / 'gitrun-report-demo.html'}" in out  # the HTML report
    assert (where / "gitrun-report-demo.html").read_text().count('class="bar ') >= 8
    merged = subprocess.run(
        ["git", "-C", str(where), "log", "-1", "--format=%s"], capture_output=True, text=True
    )
    assert merged.stdout.strip() == "gitrun: land run demo"


def test_ten_thousand_broken_tasks_print_twenty_of_each_kind(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    (run_dir / "tasks.toml").write_text(
        "".join(f'[[task]]\nid = "T{i}"\noutputs = "x"\n' for i in range(10_000))
    )
    result = runner.invoke(app, ["check", "r"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 42
    assert lines[-2:] == [
        "gitrun: error: ... and 9,980 more of this kind (task[].id)",
        "gitrun: error: ... and 9,980 more of this kind (task[].outputs)",
    ]
    assert lines[0].startswith("gitrun: error: .gitrun/runs/r/tasks.toml:2: task[0] (id 'T0').id")
    result = runner.invoke(app, ["check", "r", "--json"])
    assert len(json.loads(result.output)["problems"]) == 20_000  # JSON stays complete


def test_check_problems_are_capped_per_kind(git_repo: Path) -> None:
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:02d}", "outputs": [f"out/{i}.json"], "owns": ["TODO.md", f"out/{i}.json"]}
        for i in range(30)
    ]
    write_run(git_repo, "r", tasks)
    result = runner.invoke(app, ["check", "r"])
    assert result.exit_code == 1
    protected = [ln for ln in result.output.splitlines() if "[protected]" in ln]
    assert len(protected) == 20
    assert "  ... and 10 more of this kind (protected)" in result.output.splitlines()
    result = runner.invoke(app, ["check", "r", "--json"])
    problems = json.loads(result.output)["problems"]
    assert len([p for p in problems if p["code"] == "protected"]) == 30


def test_a_ledger_that_is_a_directory_is_one_sentence(git_repo: Path) -> None:
    run_dir = write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    (run_dir / chunk_name(1)).mkdir(parents=True)
    for command in (["status", "r"], ["retry", "r"], ["status"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1, result.output
        assert result.output == (
            f"gitrun: error: .gitrun/runs/r/{chunk_name(1)}: is a directory, where gitrun keeps a "
            "file of JSON lines; move it aside and run the command again\n"
        )


def test_junk_in_the_local_journal_is_skipped(git_repo: Path) -> None:
    from gitrun.store.journal import running_records
    from gitrun.store.local import LocalPaths

    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    local = LocalPaths.of(git_repo, "r")
    local.running.parent.mkdir(parents=True, exist_ok=True)
    local.running.write_bytes(
        b'{"event": "x"}\n[1]\n{"task": 5}\n{"task": null, "end": 1}\n\xff\n'
        b'{"task": "t1", "attempt": 1}\n{"task": "t2", "attempt": 1, "end": 1}\n'
    )
    assert list(running_records(local)) == ["t1"]


def test_an_unexpected_error_is_one_line_and_a_crash_log_with_versions(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gitrun.proof.check

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gitrun.proof.check, "check_run", broken)
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    result = runner.invoke(app, ["check", "r"])
    assert result.exit_code == 70
    assert "Traceback" not in result.output
    found = re.search(
        r"internal error \(RuntimeError: a bug\); the traceback is in (\S+);", result.output
    )
    assert found is not None
    log = Path(found[1]).read_text()
    Path(found[1]).unlink()
    assert log.startswith("gitrun ") and "\ngit version " in log and "\nPython 3." in log
    assert "RuntimeError: a bug" in log


def test_ctrl_c_exits_130(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gitrun.proof.check

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(gitrun.proof.check, "check_run", interrupted)
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    result = runner.invoke(app, ["check", "r"])
    assert result.exit_code == 130 and "gitrun: interrupted" in result.output


def test_a_full_disk_and_a_deleted_directory_are_one_sentence(
    git_repo: Path, tmp_path: Path
) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}])
    for args in (["status"], ["status", "r"], ["check", "r"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "gitrun", *args],
                cwd=git_repo,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
            )
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr == (
            "gitrun: error: could not write to standard output: no space left on device; "
            "free some space\n"
        )
    gone = tmp_path / "gone"
    script = f'mkdir "{gone}" && cd "{gone}" && rmdir "{gone}" && exec "$0" -m gitrun status'
    proc = subprocess.run(
        ["sh", "-c", script, sys.executable], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        "gitrun: error: the current directory no longer exists; cd to the repository "
        "(or pass -C DIR)\n"
    )
