"""The aider preset driven by `gitrun start` over the real aider CLI.

aider 0.86 talks to ``tests/realclient/openai_mock.py`` (Chat Completions on
127.0.0.1) through ``OPENAI_API_BASE`` with a dummy key and the model
``openai/gpt-mock``, which aider edits in its *whole* format: the mock's
answer is a file listing, which aider writes. No network. Skipped, with the
reason, when aider is not installed (``.ci/install-clients``).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from gitrun.engine import governor
from tests.helpers import build_tree, commit_all, git, ledger_records, write_run
from tests.realclient.clis import client_binary, gitrun, offline_env, private_bin
from tests.realclient.openai_mock import OpenAIMock, whole_file
from tests.realclient.scripted import Reply

pytestmark = pytest.mark.realclient

OUTPUT = "out/t1.json"
# The preset's argv before it was fixed for the real client.
OLD_PRESET = [
    "aider", "--model", "{model}", "--no-auto-commits", "--yes-always", "--message", "{pointer}",
]  # fmt: skip


def _aider_env(tmp_path: Path, base_url: str) -> dict[str, str]:
    return offline_env(
        tmp_path / "home",
        private_bin(tmp_path, "aider"),
        OPENAI_API_BASE=base_url,
        OPENAI_API_KEY="sk-mock-not-a-key",
        # litellm would fetch its model price list from the network
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )


def _run(repo: Path, command: list[str] | None = None) -> None:
    build_tree(repo, {"docs/a.md": "Alpha chapter text.\n", "docs/b.md": "Beta chapter text.\n"})
    executor: dict[str, object] = {"kind": "command", "preset": "aider"}
    if command is not None:
        # Unconfined, to show what the old flags write (confined, aider cannot).
        executor.update(command=command, isolation="none")
    write_run(
        repo,
        "r",
        [{"id": "t1", "inputs": ["docs/a.md", "docs/b.md"], "outputs": [OUTPUT]}],
        {
            "model": {"default": "openai/gpt-mock"},
            "executor": executor,
            "rules": {"text": "Summarise the inputs as JSON."},
            "limits": {"canary": 1, "max_attempts": 2, "timeout": "90s"},
        },
    )
    commit_all(repo, "run r")


def _aider_files(repo: Path) -> list[str]:
    return sorted(
        str(p.relative_to(repo))
        for p in repo.rglob("*")
        if ".git" not in p.relative_to(repo).parts[:1]
        and (p.name.startswith(".aider") or p.name == ".gitignore")
    )


def test_the_owned_write_lands_and_nothing_else_is_touched(git_repo: Path, tmp_path: Path) -> None:
    client_binary("aider")
    _run(git_repo)
    with OpenAIMock([whole_file(OUTPUT, '{"task": "t1"}')]) as api:
        done = gitrun(git_repo, _aider_env(tmp_path, api.url + "/v1"), "start", "r")
        requests = api.requests
        answered = api.answered
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(git(git_repo, "show", f"gitrun/r:{OUTPUT}")) == {"task": "t1"}
    # Nothing staged in the user's index, no .gitignore, no .aider* files.
    assert git(git_repo, "diff", "--cached", "--name-only") == ""
    assert _aider_files(git_repo) == []
    status = git(git_repo, "status", "--porcelain").splitlines()
    assert sorted(status) == ["?? .gitrun/runs/r/ledger/", "?? out/"]  # gitrun's, and the output
    # aider was handed the packet and every input read-only (--read).
    chat = json.dumps([r.body for r in requests if r.path.endswith("/chat/completions")])
    assert "Summarise the inputs as JSON." in chat
    assert "Alpha chapter text." in chat and "Beta chapter text." in chat
    assert "gitrun run r, task t1" in chat
    # aider's "Tokens: 100 sent, 20 received." for each answer is the
    # attempt's usage; the mock model has no price, so aider states no cost.
    from gitrun.store.ledger import attempt_records
    from gitrun.store.usage import Usage, usage_of

    [record] = attempt_records(ledger_records(git_repo))
    assert usage_of(record) == Usage(100 * answered, 20 * answered, 0, 0, None, "openai/gpt-mock")


def test_the_old_flags_stage_the_output_and_write_aider_files(
    git_repo: Path, tmp_path: Path
) -> None:
    """Why the preset has --no-git and the history flags: without them aider
    stages what it writes in the user's index and leaves files behind."""
    client_binary("aider")
    _run(git_repo, OLD_PRESET)
    with OpenAIMock([whole_file(OUTPUT, '{"task": "t1"}')] * 3) as api:
        done = gitrun(git_repo, _aider_env(tmp_path, api.url + "/v1"), "start", "r")
    assert done.returncode == 0, done.stdout + done.stderr
    assert OUTPUT in git(git_repo, "diff", "--cached", "--name-only").split()
    assert _aider_files(git_repo) != []


def test_a_refused_connection_is_an_environment_fault_not_a_throttle(
    git_repo: Path, tmp_path: Path
) -> None:
    """aider says "servers are down or overloaded" about a refused connection
    and retries for a minute; the run halts instead of backing off."""
    client_binary("aider")
    _run(git_repo)
    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    began = time.monotonic()
    done = gitrun(git_repo, _aider_env(tmp_path, f"http://127.0.0.1:{port}/v1"), "start", "r")
    took = time.monotonic() - began
    assert done.returncode == 3, done.stdout + done.stderr
    assert "environment fault: t1 attempt 1: aider reported 3 times in a row" in done.stdout
    assert took < 90, f"took {took:.1f} s"  # one attempt's timeout
    outcomes = [r["outcome"] for r in ledger_records(git_repo) if "outcome" in r]
    assert outcomes == ["missing"]
    halts = [r for r in ledger_records(git_repo) if r.get("event") == "halt"]
    assert [h["kind"] for h in halts] == [governor.ENVIRONMENT]


def test_a_careless_aider_worker_confined_changes_nothing_of_anyone_else(
    git_repo: Path, tmp_path: Path
) -> None:
    """Under bubblewrap, the files aider writes outside its task's paths
    fail or stay in its staging directory."""
    from tests.realclient.careless import (
        SECRET,
        assert_nothing_of_anyone_else_changed,
        careless_run,
        needs_bubblewrap,
    )

    client_binary("aider")
    needs_bubblewrap()
    config = careless_run(git_repo, "aider", "openai/gpt-mock")

    def listing(*files: tuple[str, str]) -> Reply:
        return Reply(
            "Here are the files.\n\n"
            + "".join(f"{path}\n```\n{content}\n```\n\n" for path, content in files)
        )

    # aider stops writing at the first file it cannot write: the neighbour's
    # output in t1's answer (a wall in its folder), the git config in t2's.
    script = [
        listing(
            ("out/t1.json", '{"task": "t1"}'),
            ("out/t2.json", '{"clobbered": true}'),
            (SECRET, "leaked"),
        ),
        listing(("out/t2.json", '{"task": "t2"}'), (".git/config", "[alias] x = !touch pwned")),
    ]
    with OpenAIMock(script) as api:
        done = gitrun(git_repo, _aider_env(tmp_path, api.url + "/v1"), "start", "r")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert_nothing_of_anyone_else_changed(git_repo, config, said)
    for task, refused in (("t1", "out/t2.json"), ("t2", ".git/config")):
        log = (git_repo / f".git/gitrun/r/logs/{task}.1.log").read_text()
        assert "Unable to write file" in log and "Read-only file system" in log, log
        assert refused in log.rpartition("Unable to write file")[2].replace("\n", ""), log
    assert "wrote out/t2.json" not in done.stderr
