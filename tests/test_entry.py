"""Leaving without the interpreter's teardown (gitrun.entry.leave), only when
nothing can be lost: each test runs a real child process that ends with
``leave`` and reads what it left behind.

A module-level object whose finalizer prints ``teardown`` tells the two ways
apart: the interpreter's teardown runs it, the quick exit does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import run_gitrun

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="the quick exit needs /proc to list descriptors"
)

PRELUDE = """
import atexit, sys
from gitrun.entry import leave, writable_descriptors
inherited = writable_descriptors()

class Late:
    def __del__(self):
        sys.stdout.write("teardown\\n")
        sys.stdout.flush()

keep = Late()
atexit.register(lambda: sys.stdout.write("atexit\\n"))
"""
# Buffered streams, as a user's are: what the quick exit must not lose.
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def child(body: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=BUFFERED,
        **kwargs,
    )


def test_nothing_open_skips_the_teardown_and_keeps_what_stdout_buffered() -> None:
    done = child('sys.stdout.write("buffered "); sys.stderr.write("said"); leave(3, inherited)')
    assert done.returncode == 3
    assert done.stdout == "buffered atexit\n"  # atexit once, no teardown
    assert done.stderr == "said"


def test_a_file_of_its_own_still_open_gets_the_whole_teardown(tmp_path: Path) -> None:
    out = tmp_path / "unflushed.txt"
    done = child(f'f = open({str(out)!r}, "w"); f.write("data " * 1000); leave(0, inherited)')
    assert done.returncode == 0
    assert out.read_text() == "data " * 1000
    assert done.stdout.count("atexit") == 1
    assert "teardown" in done.stdout


def test_another_thread_is_waited_for(tmp_path: Path) -> None:
    out = tmp_path / "late.txt"
    done = child(
        f"""
        import threading, time, pathlib
        def late():
            time.sleep(0.3)
            pathlib.Path({str(out)!r}).write_text("written")
        threading.Thread(target=late).start()
        leave(0, inherited)
        """
    )
    assert done.returncode == 0
    assert out.read_text() == "written"
    assert done.stdout.count("atexit") == 1
    assert "teardown" in done.stdout


def test_a_descriptor_it_was_given_does_not_stop_the_quick_exit(tmp_path: Path) -> None:
    with open(tmp_path / "given.log", "w") as given:
        fd = given.fileno()
        done = child("leave(0, inherited)", pass_fds=(fd,))
    assert done.returncode == 0
    assert done.stdout == "atexit\n"


def test_what_a_replaced_stdout_left_in_the_original_is_written() -> None:
    done = child(
        """
        import io
        sys.__stdout__.write("original ")
        sys.stdout = io.StringIO()
        leave(0, inherited)
        """
    )
    assert done.returncode == 0
    assert done.stdout.startswith("original ")


def test_a_closed_stdout_exits_as_the_interpreter_always_did() -> None:
    def closed_reader(body: str) -> tuple[int, str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + body],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=BUFFERED,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # long before the child writes: its flush fails
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err

    quick = closed_reader('sys.stdout.write("x" * 10); leave(3, inherited)')
    usual = closed_reader('sys.stdout.write("x" * 10); raise SystemExit(3)')
    assert quick[0] == usual[0] != 0  # the failed flush, not the 3
    addresses = re.compile(r"0x[0-9a-f]+")
    assert addresses.sub("", quick[1]) == addresses.sub("", usual[1])
    assert "BrokenPipeError" in quick[1]


def test_without_a_listing_of_descriptors_the_exit_is_the_usual_one() -> None:
    done = child("leave(4, None)")
    assert done.returncode == 4
    assert done.stdout.count("atexit") == 1
    assert "teardown" in done.stdout


def test_the_command_leaves_quickly_and_its_output_is_whole(git_repo: Path) -> None:
    """`python -m gitrun` ends through leave: what it printed arrives whole."""
    done = run_gitrun(git_repo, "status", "--json", "--all")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
