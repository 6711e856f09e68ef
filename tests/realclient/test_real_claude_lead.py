"""An external run led by a real Claude Code session in ``-p`` mode.

The lead runs ``gitrun next`` through Bash (allowed by ``--allowedTools``),
then launches subagents with the pointers in one turn; the mock model
answers each subagent from its own script, picked by the pointer in its
first message. gitrun's hooks, installed by ``gitrun hooks install`` or
carried by the gitrun plugin, must identify each subagent without any
per-task agent file, and hold it to the same rules either way. Skipped,
with the reason, when the CLI is not installed (``.ci/install-clients``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitrun.commands.session import prepare_external
from gitrun.definition.load import load_run
from gitrun.workers.pointer import render_pointer
from tests.helpers import commit_all, git, ledger_records, write_run
from tests.realclient.claude import (
    claude_binary,
    claude_env,
    gitrun_beside_claude,
    run_claude,
    sandbox_or_skip,
)
from tests.realclient.mockmodel import (
    Failure,
    MockModel,
    Request,
    ToolUse,
    Turn,
    agent,
    agents,
    bash,
    say,
    write,
)

pytestmark = pytest.mark.realclient

TASKS = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)]
# What a -p lead needs to run the gitrun commands of an external run (README).
LEAD_TOOLS = ("--allowedTools", "Bash(gitrun next:*)", "Bash(gitrun collect:*)")


def set_up(repo: Path, home: Path, how: str) -> str:
    """gitrun's hooks, its worker agent and the Bash sandbox, installed
    before the lead starts: by ``hooks install`` (files in the repository)
    or as the plugin. The subagent type a lead starts workers as."""
    home.mkdir(exist_ok=True)
    if how in ("hooks", "both"):
        installed = gitrun_beside_claude(repo, "hooks", "install", "--claude")
        assert installed.returncode == 0, installed.stderr
    if how in ("plugin", "both"):
        installed = gitrun_beside_claude(
            repo, "plugin", "install", "--scope", "project", "--sandbox", HOME=str(home)
        )
        assert installed.returncode == 0, installed.stderr
    assert (repo / ".claude/agents/gitrun-worker.md").exists() == (how != "plugin")
    git(repo, "add", ".claude")
    git(repo, "commit", "-q", "-m", f"gitrun {how}")
    return "gitrun:gitrun-worker" if how == "plugin" else "gitrun-worker"


# Both: a repository set up with hooks install before the plugin came (each
# hook then runs twice, and must decide the same both times).
@pytest.fixture(params=["hooks", "plugin", "both"])
def setup(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def repo(git_repo: Path, tmp_path: Path, setup: str) -> tuple[Path, str]:
    """Run r in external mode (t1 and t2 leased together, t3 later), set up
    one way or the other; and the worker's subagent type."""
    claude_binary()
    # max_load: never held back by the load average of a busy machine.
    packet = {
        "executor": {"kind": "external"},
        "limits": {"canary": 0, "concurrency": 2, "max_load": 1e6},
    }
    write_run(git_repo, "r", TASKS, packet)
    commit_all(git_repo, "run r")
    return git_repo, set_up(git_repo, tmp_path / "home", setup)


def test_a_p_lead_dispatches_two_subagents_in_one_turn_and_each_is_held_to_its_task(
    repo: tuple[Path, str],
) -> None:
    sandbox_or_skip()
    repo, kind = repo
    run = load_run(repo, "r")
    pointer = {task.id: render_pointer(run, task) for task in run.tasks}
    prepare_external(repo, "r", lambda _line: None, resume=False)  # started, nothing leased
    lead = [
        bash("gitrun next r", "Lease the next batch"),
        agents(
            agent(pointer["t1"], "t1", kind),
            agent(pointer["t2"], "t2", kind),
            agent(pointer["t3"], "t3", kind),  # not leased
        ),
        say("Waiting for the workers."),
        say("Waiting for the workers."),
        say("Waiting for the workers."),
    ]
    workers = {
        "task t1:": [
            write(str(repo / "out/t1.json"), '{"task": "t1"}'),
            write(str(repo / "out/t2.json"), '{"task": "not mine"}'),
            say("t1 done"),
        ],
        "task t2:": [
            bash("echo stray > stray.txt"),
            bash("gitrun collect r"),
            write(str(repo / "out/t2.json"), '{"task": "t2"}'),
            say("t2 done"),
        ],
        "task t3:": [write(str(repo / "out/t3.json"), "{}"), say("t3 done")],
    }
    with MockModel(lead, agents=workers) as model:
        proc = run_claude(
            repo,
            "Lead the gitrun run r.",
            claude_env(repo.parent / "home", model.url),
            *LEAD_TOOLS,
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        next_call, *launches = model.tool_use_ids()[:4]
        ran, said = model.tool_result(next_call)
        assert not ran and said.count("gitrun run r, task") == 2, said
        t1_call, t2_call, t3_call = launches
        denied, why = model.tool_result(t3_call)
        assert denied and "task t3 of run r is not handed out now" in why, why
        assert model.served_of("task t3:") == 0  # never started
        assert model.served_of("task t1:") == 3 and model.served_of("task t2:") == 4
        owned, stray = model.tool_use_ids_of("task t1:")
        assert model.tool_result(owned)[0] is False
        is_error, text = model.tool_result(stray)
        assert is_error and "gitrun task t1 may write only out/t1.json" in text, text
        shell, collect, own2 = model.tool_use_ids_of("task t2:")
        is_error, text = model.tool_result(shell)  # the lead's session sandbox holds it
        assert is_error and "Read-only file system" in text, text
        is_error, text = model.tool_result(collect)
        assert is_error and "may not run gitrun" in text, text
        assert model.tool_result(own2)[0] is False
        # The subagents ran under gitrun's canonical names.
        assert not model.tool_result(t1_call)[0] and not model.tool_result(t2_call)[0]
        descriptions = _descriptions(repo.parent / "home")
        assert sorted(descriptions) == ["gitrun r t1", "gitrun r t2"]
        # A worker has no Agent tool: no fan-out of its own outside gitrun's accounting.
        offered = {name for r in model.conversation("task t1:") for name in r.tool_names}
        assert "Agent" not in offered and {"Write", "Edit", "Read"} <= offered, offered
        assert "Agent" in {name for r in model.requests for name in r.tool_names}  # the lead's
    assert json.loads((repo / "out/t2.json").read_text()) == {"task": "t2"}
    assert not (repo / "out/t3.json").exists() and not (repo / "stray.txt").exists()
    done = gitrun_beside_claude(repo, "collect", "r", "--json", "--full")
    assert sorted(json.loads(done.stdout)["done"]) == ["t1", "t2"], done.stdout


def _json_of(text: str) -> dict[str, object]:
    """The JSON object a Bash tool result holds (the command's stdout)."""
    found = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert isinstance(found, dict)
    return found


def test_a_p_lead_reads_a_worker_s_words_from_collect_and_waits_out_a_throttle(
    git_repo: Path, tmp_path: Path
) -> None:
    """What a lead sees of a failure and of a throttle: `collect --json`
    quotes the subagent's last words (kept by its SubagentStop hook), and
    the `next` during the backoff exits 0 with why and wait_s, so the Bash
    tool shows no error."""
    sandbox_or_skip()
    claude_binary()
    # A backoff base of 10 minutes: the wait after a throttle is what two
    # throttles take to come back, at most 10 minutes.
    packet = {
        "executor": {"kind": "external"},
        "limits": {
            "canary": 0,
            "concurrency": 2,
            "max_load": 1e6,
            "backoff_base": "600s",
            "backoff_cap": "600s",
        },
    }
    write_run(git_repo, "r", TASKS, packet)
    commit_all(git_repo, "run r")
    assert gitrun_beside_claude(git_repo, "hooks", "install", "--claude").returncode == 0
    git(git_repo, "add", ".claude")
    git(git_repo, "commit", "-q", "-m", "gitrun hooks")
    (tmp_path / "home").mkdir()
    run = load_run(git_repo, "r")
    pointer = {task.id: render_pointer(run, task) for task in run.tasks}
    prepare_external(git_repo, "r", lambda _line: None, resume=False)
    # The API took 5 at once before: a throttle at 2 means its capacity
    # dropped, which a smaller fan-out does not answer: the backoff, drawn
    # from [0, 600) s, is what `next` meets.
    governor = git_repo / ".git/gitrun/r/governor.json"
    state = {"v": 1, "concurrency": 2, "backoff_until": 0, "throttles": 0, "valid_run": 0}
    governor.write_text(json.dumps({**state, "ceiling": 5}))
    lead = [
        bash("gitrun next r --json", "Lease the next batch"),
        agents(
            agent(pointer["t1"], "t1", "gitrun-worker"), agent(pointer["t2"], "t2", "gitrun-worker")
        ),
        bash("gitrun collect r --throttled t2 --json", "Collect the batch"),
        bash("gitrun next r --json", "Lease the next batch"),
        say("Waiting out the backoff."),
        say("Waiting out the backoff."),
    ]
    workers = {
        "task t1:": [
            say("I could not find the input, so I wrote nothing."),
            say("Still no input: giving up."),
        ],
        "task t2:": [say("API Error: Rate limited"), say("API Error: Rate limited")],
    }
    with MockModel(lead, agents=workers) as model:
        proc = run_claude(
            git_repo,
            "Lead the gitrun run r.",
            claude_env(tmp_path / "home", model.url),
            *LEAD_TOOLS,
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        _first, _t1, _t2, collect_call, next_call = model.tool_use_ids()[:5]
        is_error, text = model.tool_result(collect_call)
        assert not is_error, text
        collected = _json_of(text)
        assert collected["missing"] == ["t1"] and collected["throttled"] == ["t2"], text
        said = collected["said"]
        # Its words at its last stop before the collect: the one its hook
        # held, or the next (the client lets the lead go on meanwhile).
        assert isinstance(said, dict), text
        assert said["t1"] in (
            ["I could not find the input, so I wrote nothing."],
            ["Still no input: giving up."],
        ), text
        is_error, text = model.tool_result(next_call)
        assert not is_error, text  # exit 0: a wait is no error
        batch = _json_of(text)
        # The backoff after a throttle is jittered (up to twice as long as the
        # throttled attempt took): `next` meets it, or, on a machine slow
        # enough that the lead's call comes after it, leases no more than the
        # one task the bucket now takes at once.
        if "leased" in batch:
            assert list(batch["leased"]) == ["t1"], text
        else:
            assert batch["why"] == "throttled", text
            assert isinstance(batch["wait_s"], (int, float)) and batch["wait_s"] > 0, text
    words = (git_repo / ".git/gitrun/r/logs/t1.1.log").read_text()
    assert "I could not find the input, so I wrote nothing." in words


def _told(message: dict[str, Any]) -> str:
    """The text of a user message: its tool results' and its own."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = []
    for block in content or []:
        inner = block.get("content", block.get("text", ""))
        if isinstance(inner, list):
            inner = "".join(str(part.get("text", "")) for part in inner if isinstance(part, dict))
        texts.append(str(inner))
    return "\n".join(texts)


def _descriptions(home: Path) -> list[str]:
    """The description of every subagent the sessions under ``home`` started."""
    found = []
    for meta in (home / ".claude" / "projects").rglob("agent-*.meta.json"):
        found.append(json.loads(meta.read_text())["description"])
    return found


def test_a_p_lead_continues_the_subagent_a_throttle_stopped(git_repo: Path, tmp_path: Path) -> None:
    """A subagent refused with a 429 its client gives up on: collect records
    its id with the throttled try, the next batch names it under `continue`,
    and the lead's SendMessage of the pointer to it goes on in its context
    (its next request carries the turns done) and counts for the new lease."""
    sandbox_or_skip()
    claude_binary()
    packet = {
        "executor": {"kind": "external"},
        "limits": {
            "canary": 0,
            "concurrency": 1,
            "max_load": 1e6,
            "backoff_base": "1s",
            "backoff_cap": "1s",
        },
    }
    write_run(git_repo, "r", TASKS[:1], packet)
    commit_all(git_repo, "run r")
    assert gitrun_beside_claude(git_repo, "hooks", "install", "--claude").returncode == 0
    git(git_repo, "add", ".claude")
    git(git_repo, "commit", "-q", "-m", "gitrun hooks")
    (tmp_path / "home").mkdir()
    pointer = render_pointer(load_run(git_repo, "r"), load_run(git_repo, "r").tasks[0])
    prepare_external(git_repo, "r", lambda _line: None, resume=False)
    asked: list[int] = []  # the turns each of the worker's requests carried
    throttled = Failure(headers=(("retry-after", "120"),))

    def worker(request: Request) -> Turn | Failure:
        steps = sum(1 for m in request.body.get("messages") or [] if m.get("role") == "assistant")
        asked.append(steps)
        if steps < 2:
            return bash(f"echo step {steps + 1}", f"Step {steps + 1}")
        if steps == 2 and asked.count(2) == 1:
            return throttled
        return write(str(git_repo / "out/t1.json"), '{"task": "t1"}') if steps == 2 else say("done")

    seen: list[str] = []  # what the lead was told after each of its calls
    sent: list[str] = []  # the subagent ids it sent the pointer to

    def lead(request: Request) -> Turn | Failure:
        told = _told((request.body.get("messages") or [{}])[-1])
        seen.append(told)
        if len(seen) == 1:
            return bash("gitrun next r --json", "Lease the next batch")
        if len(seen) == 2:
            return Turn((agent(pointer, "t1", "gitrun-worker", wait=True),))
        if len(seen) == 3:
            return bash("gitrun collect r --throttled t1 --json", "Collect the batch")
        if "task-notification" in told:
            return bash("gitrun collect r --json", "Collect the batch")
        if sent or len(seen) > 40:
            return say("Waiting for the workers.")
        if '"continue"' in told:
            sent.append(_json_of(told)["continue"]["t1"])
            message = {"to": sent[0], "message": pointer, "summary": "go on"}
            return Turn((ToolUse("SendMessage", message),))
        # As the lead skill says: wait what `next` says to wait (a backoff as
        # long as the throttled try took, which a loaded machine stretches).
        wait = _json_of(told).get("wait_s") if "{" in told else None
        pause = f"sleep {min(float(wait), 20.0):.1f}; " if isinstance(wait, int | float) else ""
        return bash(f"{pause}gitrun next r --json", "Lease the next batch")  # after the backoff

    with MockModel(lead, agents={"task t1:": worker}, max_requests=90, lifetime=170) as model:
        proc = run_claude(
            git_repo,
            "Lead the gitrun run r.",
            claude_env(tmp_path / "home", model.url),
            *LEAD_TOOLS,
            "SendMessage",
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    # The continued worker's next request carried the two turns done.
    # (what the lead was told last says why, when it is not: its `next` results)
    assert asked == [0, 1, 2, 2, 3], (asked, len(seen), [t[-300:] for t in seen[-4:]])
    assert sent == [first_id := sent[0]] and first_id
    tries = [r for r in ledger_records(git_repo, "r") if "outcome" in r and "event" not in r]
    first, second = tries
    assert first["outcome"] == "throttled" and first["conversation"] == first_id, first
    assert second["outcome"] == "valid" and second["conversation"] == first["conversation"]
    assert second["resumed_from"] == {"attempt": 1, "throttles": 0}
    shown = git(git_repo, "show", "gitrun/r:out/t1.json")
    assert json.loads(shown) == {"task": "t1"}
    status = gitrun_beside_claude(git_repo, "status", "r")
    said = "t1: try 2 (attempt 1) continued the conversation of attempt 1 (throttled)"
    assert f"    {said}\n" in status.stdout, status.stdout
