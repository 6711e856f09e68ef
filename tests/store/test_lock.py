"""The driver lock's owner record on a disk that fills up.

A full disk is real here: a 64 KiB tmpfs mounted over the repository's
`.git/gitrun` and filled to the last page (skipped where mounting is not
permitted). The same logic is also driven without a mount by making the
record's directory impossible to write.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitrun.store.local import LocalPaths
from gitrun.store.lock import (
    LiveAttempt,
    LiveState,
    LocalStateUnwritable,
    RunLock,
    read_owner,
    run_locked,
)
from tests.helpers import git, one_task_run
from tests.helpers import run_gitrun as gitrun


@dataclass
class FullDisk:
    root: Path  # the mount point
    filler: Path

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def full_disk(git_repo: Path) -> Iterator[FullDisk]:
    """A tiny tmpfs over `.git/gitrun`, filled; unmounted at the end."""
    where = git_repo / ".git" / "gitrun"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        disk = FullDisk(where, where / "filler")
        disk.fill()
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_start_on_a_full_disk_is_one_sentence_and_works_once_freed(
    git_repo: Path, full_disk: FullDisk
) -> None:
    one_task_run(git_repo)
    refused = gitrun(git_repo, "start", "r")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("gitrun: error: cannot write ")
    assert "driver.json" in lines[0] and "No space left on device" in lines[0]
    assert "free space on that disk" in lines[0]
    assert not git(git_repo, "branch", "--list", "gitrun/r"), "nothing half-started"

    full_disk.free()
    started = gitrun(git_repo, "start", "r")
    assert started.returncode == 0, started.stdout + started.stderr
    assert git(git_repo, "show", "gitrun/r:out/t1.json") == "{}\n"


def test_a_heartbeat_on_a_full_disk_warns_once_and_resumes(
    git_repo: Path, full_disk: FullDisk
) -> None:
    full_disk.free()
    local = LocalPaths.of(git_repo, "r")
    warnings: list[str] = []
    lock = RunLock(local, warn=warnings.append)
    lock.beat()  # the first write has room
    first = read_owner(local)
    assert first is not None
    full_disk.fill()
    lock.beat(LiveState())
    lock.beat(LiveState())
    assert len(warnings) == 1
    assert "No space left on device" in warnings[0] and "driver.json" in warnings[0]
    assert read_owner(local) == first, "the last good record stays in place"
    full_disk.free()
    lock.beat()
    assert len(warnings) == 2 and "written again" in warnings[1]
    now = read_owner(local)
    assert now is not None and now.heartbeat > first.heartbeat


def test_an_unwritable_state_directory_is_one_sentence(git_repo: Path) -> None:
    """Without a mount: `.git/gitrun` is a regular file, so nothing can be written under it."""
    one_task_run(git_repo)
    (git_repo / ".git" / "gitrun").write_text("not a directory\n")
    refused = gitrun(git_repo, "start", "r")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gitrun: error: cannot write "), lines
    assert ".git/gitrun" in lines[0]


def test_a_later_heartbeat_that_cannot_be_written_is_not_fatal(git_repo: Path) -> None:
    """Without a mount: the record's directory turns into a file mid-run."""
    local = LocalPaths.of(git_repo, "r")
    warnings: list[str] = []
    with run_locked(local, "r") as held:
        held.warn = warnings.append
        shutil.rmtree(local.root)
        local.root.write_text("in the way\n")
        held.beat()
        held.beat()
        assert len(warnings) == 1 and str(local.owner) in warnings[0]
        local.root.unlink()
        local.root.mkdir()
        held.beat()
        assert read_owner(local) is not None
        assert "written again" in warnings[-1]


def test_the_first_write_failing_raises_a_sentence_not_an_oserror(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    lock = RunLock(LocalPaths(blocker / "r"))
    with pytest.raises(LocalStateUnwritable, match=r"cannot write .*driver\.json"):
        lock.beat()


def test_the_owner_record_is_a_version_1_record_with_the_live_state(git_repo: Path) -> None:
    """What `beat` writes is what `read_owner` reads back, live state included
    (status and the watchdog read the driver's concurrency and deadlines there)."""
    import json

    local = LocalPaths.of(git_repo, "r")
    state = LiveState(3, 4, 5.0, running=[LiveAttempt("t1", 2, 0.5, 1.0)])
    with run_locked(local, "r") as held:
        held.beat(state)
        on_disk = json.loads(local.owner.read_text())
        assert on_disk["v"] == 1 and on_disk["state"] == state.to_json()
        assert read_owner(local) == held.owner
    assert not local.owner.exists(), "released: the record goes with the lock"


def test_is_locked_answers_as_filelock_does_without_importing_it(git_repo: Path) -> None:
    """The probe tries flock(LOCK_EX) itself: True while another process holds
    the run lock through filelock, False once that process is killed, and the
    probe never leaves the lock taken."""
    import signal
    import time

    from filelock import FileLock

    from gitrun.store.lock import is_locked

    local = LocalPaths.of(git_repo, "r")
    assert not is_locked(local)  # no lock file
    local.root.mkdir(parents=True)
    local.lock.touch()
    assert not is_locked(local)
    mine = FileLock(str(local.lock), timeout=0)
    mine.acquire()  # the probe left it free
    mine.release()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; "
            "lock = FileLock(sys.argv[1], timeout=5); lock.acquire(); "
            "print('held', flush=True); time.sleep(60)",
            str(local.lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert is_locked(local)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    deadline = time.monotonic() + 10
    while is_locked(local) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not is_locked(local)
    local.lock.unlink()
    local.lock.symlink_to(git_repo / "nowhere")
    assert not is_locked(local)  # a dangling link, as before
    probe = "import sys; from gitrun.store.lock import is_locked; from gitrun.store.local import LocalPaths; "
    probe += "from pathlib import Path; is_locked(LocalPaths(Path(sys.argv[1]))); "
    probe += "sys.exit('filelock' in sys.modules)"
    local.lock.unlink()
    local.lock.touch()
    assert subprocess.run([sys.executable, "-c", probe, str(local.root)]).returncode == 0


def test_a_start_waits_out_a_probe_of_its_lock_but_not_a_holder(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """is_locked takes the lock for an instant; a start in that instant must
    not be refused as busy. A real holder still refuses it."""
    import threading
    import time

    from gitrun.store import lock
    from gitrun.store.flocks import hold
    from gitrun.store.lock import RunBusy, run_locked

    local = LocalPaths.of(git_repo, "r")
    local.root.mkdir(parents=True)
    taken, release = threading.Event(), threading.Event()

    def probe_for_a_moment() -> None:
        with hold(local.lock, wait=False):
            taken.set()
            release.wait(timeout=10)

    prober = threading.Thread(target=probe_for_a_moment)
    prober.start()
    try:
        assert taken.wait(timeout=10)
        monkeypatch.setattr(lock, "PROBE_PATIENCE", 60.0)  # however loaded the machine is
        threading.Timer(0.05, release.set).start()
        with run_locked(local, "r"):
            pass  # taken once the probe let go
    finally:
        release.set()
        prober.join(timeout=10)
    monkeypatch.setattr(lock, "PROBE_PATIENCE", 0.2)
    with hold(local.lock, wait=False):
        started = time.monotonic()
        with pytest.raises(RunBusy), run_locked(local, "r"):
            pass
        assert time.monotonic() - started >= 0.2
