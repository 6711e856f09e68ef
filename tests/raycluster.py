"""A real Ray cluster on loopback addresses for the tests and bench/ray_vs_local.py.

Each node is its own ``ray start`` with its own ``--node-ip-address``
(127.0.0.x), temp directory and ports, started one after another, in a
process group of its own: killing that group is losing the machine. Every
process of the cluster carries a marker in its environment, so the tests can
prove that stopping it leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MARKER = "TEST_RAY_CLUSTER"  # in the environment of every process of a cluster
NODE = "TEST_RAY_NODE"  # the node's name, likewise
START_TIMEOUT = 60.0


def ray_program() -> str:
    found = shutil.which("ray", path=str(Path(sys.executable).parent))
    return found or "ray"


def free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    name: str
    ip: str
    pgid: int
    env: dict[str, str]


@dataclass
class LocalCluster:
    root: Path
    head_ip: str = "127.0.0.11"
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    nodes: list[Node] = field(default_factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GITRUN_"))}
        tmp = self.root / f"tmp-{name}"
        tmp.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                MARKER: self.marker,
                NODE: name,
                "TMPDIR": str(tmp),  # where a node's scratch directories go
                "RAY_USAGE_STATS_ENABLED": "0",
                # A lost node is noticed in ~3 s, not Ray's default ~30 s.
                "RAY_health_check_initial_delay_ms": "1000",
                "RAY_health_check_period_ms": "1000",
                "RAY_health_check_timeout_ms": "1000",
                "RAY_health_check_failure_threshold": "3",
            }
        )
        return env

    def _start(self, name: str, ip: str, args: list[str]) -> Node:
        env = self._env(name)
        temp = self.root / f"ray-{name}"
        argv = [
            ray_program(),
            "start",
            f"--node-ip-address={ip}",
            f"--temp-dir={temp}",
            "--object-store-memory=100000000",
            f"--dashboard-agent-listen-port={free_port(ip)}",
            "--disable-usage-stats",
            *args,
        ]
        # Its own group: the daemons it forks stay in it after it returns.
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )
        try:
            out, _ = proc.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        node = Node(name, ip, proc.pid, env)
        self.nodes.append(node)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start for {name} failed ({proc.returncode}):\n{out[-3000:]}")
        return node

    def start_head(self, num_cpus: int = 0) -> Node:
        """The head: GCS and a raylet, with no CPUs unless given (then
        attempts go to the worker nodes)."""
        self.port = free_port(self.head_ip)
        args = [
            "--head",
            f"--port={self.port}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=false",
            f"--dashboard-port={free_port(self.head_ip)}",
        ]
        if importlib.util.find_spec("grpc") is not None:
            # ray[client] is installed: its server would take port 10001 otherwise.
            args.append(f"--ray-client-server-port={free_port(self.head_ip)}")
        return self._start("head", self.head_ip, args)

    def add_node(
        self, name: str, ip: str, num_cpus: int, resources: dict[str, float] | None = None
    ) -> Node:
        args = [f"--address={self.address}", f"--num-cpus={num_cpus}"]
        if resources:
            args.append(f"--resources={json.dumps(resources)}")
        return self._start(name, ip, args)

    def kill_node(self, node: Node) -> None:
        """Lose the machine: every process of the node at once, its daemons
        (one group) and its Ray workers and what they run (which may have
        left the group) alike. All are stopped (SIGSTOP) before any is
        killed: a machine that dies takes them together, and none may see
        another die first (a Ray worker whose command was killed before it
        would report that as the attempt's own exit, not as a lost node)."""
        _signal_group(node.pgid, signal.SIGSTOP)
        frozen = self.processes(node.name)
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGSTOP)
        frozen += [p for p in self.processes(node.name) if p not in frozen]
        _signal_group(node.pgid, signal.SIGKILL)
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()

    def processes(self, node: str | None = None) -> list[psutil.Process]:
        """Live processes carrying this cluster's marker (of one node, or all;
        stopped ones too)."""
        found = []
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                ours = env.get(MARKER) == self.marker and node in (None, env.get(NODE))
                if ours and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def stop(self, grace: float = 3.0) -> list[psutil.Process]:
        """What ``ray stop`` does, for this cluster's nodes only: SIGTERM, then
        SIGKILL after a grace. Returns what is still alive a few seconds after
        that (nothing, when the cluster and every attempt on it went with it);
        :meth:`clean_up` ends those."""
        for node in reversed(self.nodes):
            _signal_group(node.pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        for node in self.nodes:
            _signal_group(node.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def clean_up(self) -> None:
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def start_cluster(
    root: Path, workers: list[tuple[str, str, int, dict[str, float]]]
) -> LocalCluster:
    """A head and ``workers`` (name, ip, cpus, custom resources), started in turn."""
    cluster = LocalCluster(root)
    try:
        cluster.start_head()
        for name, ip, cpus, resources in workers:
            cluster.add_node(name, ip, cpus, resources)
    except BaseException:
        cluster.stop()
        cluster.clean_up()
        raise
    return cluster
