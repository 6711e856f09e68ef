"""The write hooks against `python -c pass`. Target: p50 <= 3x in every case.

    python bench/hook.py [--repeat 40] [--tasks 10000]

Claude Code runs `gitrun hook pre-write` before every write of every agent,
and git runs the pre-commit hook on every commit. Each case below runs the
installed `gitrun` console script (as the installed hooks do) with the hook
input on stdin, interleaved with `python -c pass` round by round so both
see the same machine; the table shows medians. The run's hook rules are
written first (`gitrun next`/`start` write them; the first call after an
edit of the definition pays for loading it, shown as its own row).

Cases: no gitrun context (a lead's write), a worker's owned write, a
worker's denied write, a dispatched subagent's write (lead session,
external run), the same owned write in a run of --tasks tasks, and the git
pre-commit hook of a worker (GITRUN_TASK set) with one staged file, called
directly and as the installed `.git/hooks/pre-commit` script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, Table, git_env, make_repo, write_bench_run

TARGET = 3.0


def gitrun_script() -> list[str]:
    script = Path(sys.executable).parent / "gitrun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gitrun"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in git_env().items() if not k.startswith("GITRUN_")}
    # the installed hooks call `gitrun` from PATH: this interpreter's first
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def write_input(repo: Path, path: str, **extra: object) -> bytes:
    data = {
        "session_id": "bench",
        "hook_event_name": "PreToolUse",
        "cwd": str(repo),
        "tool_name": "Write",
        "tool_input": {"file_path": path, "content": "{}"},
        **extra,
    }
    return json.dumps(data).encode()


class Case:
    def __init__(
        self, name: str, argv: list[str], stdin: bytes, env: dict[str, str], cwd: Path
    ) -> None:
        self.name, self.argv, self.stdin, self.env, self.cwd = name, argv, stdin, env, cwd
        self.samples: list[float] = []

    def once(self) -> float:
        start = time.perf_counter()
        proc = subprocess.run(
            self.argv, input=self.stdin, env=self.env, cwd=self.cwd, capture_output=True
        )
        took = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{self.name}: exit {proc.returncode}: {proc.stderr.decode()[-500:]}")
        return took

    def expect(self, decision: str) -> Case:
        out = subprocess.run(
            self.argv, input=self.stdin, env=self.env, cwd=self.cwd, capture_output=True
        ).stdout.decode()
        got = "deny" if '"deny"' in out else "allow"
        if got != decision:
            raise SystemExit(f"{self.name}: the hook said {got} ({out!r}), expected {decision}")
        return self


def setup_worker_run(root: Path, n: int) -> Path:
    repo = make_repo(root)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]} for i in range(n)
    ]
    write_bench_run(repo, tasks)
    env = clean_env()
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "define"], cwd=repo, check=True, env=env)
    return repo


def setup_subagent(root: Path) -> tuple[Path, bytes]:
    """An external run with one task leased and dispatched to a subagent."""
    repo = make_repo(root)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(10)
    ]
    write_bench_run(repo, tasks, {"kind": "external"})
    env = clean_env()
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "define"], cwd=repo, check=True, env=env)
    gitrun = gitrun_script()
    out = subprocess.run(  # an external run's start hands out the canary
        [*gitrun, "start", "bench", "--json"], cwd=repo, env=env, capture_output=True, check=True
    ).stdout
    ((task, pointer),) = json.loads(out)["leased"].items()
    transcript = root / "bench.jsonl"  # the session's own: <session_id>.jsonl
    lead = {
        "session_id": "bench",
        "transcript_path": str(transcript),
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": "Agent",
        "tool_input": {"description": "a task", "prompt": pointer, "subagent_type": "x"},
        "tool_use_id": "toolu_bench",
    }
    proc = subprocess.run(
        [*gitrun, "hook", "pre-write"],
        input=json.dumps(lead).encode(),
        cwd=repo,
        env=env,
        capture_output=True,
        check=True,
    )
    if b'"allow"' not in proc.stdout:
        raise SystemExit(f"the lead's dispatch was not allowed: {proc.stdout!r} {proc.stderr!r}")
    meta = root / "bench" / "subagents" / "agent-a1.meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"agentType": "x", "description": "d", "toolUseId": "toolu_bench"}))
    sub = write_input(
        repo, f"out/{task}.json", agent_id="a1", agent_type="x", transcript_path=str(transcript)
    )
    return repo, sub


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    gitrun = gitrun_script()
    hook = [*gitrun, "hook", "pre-write"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small = setup_worker_run(root / "small", 10)
        big = setup_worker_run(root / "big", args.tasks)
        sub_repo, sub_input = setup_subagent(root / "sub")
        worker = clean_env(GITRUN_RUN="bench", GITRUN_TASK="t00003")
        (small / "out").mkdir()
        (small / "out" / "t00003.json").write_text("{}\n")
        subprocess.run(["git", "add", "out"], cwd=small, check=True, env=clean_env())
        # the git hook as `gitrun hooks install --git` writes it (sh, then gitrun)
        subprocess.run(
            [*gitrun, "hooks", "install", "--git"],
            cwd=small,
            env=clean_env(),
            check=True,
            capture_output=True,
        )
        installed = small / ".git" / "hooks" / "pre-commit"
        baseline = Case("python -c pass", [sys.executable, "-c", "pass"], b"", clean_env(), root)
        cases = [
            Case("no gitrun context", hook, write_input(small, "notes.md"), clean_env(), small),
            Case("owned", hook, write_input(small, "out/t00003.json"), worker, small),
            Case("denied", hook, write_input(small, "README.md"), worker, small),
            Case("subagent (dispatched)", hook, sub_input, clean_env(), sub_repo),
            Case(
                f"owned, {args.tasks:,}-task run",
                hook,
                write_input(big, "out/t00003.json"),
                worker,
                big,
            ),
            Case("pre-commit, GITRUN_TASK", [*gitrun, "hook", "pre-commit"], b"", worker, small),
            Case("hooks/pre-commit as installed", [str(installed)], b"", worker, small),
        ]
        expected = ["allow", "allow", "deny", "allow", "allow", "allow", "allow"]
        for case, decision in zip(cases, expected, strict=True):
            case.expect(decision)  # also writes the run's hook rules, as next/start do
        # The first call after the definition changed loads it and rewrites the rules.
        tasks_toml = big / ".gitrun" / "runs" / "bench" / "tasks.toml"
        cold: list[float] = []
        for _ in range(3):
            tasks_toml.write_text(tasks_toml.read_text() + "\n")
            cold.append(cases[4].once())
        loads = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            baseline.samples.append(baseline.once())
            for case in cases:
                case.samples.append(case.once())
            loads.append(os.getloadavg()[0])
    base = statistics.median(baseline.samples)
    table = Table(f"write hooks: p50 of {args.repeat} calls each, against python -c pass")
    table.loads = loads
    table.rows.append(Row("python -c pass", f"{base * 1000:.1f} ms"))
    for case in cases:
        p50 = statistics.median(case.samples)
        ratio = p50 / base
        table.rows.append(
            Row(
                case.name,
                f"{p50 * 1000:.1f} ms",
                f"{base * 1000:.1f} ms",
                f"{ratio:.2f}x",
                f"<= {TARGET:g}x",
                ratio <= TARGET,
            )
        )
    table.rows.append(
        Row(
            f"first call after an edit, {args.tasks:,} tasks",
            f"{statistics.median(cold) * 1000:.0f} ms",
        )
    )
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
