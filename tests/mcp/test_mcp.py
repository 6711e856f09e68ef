"""``gitrun mcp`` driven by the official SDK's own client over stdio.

Every tool, the packet resource, the arguments a client gets wrong, and a
server killed in the middle of a call. Skipped, with the reason, without
the mcp extra (``pip install '.[mcp]'``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, git, run_gitrun, write_run

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

TASKS = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)]
EXTERNAL = {"executor": {"kind": "external"}, "limits": {"canary": 0, "concurrency": 2}}


@pytest.fixture
def repo(git_repo: Path) -> Path:
    write_run(git_repo, "r", TASKS, EXTERNAL)
    commit_all(git_repo, "run r")
    return git_repo


@asynccontextmanager
async def _client(repo: Path) -> AsyncIterator[Client]:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "gitrun", "mcp"], cwd=repo, env=dict(os.environ)
    )
    async with Client(server) as client:
        yield client


def _session(repo: Path, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(120):  # a server that hangs fails the test, not the suite
            async with _client(repo) as client:
                await body(client)

    anyio.run(main)


async def _call(client: Client, tool: str, **args: Any) -> tuple[bool, Any]:
    """(is_error, the structured result or the error's text)."""
    result = await client.call_tool(tool, args)
    if result.is_error:
        return True, " ".join(getattr(c, "text", "") for c in result.content)
    return False, result.structured_content


def test_the_tools_are_typed_and_a_lease_made_here_is_the_lease_of_gitrun_next(
    repo: Path,
) -> None:
    """next and collect over MCP and on the command line share one engine:
    a lease made through the server is collected by `gitrun collect`, and
    the other way round."""
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {
            "status",
            "check",
            "start",
            "resume",
            "next",
            "collect",
            "retry",
            "report",
        }
        for tool in listed.values():
            assert tool.description and tool.input_schema["required"] == ["run"], tool
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert listed["next"].input_schema["properties"]["max"]["anyOf"][0]["minimum"] == 1
        ok, check = await _call(client, "check", run="r")
        assert not ok and check["ready"] and check["problems"] == [], check
        assert "4 tasks in 1 stage" in check["summary"]
        error, said = await _call(client, "next", run="r")  # not started: the command's words
        assert error and "run 'r' has not started; start it with `gitrun start r`" in said
        ok, started = await _call(client, "start", run="r")
        assert not ok and list(started["batch"]["leased"]) == ["t1", "t2"], started
        assert started["collected"] is None and "started on branch gitrun/r" in started["said"][0]
        (repo / "out/t1.json").write_text('{"ok": 1}')
        (repo / "out/t2.json").write_text('{"ok": 2}')
        ok, collected = await _call(client, "collect", run="r")
        assert not ok and collected["done"] == ["t1", "t2"], collected
        assert "`gitrun next r`" in collected["next"]
        ok, batch = await _call(client, "next", run="r", max=1)
        assert not ok and list(batch["leased"]) == ["t3"] and batch["why"] == "max", batch
        assert batch["agent"] == "gitrun:gitrun-worker" and batch["leased"]["t3"].startswith(
            "gitrun run r, task t3: follow .gitrun/runs/r/packet.toml."
        )
        seen["batch"] = batch
        ok, status = await _call(client, "status", run="r")
        assert (
            not ok
            and status["counts"]["done"] == 2
            and status["tasks"]["t3"]["status"] == ("running")
        ), status
        ok, retried = await _call(client, "retry", run="r")
        assert not ok and retried == {
            "tasks": [],
            "lifted": None,
            "max_cost_usd": None,
            "max_tokens": None,
        }
        ok, raised = await _call(client, "retry", run="r", max_cost_usd=2.5)
        assert not ok and raised["max_cost_usd"] == 2.5, raised
        ok, report = await _call(client, "report", run="r", output="r.html")
        assert not ok and Path(report["path"]) == repo / "r.html"
        assert (repo / "r.html").read_text().lower().startswith("<!doctype html>")
        packet = await client.read_resource("gitrun://runs/r/packet.toml")
        assert packet.contents[0].text == (repo / ".gitrun/runs/r/packet.toml").read_text()

    _session(repo, body)
    # The lease the server made is gitrun's own: the command line collects it.
    (repo / "out/t3.json").write_text('{"ok": 3}')
    done = run_gitrun(repo, "collect", "r", "--json")
    assert json.loads(done.stdout)["done"] == ["t3"], done.stdout
    added = git(repo, "log", "gitrun/r", "--format=", "--name-only", "--", "out/").split()
    assert sorted(added) == ["out/t1.json", "out/t2.json", "out/t3.json"]
    # And the other way: a lease of `gitrun next`, then a new lead resumes over MCP.
    assert json.loads(run_gitrun(repo, "next", "r", "--json").stdout)["leased"].keys() == {"t4"}

    async def resumed(client: Client) -> None:
        ok, again = await _call(client, "resume", run="r")
        assert not ok and again["collected"]["abandoned"] == ["t4"], again
        assert list(again["batch"]["leased"]) == ["t4"] and again["batch"]["attempts"] == {
            "t4": 2
        }, again

    _session(repo, resumed)


def test_what_a_client_gets_wrong_is_the_command_s_sentence_as_a_tool_error(repo: Path) -> None:
    async def body(client: Client) -> None:
        error, said = await _call(client, "status", run="nosuch")
        assert error and "no run 'nosuch'" in said and "gitrun new nosuch" in said, said
        error, said = await _call(client, "next", run=3)
        assert error and "run" in said and "valid string" in said, said
        error, said = await _call(client, "next", run="r", max=0)
        assert error and "greater than or equal to 1" in said, said
        assert not (await _call(client, "start", run="r"))[0]
        error, said = await _call(client, "collect", run="r", throttled=["t4"])
        assert error and "--throttled names t4, which is not leased" in said, said
        error, said = await _call(client, "retry", run="r", max_cost_usd=-1)
        assert error and "budget" in said, said
        error, said = await _call(client, "nosuch", run="r")
        assert error, said
        with pytest.raises(Exception, match="run 'nosuch' has no packet here"):
            await client.read_resource("gitrun://runs/nosuch/packet.toml")
        for uri in ("gitrun://runs/..%2Fx/packet.toml", "gitrun://runs/A%20B/packet.toml"):
            # The SDK refuses a parameter that climbs out; gitrun, one that is no run id.
            with pytest.raises(Exception, match=r"Unknown resource|is no run id"):
                await client.read_resource(uri)
        error, said = await _call(client, "check", run="broken")
        assert error and "no run 'broken'" in said, said

    _session(repo, body)


def test_a_run_gitrun_drives_itself_is_not_started_over_mcp(git_repo: Path) -> None:
    write_run(git_repo, "c", TASKS)  # [executor] kind = "command"
    commit_all(git_repo, "run c")

    async def body(client: Client) -> None:
        error, said = await _call(client, "start", run="c")
        assert error and "run 'c' is not external" in said and "`gitrun start c`" in said, said

    _session(git_repo, body)
    assert "gitrun/c" not in git(git_repo, "branch", "--list", "gitrun/c")


def test_a_definition_that_does_not_load_is_a_list_of_problems(git_repo: Path) -> None:
    write_run(git_repo, "b", TASKS, {**EXTERNAL, "limits": {"concurrency": "many"}})
    commit_all(git_repo, "run b")

    async def body(client: Client) -> None:
        error, check = await _call(client, "check", run="b")
        assert not error and not check["ready"] and check["summary"] == "", check
        (problem,) = check["problems"]
        assert problem["code"] == "definition" and "limits.concurrency" in problem["message"]

    _session(git_repo, body)


def test_a_linked_packet_is_not_served(repo: Path, tmp_path: Path) -> None:
    """The resource reads a run's packet only as a regular file reached
    without a link: a link could name any file of the machine."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    link_run = repo / ".gitrun/runs/l"
    link_run.mkdir()
    (link_run / "packet.toml").symlink_to(secret)

    async def body(client: Client) -> None:
        with pytest.raises(Exception, match="no packet here"):
            await client.read_resource("gitrun://runs/l/packet.toml")

    _session(repo, body)


def _snapshot(*roots: Path) -> dict[str, bytes | str]:
    """Every file, link and folder beneath ``roots`` (not git's database),
    with its bytes or its target: what a refused call must leave as it was."""
    seen: dict[str, bytes | str] = {}
    for root in roots:
        for here, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if Path(here, d) != root / ".git"]
            for name in dirs + files:
                path = Path(here, name)
                if path.is_symlink():
                    seen[str(path)] = f"link to {os.readlink(path)}"
                elif path.is_dir():
                    seen[str(path)] = "folder"
                else:
                    seen[str(path)] = path.read_bytes()
    return seen


def test_the_report_tool_writes_only_a_new_file_or_its_own_report(
    repo: Path, tmp_path: Path
) -> None:
    """A client is a model that reads task data: the path it passes is
    confined like a worker's. Each attack is refused with one sentence that
    names the path, and writes nothing anywhere; the report's own place
    takes a second report. Told no place, it writes where `gitrun report`
    does, with the run's local state: the work tree gets no file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "linked").symlink_to(outside)  # a folder of the repository that leads out
    (outside / "theirs.html").write_text("someone else's file")
    (repo / "link.html").symlink_to(outside / "theirs.html")
    (repo / "README.md").write_text("an edit not committed yet\n")  # tracked, dirty
    (repo / "notes.txt").write_text("the user's untracked notes\n")
    (repo / "out").mkdir(exist_ok=True)
    (repo / "gitrun-report-other.html").write_text("<!DOCTYPE html> not gitrun's\n")
    assert run_gitrun(repo, "start", "r").returncode == 0
    attacks = [
        ".git/config",
        ".git/hooks/pre-commit",
        ".GIT/config",
        "../outside/escape.html",
        str(outside / "absolute.html"),
        "linked/r.html",
        "link.html",
        "README.md",
        "notes.txt",
        ".gitrun/runs/r/packet.toml",
        ".gitrun/r.html",
        "out",  # a folder of the repository
        "nosuch/r.html",
        "",
    ]
    before = _snapshot(repo, outside)
    config = (repo / ".git/config").read_bytes()
    reports: list[str] = []

    async def body(client: Client) -> None:
        for output in attacks:
            error, said = await _call(client, "report", run="r", output=output)
            assert error, (output, said)
            assert repr(output) in said and "\n" not in said.strip(), (output, said)
            assert _snapshot(repo, outside) == before, output
        for output in (None, None, "r.html", "r.html"):
            args = {} if output is None else {"output": output}
            error, done = await _call(client, "report", run="r", **args)
            assert not error, (output, done)
            reports.append(done["path"])
        # Another run's default place holds a file that is not its report.
        error, said = await _call(client, "report", run="r", output="gitrun-report-other.html")
        assert error and "not a report of run 'r'" in said, said

    _session(repo, body)
    assert (repo / ".git/config").read_bytes() == config
    local = repo / ".git/gitrun/r/report.html"
    assert reports == [str(local)] * 2 + [str(repo / "r.html")] * 2
    for page in (local, repo / "r.html"):
        assert page.read_text().startswith("<!DOCTYPE html>")
    assert sorted(os.listdir(outside)) == ["theirs.html"]
    assert (outside / "theirs.html").read_text() == "someone else's file"
    assert (repo / "README.md").read_text() == "an edit not committed yet\n"
    untracked = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    new = [line[3:] for line in untracked if line.startswith("??") and ".gitrun/" not in line]
    assert sorted(new) == [
        "gitrun-report-other.html",
        "link.html",
        "linked",
        "notes.txt",
        "r.html",
    ], untracked  # no temporary file left behind


def test_every_tool_takes_a_run_id_never_a_path(repo: Path) -> None:
    """The run argument of every tool names a folder of .gitrun/runs/: one
    that is a path is refused as no run id, before anything is read or made."""
    before = _snapshot(repo)

    async def body(client: Client) -> None:
        tools = [t.name for t in (await client.list_tools()).tools]
        for tool in tools:
            for run in ("../x", "/etc", "r/../r", ".."):
                error, said = await _call(client, tool, run=run)
                assert error and f"{run!r} is not a valid run id" in said, (tool, run, said)

    _session(repo, body)
    assert _snapshot(repo) == before


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def test_a_server_killed_in_the_middle_of_a_collect_leaves_nothing_half_written(
    repo: Path,
) -> None:
    """SIGKILL at growing moments into a collect that commits: whenever it
    lands, the run stays whole, and the next collect finishes the work with
    every output committed once."""
    assert run_gitrun(repo, "start", "r").returncode == 0
    for task in ("t1", "t2"):
        (repo / f"out/{task}.json").write_text(json.dumps({"task": task}))
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    collect = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "collect", "arguments": {"run": "r"}},
    }
    for delay in (0.0, 0.05, 0.15, 0.3, 0.6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitrun", "mcp"],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _rpc(proc, hello)
            assert proc.stdout is not None and b'"id":1' in proc.stdout.readline()
            _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _rpc(proc, collect)
            time.sleep(delay)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the server we started, and its children
            proc.communicate(timeout=60)
        status = run_gitrun(repo, "status", "r", "--json")
        assert status.returncode == 0, status.stderr
    done = run_gitrun(repo, "collect", "r", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(run_gitrun(repo, "status", "r", "--json").stdout)
    assert status["tasks"]["t1"]["status"] == status["tasks"]["t2"]["status"] == "done", status
    added = git(repo, "log", "gitrun/r", "--format=", "--name-only", "--", "out/").split()
    assert sorted(added) == ["out/t1.json", "out/t2.json"], added
    git(repo, "fsck", "--no-progress")  # fails the test on a broken object or ref
