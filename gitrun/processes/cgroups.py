"""A cgroup (v2) per attempt: every process it starts, ended with it.

Without bubblewrap's PID namespace, a worker's daemon that left its session
and cleared its environment is out of reach of the kill of its process
group and of the reaper's search by ``GITRUN_*`` variables. Where the
machine has cgroup v2 and gitrun may make a child of its own cgroup (read
from the ``0::`` line of ``/proc/self/cgroup``; the hierarchy is at
``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a hybrid machine), each
attempt gets one: its worker enters it before it runs (:data:`ENTER`, a
shell that moves itself in and then ``exec``-s the worker, so nothing the
worker starts is born outside; a shell that cannot enter runs nothing), and
when the attempt ends everything in it is killed
(``cgroup.kill`` where the kernel has it, else SIGKILL to each pid in
``cgroup.procs`` until none is left) and the cgroup removed. Only what is in
the attempt's own cgroup is signalled: processes the attempt started.

A driver killed while its attempt ran leaves the cgroup to the resume,
which finds it by the attempt id (:func:`end_left_group`) when it runs in
the same cgroup as the dead driver did. Where no such cgroup can be had,
:func:`cgroup_root` says why and attempts run as before: their process group is killed when they end, and what carries
their ``GITRUN_ATTEMPT_ID`` when the run ends.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import signal
import time
from pathlib import Path

HIERARCHIES = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")  # hybrid first, then pure v2
_ATTEMPT_ID = re.compile(r"[0-9a-f]{8,64}")
SHELL = "/bin/sh"
# Run as ``sh -c ENTER <cgroup.procs> <program> <args>...``: the shell writes
# its own pid (0: the writer) into the attempt's cgroup, then becomes the worker.
ENTER = 'echo 0 > "$0" && exec "$@"'
PATIENCE = 5.0  # seconds to wait for a killed cgroup to empty


@functools.cache
def cgroup_root() -> tuple[Path | None, str]:
    """gitrun's own cgroup, under which attempts' cgroups are made (proved
    by making and removing one), or None and why there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, "this system has no /proc/self/cgroup"
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        return None, "this machine has no cgroup v2 hierarchy"
    for hierarchy in HIERARCHIES:
        if not os.path.exists(os.path.join(hierarchy, "cgroup.controllers")):
            continue
        root = Path(hierarchy, own.lstrip("/"))
        probe = root / f"gitrun-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            return None, f"gitrun cannot make a cgroup in {root} ({exc.strerror or exc})"
        return root, ""
    return None, "this machine has no cgroup v2 hierarchy"


def group_name(attempt_id: str) -> str | None:
    """The name of an attempt's cgroup, by its attempt id (hex digits, as
    the driver makes them; None for anything else: a journal can be forged,
    and a name must never lead out of gitrun's own cgroup)."""
    if _ATTEMPT_ID.fullmatch(attempt_id) is None:
        return None
    return f"gitrun-attempt-{attempt_id}"


class AttemptGroup:
    """One attempt's cgroup: made at its start, killed and removed at its end."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, root: Path, attempt_id: str) -> AttemptGroup:
        name = group_name(attempt_id) or group_name(os.urandom(12).hex())
        assert name is not None
        path = root / name
        path.mkdir()
        return cls(path)

    @property
    def procs(self) -> str:
        """The file a process writes itself into to enter the cgroup."""
        return str(self.path / "cgroup.procs")

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run so that it is inside this cgroup before it runs."""
        return [SHELL, "-c", ENTER, self.procs, *argv]

    def entered(self, pid: int) -> None:
        """Wait (briefly) until the worker ``pid`` started from :meth:`wrap`
        became its program: its identity is then the worker's own. A worker
        that already ended (a zombie until the driver reaps it) is not waited
        for. An empty command line alone says nothing: a process shows one
        for a moment while it execs."""
        wrapper = "\0".join([SHELL, "-c", ENTER, self.procs]).encode() + b"\0"
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    shown = handle.read()
            except OSError:
                return
            if shown and not shown.startswith(wrapper):
                return
            if not shown and _ended(pid):
                return
            time.sleep(0.0002)

    def end(self) -> int:
        """Kill everything in the cgroup and remove it; how many processes
        it still held (0 when it was empty). Waits up to :data:`PATIENCE`."""
        killed = 0
        deadline = time.monotonic() + PATIENCE
        kill_file = self.path / "cgroup.kill"
        while True:
            pids = self._pids()
            if not pids:
                break
            killed = max(killed, len(pids))
            try:
                kill_file.write_text("1")
            except OSError:  # a kernel before 5.14: one by one
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        self.remove(deadline)
        return killed

    def remove(self, deadline: float) -> None:
        """Remove the cgroup once it is empty (its last processes may take a moment)."""
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    return
            time.sleep(0.005)

    def _pids(self) -> list[int]:
        try:
            return [int(line) for line in Path(self.procs).read_text().split()]
        except (OSError, ValueError):
            return []


def _ended(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie, or gone), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True
    return stat.rpartition(b")")[2].split()[:1] in ([b"Z"], [b"X"])


def end_left_group(attempt_id: str) -> int:
    """Kill and remove the cgroup a dead driver's attempt left (made under
    this process's own cgroup, as a driver started the same way made it);
    how many processes it held."""
    root, _why = cgroup_root()
    name = group_name(attempt_id)
    if root is None or name is None or not (root / name).is_dir():
        return 0
    return AttemptGroup(root / name).end()
