"""Subagent identity without per-task agent files, through the installed hook.

The lead's Agent call with a leased pointer is allowed, renamed and
recorded; the subagent that call started is found from its ``agent_id`` and
held to its task's owns; anything that cannot be resolved is denied with a
reason. Every hook call runs the command ``gitrun hooks install`` wrote, as
Claude Code runs it (``/bin/sh -c`` with the JSON on stdin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gitrun.definition.load import load_run
from gitrun.engine.external import external_run
from gitrun.guard.context import pointers_in
from gitrun.guard.install import install_claude
from gitrun.store.dispatches import description_of
from gitrun.store.leases import read_leases
from gitrun.store.local import LocalPaths
from gitrun.workers.pointer import render_pointer
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, write_run
from tests.subagent_helpers import (
    agent_call,
    collect,
    lease,
    start_subagent,
    subagent_call,
)

TASKS = [
    {"id": "t1", "outputs": ["out/t1.json"]},
    {"id": "t2", "outputs": ["out/t2.json"]},
    {"id": "t3", "outputs": ["out/t3.json"]},
]
# max_load: never held back by the load average of a busy machine.
EXTERNAL = {
    "executor": {"kind": "external"},
    "limits": {"canary": 0, "concurrency": 2, "max_load": 1e6},
}


@pytest.fixture
def lead(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run r, started in external mode, with t1 and t2 leased; hooks installed."""
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    )
    write_run(git_repo, "r", TASKS, EXTERNAL)
    commit_all(git_repo, "run r")
    install_claude(git_repo)
    return git_repo


def _installed_hook(
    repo: Path, event: str, payload: dict[str, Any], **env: str
) -> subprocess.CompletedProcess[str]:
    """The hook command ``gitrun hooks install`` wrote for ``event``, run as the client runs it."""
    settings = json.loads((repo / ".claude/settings.json").read_text())
    command = settings["hooks"][event][0]["hooks"][0]["command"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(payload),
        cwd=repo,
        capture_output=True,
        text=True,
        env={**full_env, **env},
        timeout=60,
    )


def _hook(repo: Path, payload: dict[str, Any], **env: str) -> tuple[int, dict[str, Any], str]:
    proc = _installed_hook(repo, "PreToolUse", payload, **env)
    out = json.loads(proc.stdout)["hookSpecificOutput"] if proc.stdout.strip() else {}
    return proc.returncode, out, proc.stderr


def _decision(result: tuple[int, dict[str, Any], str]) -> str:
    code, out, stderr = result
    assert code == 0, stderr
    return str(out.get("permissionDecision", "none"))


def _reason(result: tuple[int, dict[str, Any], str]) -> str:
    return str(result[1].get("permissionDecisionReason", ""))


def _write(repo: Path, path: str) -> dict[str, Any]:
    return {"file_path": str(repo / path), "content": "{}"}


def test_a_leased_pointer_is_dispatched_renamed_recorded_and_its_subagent_held_to_it(
    lead: Path, tmp_path: Path
) -> None:
    pointers = lease(lead, "r", start=True)
    assert sorted(pointers) == ["t1", "t2"]
    transcript = tmp_path / "lead.jsonl"
    allowed = _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))
    assert _decision(allowed) == "allow"
    updated = allowed[1]["updatedInput"]
    assert updated == {
        "description": description_of("r", "t1"),
        "prompt": pointers["t1"],
        "subagent_type": "gitrun-worker",
    }
    assert _decision(_hook(lead, agent_call(lead, transcript, pointers["t2"], "toolu_2"))) == (
        "allow"
    )
    start_subagent(transcript, "a1", "toolu_1", description="gitrun r t1")
    start_subagent(transcript, "a2", "toolu_2", kind="general-purpose")  # any type will do

    def call(agent: str, tool: str, tool_input: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
        return _hook(lead, subagent_call(lead, transcript, agent, tool, tool_input))

    assert _decision(call("a1", "Write", _write(lead, "out/t1.json"))) == "none"
    assert _decision(call("a2", "Write", _write(lead, "out/t2.json"))) == "none"
    stray = call("a1", "Write", _write(lead, "out/t2.json"))
    assert _decision(stray) == "deny" and "gitrun task t1 may write only out/t1.json" in _reason(
        stray
    )
    assert _decision(call("a2", "Edit", _write(lead, "README.md"))) == "deny"
    for command in (
        "gitrun collect r",
        "g''itrun collect r",
        '"gitrun" collect r',
        "\\gitrun collect r",
        "env gitrun collect r",
        "x=1 command gitrun collect r",
        "/usr/local/bin/gitrun collect r",
        "python3 -m gitrun collect r",
    ):
        ran = call("a1", "Bash", {"command": command})
        assert _decision(ran) == "deny" and "may not run gitrun" in _reason(ran), command
    reads = call("a1", "Bash", {"command": "cat .gitrun/runs/r/packet.toml; git log gitrun/r"})
    assert _decision(reads) == "none"
    nested = call("a1", "Agent", {"description": "help", "prompt": "write out/t2.json"})
    assert _decision(nested) == "deny" and "may not launch subagents" in _reason(nested)
    # A second subagent whose meta file names a1's Agent call gets none of its task.
    start_subagent(transcript, "a9", "toolu_1", description="gitrun r t1")
    taken = call("a9", "Write", _write(lead, "out/t1.json"))
    assert _decision(taken) == "deny", taken
    assert "dispatch was taken by another subagent (a1)" in _reason(taken)
    assert _decision(call("a1", "Write", _write(lead, "out/t1.json"))) == "none"  # still a1's


def test_a_pointer_of_a_task_not_leased_is_denied_with_what_to_do(
    lead: Path, tmp_path: Path
) -> None:
    lease(lead, "r", start=True)
    run = load_run(lead, "r")
    t3 = render_pointer(run, run.tasks[2])
    denied = _hook(lead, agent_call(lead, tmp_path / "lead.jsonl", t3, "toolu_3"))
    assert _decision(denied) == "deny"
    assert "task t3 of run r is not handed out now" in _reason(denied)
    assert "`gitrun next r`" in _reason(denied)
    nowhere = t3.replace("gitrun run r,", "gitrun run nope,")
    missing = _hook(lead, agent_call(lead, tmp_path / "lead.jsonl", nowhere, "toolu_4"))
    assert _decision(missing) == "deny" and "no gitrun run 'nope'" in _reason(missing)


def test_one_pointer_per_subagent_and_one_subagent_per_attempt(lead: Path, tmp_path: Path) -> None:
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    both = pointers["t1"] + "\n\n" + pointers["t2"]
    two = _hook(lead, agent_call(lead, transcript, both, "toolu_1"))
    assert _decision(two) == "deny" and "pointers of 2 gitrun tasks (t1, t2)" in _reason(two)
    assert _decision(_hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_2"))) == (
        "allow"
    )
    again = _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_3"))
    assert _decision(again) == "deny" and "already being worked on" in _reason(again)
    # The same call seen twice (a retried hook) is no second subagent.
    assert _decision(_hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_2"))) == (
        "allow"
    )


def test_after_collect_a_late_subagent_write_is_denied(lead: Path, tmp_path: Path) -> None:
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    assert _decision(_hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))) == (
        "allow"
    )
    start_subagent(transcript, "a1", "toolu_1")
    collect(lead, "r")  # t1 wrote nothing: released with an attempt used
    late = _hook(lead, subagent_call(lead, transcript, "a1", "Write", _write(lead, "out/t1.json")))
    assert _decision(late) == "deny" and "no longer handed out" in _reason(late)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_meta_file_of_another_kind_is_denied_at_once(
    lead: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO where the client's meta file belongs hung the hook until the
    client killed it (and a killed hook lets the write through)."""
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))
    meta = transcript.with_suffix("") / "subagents" / "agent-a1.meta.json"
    meta.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(meta)
    elif kind == "directory":
        meta.mkdir()
    else:
        meta.symlink_to("/dev/zero")
    call = subagent_call(lead, transcript, "a1", "Write", _write(lead, "out/t1.json"))
    denied = _hook(lead, call)
    assert _decision(denied) == "deny", denied
    if kind == "device":  # a link out of the session's folder, read nowhere
        assert "outside its session's folder" in _reason(denied)
    else:
        assert "cannot read this subagent's agent-a1.meta.json" in _reason(denied)


def test_a_subagent_that_cannot_be_resolved_is_denied_or_plain(lead: Path, tmp_path: Path) -> None:
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))
    # No meta file where the client writes it: cannot tell, so denied.
    lost = _hook(lead, subagent_call(lead, transcript, "a9", "Write", _write(lead, "out/t1.json")))
    assert _decision(lost) == "deny" and "cannot read this subagent's" in _reason(lost)
    # An agent_id that is no name the client makes never reaches the file system.
    odd = _hook(lead, subagent_call(lead, transcript, "../x", "Write", _write(lead, "a.txt")))
    assert _decision(odd) == "deny"
    # A subagent the lead launched without a pointer is no task's: plain.
    start_subagent(transcript, "p1", "toolu_other", kind="general-purpose", description="explore")
    plain = subagent_call(lead, transcript, "p1", "Write", _write(lead, "notes.txt"))
    plain["agent_type"] = "general-purpose"
    assert _decision(_hook(lead, plain)) == "none"
    # ... unless it presents itself as a gitrun worker.
    start_subagent(transcript, "w1", "toolu_other")
    fake = _hook(lead, subagent_call(lead, transcript, "w1", "Write", _write(lead, "out/t1.json")))
    assert _decision(fake) == "deny" and "not dispatched with a leased gitrun pointer" in _reason(
        fake
    )


def test_a_prompt_without_a_pointer_is_left_alone(lead: Path, tmp_path: Path) -> None:
    lease(lead, "r", start=True)
    call = agent_call(lead, tmp_path / "lead.jsonl", "Explore the repository.", "toolu_1")
    assert _hook(lead, call) == (0, {}, "")
    bash = {**call, "tool_name": "Bash", "tool_input": {"command": "gitrun next r"}}
    assert _hook(lead, bash) == (0, {}, "")  # the lead runs gitrun


def test_a_worker_gitrun_launched_may_not_run_gitrun_either(lead: Path, tmp_path: Path) -> None:
    call = agent_call(lead, tmp_path / "lead.jsonl", "", "toolu_1")
    bash = {**call, "tool_name": "Bash", "tool_input": {"command": "python3 -m gitrun collect r"}}
    result = _hook(lead, bash, GITRUN_RUN="r", GITRUN_TASK="t1")
    assert _decision(result) == "deny"


@pytest.mark.parametrize(
    ("run_id", "task_id"),
    [("a", "b-c"), ("a-b", "c"), ("r", "t1"), ("1-2", "3-4"), ("x" * 30, "x-"), ("a.b_c", "d.")],
)
def test_a_pointer_names_its_run_and_task_exactly(
    git_repo: Path, run_id: str, task_id: str
) -> None:
    write_run(git_repo, run_id, [{"id": task_id, "outputs": ["out/x.json"]}])
    run = load_run(git_repo, run_id)
    pointer = render_pointer(run, run.tasks[0])
    assert pointers_in(pointer) == [(run_id, task_id)]
    assert pointers_in(f"Please do this:\n{pointer}\nThanks.") == [(run_id, task_id)]


def test_a_new_external_run_writes_no_agent_file_and_says_how_to_lead_it(
    git_repo: Path,
) -> None:
    """`gitrun new --executor external` leaves .claude/ alone: the worker
    agent comes from the plugin (or `gitrun hooks install`), and a batch
    names the type the repository has."""
    proc = run_gitrun_call(["new", "e", "--executor", "external"], git_repo, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (git_repo / ".claude").exists()
    assert "`gitrun plugin install` once, and `/gitrun:lead e`" in proc.stdout
    from gitrun.guard.agents import install_worker_agent, worker_agent_type

    assert worker_agent_type(git_repo) == "gitrun:gitrun-worker"
    assert "installed the gitrun-worker agent" in install_worker_agent(git_repo)
    agent = git_repo / ".claude/agents/gitrun-worker.md"
    assert agent.read_text().startswith("---\nname: gitrun-worker\n")
    assert worker_agent_type(git_repo) == "gitrun-worker"


def test_a_subagent_s_last_words_reach_collect_and_its_log(lead: Path, tmp_path: Path) -> None:
    """A dispatched subagent that stops without its outputs: its SubagentStop
    hook keeps what it said last in its attempt's log, and `collect` quotes
    it, so the lead reads why without the subagent's transcript."""
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))
    start_subagent(transcript, "a1", "toolu_1", description="gitrun r t1")
    for active, words in (
        (False, "I could not open the input"),
        (True, "giving up: no input\x1b[2J"),
    ):
        stop = {
            "session_id": "lead",
            "transcript_path": str(transcript),
            "cwd": str(lead),
            "hook_event_name": "SubagentStop",
            "stop_hook_active": active,
            "agent_id": "a1",
            "agent_type": "gitrun-worker",
            "agent_transcript_path": str(tmp_path / "a1.jsonl"),
            "last_assistant_message": f"Reading the packet.\n{words}",
        }
        proc = _installed_hook(lead, "SubagentStop", stop)
        assert proc.returncode == 0, proc.stderr
        held = json.loads(proc.stdout) if proc.stdout.strip() else {}
        assert (held.get("decision") == "block") is not active  # held once, then let go
    collected = collect(lead, "r")
    assert collected.missing == ["t1", "t2"]  # t2 was leased and dispatched nowhere
    assert "t2" not in collected.said
    assert collected.said["t1"] == ["Reading the packet.", "giving up: no input\\x1b[2J"]
    log = (lead / ".git/gitrun/r/logs/t1.1.log").read_text()
    assert "I could not open the input" in log and "giving up: no input" in log


def test_a_transcript_that_is_not_the_session_s_own_identifies_no_subagent(
    lead: Path, tmp_path: Path
) -> None:
    """The meta file is read only from the session's own folder: a
    transcript_path that is not ``<session_id>.jsonl``, or a subagents folder
    linked elsewhere, tells nothing about who the subagent is."""
    pointers = lease(lead, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    _hook(lead, agent_call(lead, transcript, pointers["t1"], "toolu_1"))
    start_subagent(transcript, "a1", "toolu_1", description="gitrun r t1")
    other = tmp_path / "elsewhere.jsonl"
    start_subagent(other, "a1", "toolu_1", description="gitrun r t1")
    call = subagent_call(lead, other, "a1", "Write", _write(lead, "out/t1.json"))
    denied = _hook(lead, call)  # session "lead", transcript elsewhere.jsonl
    assert _decision(denied) == "deny" and "not its session's own transcript" in _reason(denied)
    linked = tmp_path / "linked"
    (linked / "lead").mkdir(parents=True)
    (linked / "lead.jsonl").write_text("")
    (linked / "lead" / "subagents").symlink_to(transcript.with_suffix("") / "subagents")
    call = subagent_call(lead, linked / "lead.jsonl", "a1", "Write", _write(lead, "out/t1.json"))
    denied = _hook(lead, call)
    assert _decision(denied) == "deny" and "outside its session's folder" in _reason(denied)
    fine = _hook(lead, subagent_call(lead, transcript, "a1", "Write", _write(lead, "out/t1.json")))
    assert _decision(fine) == "none"


def test_a_throttled_task_goes_out_again_as_the_same_attempt_to_a_new_subagent(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    )
    limits = {"canary": 0, "concurrency": 1, "max_load": 1e6, "backoff_base": "0.01s"}
    write_run(git_repo, "r", TASKS, {"executor": {"kind": "external"}, "limits": limits})
    commit_all(git_repo, "run r")
    install_claude(git_repo)
    pointers = lease(git_repo, "r", start=True)
    transcript = tmp_path / "lead.jsonl"
    first = _hook(git_repo, agent_call(git_repo, transcript, pointers["t1"], "toolu_1"))
    assert _decision(first) == "allow"
    start_subagent(transcript, "a1", "toolu_1")
    with external_run(git_repo, "r") as ext:
        assert ext.collect(["t1"]).throttled == ["t1"]
    deadline = time.monotonic() + 30
    while "t1" not in (pointers := lease(git_repo, "r")):
        assert time.monotonic() < deadline, "t1 was never handed out again"
        time.sleep(0.02)
    # Attempt 1 again (the throttle used no number), its second try.
    assert read_leases(LocalPaths.of(git_repo, "r"))["t1"].try_of == (1, 1)
    again = _hook(git_repo, agent_call(git_repo, transcript, pointers["t1"], "toolu_2"))
    assert _decision(again) == "allow", _reason(again)  # the first try's dispatch is over
    start_subagent(transcript, "a2", "toolu_2")
    late = subagent_call(git_repo, transcript, "a1", "Write", _write(git_repo, "out/t1.json"))
    assert _decision(_hook(git_repo, late)) == "deny"  # the first try's subagent has nothing
    new = subagent_call(git_repo, transcript, "a2", "Write", _write(git_repo, "out/t1.json"))
    assert _decision(_hook(git_repo, new)) == "none"
