"""What a worker controls reaches no terminal raw.

A worker that writes a stray file named ``stray\\x1b]0;PWNED\\x07.txt`` and
prints an escape sequence as its last line once had ``start``, ``status``
and ``resume`` print both raw (retitling the user's terminal), and the halt's
diagnosis committed raw to the ledger, so it replayed on every machine.
Every such character is now shown escaped, by one function,
:func:`gitrun.visible.visible`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.store.ledger import LedgerWriter
from gitrun.visible import visible
from tests.helpers import commit_all, committed_ledger, run_gitrun, write_run

RAW = ("\x1b", "\x07", "\x9b", "\r")
# A stray file outside every owned path, then an escape sequence as the last
# line of output, and no output: the canary fails with the line as its diagnosis.
WORKER = r"""
printf x > "stray$(printf '\033]0;PWNED\007').txt"
printf 'working\n'
printf 'oops \033[31mRED\033]0;PWNED\007\n'
exit 1
"""
SHOWN_FILE = "stray\\x1b]0;PWNED\\x07.txt"
SHOWN_LINE = "oops \\x1b[31mRED\\x1b]0;PWNED\\x07"


def _no_raw(text: str) -> None:
    found = [ch for ch in RAW if ch in text]
    assert not found, f"raw {found!r} in: {text!r}"


@pytest.fixture
def hostile(git_repo: Path) -> Path:
    table = [{"id": "t1", "outputs": ["out/t1.json"]}]
    packet = {
        # Unconfined, so that its stray write lands and the audit reports it.
        "executor": {"kind": "command", "preset": "shell", "shell": WORKER, "isolation": "none"},
        "limits": {"timeout": "60s", "max_attempts": 2, "max_spawns": 10},
    }
    write_run(git_repo, "r", table, packet)
    commit_all(git_repo, "run r")
    return git_repo


def test_start_status_resume_and_the_committed_halt_show_a_worker_s_escapes(
    hostile: Path,
) -> None:
    started = run_gitrun(hostile, "start", "r")
    assert started.returncode == 3, started.stdout + started.stderr
    assert any("\x1b" in p.name for p in hostile.iterdir())  # the worker really wrote it
    for out in (started.stdout, started.stderr):
        _no_raw(out)
    assert f"ownership violation: {SHOWN_FILE} changed outside every owned path" in started.stderr
    assert "halted: canary failed: t1 used up its attempts without one valid output " in (
        started.stdout
    )
    assert f"(last: status 1: `{SHOWN_LINE}`)" in started.stdout
    assert f"ownership violation: {SHOWN_FILE}" in started.stdout

    halts = [r for r in committed_ledger(hostile) if r.get("event") == "halt"]
    assert len(halts) == 1
    message = str(halts[0]["message"])
    _no_raw(message)
    assert f"`{SHOWN_LINE}`" in message

    status = run_gitrun(hostile, "status", "r")
    _no_raw(status.stdout + status.stderr)
    assert f"`{SHOWN_LINE}`" in status.stdout and SHOWN_FILE in status.stdout
    _no_raw(run_gitrun(hostile, "status").stdout)

    resumed = run_gitrun(hostile, "resume", "r")
    assert resumed.returncode == 3
    _no_raw(resumed.stdout + resumed.stderr)
    assert f"`{SHOWN_LINE}`" in resumed.stdout

    page = hostile.parent / "report.html"
    reported = run_gitrun(hostile, "report", "r", "--output", str(page))
    assert reported.returncode == 0, reported.stderr
    _no_raw(page.read_text())
    assert SHOWN_FILE in page.read_text()

    retried = run_gitrun(hostile, "retry", "r")
    assert retried.returncode == 0, retried.stderr
    _no_raw(retried.stdout + retried.stderr)
    assert "lifted the halt (canary failed" in retried.stdout and SHOWN_LINE in retried.stdout


def test_a_raw_halt_an_older_gitrun_committed_is_shown_escaped(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    commit_all(git_repo, "run r")
    writer = LedgerWriter(git_repo / ".gitrun/runs/r")
    try:
        writer.write(
            {
                "event": "halt",
                "kind": "environment fault",
                "message": "environment fault: 3 of 3 attempts: `\x1b[2J\x1b]0;PWNED\x07`",
                "at": "2026-01-01T00:00:00.000+00:00",
            }
        )
    finally:
        writer.close()
    status = run_gitrun(git_repo, "status", "r")
    _no_raw(status.stdout + status.stderr)
    assert "`\\x1b[2J\\x1b]0;PWNED\\x07`" in status.stdout
    assert json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)["halt"]


def test_a_validator_quoting_the_output_is_shown_escaped(git_repo: Path) -> None:
    """A command validator's last line (which may quote the worker's output)
    becomes the attempt's reason: printed, and kept in the ledger."""
    table = [{"id": "t1", "outputs": ["out/t1.txt"]}]
    packet = {
        "executor": {
            "kind": "command",
            "preset": "shell",
            "shell": "mkdir -p out && printf 'bad\\033]0;PWNED\\007' > out/t1.txt",
        },
        "validators": {"quote": {"kind": "command", "command": ["sh", "-c", 'cat "$0"; exit 1']}},
        "outputs": {"validators": ["quote"]},
        "limits": {"timeout": "60s", "max_attempts": 1, "canary": 0},
    }
    write_run(git_repo, "r", table, packet)
    commit_all(git_repo, "run r")
    run = run_gitrun(git_repo, "start", "r")
    assert run.returncode != 0
    _no_raw(run.stdout + run.stderr)
    assert "bad\\x1b]0;PWNED\\x07" in run.stderr
    reasons = [str(r.get("reason")) for r in committed_ledger(git_repo) if r.get("task") == "t1"]
    assert reasons and all("\x1b" not in r and "bad\\x1b]0;PWNED\\x07" in r for r in reasons)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, é, — and ▸", "plain text, é, — and ▸"),
        ("\x1b]0;t\x07", "\\x1b]0;t\\x07"),
        ("a\x9bb\x7fc\x00", "a\\x9bb\\x7fc\\x00"),
        ("line\rover", "line\\rover"),
        ("one\ntwo\tthree", "one\\ntwo\\tthree"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("zero\u200bwidth\u2028sep", "zero\\u200bwidth\\u2028sep"),
        ("bad\udcffbyte", "bad\\udcffbyte"),  # an undecodable byte of a file name
    ],
)
def test_visible_escapes_what_a_terminal_would_obey_and_keeps_the_rest(
    text: str, shown: str
) -> None:
    assert visible(text) == shown
    assert visible(visible(text)) == visible(text)  # said twice, escaped once
    assert visible(shown).isprintable()


def test_visible_keeps_gitrun_s_own_lines_when_asked() -> None:
    assert visible("a\x1b\nb", lines=True) == "a\\x1b\nb"
    assert visible("a\nb") == "a\\nb"
