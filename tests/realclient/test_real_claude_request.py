"""From a request in a real Claude Code session to a landed run, with only
the gitrun plugin: its fan-out skill writes the run, shows what ``check``
says of it and hands it to its lead skill.

The user asks ``claude -p`` to summarize every note, in words (the mock
model then invokes ``gitrun:fanout`` as the listing of skills offers it) or
as ``/gitrun:fanout REQUEST``; the model runs the commands the skill names
(allowed by the skill alone), then invokes ``gitrun:lead`` and plays that
skill's loop (``tests/realclient/lead.py``); each worker writes its own
output with the Write tool. Skipped, with the reason, without the
CLI (``.ci/install-clients``) or Claude Code's sandbox.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.helpers import build_tree, commit_all, git
from tests.realclient.claude import (
    claude_binary,
    claude_env,
    gitrun_beside_claude,
    run_claude,
    sandbox_or_skip,
)
from tests.realclient.lead import Lead, conversation
from tests.realclient.mockmodel import (
    Brain,
    Failure,
    MockModel,
    Request,
    ToolUse,
    Turn,
    bash,
    say,
    write,
)

pytestmark = pytest.mark.realclient

NOTES = ["alpha", "beta", "gamma", "delta"]  # docs/<stem>.md, one task each, in sorted order
REQUEST = "Summarize every note in docs/ into out/<stem>.json"
RULES = 'Summarize the note in one sentence, as {"summary": "..."}.'
NEW = (
    "gitrun new notes --executor external --inputs 'docs/*.md' "
    f"--output 'out/{{stem}}.json' --rules '{RULES}' --validate json"
)


def skill(name: str, args: str) -> Turn:
    return Turn((ToolUse("Skill", {"skill": name, "args": args}),))


@pytest.mark.parametrize("how", ["asked", "slash"])
def test_a_request_becomes_an_external_run_that_the_session_leads_and_lands(
    git_repo: Path, tmp_path: Path, how: str
) -> None:
    claude_binary()
    sandbox_or_skip()
    build_tree(git_repo, {f"docs/{stem}.md": f"The {stem} note.\n" for stem in NOTES})
    commit_all(git_repo, "notes")
    home = tmp_path / "home"
    home.mkdir()
    installed = gitrun_beside_claude(
        git_repo, "plugin", "install", "--scope", "project", "--sandbox", HOME=str(home)
    )
    assert installed.returncode == 0, installed.stderr
    commit_all(git_repo, "the gitrun plugin")
    # The fan-out skill's part, a turn per step; then the lead skill's loop.
    steps = [
        *([skill("gitrun:fanout", REQUEST)] if how == "asked" else []),
        bash(NEW, "Write the run"),
        bash("gitrun check notes", "Check the run"),
        skill("gitrun:lead", "notes"),
    ]
    lead = Lead("notes", "gitrun start notes --json")

    def session(request: Request) -> Turn:
        calls, _results = conversation(request)
        return steps[len(calls)] if len(calls) < len(steps) else lead(request)

    workers: dict[str, Sequence[Turn | Failure] | Brain] = {
        f"task t{n:04d}:": [
            write(str(git_repo / f"out/{stem}.json"), json.dumps({"summary": f"The {stem}."})),
            say(f"wrote out/{stem}.json"),
        ]
        for n, stem in enumerate(sorted(NOTES), 1)
    }
    # Asked in words, the session may invoke the fan-out skill once the user
    # allows it (a -p session refuses a skill it was not allowed); typed as
    # a command, the skill needs no permission. Every command after that
    # runs by the skills' own allowed-tools.
    prompt, allowed = {
        "asked": (REQUEST, ("--allowedTools", "Skill(gitrun:fanout)")),
        "slash": (f"/gitrun:fanout {REQUEST}", ()),
    }[how]
    with MockModel(session, agents=workers, max_requests=200) as model:
        env = claude_env(home, model.url, GITRUN_MAX_LOAD="1000000")  # a busy machine's load
        proc = run_claude(git_repo, prompt, env, *allowed)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:], lead.commands)
        listed = json.dumps(next(r for r in model.requests if r.is_agent_turn).body)
        assert "gitrun:fanout" in listed and "gitrun:lead" in listed  # the skills it offers
        said = [model.tool_result(i) for i in model.tool_use_ids()]
        assert not any(error for error, _text in said), said
        if how == "asked":
            invoked = said.pop(0)[1]
            assert invoked == "Launching skill: gitrun:fanout", invoked
        new, check, handed = (text for _error, text in said[:3])
        assert handed == "Launching skill: gitrun:lead", handed
        assert new.startswith("created run 'notes' with 4 tasks"), new
        # The verdict the skill shows the user, counting the tasks.
        assert check.startswith("run 'notes' is ready: 4 tasks in 1 stage"), check
        # The skill's own text reached the model once it was invoked.
        bodies = [json.dumps(r.body) for r in model.requests if r.is_agent_turn]
        assert any("gitrun new RUN --executor external" in body for body in bodies)
    assert lead.commands[-1] == "gitrun land notes" and lead.batches == 2, lead.commands
    # Every output valid on the run branch, committed once, and landed.
    added = git(git_repo, "log", "gitrun/notes", "--format=", "--name-only", "--", "out/")
    assert sorted(added.split()) == sorted(f"out/{stem}.json" for stem in NOTES), added
    for stem in NOTES:
        shown = git(git_repo, "show", f"gitrun/notes:out/{stem}.json")
        assert json.loads(shown) == {"summary": f"The {stem}."}
        assert git(git_repo, "show", f"HEAD:out/{stem}.json") == shown
    packet = tomllib.loads(git(git_repo, "show", "gitrun/notes:.gitrun/runs/notes/packet.toml"))
    assert packet["executor"]["kind"] == "external" and packet["rules"]["text"] == RULES
    assert packet["outputs"]["validators"] == ["json"]
    status = json.loads(gitrun_beside_claude(git_repo, "status", "notes", "--json").stdout)
    assert status["counts"]["done"] == len(NOTES) and not status.get("violations"), status
    assert git(git_repo, "status", "--porcelain") == ""
