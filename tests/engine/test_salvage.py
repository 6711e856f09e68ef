"""Salvage against a worker that lies: the conversation id a client names in
its output is only continued when it is a whole one of the client's own
shape, never a piece of another conversation's file name."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from tests.helpers import commit_all, ledger_records, run_gitrun, write_run

# A codex stand-in: a fresh try names the conversation FORGED and is cut off
# by its timeout; a resumed one says so in CALLS and writes the output.
FAKE_CODEX = """#!{python}
import os, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("codex-cli 0.0.1")
    sys.exit(0)
with open({calls!r}, "a") as calls:
    calls.write(" ".join(args[:2]) + "\\n")
if args[:2] == ["exec", "resume"] or os.path.exists({calls!r} + ".fresh"):
    os.makedirs("out", exist_ok=True)
    with open("out/t1.json", "w") as out:
        out.write('{{"done": true}}')
    sys.exit(0)
open({calls!r} + ".fresh", "w").close()
print('{{"type":"thread.started","thread_id":"{forged}"}}', flush=True)
time.sleep(60)
"""

# Another task's conversation, whose id ends in what the worker names.
OTHERS = "11111111-2222-4333-8444-0123456789ab"
FORGED = "0123456789ab"


def test_a_named_id_that_is_only_the_tail_of_another_conversation_is_not_resumed(
    git_repo: Path, tmp_path: Path
) -> None:
    home = tmp_path / "codex-home"
    day = home / "sessions/2026/01/01"
    day.mkdir(parents=True)
    turn = json.dumps({"type": "function_call"}, separators=(",", ":"))
    (day / f"rollout-2026-01-01T00-00-00-{OTHERS}.jsonl").write_text(f"{turn}\n{turn}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    codex = bin_dir / "codex"
    codex.write_text(FAKE_CODEX.format(python=sys.executable, calls=str(calls), forged=FORGED))
    codex.chmod(codex.stat().st_mode | stat.S_IXUSR)
    packet = {
        "executor": {"preset": "codex", "env": {"CODEX_HOME": str(home)}},
        "model": {"default": "gpt-mock"},
        "limits": {
            "canary": 0,
            "concurrency": 1,
            "max_attempts": 3,
            "timeout": "2s",
            "backoff_base": "1s",
            "backoff_cap": "1s",
            "max_load": 1e6,
        },
    }
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}], packet)
    commit_all(git_repo, "run r")
    path = os.pathsep.join([str(bin_dir), os.environ["PATH"]])
    done = run_gitrun(git_repo, "start", "r", env={"PATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
    tries = [r for r in ledger_records(git_repo) if "outcome" in r and "event" not in r]
    assert [t["outcome"] for t in tries][-1] == "valid"
    # The next try started fresh: never `codex exec resume 0123456789ab`.
    assert "resumed_from" not in tries[-1]
    assert calls.read_text().splitlines()[-1] != "exec resume"
