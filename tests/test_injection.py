"""Task data is never code (DESIGN.md rule 9, issue 9 section 5).

Every hostile payload goes through every preset and wrapper form for real:
the command is rendered and executed as a child process (through a real
`gitrun start` for the end-to-end cases), and no marker file may ever appear.
The worker records the argv and environment it received, so each test also
shows the payload arrived intact, as data. Templates that cannot be made safe
are refused by `gitrun check` and by `render_command`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from gitrun.check import check_run
from gitrun.executor import UnsafeCommand, command_template, render_command, template_problems
from gitrun.proc import clean_env
from gitrun.runs import load_run
from gitrun.session import start_run
from gitrun.settings import Executor
from tests.helpers import build_tree, commit_all, git, write_run

MARK = "@MARK@"  # replaced by the absolute path of a marker file
PAYLOADS = [
    "$(touch @MARK@)",
    "`touch @MARK@`",
    '"; touch @MARK@; "',
    "' ; touch @MARK@ ; '",
    "a$IFS$(touch${IFS}@MARK@)",
    "x\ntouch @MARK@\n",
    "|| touch @MARK@",
    "& touch @MARK@",
    "; touch @MARK@ #",
    "%(x)s %s {task} {pointer} {outputs}",
    "\\ \\\\ \\$(touch @MARK@)",
    "docs/$(touch PWNED).md",
    "$'\\x41' $((1+1)) ${HOME} !! -c 'touch @MARK@'",
]
ONE_LINE = [p for p in PAYLOADS if "\n" not in p]
EXEC_ARGV = "import os, sys; os.execv(sys.argv[1], sys.argv[1:])"  # python -c: run argv[1:]

RECORDER = """\
import json, os, sys
record = {
    "argv": sys.argv[1:],
    "env": {k: v for k, v in os.environ.items() if k.startswith("GITRUN_")},
}
data = json.dumps(record)
if os.environ.get("RECORD_TO"):
    with open(os.environ["RECORD_TO"], "w") as handle:
        handle.write(data)
for out in os.environ.get("GITRUN_OUTPUTS", "").splitlines():
    if out and not os.environ.get("RECORD_TO"):
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as handle:
            handle.write(data)
"""


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    """An executable that writes the argv and GITRUN_* environment it got."""
    path = tmp_path / "bin" / "recorder"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\n{RECORDER}")
    path.chmod(0o755)
    return path


@pytest.fixture
def stand_ins(recorder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """claude, codex, gemini and aider on PATH as the recorder, so a preset's
    argv really goes through exec."""
    for name in ("claude", "codex", "gemini", "aider"):
        shutil.copy(recorder, recorder.parent / name)
    monkeypatch.setenv("PATH", f"{recorder.parent}{os.pathsep}{os.environ['PATH']}")
    return recorder.parent


def safe_forms(rec: Path) -> dict[str, list[str]]:
    """Every wrapper form, spelled the safe way: values as whole arguments
    after a literal script, or read from GITRUN_* inside it."""
    script = f'{rec} "$1" "$GITRUN_POINTER" "$GITRUN_OUTPUTS"'
    after = ["sh", "{pointer}"]
    py = sys.executable
    forms = {
        "direct": [str(rec), "{pointer}", "{task}", "{outputs}", "{model}"],
        "sh -c": ["sh", "-c", script, *after],
        "bash -lc": ["bash", "-lc", script, *after],
        "sh -e -c": ["sh", "-e", "-c", script, *after],
        "sh -ec": ["sh", "-ec", script, *after],
        "dash -c": ["dash", "-c", script, *after],
        "/bin/sh -c": ["/bin/sh", "-c", script, *after],
        "env sh -c": ["env", "sh", "-c", script, *after],
        "env VAR=x sh -c": ["env", "A=1", "B=2", "sh", "-c", script, *after],
        "/usr/bin/env bash -c": ["/usr/bin/env", "bash", "-c", script, *after],
        "timeout 60 sh -c": ["timeout", "60", "sh", "-c", script, *after],
        "nice -n 1 sh -c": ["nice", "-n", "1", "sh", "-c", script, *after],
        "nohup sh -c": ["nohup", "sh", "-c", script, *after],
        "stdbuf -oL sh -c": ["stdbuf", "-oL", "sh", "-c", script, *after],
        "setsid sh -c": ["setsid", "sh", "-c", script, *after],
        "python -c": [py, "-c", EXEC_ARGV, str(rec), "{pointer}", "{task}"],
        "perl -e": ["perl", "-e", "exec { $ARGV[0] } @ARGV", str(rec), "{pointer}"],
        "node -e": [
            "node", "-e",
            "require('child_process').execFileSync(process.argv[1], process.argv.slice(2))",
            str(rec), "{pointer}",
        ],
    }  # fmt: skip
    return {k: v for k, v in forms.items() if shutil.which(v[0])}


def values_for(payload: str) -> dict[str, str]:
    pointer = (
        f"gitrun run r, task t1: follow .gitrun/runs/r/packet.toml. {payload}\n"
        f"Inputs: docs/{payload}.md. Write only out/{payload}.json — the task is done when it "
        "exists and validates."
    )
    return {
        "pointer": pointer,
        "task": "t1",
        "run": "r",
        "model": f"model {payload}",
        "packet": ".gitrun/runs/r/packet.toml",
        "attempt": "1",
        "outputs": f"out/{payload}.json",
        "stage": "work",
    }


def run_rendered(argv: list[str], values: dict[str, str], cwd: Path, record: Path) -> None:
    """Execute like the driver does: the rendered argv, GITRUN_* in the environment."""
    env = clean_env()
    env.update({f"GITRUN_{k.upper()}": v for k, v in values.items()})
    env["RECORD_TO"] = str(record)
    subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )


def with_marker(payload: str, marker: Path) -> str:
    return payload.replace(MARK, str(marker))


def assert_no_marker(markers: Path, where: Path, what: str) -> None:
    assert not any(markers.iterdir()), f"{what}: the payload ran"
    assert not list(where.rglob("PWNED*")), f"{what}: the payload ran"


def test_no_payload_runs_through_any_safe_form(tmp_path: Path, recorder: Path) -> None:
    markers, cwd = tmp_path / "markers", tmp_path / "cwd"
    markers.mkdir()
    cwd.mkdir()
    forms = safe_forms(recorder)
    assert {"sh -c", "bash -lc", "python -c", "timeout 60 sh -c", "env sh -c"} <= set(forms)
    for name, template in forms.items():
        assert template_problems(template) == [], name
        for n, raw in enumerate(PAYLOADS):
            values = values_for(with_marker(raw, markers / f"m{n}"))
            record = tmp_path / "record.json"
            record.unlink(missing_ok=True)
            run_rendered(render_command(template, values), values, cwd, record)
            assert_no_marker(markers, cwd, f"{name} with {raw!r}")
            got = json.loads(record.read_text())
            assert got["argv"][0] == values["pointer"], name  # arrived whole, as data
            assert got["env"]["GITRUN_POINTER"] == values["pointer"]
            assert got["env"]["GITRUN_OUTPUTS"] == values["outputs"]


def test_shell_preset_scripts_read_values_from_the_environment(
    tmp_path: Path, recorder: Path
) -> None:
    markers, cwd = tmp_path / "markers", tmp_path / "cwd"
    markers.mkdir()
    cwd.mkdir()
    scripts = [
        f'{recorder} "$GITRUN_POINTER" "$GITRUN_TASK"',
        f'p="$GITRUN_POINTER"; echo "$p" >/dev/null; printf "%s" "$GITRUN_OUTPUTS" | '
        f'while IFS= read -r out; do :; done; {recorder} "$p"',
    ]
    for script in scripts:
        template = command_template(Executor(preset="shell", shell=script))
        assert template is not None and template_problems(template) == []
        for n, raw in enumerate(PAYLOADS):
            values = values_for(with_marker(raw, markers / f"m{n}"))
            record = tmp_path / "record.json"
            run_rendered(render_command(template, values), values, cwd, record)
            assert_no_marker(markers, cwd, f"shell preset with {raw!r}")
            assert json.loads(record.read_text())["argv"][0] == values["pointer"]


@pytest.mark.parametrize("preset", ["claude", "codex", "gemini", "aider"])
def test_presets_exec_payloads_as_single_arguments(
    preset: str, tmp_path: Path, stand_ins: Path
) -> None:
    markers, cwd = tmp_path / "markers", tmp_path / "cwd"
    markers.mkdir()
    cwd.mkdir()
    template = command_template(Executor(preset=preset))
    assert template is not None and template_problems(template) == []
    for n, raw in enumerate(PAYLOADS):
        values = values_for(with_marker(raw, markers / f"m{n}"))
        argv = render_command(template, values)
        assert argv[0] == preset and argv.count(values["pointer"]) == 1
        assert argv.count(values["model"]) == 1
        record = tmp_path / "record.json"
        run_rendered(argv, values, cwd, record)
        assert_no_marker(markers, cwd, f"{preset} with {raw!r}")
        assert json.loads(record.read_text())["argv"] == argv[1:]


# Templates that cannot be made safe, and a word the fix in the message must carry.
UNSAFE: dict[str, tuple[dict[str, object], str]] = {
    "shell preset, quoted": ({"preset": "shell", "shell": 'echo "{pointer}"'}, "$GITRUN_POINTER"),
    "shell preset, bare": ({"preset": "shell", "shell": "echo {pointer} {task}"}, "$GITRUN_TASK"),
    "shell preset, single": ({"preset": "shell", "shell": "echo '{outputs}'"}, "$GITRUN_OUTPUTS"),
    "sh -c embedded": ({"command": ["sh", "-c", 'echo "{pointer}"']}, "$GITRUN_POINTER"),
    "sh -c whole": ({"command": ["sh", "-c", "{pointer}"]}, "after the script"),
    "bash -lc": ({"command": ["bash", "-lc", "{pointer}"]}, "$GITRUN_POINTER"),
    "sh -e -c": ({"command": ["sh", "-e", "-c", "{pointer}"]}, "$GITRUN_POINTER"),
    "sh -ec": ({"command": ["sh", "-ec", "{pointer}"]}, "$GITRUN_POINTER"),
    "bash -o pipefail -c": ({"command": ["bash", "-o", "pipefail", "-c", "{task}"]}, "$GITRUN"),
    "sh script file": ({"command": ["sh", "{packet}"]}, "$GITRUN_PACKET"),
    "env sh -c": ({"command": ["env", "sh", "-c", "{pointer}"]}, "$GITRUN_POINTER"),
    "env VAR=x sh -c": ({"command": ["env", "A=1", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "env -i sh -c": ({"command": ["env", "-i", "-u", "X", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "env -S": ({"command": ["env", "-S", "{pointer}"]}, "$GITRUN_POINTER"),
    "env as program": ({"command": ["env", "{pointer}"]}, "literally"),
    "timeout 60 sh -c": ({"command": ["timeout", "60", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "timeout -s KILL": (
        {"command": ["timeout", "-s", "KILL", "-k", "5", "60", "bash", "-c", "{pointer}"]},
        "$GITRUN_POINTER",
    ),
    "nice sh -c": ({"command": ["nice", "-n", "5", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "nohup sh -c": ({"command": ["nohup", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "stdbuf -oL": ({"command": ["stdbuf", "-oL", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "stdbuf -o L": ({"command": ["stdbuf", "-o", "L", "-e", "0", "sh", "-c", "{task}"]}, "$GITRUN"),
    "exec sh -c": ({"command": ["exec", "sh", "-c", "{pointer}"]}, "$GITRUN"),
    "nested wrappers": (
        {"command": ["nice", "timeout", "9", "env", "A=1", "/bin/bash", "-c", "{pointer}"]},
        "$GITRUN_POINTER",
    ),
    "absolute path": ({"command": ["/bin/sh", "-c", "{pointer}"]}, "$GITRUN"),
    "python -c": ({"command": ["python3", "-c", "{pointer}"]}, "$GITRUN_POINTER"),
    "python3.12 -Sc": ({"command": ["/usr/bin/python3.12", "-Sc", "{pointer}"]}, "$GITRUN"),
    "python script": ({"command": ["python3", "{pointer}"]}, "$GITRUN_POINTER"),
    "python -m": ({"command": ["python", "-m", "{task}"]}, "$GITRUN_TASK"),
    "perl -e": ({"command": ["perl", "-e", "{pointer}"]}, "$GITRUN_POINTER"),
    "perl -lne": ({"command": ["perl", "-lne", "{pointer}"]}, "$GITRUN_POINTER"),
    "ruby -e": ({"command": ["ruby", "-e", "{pointer}"]}, "$GITRUN_POINTER"),
    "node -e": ({"command": ["node", "-e", "{pointer}"]}, "$GITRUN_POINTER"),
    "node --eval": ({"command": ["node", "--eval", "{pointer}"]}, "$GITRUN_POINTER"),
    "unknown wrapper": ({"command": ["my-runner", "bash", "-c", "{pointer}"]}, "$GITRUN"),
    "program from data": ({"command": ["{task}", "--go"]}, "literally"),
    "embedded option": ({"command": ["agent", "--model={model}", "{pointer}"]}, '"--model"'),
    "embedded text": ({"command": ["claude", "-p", "do: {pointer}"]}, "argument of its own"),
    "args of a preset": ({"preset": "codex", "args": ["--note=x{task}"]}, "args[0]"),
}


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unsafe_templates_are_refused_by_check_and_at_render(
    name: str, git_repo: Path, tmp_path: Path
) -> None:
    executor, fix = UNSAFE[name]
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["a.json"]}], {"executor": executor})
    problems = [p for p in check_run(load_run(git_repo, "r", environ={})).problems]
    executor_messages = [p.message for p in problems if p.code == "executor"]
    assert executor_messages, f"{name}: check passed"
    assert all("[executor]" in m for m in executor_messages)
    assert any(fix in m for m in executor_messages), executor_messages
    template = command_template(Executor.model_validate(executor))
    assert template is not None
    markers = tmp_path / "markers"
    markers.mkdir()
    with pytest.raises(UnsafeCommand, match=r"\[executor\]"):
        render_command(template, values_for(with_marker(PAYLOADS[0], markers / "m")))


def test_gitrun_check_names_the_field_and_the_fix(git_repo: Path) -> None:
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["a.json"]}],
        {"executor": {"preset": "shell", "shell": 'my-agent "{pointer}"'}},
    )
    out = subprocess.run(
        [sys.executable, "-m", "gitrun", "check", "r"], cwd=git_repo, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "[executor] shell contains {pointer}" in out.stdout + out.stderr
    assert 'write "$GITRUN_POINTER" there instead' in out.stdout + out.stderr
    assert "Traceback" not in out.stderr


def quiet(_message: str) -> None:
    pass


@pytest.mark.parametrize("form", ["shell preset", "sh -c", "python -c", "claude", "aider"])
def test_a_real_start_never_runs_a_note(
    form: str, git_repo: Path, tmp_path: Path, recorder: Path, stand_ins: Path
) -> None:
    """Notes carrying every payload, through a real `gitrun start`."""
    markers = tmp_path / "markers"
    markers.mkdir()
    executors: dict[str, dict[str, object]] = {
        "shell preset": {"preset": "shell", "shell": f'{recorder} "$GITRUN_POINTER"'},
        "sh -c": {"command": ["sh", "-c", f'{recorder} "$1"', "sh", "{pointer}"]},
        "python -c": {"command": [sys.executable, "-c", EXEC_ARGV, str(recorder), "{pointer}"]},
        "claude": {"preset": "claude"},
        "aider": {"preset": "aider"},
    }
    tasks: list[dict[str, object]] = [
        {
            "id": f"t{n:02d}",
            "outputs": [f"out/t{n:02d}.json"],
            "note": with_marker(p, markers / "m"),
        }
        for n, p in enumerate(ONE_LINE)
    ]
    packet = {"executor": executors[form], "limits": {"concurrency": 8, "timeout": "60s"}}
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "define r")
    outcome = start_run(git_repo, "r", quiet)
    assert_no_marker(markers, git_repo, form)
    assert outcome.exit_code == 0
    for task in tasks:
        got = json.loads(git(git_repo, "show", f"gitrun/r:out/{task['id']}.json"))
        pointer = got["env"]["GITRUN_POINTER"]
        assert str(task["note"]) in pointer
        assert pointer in got["argv"]


def test_a_file_name_fed_through_gitrun_new_never_runs(
    git_repo: Path, tmp_path: Path, recorder: Path
) -> None:
    """`gitrun new --inputs 'docs/*.md'` over `docs/$(touch PWNED).md`, shell preset."""
    build_tree(git_repo, {"docs/$(touch PWNED).md": "x\n", "docs/`touch PWNED`.md": "y\n"})
    commit_all(git_repo, "docs")

    def gitrun(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gitrun", *args],
            cwd=git_repo,
            capture_output=True,
            text=True,
            timeout=120,
        )

    made = gitrun("new", "r", "--inputs", "docs/*.md", "--output", "out/{stem}.json")
    assert made.returncode == 0, made.stderr
    packet_path = git_repo / ".gitrun/runs/r/packet.toml"
    packet = tomllib.loads(packet_path.read_text())
    packet["limits"]["timeout"] = "60s"

    def use_shell(script: str) -> None:
        packet["executor"] = {"kind": "command", "preset": "shell", "shell": script}
        packet_path.write_text(tomli_w.dumps(packet))
        commit_all(git_repo, "define r")

    # The spelling that ran the file name: refused before anything starts.
    use_shell(f'echo "working on {{pointer}}"; {recorder} "{{pointer}}"')
    refused = gitrun("start", "r")
    assert not list(tmp_path.rglob("PWNED")), "a file name ran as a command"
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "[executor] shell contains {pointer}" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not git(git_repo, "branch", "--list", "gitrun/r")

    use_shell(f'echo "working on $GITRUN_POINTER"; {recorder} "$GITRUN_POINTER"')
    started = gitrun("start", "r")
    assert not list(tmp_path.rglob("PWNED")), "a file name ran as a command"
    assert started.returncode == 0, started.stdout + started.stderr
    got = json.loads(git(git_repo, "show", "gitrun/r:out/$(touch PWNED).json"))
    assert "docs/$(touch PWNED).md" in got["argv"][0]
