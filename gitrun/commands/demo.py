"""``gitrun demo``: the whole story in one command, offline, in under a minute.

A throwaway repository, a run of simulated agents that lie, flake, write
garbage and get throttled; halfway the driver is killed as a lost session
would be (SIGKILL), then ``resume`` finishes the run and ``land`` merges it.
The report shows the run's history, spawns against usable outputs, and the
tasks that a runner trusting exit statuses would have redone for nothing.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from gitrun.commands.land.landing import land_run
from gitrun.commands.report.page import default_path, write_report
from gitrun.commands.report.timeline import needless_reruns
from gitrun.commands.scaffold import new_run
from gitrun.definition.load import load_run
from gitrun.engine.budget import spend_text, tokens_text
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError, UsageError
from gitrun.processes.proc import clean_env, run_cmd
from gitrun.store import git, ledger
from gitrun.store.events import AttemptRecord, Outcome

RUN_ID = "demo"
DEMO_IDENTITY = {
    "GIT_AUTHOR_NAME": "gitrun demo",
    "GIT_AUTHOR_EMAIL": "demo@gitrun.invalid",
    "GIT_COMMITTER_NAME": "gitrun demo",
    "GIT_COMMITTER_EMAIL": "demo@gitrun.invalid",
}

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    repo: Path
    exit_code: int


def run_demo(where: Path | None, tasks: int, seed: int, say: Say) -> DemoResult:
    if not 2 <= tasks <= 500:
        raise UsageError("--tasks must be between 2 and 500")
    repo = _make_repo(where, tasks)
    _define_run(repo, seed)
    say(f"A throwaway repository with {tasks} chapters to summarise: {repo}")
    say(f"Run {RUN_ID!r}: {tasks} tasks, one simulated agent each (seed {seed}), concurrency 4.\n")

    half = tasks // 2
    driver = _gitrun(repo, "start", RUN_ID)
    killed = _kill_when(repo, driver, lambda done: done >= half)
    _restore_terminal()
    if killed:
        say(
            f"\n*** {half} outputs are committed. The session is lost now: driver killed with SIGKILL. ***"
        )
        say("*** Its workers are orphaned and nothing was saved on the way out. Resuming... ***\n")
        driver = _gitrun(repo, "resume", RUN_ID)
        driver.wait()
        _restore_terminal()
    status = read_status(repo, RUN_ID)
    if status.counts()["done"] != tasks:
        say(f"\nThe run did not finish: see `gitrun -C {repo} status {RUN_ID}`")
        return DemoResult(repo, 1)
    say("\n" + land_run(repo, RUN_ID))
    _report(repo, say)
    return DemoResult(repo, 0)


def _make_repo(where: Path | None, tasks: int) -> Path:
    if where is None:
        repo = Path(tempfile.mkdtemp(prefix="gitrun-demo-"))
    else:
        repo = where.resolve()
        if repo.exists() and any(repo.iterdir()):
            raise GitrunError(f"{repo} is not empty; give --dir a new or empty directory")
        repo.mkdir(parents=True, exist_ok=True)
    env = clean_env(DEMO_IDENTITY)
    run_cmd(["git", "init", "-q", str(repo)], env=env)
    docs = repo / "docs"
    docs.mkdir()
    for n in range(1, tasks + 1):
        (docs / f"ch{n:02d}.md").write_text(f"# Chapter {n}\n\nThe text of chapter {n}.\n")
    (repo / "PROGRESS.md").write_text(
        "# Progress\n\nThe lead updates this file; workers never do.\n"
    )
    run_cmd(["git", "-C", str(repo), "add", "-A"], env=env)
    run_cmd(["git", "-C", str(repo), "commit", "-q", "-m", "The book to summarise"], env=env)
    for key, value in (("user.name", "gitrun demo"), ("user.email", "demo@gitrun.invalid")):
        run_cmd(["git", "-C", str(repo), "config", key, value], env=env)
    return repo


def _define_run(repo: Path, seed: int) -> None:
    new_run(
        repo,
        RUN_ID,
        inputs="docs/*.md",
        output="out/{stem}.json",
        description="Summarise each chapter",
    )
    # The simulated API counts its callers in a folder of its own, outside
    # the repository (which a confined worker may not write).
    digest = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    crowd = Path(tempfile.gettempdir()) / f"gitrun-demo-crowd-{digest}"
    packet = {
        "run": {"id": RUN_ID, "description": "Summarise each chapter as JSON"},
        "rules": {
            "text": "Read your chapter. Write one JSON object with keys task and summary.",
            "acceptance": ["The output parses as JSON."],
        },
        "limits": {
            "concurrency": 4,
            "canary": 1,
            "max_attempts": 4,
            "timeout": "30s",
            "backoff_base": "0.3s",
            "backoff_cap": "2s",
            "grow_after": 2,
        },
        "model": {"default": "sim-model"},
        "executor": {
            "kind": "command",
            "command": [
                sys.executable,
                "-m",
                "gitrun.workers.simagent",
                "--seed",
                str(seed),
                "--crowd",
                str(crowd),
                "--crowd-limit",
                "3",
            ],
        },
        "stages": [{"name": "work"}],
    }
    (repo / ".gitrun/runs" / RUN_ID / "packet.toml").write_text(tomli_w.dumps(packet))


def _gitrun(repo: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gitrun", "-C", str(repo), *args],
        env=clean_env(DEMO_IDENTITY),
    )


def _kill_when(repo: Path, driver: subprocess.Popen[bytes], ready: Callable[[int], bool]) -> bool:
    """SIGKILL the driver once ``ready(done)`` holds; False if it finished first."""
    while driver.poll() is None:
        try:
            done = read_status(repo, RUN_ID).counts()["done"]
        except GitrunError:
            done = 0
        if ready(done):
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            return True
        time.sleep(0.1)
    return False


def _restore_terminal() -> None:
    """A killed live view leaves the cursor hidden."""
    if sys.stderr.isatty():
        sys.stderr.write("\x1b[?25h")
        sys.stderr.flush()


def _report(repo: Path, say: Say) -> None:
    shown = "%h %s%n        %(trailers:only,unfold,separator=%x3b%x20)"
    say(f"\n$ git log --first-parent --format='{shown}' HEAD^1..gitrun/{RUN_ID}")
    log = git.git(repo, "log", "--first-parent", f"--format={shown}", f"HEAD^1..gitrun/{RUN_ID}")
    say(log.decode().rstrip())
    status = read_status(repo, RUN_ID)
    records = ledger.read_ledger(repo / load_run(repo, RUN_ID).dir)
    attempts = [r for r in ledger.typed(records) if isinstance(r, AttemptRecord)]
    outcomes: dict[str, int] = {}
    for record in attempts:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
    say(
        f"\n{status.spawns} spawns for {status.usable} usable outputs; attempts by outcome: "
        + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
    )

    for line in (spend_text(status.usage, status.usable, status.budget), tokens_text(status.usage)):
        if line:
            say(line[0].upper() + line[1:] + ".")
    liars = needless_reruns(records)
    if liars:
        say(
            f"A runner that trusts exit statuses would have re-run {len(liars)} tasks needlessly: "
            f"{', '.join(liars)} (each wrote a valid output, then exited non-zero)."
        )
    quarantined = sorted({r.task for r in attempts if r.outcome == Outcome.INVALID})
    if quarantined:
        say(f"Invalid outputs were quarantined, not committed: {', '.join(quarantined)}.")
    page = write_report(repo, RUN_ID, repo / default_path(RUN_ID))
    say(f"\nThe report, a page with the timeline of every attempt: {page}")
    say(f"The repository is {repo}")
    look = f"cd {shlex.quote(str(repo))} && git log --graph --oneline"
    say(f"Look around: {look} && {_gitrun_as_run()} status {RUN_ID}")


def _gitrun_as_run() -> str:
    """How the user's shell reaches this gitrun: ``gitrun`` when it is on the
    PATH, else the path it was run by (``.venv/bin/gitrun demo`` with nothing
    activated), else ``python -m gitrun``."""
    if shutil.which("gitrun") is not None:
        return "gitrun"
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "gitrun" and os.path.isfile(script):
        return shlex.quote(os.path.abspath(script))
    return f"{shlex.quote(sys.executable)} -m gitrun"
