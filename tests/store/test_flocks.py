"""flock locks taken without filelock, and taken over from the dead.

Real processes and threads; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from gitrun.store.flocks import Held, hold
from tests.helpers import one_task_run

HOLDER = """
import sys, time
from pathlib import Path
from gitrun.store.flocks import hold
with hold(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_lock_whose_holder_was_killed_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "driver.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(Held), hold(path, wait=False):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        with hold(path, wait=False):  # the kernel let go: no unlock step
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_it_is_the_same_lock_filelock_takes(tmp_path: Path) -> None:
    """A gitrun of an earlier version (filelock) and this one exclude each other."""
    path = tmp_path / "commit.lock"
    theirs = FileLock(str(path), timeout=0)
    with theirs, pytest.raises(Held), hold(path, wait=False):
        pass
    with hold(path, wait=False), pytest.raises(Timeout):
        theirs.acquire()
    with theirs:
        pass


def test_threads_of_one_process_take_turns(tmp_path: Path) -> None:
    """The committing thread and a flush on the driver's thread never hold it together."""
    path = tmp_path / "commit.lock"
    order: list[str] = []
    first_in, second_tried = threading.Event(), threading.Event()

    def first() -> None:
        with hold(path):
            order.append("first in")
            first_in.set()
            assert second_tried.wait(10)
            time.sleep(0.1)  # the other thread is blocked meanwhile
            order.append("first out")

    def second() -> None:
        assert first_in.wait(10)
        second_tried.set()
        with hold(path):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
        assert not thread.is_alive()
    assert order == ["first in", "first out", "second in"]


def test_a_start_never_imports_filelock(git_repo: Path) -> None:
    """filelock imports asyncio: ~45 ms of every start, for a lock flock gives."""
    one_task_run(git_repo)
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('MODULES ' + json.dumps("
        "[m for m in ('filelock', 'asyncio') if m in sys.modules]) + chr(10)))\n"
        "sys.argv = ['gitrun', 'start', 'r', '--quiet']\n"
        "from gitrun.cli.entry import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=git_repo,
        capture_output=True,
        text=True,
        env={**os.environ, "GITRUN_MAX_LOAD": "1000000"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    assert json.loads(line.removeprefix("MODULES ")) == []
