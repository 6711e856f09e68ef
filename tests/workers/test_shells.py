"""A shell that cannot run the program it was told to: exit 127 or 126 and
its own sentence naming the program. The sentences are the shells' own
(dash, bash, zsh, busybox and the launchers of coreutils), read as a table;
a real run of ``sh -c`` naming a missing program halts after one attempt."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from gitrun.engine import governor
from gitrun.workers.shells import shell_refusal
from tests.helpers import build_tree, commit_all, ledger_records, write_run

quiet = lambda _line: None  # noqa: E731

# -- the decision, as a table ----------------------------------------------------------

# (exit status, the output's end, the program named or None, what it means)
CASES = [
    # dash, Debian's sh, with $0 "sh" or a name of the command's choosing
    (127, "sh: 1: no-such-cli: not found\n", "no-such-cli", "missing"),
    (127, "worker: 3: no-such-cli: not found", "no-such-cli", "missing"),
    (127, "sh: 1: ./bin/tool: not found", "./bin/tool", "missing"),
    (126, "sh: 1: ./bin/tool: Permission denied", "./bin/tool", "refused"),
    (126, "sh: 1: /tmp/blob: Exec format error", "/tmp/blob", "refused"),
    # bash 5.1 and later
    (127, "bash: line 1: no-such-cli: command not found", "no-such-cli", "missing"),
    (127, "sh: line 1: ./nope: No such file or directory", "./nope", "missing"),
    (127, "bash: line 1: ./tool: cannot execute: required file not found", "./tool", "interpreter"),
    (126, "bash: line 1: ./tool: Permission denied", "./tool", "refused"),
    (126, "bash: line 1: /tmp: Is a directory", "/tmp", "refused"),
    (
        126,
        "bash: line 1: ./blob: cannot execute binary file: Exec format error",
        "./blob",
        "refused",
    ),
    (127, "run.sh: line 7: jq: command not found", "jq", "missing"),
    # bash before 5.1, without the line number
    (127, "bash: no-such-cli: command not found", "no-such-cli", "missing"),
    (
        126,
        "/bin/bash: ./tool: /usr/bin/perl6: bad interpreter: No such file or directory",
        "./tool",
        "interpreter",
    ),
    # zsh (its messages, from its exec.c: "command not found: %s", "%e: %s")
    (127, "zsh:1: command not found: no-such-cli", "no-such-cli", "missing"),
    (127, "zsh: command not found: no-such-cli", "no-such-cli", "missing"),
    (127, "zsh:1: no such file or directory: ./nope", "./nope", "missing"),
    (126, "zsh:1: permission denied: ./tool", "./tool", "refused"),
    # busybox ash, ksh, mksh
    (127, "sh: no-such-cli: not found", "no-such-cli", "missing"),
    (127, "ksh: no-such-cli: not found", "no-such-cli", "missing"),
    (127, "mksh: no-such-cli: inaccessible or not found", "no-such-cli", "missing"),
    # coreutils' and util-linux's launchers, in a UTF-8 locale and in C
    (127, "env: ‘no-such-cli’: No such file or directory", "no-such-cli", "missing"),
    (127, "env: 'no-such-cli': No such file or directory", "no-such-cli", "missing"),
    (
        127,
        "timeout: failed to run command ‘no-such-cli’: No such file or directory",
        "no-such-cli",
        "missing",
    ),
    (
        127,
        "setsid: failed to execute no-such-cli: No such file or directory",
        "no-such-cli",
        "missing",
    ),
    (126, "env: ‘./tool’: Permission denied", "./tool", "refused"),
    # after some output of the worker's own
    (127, "reading the task\nsh: 1: no-such-cli: not found\n\n", "no-such-cli", "missing"),
    # not a shell's refusal: the program's own words, or another status
    (127, "", None, None),
    (127, "error: widget: not found", None, None),
    (127, "config.toml: No such file or directory", None, None),
    (127, "cat: notes.md: No such file or directory", None, None),
    (127, "python: model weights: command not found", None, None),
    (126, "sh: 1: no-such-cli: not found", None, None),  # the status says otherwise
    (1, "sh: 1: no-such-cli: not found", None, None),
    (2, "bash: line 1: ./tool: Permission denied", None, None),
    (None, "sh: 1: no-such-cli: not found", None, None),  # killed by a signal
    # said long before the end: the worker went on, its last words are its own
    (127, "sh: 1: helper: not found\nstep 2\nstep 3\nstep 4\ngave up", None, None),
]


@pytest.mark.parametrize(("status", "output", "program", "meaning"), CASES)
def test_a_shells_refusal_is_known_by_its_status_and_words(
    status: int | None, output: str, program: str | None, meaning: str | None
) -> None:
    found = shell_refusal(status, output)
    if program is None:
        assert found is None
    else:
        assert found is not None
        assert (found.program, found.meaning) == (program, meaning)


@pytest.mark.parametrize("shell", ["sh", "dash", "bash", "zsh", "busybox"])
def test_each_installed_shell_says_it_in_a_known_form(shell: str, tmp_path: Path) -> None:
    """The table's rows, checked against the shells on this machine."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    front = [shell, "sh"] if shell == "busybox" else [shell]
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o644)
    for script, status, program in (
        ("no-such-cli x", 127, "no-such-cli"),
        (f"{tool} x", 126, str(tool)),
    ):
        said = subprocess.run(
            [*front, "-c", script, "worker"], capture_output=True, text=True, timeout=10
        )
        assert said.returncode == status, said
        found = shell_refusal(said.returncode, said.stdout + said.stderr)
        assert found is not None and found.program == program, said.stderr


# -- through a real run ------------------------------------------------------------------


def _run(repo: Path, command: list[str], count: int = 3) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, count + 1)]
    packet = {
        "executor": {"command": command},
        "limits": {"canary": 1, "concurrency": 1, "max_attempts": 3, "timeout": "60s"},
    }
    write_run(repo, "r", tasks, packet)
    commit_all(repo, "run r")


def test_sh_naming_a_missing_program_halts_after_one_attempt(git_repo: Path) -> None:
    """Before, three attempts each said `not found` before the run halted (a
    one-task run as a retry storm, with the advice to raise limits.max_spawns)."""
    _run(git_repo, ["sh", "-c", 'no-such-cli "$1"', "sh", "{task}"])
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert outcome.halt.message == (
        "environment fault: t1 attempt 1: the shell cannot find the program `no-such-cli` "
        "(exit 127, `sh: 1: no-such-cli: not found`); install it or put it on PATH (or fix "
        "[executor] command), then `gitrun retry` and `gitrun resume`"
    )
    assert outcome.status.spawns == 1
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["task"], r["attempt"]) for r in records] == [("t1", 1)]


def test_bash_naming_a_missing_program_halts_after_one_attempt(git_repo: Path) -> None:
    _run(git_repo, ["bash", "-c", 'no-such-cli "$1"', "worker", "{task}"])
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert "the shell cannot find the program `no-such-cli`" in outcome.halt.message
    assert "`worker: line 1: no-such-cli: command not found`" in outcome.halt.message
    assert outcome.status.spawns == 1


def test_a_script_that_is_not_executable_halts_after_one_attempt(git_repo: Path) -> None:
    build_tree(git_repo, {"bin/tool": "#!/bin/sh\necho hi\n"})  # committed without +x
    _run(git_repo, ["sh", "-c", './bin/tool "$1"', "sh", "{task}"])
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.message == (
        "environment fault: t1 attempt 1: the shell cannot execute `./bin/tool` (exit 126, "
        "`sh: 1: ./bin/tool: Permission denied`); make it executable (`chmod +x`) or fix "
        "[executor] command, then `gitrun retry` and `gitrun resume`"
    )
    assert outcome.status.spawns == 1


def test_a_program_that_exits_127_by_itself_is_judged_as_before(git_repo: Path) -> None:
    """Its own words are not a shell's: no halt at the first attempt (the
    breaker for fast, empty failures still stops a run of them)."""
    build_tree(
        git_repo,
        {
            "bin/agent": f"#!{sys.executable}\nimport sys\nprint('error: widget: not found')\n"
            "sys.exit(127)\n"
        },
    )
    (git_repo / "bin/agent").chmod(0o755)
    _run(git_repo, ["bin/agent", "{task}"])
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.spawns > 1
    assert outcome.halt is None or "cannot find the program" not in outcome.halt.message
