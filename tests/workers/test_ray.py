"""The Ray executor: settings, check, the node side, and runs on a real cluster.

The cluster tests start real ``ray start`` nodes on loopback addresses
(tests/raycluster.py) and are skipped, with the reason, where Ray is not
installed. The node side (gitrun.workers.ray.node) is plain Python and is tested
without Ray: it is what each Ray task runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitrun.commands.session import CheckFailed, resume_run, start_run
from gitrun.definition.load import load_run
from gitrun.definition.schema import Executor, Limits, parse_bytes
from gitrun.engine.governor import ENVIRONMENT, EndFacts, Governor
from gitrun.errors import GitrunError
from gitrun.proof.check import check_run
from gitrun.store import ledger
from gitrun.workers.ray.executor import INSTALL, is_ray_installed
from gitrun.workers.ray.node import run_attempt
from tests.helpers import (
    FAKE_WORKER,
    build_tree,
    commit_all,
    fake_worker_run,
    git,
    ledger_records,
    wait_for,
    write_run,
)

HAVE_RAY = is_ray_installed()
needs_ray = pytest.mark.skipif(
    not HAVE_RAY, reason=f"Ray is not installed; `{INSTALL}` runs these tests"
)


def quiet(_line: str) -> None:
    pass


# -- the [executor] table ----------------------------------------------------------


def test_the_executor_table_takes_ray_fields_and_per_stage_resources() -> None:
    executor = Executor.model_validate(
        {
            "kind": "ray",
            "address": "ray://head.example:10001",
            "shared_fs": True,
            "resources": {
                "num_cpus": 2,
                "memory": "1GiB",
                "custom": {"big_disk": 1},
                "stages": {"check": {"num_gpus": 1, "custom": {"fast": 0.5}}},
            },
        }
    )
    check = executor.resources.for_stage("check")
    assert (check.num_cpus, check.num_gpus, check.memory) == (2.0, 1.0, 1 << 30)
    assert check.custom == {"big_disk": 1.0, "fast": 0.5}
    work = executor.resources.for_stage("work")
    assert (work.num_gpus, work.custom) == (0.0, {"big_disk": 1.0})
    assert (parse_bytes("512MiB"), parse_bytes("2GB"), parse_bytes(7)) == (
        512 << 20,
        2_000_000_000,
        7,
    )


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ({"kind": "ray", "address": "head"}, "is not a Ray address"),
        ({"kind": "ray", "resources": {"memory": "lots"}}, "is not a size"),
        ({"kind": "ray", "resources": {"num_cpus": -1}}, "greater than or equal to 0"),
        ({"kind": "ray", "resources": {"gpus": 1}}, "did you mean 'num_gpus'"),
    ],
)
def test_a_bad_ray_field_is_one_sentence_naming_it(
    git_repo: Path, table: dict[str, Any], said: str
) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}], {"executor": table})
    with pytest.raises(Exception) as raised:
        load_run(git_repo, "r")
    text = str(raised.value)
    assert "packet.toml" in text and "executor" in text and said in text, text
    assert "Traceback" not in text


def _ray_run(repo: Path, extra: dict[str, Any] | None = None) -> None:
    executor: dict[str, Any] = {"kind": "ray", "command": ["true", "{pointer}"]}
    executor.update(extra or {})
    write_run(repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}], {"executor": executor})


def test_check_names_the_install_command_when_ray_is_missing(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ray_run(git_repo)
    monkeypatch.setitem(sys.modules, "ray", None)  # how Python says a module is absent
    problems = [p.message for p in check_run(load_run(git_repo, "r")).problems]
    assert any(INSTALL in p and 'kind = "ray"' in p for p in problems), problems
    with pytest.raises(CheckFailed) as failed:
        start_run(git_repo, "r", quiet)
    assert INSTALL in str(failed.value)
    assert git(git_repo, "branch", "--list", "gitrun/r").strip() == ""  # nothing half-started


@needs_ray
def test_check_passes_a_ray_run_where_ray_is_installed(git_repo: Path) -> None:
    _ray_run(git_repo)
    assert check_run(load_run(git_repo, "r")).problems == []


def test_check_names_a_resource_stage_the_run_does_not_have(git_repo: Path) -> None:
    _ray_run(git_repo, {"resources": {"stages": {"reveiw": {"num_gpus": 1}}}})
    problems = [p.message for p in check_run(load_run(git_repo, "r")).problems]
    assert any("[executor.resources.stages] names stage 'reveiw'" in p for p in problems), problems


@needs_ray
def test_a_cluster_that_does_not_answer_is_one_sentence_at_once(git_repo: Path) -> None:
    from tests.raycluster import free_port

    address = f"127.0.0.21:{free_port('127.0.0.21')}"  # nothing listens there
    _ray_run(git_repo, {"address": address})
    started = time.monotonic()
    with pytest.raises(GitrunError) as raised:
        start_run(git_repo, "r", quiet)
    assert time.monotonic() - started < 20  # Ray alone would wait for minutes
    assert str(raised.value) == (
        f"cannot reach the Ray cluster at [executor] address {address!r} (Connection refused); "
        "start it (`ray start --head`) or fix the address, then `gitrun resume r`"
    )


def test_check_refuses_the_claude_preset_in_scratch_mode(git_repo: Path) -> None:
    executor = {"kind": "ray", "preset": "claude"}
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}], {"executor": executor})
    problems = [p.message for p in check_run(load_run(git_repo, "r")).problems]
    assert any('preset "claude"' in p and "shared_fs = true" in p for p in problems), problems
    executor["shared_fs"] = True
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}], {"executor": executor})
    problems = [p.message for p in check_run(load_run(git_repo, "r")).problems]
    assert not any("shared_fs" in p for p in problems), problems


def test_check_holds_a_ray_command_to_the_command_rules(git_repo: Path) -> None:
    _ray_run(git_repo, {"command": ["sh", "-c", "echo {task}"]})
    problems = [p.message for p in check_run(load_run(git_repo, "r")).problems]
    assert any("embeds {task} in a longer string" in p for p in problems), problems


def _imported_by(*argv: str, cwd: Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=cwd
    )
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@needs_ray
def test_the_import_probe_sees_ray(tmp_path: Path) -> None:
    assert "ray" in _imported_by("-c", "import ray", cwd=tmp_path)


@needs_ray
@pytest.mark.parametrize("command", [["--version"], ["check", "r"], ["status", "r"]])
def test_version_check_and_status_never_import_ray(git_repo: Path, command: list[str]) -> None:
    _ray_run(git_repo)
    commit_all(git_repo, "a ray run")
    imported = _imported_by("-m", "gitrun", *command, cwd=git_repo)
    assert "gitrun" in imported
    assert "ray" not in imported


# -- lost attempts: no attempt used, the breaker hears of them -----------------------------


def _facts(outcome: str) -> EndFacts:
    return EndFacts("t", outcome, 20.0, None, None, True, "NodeDiedError: node died")


def test_losses_with_no_valid_output_between_halt_the_run_as_an_environment_fault() -> None:
    limits = Limits(concurrency=4)
    governor = Governor(limits, tasks=100, spawns=0, canary=[])
    window = 2 * max(limits.breaker_size, limits.concurrency)
    for _ in range(window - 1):
        governor.ended(_facts(ledger.LOST), time.time())
    governor.ended(_facts(ledger.VALID), time.time())  # progress: the count starts again
    for _ in range(window - 1):
        governor.ended(_facts(ledger.LOST), time.time())
    assert governor.halt is None
    governor.ended(_facts(ledger.LOST), time.time())
    assert governor.halt is not None and governor.halt.kind == ENVIRONMENT
    assert "lost with the machine or the lead session running them" in governor.halt.message
    assert "gitrun resume" in governor.halt.message


def test_a_lost_outcome_uses_no_attempt() -> None:
    assert ledger.LOST not in ledger.COUNTED


# -- the node side, without Ray ---------------------------------------------------------------


def _spec(tmp_path: Path, script: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "argv": [sys.executable, "-c", script],
        "env": {"GITRUN_TASK": "t1"},
        "timeout": 30.0,
        "kill_grace": 1.0,
        "outputs": ["out/t1.json"],
        "max_output_bytes": 1000,
        "files": {"docs/in.md": b"input\n", ".gitrun/runs/r/packet.toml": b"[run]\n"},
    }
    spec.update(extra)
    return spec


def test_the_node_runs_the_command_in_a_scratch_directory_and_brings_back_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    script = (
        "import os, pathlib; "
        "text = pathlib.Path('docs/in.md').read_text(); "
        "os.makedirs('out', exist_ok=True); "
        "pathlib.Path('out/t1.json').write_text('{\"in\": %r}' % text); "
        "pathlib.Path('elsewhere.txt').write_text('not an output'); "
        "print('worked in', os.getcwd() == os.environ['GITRUN_REPO'], os.environ['GITRUN_TASK'])"
    )
    result = run_attempt(_spec(tmp_path, script))
    assert result["status"] == 0 and not result["timed_out"]
    assert result["outputs"] == {"out/t1.json": b"{\"in\": 'input\\n'}"}
    assert result["refused"] == {}
    assert b"worked in True t1" in result["log"]
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


def test_the_node_names_a_usage_file_and_brings_back_what_the_worker_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$GITRUN_USAGE names a file on the node (the driver's path means
    nothing there), and what the worker wrote comes back, capped."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    script = (
        "import os, pathlib; p = os.environ['GITRUN_USAGE']; "
        "print('driver path' if p == '/driver/usage.json' else 'node path'); "
        "pathlib.Path(p).write_text(os.environ['BODY'])"
    )
    spec = _spec(tmp_path, script, usage={"env": "GITRUN_USAGE", "max": 64})
    spec["env"] = {
        **spec["env"],
        "GITRUN_USAGE": "/driver/usage.json",
        "BODY": '{"cost_usd": 0.25}',
    }
    result = run_attempt(spec)
    assert b"node path" in result["log"]
    assert result["usage_file"] == b'{"cost_usd": 0.25}'
    spec["env"]["BODY"] = "x" * 500
    assert run_attempt(spec)["usage_file"] == b"x" * 65  # one byte over: the reader says too big
    spec["env"]["BODY"] = ""
    del spec["usage"]
    assert "usage_file" not in run_attempt(spec)
    assert list(tmp_path.iterdir()) == []  # scratch and usage directories are gone


def test_a_program_that_cannot_start_ends_the_attempt_with_status_127(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "", cwd=str(tmp_path))
    spec["argv"] = ["gitrun-no-such-program", "{pointer}"]
    result = run_attempt(spec)
    assert result["status"] == 127
    assert b"cannot start 'gitrun-no-such-program'" in result["log"]


def test_an_output_over_the_cap_or_a_symlink_is_not_brought_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    script = (
        "import os; open('out/big.json', 'w').write('x' * 5000); "
        "os.symlink('/etc/passwd', 'out/t1.json')"
    )
    spec = _spec(tmp_path, script, outputs=["out/t1.json", "out/big.json", "out/none.json"])
    result = run_attempt(spec)
    assert result["outputs"] == {}
    assert "over limits.max_output_bytes (1,000)" in result["refused"]["out/big.json"]
    assert "5,000 bytes" in result["refused"]["out/big.json"]
    assert "is or passes through a symlink" in result["refused"]["out/t1.json"]
    assert "out/none.json" not in result["refused"]  # not written: the check says so


def test_the_node_enforces_the_timeout_on_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = (
        "import os, signal, subprocess, sys, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); "
        "print('ignoring TERM', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    result = run_attempt(_spec(tmp_path, script, timeout=1.0, kill_grace=0.5, cwd=str(tmp_path)))
    assert result["timed_out"] and result["status"] == -signal.SIGKILL
    assert time.monotonic() - started < 20
    assert b"ignoring TERM" in result["tail"]
    _assert_gone(_read_pids(pidfile))


def test_the_guard_kills_the_attempt_when_the_ray_worker_dies(tmp_path: Path) -> None:
    """A node's Ray worker killed outright (node lost, task force-cancelled,
    driver gone): nothing of the attempt writes on."""
    pidfile = tmp_path / "pids"
    script = (
        "import os, subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(60)"
    )
    spec = _spec(tmp_path, script, cwd=str(tmp_path))
    stand_in = tmp_path / "worker.py"
    stand_in.write_text(
        "import json, sys\n"
        "from gitrun.workers.ray.node import run_attempt\n"
        "run_attempt(json.loads(sys.argv[1]))\n"
    )
    del spec["files"]
    worker = subprocess.Popen([sys.executable, str(stand_in), json.dumps(spec)])
    try:
        wait_for(lambda: len(_read_pids(pidfile)) >= 2, what="the command wrote its two pids")
        pids = _read_pids(pidfile)
        worker.kill()
        worker.wait()
        _assert_gone(pids)
    finally:
        worker.kill()
        worker.wait()
        for pid in _read_pids(pidfile):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _read_pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _assert_gone(pids: list[int]) -> None:
    """A SIGKILLed process takes a moment to die on a busy machine: wait for it, bounded."""
    assert len(pids) == 2
    wait_for(lambda: not any(_alive(p) for p in pids), 10, what=f"processes {pids} ended")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- on a real cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and two worker nodes on 127.0.0.11-13; only the second has "w2"."""
    if not HAVE_RAY:
        pytest.skip(f"Ray is not installed; `{INSTALL}` runs these tests")
    from tests.raycluster import start_cluster

    # Not under pytest's tmp_path_factory: Ray's socket paths under a pytest-xdist
    # worker's base directory pass the 107 bytes an AF_UNIX path may have.
    root = Path(tempfile.mkdtemp(prefix="ray-"))
    try:
        started = start_cluster(
            root, [("w1", "127.0.0.12", 3, {}), ("w2", "127.0.0.13", 3, {"w2": 100})]
        )
        try:
            yield started
        finally:
            left = started.stop()
            started.clean_up()
            assert left == [], f"left behind after the cluster stopped: {left}"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _cluster_run(
    repo: Path,
    cluster: Any,
    count: int,
    spec: dict[str, Any],
    limits: dict[str, Any] | None = None,
    **executor: Any,
) -> Path:
    table = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, str(FAKE_WORKER), str(repo.parent / "r-spec.json")],
        **executor,
    }
    # max_load: the nodes share this machine, whose load the gate would read.
    own = {"timeout": "60s", "concurrency": 6, "max_load": 1000.0, "kill_grace": "1s"}
    own.update(limits or {})
    return fake_worker_run(repo, "r", count, spec, {"executor": table, "limits": own})


def _tasks_in_commits(repo: Path) -> Counter[str]:
    log = git(repo, "log", "--format=%B", "gitrun/r")
    return Counter(ln.split(": ", 1)[1] for ln in log.splitlines() if ln.startswith("Gitrun-Task:"))


@pytest.mark.ray
def test_scratch_mode_brings_back_only_the_declared_outputs(git_repo: Path, cluster: Any) -> None:
    build_tree(git_repo, {"docs/in.md": "from the base commit\n"})
    commit_all(git_repo, "input")
    (git_repo / "docs/in.md").write_text("edited since, not committed\n")
    script = (
        "import json, os, pathlib; t = os.environ['GITRUN_TASK']; "
        "saw = pathlib.Path('docs/in.md').read_text(); "
        "pathlib.Path(f'out/{t}.json').write_text(json.dumps({'saw': saw})); "
        "pathlib.Path('stray.txt').write_text('x'); pathlib.Path('docs/in.md').write_text('changed')"
    )
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": ["docs/in.md"], "outputs": [f"out/t{i}.json"]} for i in (1, 2)
    ]
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", script],
    }
    write_run(git_repo, "r", tasks, {"executor": executor, "limits": {"max_load": 1000.0}})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.violations == []
    saw = json.loads(git(git_repo, "show", "gitrun/r:out/t1.json"))
    assert saw == {"saw": "from the base commit\n"}  # shipped from the base, not the work tree
    assert not (git_repo / "stray.txt").exists()
    assert (git_repo / "docs/in.md").read_text() == "edited since, not committed\n"
    records = ledger_records(git_repo)
    assert {r["dispatch"] for r in records if "outcome" in r} == {"ray"}
    log = (git_repo / ".git/gitrun/r").rglob("*.log")
    assert any("ran on node 127.0.0.1" in p.read_text() for p in log)


@pytest.mark.ray
def test_an_output_too_big_to_bring_back_is_invalid_with_the_reason(
    git_repo: Path, cluster: Any
) -> None:
    script = "import os; open(f\"out/{os.environ['GITRUN_TASK']}.json\", 'w').write('[' + '1,' * 600 + '1]')"
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", script],
    }
    limits = {"max_output_bytes": 1000, "max_attempts": 1, "max_load": 1000.0}
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": executor, "limits": limits},
    )
    assert start_run(git_repo, "r", quiet).exit_code != 0
    [record] = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert record["outcome"] == "invalid"
    assert "out/t1.json: is 1,203 bytes on the node, over limits.max_output_bytes (1,000)" in str(
        record["reason"]
    )


@pytest.mark.ray
def test_a_later_stage_reads_the_earlier_outputs_where_its_resources_are(
    git_repo: Path, cluster: Any
) -> None:
    """Per-stage resources place the review on w2, the only node with "w2";
    its scratch directory holds the work stage's outputs as validated."""
    work = (
        "import json, os; t = os.environ['GITRUN_TASK']; "
        "open('out/' + t + '.json', 'w').write(json.dumps([t]))"
    )
    review = (
        "import glob, json; seen = sorted(json.load(open(p))[0] for p in glob.glob('out/w*.json')); "
        "open('review/all.json', 'w').write(json.dumps(seen))"
    )
    program = (
        "import os, sys; exec(sys.argv[1] if os.environ['GITRUN_STAGE'] == 'work' else sys.argv[2])"
    )
    tasks: list[dict[str, object]] = [
        {"id": f"w{i}", "outputs": [f"out/w{i}.json"]} for i in range(1, 4)
    ]
    tasks.append(
        {"id": "all", "stage": "review", "inputs": ["out/*.json"], "outputs": ["review/all.json"]}
    )
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", program, work, review],
        "resources": {"stages": {"review": {"custom": {"w2": 1}}}},
    }
    packet = {
        "executor": executor,
        "stages": [{"name": "work"}, {"name": "review"}],
        "limits": {"max_load": 1000.0},
    }
    write_run(git_repo, "r", tasks, packet)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    assert json.loads(git(git_repo, "show", "gitrun/r:review/all.json")) == ["w1", "w2", "w3"]
    [log] = (git_repo / ".git/gitrun/r").rglob("all.1.log")
    assert "ran on node 127.0.0.13" in log.read_text()


@pytest.mark.ray
def test_a_timeout_on_a_node_ends_the_attempt_and_counts_it(git_repo: Path, cluster: Any) -> None:
    script = "import time; print('thinking', flush=True); time.sleep(120)"
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", script],
    }
    limits = {"timeout": "2s", "kill_grace": "1s", "max_attempts": 1, "max_load": 1000.0}
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": executor, "limits": limits},
    )
    started = time.monotonic()
    assert start_run(git_repo, "r", quiet).exit_code == 3  # the canary used its one attempt
    assert time.monotonic() - started < 30
    [record] = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert record["timed_out"] is True and record["outcome"] == "missing"
    assert cluster.processes("w1") + cluster.processes("w2")  # the nodes live on
    assert _commands(cluster, script) == []  # nothing of the attempt runs on


@pytest.mark.ray
def test_a_node_that_does_not_answer_is_force_cancelled_after_the_deadline(
    git_repo: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ray worker running the attempt is frozen (SIGSTOP), so the node
    cannot end it at its timeout: the driver cancels the task with
    force=True once the grace and the node's slack are over."""
    import threading

    from gitrun.workers.ray import executor as rayexec

    monkeypatch.setattr(rayexec, "NODE_SLACK", 2.0)
    script = "import time; print('stuck', flush=True); time.sleep(120)"
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", script],
    }
    # Long enough for the freezer to find the command on a busy machine before
    # the node's own timeout would end it.
    timeout = 6
    limits = {"timeout": f"{timeout}s", "kill_grace": "1s", "max_attempts": 1, "max_load": 1000.0}
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": executor, "limits": limits},
    )
    frozen: list[psutil.Process] = []

    def freeze_its_worker() -> None:
        deadline = time.monotonic() + 30
        while not (commands := _commands(cluster, script)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if commands:
            worker = commands[0].parent().parent()  # command <- guard <- Ray worker
            worker.suspend()
            frozen.append(worker)

    freezer = threading.Thread(target=freeze_its_worker)
    freezer.start()
    try:
        started = time.monotonic()
        start_run(git_repo, "r", quiet)
        took = time.monotonic() - started
    finally:
        freezer.join()
        for worker in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.resume()
    assert frozen, "the attempt never started"
    assert timeout + 1 + 2 <= took < 40
    [record] = [r for r in ledger_records(git_repo) if r.get("task") == "t1"]
    assert record["timed_out"] is True
    log = next((git_repo / ".git/gitrun/r").rglob("t1.1.log")).read_text()
    assert "the node did not answer in time" in log
    deadline = time.monotonic() + 20
    while _commands(cluster, script) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _commands(cluster, script) == []  # the guard took the command with the worker


@pytest.mark.ray
def test_shared_filesystem_mode_runs_in_the_repository(git_repo: Path, cluster: Any) -> None:
    _cluster_run(git_repo, cluster, 6, {"default": "write"}, shared_fs=True)
    assert start_run(git_repo, "r", quiet).exit_code == 0
    assert sorted(_tasks_in_commits(git_repo).values()) == [1] * 6


@pytest.mark.ray
def test_resume_after_the_driver_dies_commits_each_task_once(git_repo: Path, cluster: Any) -> None:
    _cluster_run(git_repo, cluster, 24, {"default": "write", "sleep": [0.3, 0.8]})
    commit_all(git_repo, "the run")
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r", "--quiet"],
        cwd=git_repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(_tasks_in_commits_or_none(git_repo).values()) < 6:
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.1)
    finally:
        driver.kill()
        driver.wait()
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert sorted(_tasks_in_commits(git_repo).values()) == [1] * 24
    assert git(git_repo, "fsck", "--no-progress", "--no-dangling").strip() == ""
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert any(r["outcome"] == ledger.ABANDONED for r in records)  # out when the driver died


def _tasks_in_commits_or_none(repo: Path) -> Counter[str]:
    try:
        return _tasks_in_commits(repo)
    except AssertionError:
        return Counter()


@pytest.mark.ray
def test_stopping_the_driver_stops_its_attempts_on_the_nodes(git_repo: Path, cluster: Any) -> None:
    script = "import time; print('working', flush=True); time.sleep(120)"
    executor = {
        "kind": "ray",
        "address": cluster.address,
        "command": [sys.executable, "-c", script],
    }
    limits = {"concurrency": 4, "canary": 0, "max_load": 1000.0, "kill_grace": "1s"}
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(4)
    ]
    write_run(git_repo, "r", tasks, {"executor": executor, "limits": limits})
    commit_all(git_repo, "the run")
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r", "--quiet"],
        cwd=git_repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_commands(cluster, script)) < 4:
            assert time.monotonic() < deadline and driver.poll() is None, (
                "the attempts never started"
            )
            time.sleep(0.05)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    outcomes = [r["outcome"] for r in ledger_records(git_repo) if "outcome" in r]
    assert outcomes == [ledger.INTERRUPTED] * 4  # stopped by gitrun: no attempt used
    deadline = time.monotonic() + 20
    while _commands(cluster, script) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _commands(cluster, script) == []


def _commands(cluster: Any, script: str) -> list[psutil.Process]:
    """The cluster's processes running ``script`` (the attempts' commands)."""
    found = []
    for proc in cluster.processes():
        try:
            if proc.cmdline()[1:] == ["-c", script]:  # not its guard, which ends so too
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


# Last: it loses w2 for good.
def _failures(out: str) -> object:
    """What the --json summary says of the tasks that did not end done."""
    try:
        tasks = json.loads(out)["tasks"]
    except (ValueError, KeyError, TypeError):
        return out[-3000:]
    return {t: s for t, s in tasks.items() if s.get("status") != "done"}


@pytest.mark.ray
def test_sixty_tasks_on_three_nodes_survive_losing_one(git_repo: Path, cluster: Any) -> None:
    """Ray's fault tolerance, proved: lying workers, a worker node killed mid-run;
    every output committed exactly once, lost attempts not counted (with
    max_attempts = 1 a counted loss fails its task), fsck clean, and the
    cluster's stop leaves nothing behind (the fixture's teardown)."""
    lies = {f"t{i:02d}": "write_then_fail" for i in range(1, 61, 4)}  # wrote, says it failed
    spec = {"default": "write", "tasks": lies, "sleep": [0.5, 1.5]}
    _cluster_run(git_repo, cluster, 60, spec, {"max_attempts": 1})
    commit_all(git_repo, "the run")
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r", "--json"],
        cwd=git_repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        # Mid-run, with an attempt of this run out on w2: lose w2.
        while not (
            sum(_tasks_in_commits_or_none(git_repo).values()) >= 12
            and any("fake_worker" in " ".join(p.cmdline()) for p in cluster.processes("w2"))
        ):
            assert time.monotonic() < deadline and driver.poll() is None, "the run never got going"
            time.sleep(0.05)
        cluster.kill_node(next(n for n in cluster.nodes if n.name == "w2"))
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, (err[-3000:], _failures(out))
    assert json.loads(out)["exit_code"] == 0
    commits = _tasks_in_commits(git_repo)
    assert sorted(commits) == [f"t{i:02d}" for i in range(1, 61)]
    assert set(commits.values()) == {1}  # exactly once each
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    lost = [r for r in records if r["outcome"] == ledger.LOST]
    assert lost, "no attempt was lost with the node"
    assert all("lost" in str(r["reason"]) for r in lost)
    valid = Counter(r["task"] for r in records if r["outcome"] == ledger.VALID)
    assert set(valid.values()) == {1}
    lied = [r for r in records if r["task"] in lies and r["outcome"] == ledger.VALID]
    assert lied and all(r["exit"] == 1 for r in lied)
    assert git(git_repo, "fsck", "--no-progress", "--no-dangling").strip() == ""
    assert cluster.processes("w2") == []  # nothing of the lost node, attempts included


@pytest.mark.ray
def test_usage_reaches_the_ledger_from_the_node(git_repo: Path, cluster: Any) -> None:
    """Usage on Ray: a client's own report (a program named `claude` printing
    its closing JSON object) and a worker's usage file are recorded per attempt,
    as for a local attempt."""
    bin_dir = git_repo.parent / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(
        "#!/bin/sh\n"
        'mkdir -p out && printf \'{"ok": 1}\' > "out/$GITRUN_TASK.json"\n'
        'if [ "$GITRUN_TASK" = t2 ]; then\n'
        '  printf \'{"input": 7, "output": 3, "cost_usd": 0.5, "model": "m2"}\' > "$GITRUN_USAGE"\n'
        "fi\n"
        'echo \'{"type": "result", "subtype": "success", "is_error": false, "result": "all done",'
        ' "total_cost_usd": 0.125, "usage": {"input_tokens": 100, "output_tokens": 20},'
        ' "modelUsage": {"claude-x": {"inputTokens": 100, "outputTokens": 20, "costUSD": 0.125}}}\'\n'
    )
    claude.chmod(0o755)
    tasks: list[dict[str, object]] = [
        {"id": task, "outputs": [f"out/{task}.json"]} for task in ("t1", "t2")
    ]
    executor = {"kind": "ray", "address": cluster.address, "command": [str(claude), "{pointer}"]}
    write_run(git_repo, "r", tasks, {"executor": executor, "limits": {"max_load": 1000.0}})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    records = {r["task"]: r for r in ledger_records(git_repo) if "outcome" in r}
    assert records["t1"]["usage"]["cost_usd"] == 0.125
    assert records["t1"]["usage"]["input"] == 100 and records["t1"]["usage"]["output"] == 20
    t2 = records["t2"]["usage"]  # the file wins over the client's own report
    assert (t2["input"], t2["output"], t2["cost_usd"], t2["model"]) == (7, 3, 0.5, "m2")
