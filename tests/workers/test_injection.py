"""Task data is never code: a hostile payload in it never runs.

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

from gitrun.commands.session import start_run
from gitrun.definition.load import load_run
from gitrun.definition.schema import Executor
from gitrun.processes.proc import clean_env
from gitrun.proof.check import check_run
from gitrun.workers.executor import (
    UnsafeCommand,
    command_template,
    render_command,
    template_problems,
)
from gitrun.workers.interpreters import code_slots
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, commit_all, git, run_gitrun, write_run

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
        "repo": "/repo",
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
    out = run_gitrun_call(["check", "r"], git_repo)
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
        return run_gitrun(git_repo, *args)

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


# Programs that hand an argument to a shell as a command line. Each ran a
# task note for real before `check` knew them. (template, needs root)
COMMAND_LINE_REPROS: dict[str, tuple[list[str], bool]] = {
    "script -c": (["script", "-q", "-c", "{pointer}", "/dev/null"], False),
    "runuser USER -c": (["runuser", "root", "-c", "{pointer}"], True),
    "su USER -c": (["su", "root", "-c", "{pointer}"], True),
    "timeout watch": (["timeout", "3", "watch", "-n", "1", "{pointer}"], False),
}


@pytest.mark.parametrize("name", sorted(COMMAND_LINE_REPROS))
def test_programs_that_run_a_command_line_are_refused(
    name: str, git_repo: Path, tmp_path: Path
) -> None:
    template, needs_root = COMMAND_LINE_REPROS[name]
    program = template[2] if template[0] == "timeout" else template[0]
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed here")
    if needs_root and os.geteuid() != 0:
        pytest.skip(f"{program} USER -c runs without a password only for root")
    marker = tmp_path / "PWNED_NOTE"
    note = f"$(touch {marker})"
    values = values_for(note)
    # The danger is real here: substituted naively, the program runs the note.
    naive = [values["pointer"] if arg == "{pointer}" else arg for arg in template]
    env = {**clean_env(), "TERM": "dumb"}
    subprocess.run(naive, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert marker.exists(), f"{name}: the repro did not run here, so the test would prove nothing"
    marker.unlink()

    tasks: list[dict[str, object]] = [{"id": "t1", "outputs": ["out/t1.json"], "note": note}]
    write_run(git_repo, "r", tasks, {"executor": {"command": template}})
    commit_all(git_repo, "define r")
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    messages = [p.message for p in problems if p.code == "executor"]
    assert messages and all("[executor] command[" in m for m in messages), messages
    with pytest.raises(UnsafeCommand, match=r"\[executor\]"):
        render_command(template, values)  # also when check was skipped
    started = run_gitrun_call(["start", "r"], git_repo, timeout=120)
    assert started.returncode == 1 and "[executor]" in started.stderr, started.stderr
    assert not marker.exists(), f"{name}: gitrun start ran the note"


P = "{pointer}"
# Every {pointer} here lands where a program parses it as code (or picks the
# program): code_slots must mark it, and render_command must refuse.
COMMAND_LINE_FORMS: dict[str, list[str]] = {
    "script -c": ["script", "-q", "-c", P, "/dev/null"],
    "script --command=": ["script", "--command", P],
    "script, options after the file": ["script", "/dev/null", "-c", P],
    "su -c": ["su", "root", "-c", P],
    "su -": ["su", "-", "root", "-c", P],
    "su --command": ["su", "--command", P, "root"],
    "su args to the shell": ["su", "root", P],
    "su -s": ["su", "-s", P, "root"],
    "runuser -c": ["runuser", "root", "-c", P],
    "runuser --session-command": ["runuser", "--session-command", P, "root"],
    "sg": ["sg", "users", P],
    "watch": ["watch", P],
    "watch -n": ["timeout", "3", "watch", "-n", "1", P],
    "watch, several operands": ["watch", "echo", P],
    "ssh": ["ssh", "host", "agent", P],
    "ssh -p": ["ssh", "-p", "22", "host", "agent", P],
    "ssh options after host": ["ssh", "host", "-t", P],
    "ssh -o ProxyCommand": ["ssh", "-o", P, "host"],
    "mosh": ["mosh", "host", "--", "agent", P],
    "sudo -s": ["sudo", "-s", "agent", P],
    "sudo -i": ["sudo", "-u", "x", "-i", P],
    "sudo --login": ["sudo", "--login", P],
    "tmux": ["tmux", "new-session", "-d", P],
    "tmux -c": ["tmux", "-c", P],
    "screen": ["screen", "-dm", P],
    "screen -X stuff": ["screen", "-S", "s", "-X", "stuff", P],
    "expect -c": ["expect", "-c", P],
    "nix-shell --run": ["nix-shell", "-p", "git", "--run", P],
    "nix-shell --command": ["nix-shell", "--command", P],
    "npx -c": ["npx", "-c", P],
    "npm exec -c": ["npm", "exec", "-c", P],
    "npm run with args": ["npm", "run", "agent", "--", P],
    "parallel": ["parallel", "agent", P],
    "parallel :::": ["parallel", ":::", P],
    "at": ["at", "now", P],
    "at -f": ["at", "-f", P, "now"],
    "batch": ["batch", P],
    "entr -s": ["entr", "-s", P],
    "flock -c": ["flock", "/tmp/lock", "-c", P],
    "env -S": ["env", "-S", P],
    # wrappers that run argv keep the wrapped program analysed
    "chroot sh -c": ["chroot", "/srv", "sh", "-c", P],
    "chroot script": ["chroot", "--userspec", "u:g", "/srv", "script", "-c", P],
    "unshare su": ["unshare", "-r", "--wd", "/", "su", "root", "-c", P],
    "nsenter bash -c": ["nsenter", "-t", "1", "-m", "bash", "-c", P],
    "firejail watch": ["firejail", "--net=none", "watch", P],
    "systemd-run ssh": ["systemd-run", "--user", "-p", "X=1", "ssh", "h", P],
    "bwrap sh -c": ["bwrap", "--bind", "/", "/", "--dev", "/dev", "sh", "-c", P],
    "bwrap --overlay then sh": ["bwrap", "--overlay", "a", "b", "c", "sh", "-c", P],
    "docker run script": ["docker", "run", "--rm", "-e", "A=1", "img", "script", "-c", P],
    "docker run --entrypoint": ["docker", "run", "--entrypoint", P, "img"],
    "docker run image from data": ["docker", "run", "--rm", P],
    "docker exec su": ["docker", "exec", "-it", "box", "su", "root", "-c", P],
    "podman run bash": ["podman", "run", "--name", "x", "img", "bash", "-c", P],
    "kubectl exec": ["kubectl", "exec", "pod", "-c", "ctr", "--", "sh", "-c", P],
    "kubectl exec watch": ["kubectl", "exec", "pod", "--", "watch", P],
    "uv run": ["uv", "run", "--with", "x", "python", "-c", P],
    "uv tool run": ["uv", "tool", "run", "--from", "x", "sh", "-c", P],
    "uvx": ["uvx", "--with", "y", "script", "-c", P],
    "poetry run": ["poetry", "run", "sh", "-c", P],
    "conda run": ["conda", "run", "-n", "env", "bash", "-c", P],
    "pipx run": ["pipx", "run", "--spec", "x", "watch", P],
    "unknown runner then watch": ["my-runner", "watch", P],
    "unknown runner then su": ["my-runner", "--x", "su", "root", "-c", P],
}

# Each {pointer} here is a whole argument of a program that takes it as data.
ARGV_FORMS: dict[str, list[str]] = {
    "runuser -u": ["runuser", "-u", "agent", "--", "claude", "-p", P],
    "watch -x": ["watch", "-x", "agent", P],
    "npx package": ["npx", "-y", "@scope/agent", "-p", P],
    "npm exec --": ["npm", "exec", "--", "agent", P],
    "docker run": ["docker", "run", "--rm", "-i", "-e", "A=1", "--name", "x", "img", "agent", P],
    "docker exec": ["docker", "exec", "-it", "box", "agent", P],
    "kubectl exec": ["kubectl", "exec", "pod", "-c", "ctr", "--", "agent", P],
    "uv run": ["uv", "run", "--with", "x", "agent", P],
    "uvx": ["uvx", "agent", P],
    "poetry run": ["poetry", "run", "agent", P],
    "conda run": ["conda", "run", "-n", "env", "agent", P],
    "pipx run": ["pipx", "run", "agent", P],
    "chroot": ["chroot", "/srv", "agent", P],
    "unshare": ["unshare", "-r", "-n", "agent", P],
    "nsenter": ["nsenter", "-t", "1", "-m", "agent", P],
    "firejail": ["firejail", "--net=none", "agent", P],
    "systemd-run": ["systemd-run", "--user", "-p", "X=1", "--wait", "agent", P],
    "bwrap": ["bwrap", "--bind", "/", "/", "--overlay", "a", "b", "c", "agent", P],
    "flock": ["flock", "/tmp/lock", "agent", P],
    "sudo -u": ["sudo", "-u", "x", "agent", P],
    "xargs -I": ["xargs", "-I", "%", "agent", "%", P],
    "codex preset shape": ["codex", "exec", "--model", "{model}", "--sandbox", "w", P],
}


@pytest.mark.parametrize("name", sorted(COMMAND_LINE_FORMS))
def test_a_placeholder_in_a_command_line_or_program_slot_is_refused(name: str) -> None:
    template = COMMAND_LINE_FORMS[name]
    assert template.index(P) in code_slots(template), name
    problems = template_problems(template)
    assert problems and "[executor]" in problems[0]
    with pytest.raises(UnsafeCommand):
        render_command(template, values_for(PAYLOADS[0]))


@pytest.mark.parametrize("name", sorted(ARGV_FORMS))
def test_a_placeholder_that_stays_one_argv_element_is_accepted(name: str) -> None:
    template = ARGV_FORMS[name]
    assert template.index(P) not in code_slots(template), (name, code_slots(template))
    assert template_problems(template) == []


def test_make_eval_never_runs_a_note_end_to_end(git_repo: Path, tmp_path: Path) -> None:
    """`make --eval {pointer}` passed check, and a note `$(shell touch ...)`
    ran during `gitrun start`: make expands its --eval text as a makefile."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed here")
    marker = tmp_path / "PWNED"
    note = f"$(shell touch {marker})"
    template = ["make", "-f", "/dev/null", "--eval", "{pointer}", "all"]
    naive = [values_for(note)["pointer"] if arg == "{pointer}" else arg for arg in template]
    subprocess.run(naive, cwd=tmp_path, capture_output=True, timeout=60, env=clean_env())
    assert marker.exists(), "the repro did not run here, so the test would prove nothing"
    marker.unlink()

    tasks: list[dict[str, object]] = [{"id": "t1", "outputs": ["out/t1.json"], "note": note}]
    write_run(git_repo, "r", tasks, {"executor": {"command": template}})
    commit_all(git_repo, "define r")
    problems = check_run(load_run(git_repo, "r", environ={})).problems
    messages = [p.message for p in problems if p.code == "executor"]
    assert messages and "[executor] command[4] is {pointer}" in messages[0], messages
    started = run_gitrun_call(["start", "r"], git_repo, timeout=120)
    assert not marker.exists(), "gitrun start ran a note through make --eval"
    assert started.returncode == 1 and "[executor]" in started.stderr, started.stderr


# Programs the table did not know, each of which runs an argument as code.
UNKNOWN_BEFORE_FORMS: dict[str, list[str]] = {
    "make --eval": ["make", "-f", "/dev/null", "--eval", P, "all"],
    "make --eval=": ["make", "all", "--eval", P],
    "make -E": ["make", "-E", P],
    "make -f": ["make", "-f", P],
    "make assignment operand": ["make", P],
    "deno eval": ["deno", "eval", P],
    "deno eval -p": ["deno", "eval", "-p", P],
    "deno run script from data": ["deno", "run", "-A", P],
    "deno task": ["deno", "task", P],
    "vim -c": ["vim", "-c", P],
    "vim +cmd operand": ["vim", P],
    "vim -S": ["vim", "-S", P],
    "nvim --cmd": ["nvim", "--cmd", P],
    "nvim -c": ["nvim", "-c", P],
    "nvim +cmd operand": ["nvim", "--headless", P],
    "vi -c": ["/usr/bin/vi", "-c", P],
    "emacs --eval": ["emacs", "--batch", "--eval", P],
    "emacs -l": ["emacs", "-l", P],
    "gdb -ex": ["gdb", "-batch", "-ex", P],
    "gdb --eval-command": ["gdb", "--eval-command", P],
    "gdb program": ["gdb", "--args", P],
    "git -c": ["git", "-c", P, "log"],
    "git -c, glued": ["git", "--no-pager", "-c", P, "status"],
    "git rebase --exec": ["git", "rebase", "--exec", P, "main"],
    "git rebase -x": ["git", "rebase", "-x", P],
    "git submodule foreach": ["git", "submodule", "foreach", P],
    "git bisect run": ["git", "bisect", "run", P],
    "git bisect run sh -c": ["git", "bisect", "run", "sh", "-c", P],
    "rsync -e": ["rsync", "-a", "-e", P, "src/", "host:dst/"],
    "rsync --rsh": ["rsync", "--rsh", P, "src/", "host:dst/"],
    "rsync --rsync-path": ["rsync", "--rsync-path", P, "src/", "host:dst/"],
    "xterm -e": ["xterm", "-e", P],
    "xterm -e argv": ["xterm", "-hold", "-e", "agent", P],
    "busybox applet": ["busybox", P],
    "busybox sh -c": ["busybox", "sh", "-c", P],
    "bash5 -c": ["bash5", "-c", P],
    "bash-5.2 -c": ["bash-5.2", "-c", P],
    "sh.exe -c": ["sh.exe", "-c", P],
    "zsh5.9 -c": ["/usr/local/bin/zsh5.9", "-c", P],
    "ksh93 -c": ["ksh93", "-c", P],
    "bash.exe windows path": ["C:\\Program Files\\Git\\bin\\bash.exe", "-c", P],
    "cmd /c": ["cmd", "/c", P],
    "cmd.exe /c": ["cmd.exe", "/s", "/c", P],
    "cmd /k": ["cmd", "/k", P],
    "powershell -Command": ["powershell", "-Command", P],
    "powershell.exe -Command": ["powershell.exe", "-NoProfile", "-Command", P],
    "pwsh.exe -c": ["pwsh.exe", "-c", P],
    "python.exe -c": ["python.exe", "-c", P],
    "unknown runner then make": ["my-runner", "make", "--eval", P],
}

# ... while these, of the same programs, take the placeholder as data.
KNOWN_PROGRAMS_DATA_FORMS: dict[str, list[str]] = {
    "git commit -m": ["git", "commit", "-m", P],
    "git log --grep": ["git", "log", "--grep", P],
    "deno run script args": ["deno", "run", "-A", "agent.ts", P],
    "rsync destination": ["rsync", "-a", "src/", P],
    "busybox applet argv": ["busybox", "timeout", "5", "agent", P],
}


@pytest.mark.parametrize("name", sorted(UNKNOWN_BEFORE_FORMS))
def test_programs_the_table_did_not_know_are_refused(name: str) -> None:
    template = UNKNOWN_BEFORE_FORMS[name]
    assert template.index(P) in code_slots(template), (name, code_slots(template))
    problems = template_problems(template)
    assert problems and "[executor]" in problems[0]


@pytest.mark.parametrize("name", sorted(KNOWN_PROGRAMS_DATA_FORMS))
def test_known_programs_still_take_whole_arguments_as_data(name: str) -> None:
    template = KNOWN_PROGRAMS_DATA_FORMS[name]
    assert template.index(P) not in code_slots(template), (name, code_slots(template))
