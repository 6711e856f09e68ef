"""Real agent clients lead an external run through ``gitrun mcp``.

codex 0.171, configured with gitrun's MCP server in a private
``CODEX_HOME``, talks to the scripted Responses API on 127.0.0.1 (no
network, no key). It offers the server's tools to the model as one
namespace, ``mcp__gitrun``; the model starts the run, writes the outputs
with its shell, names a task wrongly, collects and asks for the next batch.
Claude Code, given the server with ``--mcp-config``, calls the same
tools as ``mcp__gitrun__<tool>``. Skipped, with the reason, without the
client (``.ci/install-clients``) or the mcp extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, git, write_run
from tests.realclient.clis import client_binary, codex_env, gitrun, offline_env, private_bin
from tests.realclient.openai_mock import OpenAIMock, shell
from tests.realclient.scripted import Answer, Call, Reply, Request

pytestmark = pytest.mark.realclient
pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

NAMESPACE = "mcp__gitrun"  # how codex offers an MCP server's tools
WAITS = 120
TASKS = ["t1", "t2", "t3"]
# The client starts gitrun mcp with an environment of its own choosing, so the
# packet keeps the load gate out of the way (a busy machine leases one at a time).
LIMITS = {"canary": 0, "concurrency": 3, "max_load": 1e6}
LEAD_ARGS = ["--ephemeral", "--json", "Lead the gitrun run r."]


def _codex_env(tmp_path: Path, base_url: str, repo: Path) -> dict[str, str]:
    return codex_env(
        tmp_path,
        base_url,
        "request_max_retries = 0\n\n"
        # What the agent-clients page shows, with this interpreter's gitrun.
        "[mcp_servers.gitrun]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = ["-m", "gitrun", "-C", {json.dumps(str(repo))}, "mcp"]\n'
        'default_tools_approval_mode = "approve"\n'
        # codex gives a server 10 s to start and a call 60 s by default: a
        # machine under load must not fail the test.
        "startup_timeout_sec = 120\n"
        "tool_timeout_sec = 120\n",
    )


class CodexLead(OpenAIMock):
    """The scripted lead, calling gitrun's tools only once codex offers them:
    codex starts its MCP servers beside the session, and on a busy machine
    its first requests come before the server is up. Until then each turn
    waits a second in the shell, at most :data:`WAITS` times."""

    waits = 0

    def answer(self, request: Request) -> Answer:
        body = request.body if isinstance(request.body, dict) else {}
        tools = body.get("tools") or []
        offered = any(isinstance(t, dict) and t.get("name") == NAMESPACE for t in tools)
        if tools and not offered and request.path.split("?")[0].endswith("/responses"):
            assert self.waits < WAITS, "codex never offered gitrun's tools"
            self.waits += 1
            wait = Call("exec_command", {"cmd": "sleep 1"}, f"call_wait_{self.waits}")
            return Answer.sse(self._response_events(wait))
        return super().answer(request)


def _external_run(repo: Path) -> None:
    """Run r: the three tasks, external, committed."""
    packet = {"executor": {"kind": "external"}, "limits": LIMITS}
    write_run(repo, "r", [{"id": t, "outputs": [f"out/{t}.json"]} for t in TASKS], packet)
    commit_all(repo, "run r")


def _tool(name: str, **args: Any) -> Call:
    return Call(name, args, namespace=NAMESPACE)


def _result(text: str) -> dict[str, Any]:
    """The tool's structured result in what the client told the model."""
    assert "{" in text, text
    found = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert isinstance(found, dict), text
    return found


def test_a_codex_lead_starts_collects_and_finishes_a_run_over_mcp(
    git_repo: Path, tmp_path: Path
) -> None:
    binary = client_binary("codex")
    _external_run(git_repo)
    writes = " && ".join(f'printf \'{{"task": "{t}"}}\' > out/{t}.json' for t in TASKS)
    script = [
        _tool("start", run="r"),
        shell(f"mkdir -p out && {writes}"),
        _tool("collect", run="r", throttled=["t9"]),  # no such lease: the tool says so
        _tool("collect", run="r"),
        _tool("next", run="r"),
        Reply("Every task is done."),
    ]
    with CodexLead(script) as api:
        env = _codex_env(tmp_path, api.url + "/v1", git_repo)
        proc = subprocess.run(
            [binary, "exec", "--model", "gpt-mock", "--sandbox", "workspace-write", *LEAD_ARGS],
            cwd=git_repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        told = api.function_outputs()
        start, write, wrong, collect, after = (told[i] for i in api.call_ids())
    assert list(_result(start)["batch"]["leased"]) == TASKS, start
    assert "unsupported call" not in write, write
    assert "--throttled names t9, which is not leased" in wrong, wrong
    assert _result(collect)["done"] == TASKS, collect
    assert _result(after)["done"] is True, after
    # The run's own record says the same: every output committed once.
    added = git(git_repo, "log", "gitrun/r", "--format=", "--name-only", "--", "out/").split()
    assert sorted(added) == [f"out/{t}.json" for t in TASKS], added
    status = json.loads(gitrun(git_repo, env, "status", "r", "--json").stdout)
    assert status["counts"]["done"] == 3 and not status["violations"], status


def test_a_claude_code_lead_calls_gitrun_s_tools_over_mcp(git_repo: Path, tmp_path: Path) -> None:
    from tests.realclient.claude import claude_binary, claude_env, run_claude
    from tests.realclient.mockmodel import MockModel, ToolUse, Turn, say

    claude_binary()
    _external_run(git_repo)
    server = {"command": sys.executable, "args": ["-m", "gitrun", "-C", str(git_repo), "mcp"]}
    config = json.dumps({"mcpServers": {"gitrun": server}})
    lead = [
        Turn((ToolUse("mcp__gitrun__start", {"run": "r"}),)),
        Turn((ToolUse("mcp__gitrun__status", {"run": "r"}),)),
        say("Started."),
    ]
    (tmp_path / "home").mkdir()
    with MockModel(lead) as model:
        env = claude_env(tmp_path / "home", model.url)
        proc = run_claude(
            git_repo, "Lead r.", env, "--mcp-config", config, "--allowedTools", "mcp__gitrun"
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        start, status = (model.tool_result(i) for i in model.tool_use_ids())
    assert not start[0] and list(_result(start[1])["batch"]["leased"]) == TASKS, start
    assert not status[0] and _result(status[1])["counts"]["running"] == 3, status


def test_a_gemini_cli_lead_calls_gitrun_s_tools_over_mcp(git_repo: Path, tmp_path: Path) -> None:
    """gemini-cli 0.61 names an MCP server's tools mcp_<server>_<tool>, and
    runs them without asking when the server is trusted."""
    from tests.realclient.gemini_mock import GeminiMock

    binary = client_binary("gemini")
    _external_run(git_repo)
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    server = {"command": sys.executable, "args": ["-m", "gitrun", "-C", str(git_repo), "mcp"]}
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": {"gitrun": {**server, "trust": True}},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    script = [Call("mcp_gitrun_start", {"run": "r"}), Call("mcp_gitrun_status", {"run": "r"})]
    with GeminiMock([*script, Reply("Started.")]) as api:
        env = offline_env(
            home,
            private_bin(tmp_path, "gemini"),
            GOOGLE_GEMINI_BASE_URL=api.url,
            GEMINI_API_KEY="mock-not-a-key",
        )
        proc = subprocess.run(
            [
                binary,
                "--model",
                "gemini-mock",
                "--skip-trust",
                "--output-format",
                "json",
                "--prompt",
                "Lead the gitrun run r.",
            ],
            cwd=git_repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        told = {r["name"]: json.dumps(r["response"]) for r in api.function_responses()}
    start = json.loads(told["mcp_gitrun_start"])["output"]
    assert list(_result(start)["batch"]["leased"]) == TASKS, start
    status = json.loads(told["mcp_gitrun_status"])["output"]
    assert _result(status)["counts"]["running"] == 3, status
