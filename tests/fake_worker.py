"""A stand-in for an agent CLI, driven by a JSON spec file (argv[1]).

The spec maps task ids to behaviours (``default`` for the rest):

- ``write``: write a valid JSON output, exit 0
- ``write_then_fail``: write it, then report a throttle and exit 1
- ``nowrite``: exit 0 without writing
- ``invalid``: write broken JSON, exit 0
- ``invalid_then_write``: broken on attempt 1, valid afterwards
- ``nowrite_then_write``: nothing on attempt 1, valid afterwards
- ``hang_unless_allowed``: broken on attempt 1; later attempts hang unless
  the file ``ALLOW`` exists in the working directory, then write
- ``symlink_then_write``: make each output a symlink to README.md on
  attempt 1, write it properly afterwards
- ``stray``: write the output and a file outside the task's owns
  (``stray_path``, default ``stray/<task>.txt``)
- ``crowd``: exit 75 (throttled) when more than ``crowd_limit`` copies run at
  once, counted with lock files in ``crowd_dir``; otherwise write
- ``hang``: print a line and sleep until killed (its attempt times out)
- ``neighbour``: write the output and a second file (``neighbour_path``,
  default ``out/t02.json``, another task's output)
- ``denied``: ask the real write hook (``gitrun hook pre-write``, as an agent
  client asks it before a Write) to write ``denied_path`` (default
  ``notes/<task>.md``), print its answer, then write the output
  (``denied_then_hang``: then hang)

``sleep`` (seconds, or [min, max] for a random pick) delays every worker;
``spawn_log`` names a file where each worker appends "start" and, once its
output is in place, "wrote" lines. Outputs are written to a temporary file
and renamed, so they are either whole or absent.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from gitrun.workers.simagent import log_event, write_whole


def _log(spec: dict[str, object], event: str) -> None:
    log = spec.get("spawn_log")
    if isinstance(log, str):
        os.environ["GITRUN_SIM_LOG"] = log
        log_event(event)


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    task = os.environ["GITRUN_TASK"]
    attempt = int(os.environ["GITRUN_ATTEMPT"])
    outputs = [p for p in os.environ["GITRUN_OUTPUTS"].split("\n") if p]
    mode = spec.get("tasks", {}).get(task, spec.get("default", "write"))
    _log(spec, "start")
    if mode == "crowd":
        return _crowd(spec, outputs, task, attempt)
    if mode in ("denied", "denied_then_hang"):
        _ask_the_hook(str(spec.get("denied_path", "notes/{task}.md")).format(task=task))
    if mode in ("hang", "denied_then_hang"):
        print("working on it...", flush=True)
        time.sleep(3600)
    # {"dir": ..., "count": N}: wait (bounded) until N workers have arrived;
    # the first N meet, every later one finds them there and goes on.
    meet = spec.get("meet")
    if isinstance(meet, dict):
        here = Path(meet["dir"]) / f"{task}.{attempt}"
        here.touch()
        deadline = time.monotonic() + 30
        while len(list(here.parent.iterdir())) < int(meet["count"]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    gate = spec.get("gate")
    if isinstance(gate, str) and task in spec.get("gated", []):
        deadline = time.monotonic() + 120  # the test opens it; never wait forever
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    delay = spec.get("sleep", 0)
    if isinstance(delay, list):
        delay = random.uniform(*delay)
    time.sleep(float(delay))
    valid = json.dumps({"task": task, "attempt": attempt}) + "\n"
    if mode == "nowrite" or (mode == "nowrite_then_write" and attempt == 1):
        print("all done!")
        return 0
    if mode == "invalid" or (
        mode in ("invalid_then_write", "hang_unless_allowed") and attempt == 1
    ):
        for path in outputs:
            write_whole(path, "{not json")
        return 0
    if mode == "symlink_then_write" and attempt == 1:
        for path in outputs:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath("README.md", Path(path).parent), path)
        return 0
    if mode == "hang_unless_allowed":
        while not Path("ALLOW").exists():
            time.sleep(0.05)
    for path in outputs:
        write_whole(path, valid)
    _log(spec, "wrote")
    # {task: seconds}: an agent's summary turn after its last write
    time.sleep(float(spec.get("after", {}).get(task, 0)))
    if mode == "stray":
        stray = str(spec.get("stray_path", "stray/{task}.txt")).format(task=task)
        write_whole(stray, "not mine to write")
    if mode == "neighbour":
        write_whole(str(spec.get("neighbour_path", "out/t02.json")), valid)
    if mode == "write_then_fail":
        print("Server is temporarily limiting requests (not your usage limit)", file=sys.stderr)
        return 1
    return 0


def _ask_the_hook(path: str) -> None:
    """What an agent client does before its Write tool writes ``path``."""
    import subprocess

    call = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": os.path.abspath(path), "content": "mine"},
        "cwd": os.getcwd(),
    }
    answer = subprocess.run(
        [sys.executable, "-m", "gitrun", "hook", "pre-write"],
        input=json.dumps(call),
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(answer.stdout.strip() or answer.stderr.strip(), flush=True)


def _crowd(spec: dict[str, object], outputs: list[str], task: str, attempt: int) -> int:
    crowd = Path(str(spec["crowd_dir"]))
    crowd.mkdir(parents=True, exist_ok=True)
    # Not by pid: each confined worker is pid 2 of a namespace of its own.
    mine = crowd / f"{task}.{attempt}.{os.urandom(4).hex()}"
    mine.write_text(task)
    try:
        time.sleep(0.05)  # let the crowd gather
        if len(list(crowd.iterdir())) > int(spec.get("crowd_limit", 2)):  # type: ignore[call-overload]
            print("Error: 429 Too Many Requests (rate limited)", file=sys.stderr)
            return 75
        time.sleep(float(spec.get("sleep", 0.1)))  # type: ignore[arg-type]
        for path in outputs:
            write_whole(path, json.dumps({"task": task, "attempt": attempt}) + "\n")
        _log(spec, "wrote")
        return 0
    finally:
        mine.unlink()


if __name__ == "__main__":
    sys.exit(main())
