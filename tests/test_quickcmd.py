"""Commands answered without typer (gitrun/quickcmd.py): the same output, exit
code and errors as the full command line, and only for the forms it knows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.quickcmd import main as quick_main
from tests.helpers import commit_all, write_run

_FULL = "import sys; from gitrun.cli import main; sys.exit(main(sys.argv[1:]))"
_QUICK = """
import sys
from gitrun.entry import main
sys.argv = ["gitrun", *sys.argv[1:]]
code = main()
heavy = sorted(
    m for m in sys.modules if m.split(".")[0] in ("typer", "click", "rich", "pydantic")
)
sys.stderr.write(f"heavy={heavy}\\n")
sys.exit(code)
"""


def _run(repo: Path, code: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=repo, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def repo(git_repo: Path) -> Path:
    write_run(git_repo, "r", [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(3)])
    write_run(git_repo, "s", [{"id": "a", "outputs": ["out/a.json"]}])
    commit_all(git_repo, "define")
    (git_repo / "sub").mkdir()
    return git_repo


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "r"],
        ["status", "r", "--json"],
        ["status", "--json"],
        ["status", "--all", "r"],
        ["-C", "sub", "status", "s"],
        ["status", "nope"],
        ["-C", "README.md", "status"],
        ["-C", "/", "status", "r"],
    ],
)
def test_the_quick_path_answers_as_the_full_command_line(repo: Path, args: list[str]) -> None:
    full = _run(repo, _FULL, args)
    quick = _run(repo, _QUICK, args)
    heavy = quick.stderr.splitlines()[-1]
    if quick.returncode == 0:  # an error is reported as the command line reports it
        assert heavy == "heavy=[]", (args, quick.stderr)
    assert quick.returncode == full.returncode, (args, full.stderr, quick.stderr)
    assert quick.stdout == full.stdout, args
    assert "\n".join(quick.stderr.splitlines()[:-1]) == full.stderr.rstrip("\n"), args
    if "--json" in args and full.returncode == 0:
        json.loads(quick.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ["status", "-h"],
        ["status", "--help"],
        ["status", "--jsn"],
        ["status", "r", "s"],
        ["status", ""],
        ["-C"],
        ["--version"],
        ["check", "r"],
        ["-C", "sub", "check", "r"],
        [],
    ],
)
def test_other_forms_go_to_the_full_command_line(args: list[str]) -> None:
    assert quick_main(args) is None


def test_the_kept_help_is_what_typer_renders(tmp_path: Path) -> None:
    """gitrun/helptext.py is generated: when a command or its help changes,
    write it again with
    COLUMNS=80 python -c 'from gitrun.cli import main; main(["--help"])'
    (the text between the triple quotes)."""
    from gitrun.helptext import MAIN

    env = {**os.environ, "COLUMNS": "80"}
    rendered = subprocess.run(
        [sys.executable, "-c", _FULL, "--help"], capture_output=True, text=True, env=env
    )
    assert rendered.returncode == 0
    assert rendered.stdout == MAIN
    quick = subprocess.run(
        [sys.executable, "-m", "gitrun", "-h"], capture_output=True, text=True, env=env
    )
    assert quick.returncode == 0 and quick.stdout == MAIN


@pytest.mark.parametrize(("columns", "quick"), [("80", True), ("200", True), ("60", False)])
def test_help_is_kept_only_for_the_width_it_was_rendered_at(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], columns: str, quick: bool
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert (quick_main(["--help"]) is not None) == quick
    assert bool(capsys.readouterr().out) == quick


def _ran_repo(root: Path, name: str) -> Path:
    """A repository with run r: t0 and t1 write their output, t2 writes nothing."""
    repo = root / name
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("x\n")
    script = 'case "$GITRUN_TASK" in t0|t1) echo "{}" > "$GITRUN_OUTPUTS";; esac'
    write_run(
        repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(3)],
        {
            "executor": {"kind": "command", "command": ["sh", "-c", script]},
            "limits": {"max_attempts": 1, "canary": 0, "concurrency": 1},
        },
    )
    commit_all(repo, "define")
    return repo


@pytest.mark.parametrize(
    "args", [["start", "r"], ["start", "r", "-q"], ["start", "--json", "r"], ["resume", "r"]]
)
def test_start_and_resume_answer_as_the_full_command_line(
    tmp_path: Path, git_repo: Path, args: list[str]
) -> None:
    """The same run in two repositories, driven one way each: the same exit
    code, summary and event lines, and the quick way loads no typer."""
    outcomes = []
    for code, name in ((_FULL, "full"), (_QUICK, "quick")):
        repo = _ran_repo(tmp_path, name)
        if args[0] == "resume":  # a run that started and stopped before its tasks ran
            _run(repo, code, ["start", "r", "-q"])
            subprocess.run(["git", "branch", "-f", "gitrun/r", "gitrun/r~1"], cwd=repo, check=True)
            for out in (repo / "out").iterdir():
                out.unlink()
        outcomes.append(_run(repo, code, args))
    full, quick = outcomes
    heavy = quick.stderr.splitlines()[-1]  # a drive loads the definition (pydantic), no more
    assert heavy.startswith("heavy=[") and not re.search(r"'(typer|click|rich)\b", heavy), heavy
    assert quick.returncode == full.returncode == 1, (full.stderr, quick.stderr)
    if "--json" in args:
        states = [
            {tid: t["status"] for tid, t in json.loads(p.stdout)["tasks"].items()}
            for p in (full, quick)
        ]
        assert states[0] == states[1] == {"t0": "done", "t1": "done", "t2": "failed"}
    else:
        assert quick.stdout == full.stdout and "2 done" in full.stdout

    def events(text: str) -> list[str]:
        return [line.split(" as ")[0] for line in text.splitlines() if line.startswith("gitrun: ")]

    # The same events; a commit and the next attempt's end may come in either order.
    assert sorted(e.split(" from ")[0] for e in events(quick.stderr)) == sorted(
        e.split(" from ")[0] for e in events(full.stderr)
    )
    assert bool(events(full.stderr)) == ("-q" not in args and "--json" not in args)


@pytest.mark.parametrize(
    "args",
    [
        ["start"],
        ["start", "r", "--bogus"],
        ["start", "r", "s"],
        ["resume", "--help"],
        ["start", "-h"],
    ],
)
def test_other_drive_forms_go_to_the_full_command_line(args: list[str]) -> None:
    assert quick_main(args) is None


def test_a_start_loads_its_definition_once(
    tmp_path: Path, git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No view yet (as after `gitrun new` and `check`): the load that reads
    the executor's kind is the one the start uses."""
    from gitrun import quickcmd, runs, session

    repo = _ran_repo(tmp_path, "once")
    real, calls = runs.load_run, []

    def counted(*args: object, **kwargs: object) -> runs.RunDef:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runs, "load_run", counted)
    monkeypatch.setattr(session, "load_run", counted)
    assert quickcmd.drive(repo, "r", as_json=False, quiet=True, resume=False) == 1
    assert len(calls) == 1


def _external_repo(root: Path, name: str) -> Path:
    repo = root / name
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("x\n")
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(3)]
    # a throttled task backs off for longer than the test: the same batches either way
    limits = {"canary": 0, "backoff_base": "1h", "backoff_cap": "2h"}
    write_run(repo, "e", tasks, {"executor": {"kind": "external"}, "limits": limits})
    commit_all(repo, "define")
    return repo


@pytest.mark.parametrize("as_json", [False, True])
def test_an_external_start_and_resume_print_what_the_full_command_line_prints(
    tmp_path: Path, as_json: bool
) -> None:
    """start, one subagent's output, resume: the same batches, collections
    and exit codes either way."""
    said = []
    for code, name in ((_FULL, "full"), (_QUICK, "quick")):
        repo = _external_repo(tmp_path, name)
        json_flag = ["--json"] if as_json else []
        started = _run(repo, code, ["start", "e", *json_flag])
        (repo / "out").mkdir(exist_ok=True)
        (repo / "out/t1.json").write_text('{"ok": true}')
        resumed = _run(repo, code, ["resume", "e", *json_flag])

        def plain(text: str, repo: Path = repo) -> str:  # this repository, this instant
            return re.sub(
                r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", "TIME", text.replace(str(repo), "REPO")
            )

        said.append([(p.returncode, plain(p.stdout)) for p in (started, resumed)])
    full, quick = said
    assert quick == full
    assert [code for code, _ in full] == [0, 0]
    leased_again = full[1][1] if as_json else full[1][1].split("next:")[1]
    assert '"t1"' not in leased_again and "task t1" not in leased_again  # collected as done
    assert "t2" in leased_again


def test_an_external_start_finds_its_run_once(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quick way prints the batch itself: it does not hand the command
    to the full command line to load the run's view again."""
    from gitrun import state

    repo = _external_repo(git_repo, "e1")
    real, calls = state.load_view, []

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(state, "load_view", counted)
    monkeypatch.setattr(sys, "argv", ["gitrun", "-C", str(repo), "start", "e"])
    from gitrun.entry import main as entry_main  # quickcmd finds the run, the CLI prints it

    assert entry_main() == 0
    assert len(calls) == 1
    assert "leased 3" in capsys.readouterr().out


def _orchestrate(repo: Path, code: str) -> list[tuple[int, str, str]]:
    """An orchestrator's calls on an external run: batches, a subagent's
    output, a throttle, collections, and the mistakes one makes."""
    calls = [
        ["start", "e"],  # leases t0, t1 and t2
        ["collect", "e", "--throttled", "t9"],  # not leased: an error
        ["collect", "--json", "e"],  # t2 wrote its output (below)
        ["next", "e", "--max", "1"],
        ["next", "--json", "e"],
        ["next", "e", "--max=0"],  # a usage error
        ["collect", "e", "--throttled", "t0", "--throttled=t1"],
        ["next", "e", "--max", "1", "--max", "5"],  # backing off
        ["next", "nope"],
        ["-C", "sub", "next", "e"],
    ]
    said = []
    for args in calls:
        if args[:2] == ["collect", "--json"]:
            (repo / "out").mkdir(exist_ok=True)
            (repo / "out/t2.json").write_text('{"ok": true}')
        proc = _run(repo, code, args)
        stderr = proc.stderr
        if code is _QUICK:
            *said_lines, heavy = stderr.splitlines()
            if proc.returncode == 0:  # an error is reported as the command line reports it
                assert not re.search(r"'(typer|click|rich)\b", heavy), (args, heavy)
            stderr = "".join(f"{line}\n" for line in said_lines)

        def plain(text: str) -> str:  # this repository, this instant, this backoff's jitter
            text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", "TIME", text)
            text = re.sub(r"from [0-9a-f]{10}\b", "from COMMIT", text)
            return re.sub(r"wait \d+ s", "wait N s", text).replace(str(repo), "REPO")

        said.append((proc.returncode, plain(proc.stdout), plain(stderr)))
    return said


def test_next_and_collect_answer_as_the_full_command_line(tmp_path: Path) -> None:
    """Every call of an orchestration prints the same, on the same streams,
    with the same exit code either way, and the quick way loads no typer
    (but to report an error, as the command line reports it)."""
    full, quick = (
        _orchestrate(_external_repo(tmp_path, name), code)
        for code, name in ((_FULL, "full"), (_QUICK, "quick"))
    )
    assert quick == full
    assert [code for code, _, _ in full] == [0, 1, 0, 0, 0, 2, 0, 1, 1, 1], full
    assert json.loads(full[2][1])["done"] == ["t2"]
    assert "task t0" in full[3][1] and json.loads(full[4][1])[0]["task"] == "t1"
    assert "--max must be 1 or more" in full[5][2]
    assert full[6][1].startswith("throttled: t0 (") and "wait N s" in full[7][1]


@pytest.mark.parametrize(
    "args",
    [
        ["next"],
        ["next", "e", "--max"],
        ["next", "e", "--max", "x"],
        ["next", "e", "--max", "-1"],
        ["next", "e", "--max", " 4"],
        ["next", "e", "--max", "٤"],
        ["next", "e", "--throttled", "t0"],
        ["next", "e", "f"],
        ["next", "-h"],
        ["next", "e", "--json=1"],
        ["collect", "e", "--throttled"],
        ["collect", "e", "--throttled", "--json"],
        ["collect", "e", "--max", "1"],
        ["collect", "--help"],
        ["collect", "e", "--", "x"],
    ],
)
def test_other_external_forms_go_to_the_full_command_line(args: list[str]) -> None:
    assert quick_main(args) is None
