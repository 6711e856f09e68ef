"""Three kinds of "no": a throttle backs off, a usage limit parks, billing halts.

The words are the clients' own (claude-code 2.1.332 against a mock of the
API, codex 0.171); the parked run waits for the reset in this driver, in a
driver started after kill -9, and in `next` of an external run.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import time
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run, start_run
from gitrun.definition.schema import Limits
from gitrun.engine import governor
from gitrun.workers.refusals import BILLING, QUOTA, refusal_of, reset_of
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, gitrun_process, ledger_records, wait_until, write_run

quiet = lambda _line: None  # noqa: E731
LIMITS = Limits()
NOW = dt.datetime(2026, 12, 3, 20, 0, tzinfo=dt.UTC).timestamp()
CLAUDE_QUOTA = (
    '{"type":"result","subtype":"success","is_error":true,"api_error_status":429,'
    '"api_error":"usage_limit_reached","result":"You\'ve hit your 5-hour limit · resets '
    '10:51pm (UTC)"}'
)
CLAUDE_EVENT = (
    '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":%d,'
    '"rateLimitType":"five_hour"}}'
)
CLAUDE_BILLING = '{"type":"result","is_error":true,"result":"Credit balance is too low"}'


def _refusal(text: str) -> object:
    return refusal_of(text, LIMITS.quota_patterns, LIMITS.billing_patterns, NOW, dt.UTC)


def test_each_client_s_words_are_told_apart() -> None:
    quota = _refusal(CLAUDE_QUOTA)
    assert quota is not None and quota.kind == QUOTA  # type: ignore[attr-defined]
    assert quota.said == "You've hit your 5-hour limit · resets 10:51pm (UTC)"  # type: ignore[attr-defined]
    reset = dt.datetime(2026, 12, 3, 22, 51, tzinfo=dt.UTC).timestamp()
    assert quota.until == reset  # type: ignore[attr-defined]
    event = _refusal(CLAUDE_EVENT % (NOW + 600))
    assert event is not None and event.until == NOW + 600  # type: ignore[attr-defined]
    codex = _refusal("You've hit your usage limit. Try again at 3:05 PM.")
    assert codex is not None and codex.kind == QUOTA  # type: ignore[attr-defined]
    # 15:05 has passed today: tomorrow's.
    assert codex.until == dt.datetime(2026, 12, 4, 15, 5, tzinfo=dt.UTC).timestamp()  # type: ignore[attr-defined]
    billing = _refusal(CLAUDE_BILLING)
    assert billing is not None and billing.kind == BILLING  # type: ignore[attr-defined]
    openai = _refusal("429: You exceeded your current quota, please check your plan and billing")
    assert openai is not None and openai.kind == BILLING  # type: ignore[attr-defined]
    # A throttle is neither, though it names the usage limit it is not.
    throttle = "API Error: Server is temporarily limiting requests (not your usage limit)"
    assert _refusal(throttle) is None and _refusal("API Error: 529 overloaded") is None
    assert _refusal('{"review": {"status": "rejected"}}') is None  # a task's own words


def test_a_reset_is_read_from_every_form_or_not_at_all() -> None:
    assert reset_of("try again in 2 hours", NOW) == NOW + 7200
    assert reset_of("usage limit; retry-after: 30", NOW) == NOW + 30
    assert reset_of("resets 3pm (Europe/Berlin)", NOW) == (
        dt.datetime(2026, 12, 4, 15, 0, tzinfo=dt.UTC).timestamp() - 3600
    )
    assert reset_of("Quota exceeded. Please retry in 41.220713462s.", NOW) == NOW + 41  # gemini
    assert reset_of("You've hit your limit", NOW) is None
    # Claude Code's epoch, stated before the attempt ended and passed since
    # (a loaded machine, a client that went on): reset now, no half-hour park.
    assert reset_of(f'{{"resetsAt": {int(NOW + 60)}}}', NOW) == NOW + 60
    assert reset_of(f'{{"resetsAt": {int(NOW - 4)}}}', NOW) == NOW
    assert reset_of(f'{{"resetsAt": {int(NOW - 3600)}}}', NOW) is None
    assert reset_of("resets 25:99", NOW) is None

    # codex names the date when the reset is on another day (NOW is 20:00 UTC, Dec 3rd).
    def utc(*when: int) -> float:
        return dt.datetime(*when, tzinfo=dt.UTC).timestamp()

    tomorrow = "You've hit your usage limit. Try again at Dec 4th, 2026 12:47 AM."
    assert reset_of(tomorrow, NOW, dt.UTC) == utc(2026, 12, 4, 0, 47)
    assert reset_of("try again at Jan 1st, 2027 3:05 PM.", NOW, dt.UTC) == utc(2027, 1, 1, 15, 5)
    assert reset_of("try again at 7:30 PM.", NOW, dt.UTC) == utc(2026, 12, 4, 19, 30)
    assert reset_of("try again at Dec 2nd, 2026 3:05 PM.", NOW, dt.UTC) is None  # gone by
    assert reset_of("try again at Feb 30th, 2027 3:05 PM.", NOW, dt.UTC) is None


def _script(reset_in: float, text: str = CLAUDE_EVENT) -> str:
    """t1's first try prints the refusal (and, for a quota, its reset in
    ``reset_in`` s, written once to a file so every try reads the same);
    every other try writes its output."""
    return (
        'stamp=".git/reset-at"; [ -e "$stamp" ] || '
        f"{sys.executable} -c 'import time; print(int(time.time() + {reset_in}))' > \"$stamp\"; "
        'if [ "$GITRUN_TASK" = t1 ] && [ ! -e .git/refused ]; then touch .git/refused; '
        f'printf \'%s\\n\' "$(printf \'{text}\' "$(cat "$stamp")")"; exit 1; fi; '
        'mkdir -p out && printf \'{"task": "%s"}\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    )


def _run(repo: Path, script: str, tasks: int = 4) -> None:
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    packet = {
        "executor": {"preset": "shell", "shell": script, "isolation": "none"},
        "limits": {"canary": 0, "concurrency": 1, "max_attempts": 1, "timeout": "60s"},
    }
    write_run(repo, "r", table, packet)
    commit_all(repo, "run r")


def _starts(repo: Path) -> list[tuple[str, float]]:
    records = [r for r in ledger_records(repo) if "outcome" in r]
    return sorted(
        (str(r["task"]), dt.datetime.fromisoformat(str(r["started"])).timestamp()) for r in records
    )


def test_a_usage_limit_parks_the_run_until_its_reset_and_uses_no_attempt(git_repo: Path) -> None:
    _run(git_repo, _script(3))
    said: list[str] = []
    outcome = start_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    assert outcome.status.counts()["done"] == 4
    [park] = [r for r in ledger_records(git_repo) if r.get("event") == "park"]
    assert park["reason"] == "usage limit of sh"
    until = dt.datetime.fromisoformat(str(park["until"])).timestamp()
    assert any(line.startswith("parked until ") for line in said), said
    # Nothing started between the refusal and the reset; max_attempts 1 and
    # t1 done: the refused try used no attempt.
    refused_at = dt.datetime.fromisoformat(str(park["at"])).timestamp()
    assert not [t for t, at in _starts(git_repo) if refused_at < at < until]
    t1 = [r for r in ledger_records(git_repo) if r.get("task") == "t1" and "outcome" in r]
    assert [r["outcome"] for r in t1] == ["throttled", "valid"]


def test_a_driver_killed_while_parked_leaves_the_park_to_the_next(git_repo: Path) -> None:
    _run(git_repo, _script(6))
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    wait_until(driver, lambda: [r for r in ledger_records(git_repo) if r.get("event") == "park"])
    # A parked driver is healthy: it beats on while it waits.
    watchdog = run_gitrun_call(["watchdog"], git_repo)
    assert watchdog.returncode == 0, watchdog.stdout + watchdog.stderr
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    [park] = [r for r in ledger_records(git_repo) if r.get("event") == "park"]
    until = dt.datetime.fromisoformat(str(park["until"])).timestamp()
    # What status says of it is the hour-long park's test below: this one's
    # 6 s may be over before a loaded machine starts a status.
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.status.counts()["done"] == 4
    assert time.time() >= until
    refused_at = dt.datetime.fromisoformat(str(park["at"])).timestamp()
    assert not [t for t, at in _starts(git_repo) if refused_at < at < until]


def test_a_billing_refusal_halts_at_once_and_holds(git_repo: Path) -> None:
    _run(git_repo, _script(0, CLAUDE_BILLING.replace("%", "%%")))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3 and outcome.halt is not None
    assert outcome.halt.kind == governor.BILLING
    assert "'Credit balance is too low'" in outcome.halt.message
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["task"], r["outcome"]) for r in records] == [("t1", "unstarted")]
    again = resume_run(git_repo, "r", quiet)
    assert again.exit_code == 3 and again.status.spawns == 1  # held until `gitrun retry`


def test_an_external_run_s_next_waits_out_a_park(git_repo: Path) -> None:
    from gitrun.store import events
    from gitrun.store import ledger as ledger_mod

    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 3)]
    packet = {"executor": {"kind": "external"}, "limits": {"canary": 0, "concurrency": 1}}
    write_run(git_repo, "e", table, packet)
    commit_all(git_repo, "run e")

    def gitrun(*args: str) -> dict[str, object]:
        done = run_gitrun_call([*args, "--json", "--full"], git_repo)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    assert [b["task"] for b in gitrun("start", "e")["leased"]] == ["t1"]  # type: ignore[attr-defined]
    # t1's subagent met a usage limit: the park is in the ledger, as a driver writes it.
    until = time.time() + 3600
    record = {"event": "park", "until": events.iso(until), "reason": "usage limit of codex"}
    ledger_mod.LedgerWriter(git_repo / ".gitrun/runs/e").write(
        {**record, "at": events.iso(time.time())}
    )
    (git_repo / "out/t1.json").write_text("{}")
    gitrun("collect", "e")
    batch = gitrun("next", "e")
    assert batch["leased"] == [] and batch["why"] == "parked", batch
    assert 3500 < float(batch["wait_s"]) <= 3600  # type: ignore[arg-type]
    assert "usage limit of codex" in str(batch["reason"])


@pytest.mark.parametrize("word", ["usage_limit_reached", "credit balance is too low"])
def test_the_patterns_are_the_packet_s_to_change(word: str) -> None:
    limits = Limits(quota_patterns=["out of juice"], billing_patterns=["no money"])
    assert refusal_of(word, limits.quota_patterns, limits.billing_patterns, NOW) is None
    found = refusal_of("out of juice", limits.quota_patterns, limits.billing_patterns, NOW)
    assert found is not None and found.kind == QUOTA and found.until is None


def test_a_park_moves_with_the_branch_to_a_fresh_clone(git_repo: Path, tmp_path: Path) -> None:
    """The park is committed as it happens: a resume on another clone, after
    the first driver died with kill -9, waits for the same reset."""
    from tests.helpers import committed_ledger, git

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    _run(git_repo, _script(8))
    git(git_repo, "push", "-q", "origin", "HEAD")
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    try:
        wait_until(
            driver, lambda: [r for r in committed_ledger(git_repo) if r.get("event") == "park"]
        )
        git(git_repo, "push", "-q", "origin", "gitrun/r")
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    [park] = [r for r in committed_ledger(git_repo) if r.get("event") == "park"]
    until = dt.datetime.fromisoformat(str(park["until"])).timestamp()
    clone = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    (clone / ".git/reset-at").write_text((git_repo / ".git/reset-at").read_text())
    (clone / ".git/refused").touch()  # (the worker's own memory of its one refusal)
    resumed = run_gitrun_call(["resume", "r"], clone, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert time.time() >= until
    # The proof is the starts: none between the refusal and the reset, on
    # the clone too. (Whether the resume says "parked until" depends on how
    # long a loaded machine takes to bring it to its first decision.)
    refused_at = dt.datetime.fromisoformat(str(park["at"])).timestamp()
    assert not [t for t, at in _starts(clone) if refused_at < at < until]
    assert len([r for r in ledger_records(clone) if r.get("outcome") == "valid"]) == 4


def test_a_reset_that_cannot_be_read_parks_for_the_default_and_says_so(git_repo: Path) -> None:
    _run(git_repo, _script(0, "You have hit your usage limit."))
    packet = git_repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text().replace("[limits]\n", '[limits]\npark_default = "2s"\n'))
    commit_all(git_repo, "park for 2 s")
    said: list[str] = []
    began = time.time()
    outcome = start_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0 and outcome.status.counts()["done"] == 4, said
    assert time.time() - began >= 2
    [line] = [s for s in said if s.startswith("parked until ")]
    assert "its reset could not be read from 'You have hit your usage limit.'" in line
    assert "limits.park_default" in line


def test_a_parked_run_s_status_says_until_when_and_why_in_text_as_in_json(
    git_repo: Path,
) -> None:
    """While its driver waits for the reset, and after that driver is gone:
    the text names the reset's date and time in UTC and the reason, as the
    JSON does."""
    _run(git_repo, _script(3600))
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    try:
        wait_until(
            driver, lambda: [r for r in ledger_records(git_repo) if r.get("event") == "park"]
        )
        [park] = [r for r in ledger_records(git_repo) if r.get("event") == "park"]
        until = dt.datetime.fromisoformat(str(park["until"]))
        day_and_time = until.strftime("%Y-%m-%d %H:%M:%S UTC")
        for alive in (True, False):
            text = run_gitrun_call(["status", "r"], git_repo).stdout
            data = json.loads(run_gitrun_call(["status", "r", "--json"], git_repo).stdout)
            assert data["parked"] == {"until": park["until"], "reason": "usage limit of sh"}
            assert (
                f"parked until {until.strftime('%H:%M')} UTC (usage limit of sh): no new starts "
                f"until {day_and_time}" in text
            ), (alive, text)
            if alive:
                driver.send_signal(signal.SIGKILL)
                driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
