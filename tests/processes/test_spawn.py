"""Starting workers: posix_spawn where nothing would differ, Popen elsewhere,
and a worker cannot tell which started it.

Real child processes, each reaped; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitrun.processes.spawn import Child, Process, Spawner

# What a worker sees of how it was started: its directory, session and
# group, stdin, open descriptors, ignored signals (from sh, which ignores
# none of its own), and its environment.
LOOK = r"""
cd_=$(pwd)
fds=$(ls /proc/$$/fd | sort -n | tr '\n' ' ')
ign=$(grep SigIgn /proc/$$/status | cut -f2)
sid=$(cut -d' ' -f6 /proc/$$/stat)
pgrp=$(cut -d' ' -f5 /proc/$$/stat)
printf '{"cwd": "%s", "fds": "%s", "ignored": "%s", "leads": %s, "stdin": "%s", "x": "%s"}\n' \
  "$cd_" "$fds" "$ign" "$([ "$sid" = $$ ] && [ "$pgrp" = $$ ] && echo true || echo false)" \
  "$(readlink /proc/$$/fd/0)" "$X"
"""


def _look(spawner: Spawner, cwd: Path) -> tuple[Process, dict[str, object]]:
    out, into = os.pipe()
    try:
        proc = spawner.start(["sh", "-c", LOOK], cwd, {**os.environ, "X": "y z"}, into)
    finally:
        os.close(into)
    with os.fdopen(out, "rb") as pipe:
        seen = json.loads(pipe.read())
    assert proc.wait() == 0
    return proc, seen


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_worker_cannot_tell_posix_spawn_from_popen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    spawner = Spawner()
    try:
        spawned, by_spawn = _look(spawner, here)
        opened, by_popen = _look(spawner, elsewhere)  # not the current directory: Popen
    finally:
        spawner.close()
    assert isinstance(spawned, Child) and isinstance(opened, subprocess.Popen)
    assert by_spawn["cwd"] == str(here) and by_popen["cwd"] == str(elsewhere)
    # glibc's posix_spawn leaves its two internal signals (32 and 33, which
    # glibc keeps for itself) ignored, as CPython's own posix_spawn path does.
    internal = (1 << 31) | (1 << 32)
    ignored = {
        k: int(str(v["ignored"]), 16) & ~internal
        for k, v in (("spawn", by_spawn), ("popen", by_popen))
    }
    assert ignored["spawn"] == ignored["popen"]
    assert not ignored["spawn"] & (1 << (signal.SIGPIPE - 1)), "SIGPIPE is the default again"
    for seen in (by_spawn, by_popen):
        seen.pop("cwd")
        seen.pop("ignored")
    assert by_spawn == by_popen
    assert by_spawn["leads"] is True and by_spawn["stdin"] == "/dev/null"
    assert by_spawn["x"] == "y z"
    assert str(by_spawn["fds"]).startswith("0 1 2 ")


def test_an_inheritable_descriptor_gitrun_was_given_never_reaches_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Popen closes such descriptors in each child; posix_spawn cannot, so the
    spawner makes them close-on-exec first."""
    monkeypatch.chdir(tmp_path)
    given, other_end = os.pipe()
    os.set_inheritable(given, True)
    try:
        spawner = Spawner()
        out, into = os.pipe()
        try:
            lister = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"
            proc = spawner.start([sys.executable, "-c", lister], tmp_path, dict(os.environ), into)
        finally:
            os.close(into)
        with os.fdopen(out, "rb") as pipe:
            fds = json.loads(pipe.read())
        assert proc.wait() == 0
        spawner.close()
        assert isinstance(proc, Child)
        assert given not in fds and fds[:3] == [0, 1, 2]
        assert not os.get_inheritable(given)
    finally:
        os.close(given)
        os.close(other_end)


def test_a_spawned_worker_s_status_reads_as_popen_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exit status as it is; a death by a signal as minus the signal."""
    monkeypatch.chdir(tmp_path)
    spawner = Spawner()
    out, into = os.pipe()
    try:
        exits = spawner.start(["sh", "-c", "exit 3"], tmp_path, dict(os.environ), into)
        sleeps = spawner.start(["sleep", "60"], tmp_path, dict(os.environ), into)
    finally:
        os.close(into)
        os.close(out)
    try:
        assert isinstance(exits, Child) and isinstance(sleeps, Child)
        assert exits.wait() == 3 and exits.poll() == 3
        assert sleeps.poll() is None
        os.killpg(sleeps.pid, signal.SIGKILL)  # it leads its own group
        deadline = time.monotonic() + 10
        while sleeps.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert sleeps.wait() == -signal.SIGKILL
    finally:
        if sleeps.poll() is None:
            os.kill(sleeps.pid, signal.SIGKILL)
            sleeps.wait()
        spawner.close()


def test_a_program_that_cannot_be_run_is_an_oserror_on_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    spawner = Spawner()
    out, into = os.pipe()
    try:
        for argv in (["./no-such-program"], ["./not-executable"], ["no-such-program-on-path"]):
            for cwd in (tmp_path, tmp_path.parent):
                with pytest.raises(OSError):
                    spawner.start(argv, cwd, dict(os.environ), into)
    finally:
        os.close(into)
        os.close(out)
        spawner.close()
