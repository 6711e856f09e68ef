"""Money is a finite, sane number: a budget the user gives, a cost or a count
of tokens a worker reports, and every JSON gitrun writes.

`retry --budget inf` once committed ``"max_cost_usd": Infinity`` to the
ledger, which is then no JSON (``jq`` rejects it); a worker reporting
``cost_usd: 1e308`` three times made the run's spend ``$inf``, a halt no
finite budget could lift. An amount out of range is refused in one
sentence; a worker's absurd report is refused as unreadable (its cost is
unknown, as if it had reported none), never added."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.store.jsonlines import line_of
from gitrun.store.usage import Usage, UsageTotals, usage_of
from gitrun.workers.clientusage import AiderReader, ClaudeReader, read_usage_file
from tests.helpers import commit_all, ledger_records, user_env, write_run

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"


def _gitrun(repo: Path, *args: str) -> Any:
    from tests.realclient.clis import gitrun

    return gitrun(repo, user_env(), *args)


def _strict(text: str) -> Any:
    """``text`` parsed as strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` refused."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON: {text[:300]}")

    return json.loads(text, parse_constant=refuse)


def _shell_run(repo: Path, tasks: int, cost: str, limits: dict[str, Any]) -> None:
    """Each attempt writes its output and reports ``cost`` dollars through $GITRUN_USAGE."""
    worker = (
        'mkdir -p out && printf \'{"ok": 1}\' > "out/$GITRUN_TASK.json"\n'
        'printf \'{"input": 800, "output": 200, "cost_usd": %s}\' "$COST" > "$GITRUN_USAGE"\n'
    )
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    packet = {
        "executor": {"kind": "command", "preset": "shell", "shell": worker, "env": {"COST": cost}},
        "limits": {"timeout": "60s", **limits},
    }
    write_run(repo, "r", table, packet)
    commit_all(repo, "run r")


def _committed_ledger_is_strict_json(repo: Path) -> None:
    from tests.helpers import git

    names = git(repo, "ls-tree", "-r", "--name-only", "gitrun/r", "--", ".gitrun/runs/r/ledger")
    assert names.split()
    for name in names.split():
        for line in git(repo, "show", f"gitrun/r:{name}").splitlines():
            _strict(line)


# -- what the user gives -----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["inf", "1e400", "nan", "-inf", "Infinity", "0", "-1", "2e6", "x"])
def test_retry_refuses_a_budget_that_is_no_sane_amount_and_writes_nothing(
    git_repo: Path, text: str
) -> None:
    _shell_run(git_repo, 1, "0.25", {})
    before = ledger_records(git_repo)
    result = CliRunner().invoke(app, ["retry", "r", "--budget", text])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"gitrun: error: --budget {text} is not an amount of US dollars gitrun holds; give a "
        "finite number above 0 and at most $1,000,000, such as `--budget 25`\n"
    )
    assert ledger_records(git_repo) == before


def test_retry_refuses_a_token_budget_past_what_gitrun_holds(git_repo: Path) -> None:
    _shell_run(git_repo, 1, "0.25", {})
    result = CliRunner().invoke(app, ["retry", "r", "--tokens", str(10**12 + 1)])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"gitrun: error: --tokens {10**12 + 1} is not a number of tokens gitrun holds; give a "
        "whole number from 1 to 1,000,000,000,000, such as `--tokens 2000000`\n"
    )
    assert ledger_records(git_repo) == []


def test_the_packet_and_the_environment_refuse_a_budget_past_what_gitrun_holds(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shell_run(git_repo, 1, "0.25", {"max_cost_usd": 1e300})
    checked = CliRunner().invoke(app, ["check", "r"])
    assert checked.exit_code != 0
    assert "limits.max_cost_usd" in checked.output and "1000000" in checked.output
    assert "Traceback" not in checked.output
    _shell_run(git_repo, 1, "0.25", {})
    monkeypatch.setenv("GITRUN_MAX_TOKENS", "999999999999999999")
    checked = CliRunner().invoke(app, ["check", "r"])
    assert checked.exit_code != 0 and "GITRUN_MAX_TOKENS" in checked.output, checked.output


def test_the_largest_budget_is_taken_and_the_ledger_stays_json(git_repo: Path) -> None:
    _shell_run(git_repo, 2, "0.25", {"max_cost_usd": 0.3, "max_projection": 10})
    halted = _gitrun(git_repo, "start", "r")
    assert halted.returncode == 3, halted.stdout + halted.stderr
    raised = _gitrun(git_repo, "retry", "r", "--budget", "1e6")
    assert raised.returncode == 0, raised.stderr
    assert "the run's budget is now max_cost_usd $1,000,000" in raised.stdout
    done = _gitrun(git_repo, "resume", "r", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _strict(done.stdout)["spend"]["budget"]["max_cost_usd"] == 1e6
    _committed_ledger_is_strict_json(git_repo)


# -- what a worker reports ---------------------------------------------------------------------


def test_a_worker_reporting_an_absurd_cost_is_refused_not_added_and_status_says_unknown(
    git_repo: Path,
) -> None:
    """Three attempts of $1e308 each once summed to $inf and halted the run for
    good. Each report is refused as unreadable, with a warning naming the field;
    the attempts count as of unknown cost, and a finite budget still holds."""
    _shell_run(git_repo, 3, "1e308", {"max_cost_usd": 5.0, "canary": 1})
    run = _gitrun(git_repo, "start", "r")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        run.stderr.count("field 'cost_usd' is not a number of US dollars from 0 to 1,000,000") == 3
    )
    assert "inf" not in run.stdout + run.stderr
    assert "spend unknown: none of the 3 attempts reported a cost; budget $5.00" in run.stdout
    status = _gitrun(git_repo, "status", "r")
    assert "spend unknown: none of the 3 attempts reported a cost" in status.stdout
    spend = _strict(_gitrun(git_repo, "status", "r", "--json").stdout)["spend"]
    assert spend["spent_usd"] == 0 and spend["unknown_cost"] == 3
    _committed_ledger_is_strict_json(git_repo)


@pytest.mark.parametrize(
    "body",
    [
        '{"cost_usd": 1e308}',
        '{"cost_usd": 1e400}',  # Python's json reads it as infinity
        '{"cost_usd": Infinity}',
        '{"cost_usd": NaN}',
        '{"cost_usd": 1000000.01}',
        '{"output": 1000000000001}',
        '{"input": 1' + "0" * 400 + "}",
    ],
)
def test_a_usage_file_out_of_range_is_unreadable(tmp_path: Path, body: str) -> None:
    path = tmp_path / "usage.json"
    path.write_text(body)
    usage, problem = read_usage_file(path)
    assert usage is None and problem.startswith("is not a usage report: field "), problem


def test_a_ledger_record_of_an_absurd_cost_counts_as_unknown() -> None:
    """A ledger an older gitrun wrote, with a cost it should have refused."""
    totals = UsageTotals()
    for _ in range(3):
        totals.add(usage_of({"usage": {"output": 5, "cost_usd": 1e308}}), valid=True, stage="w")
    assert totals.spent_usd == 0 and totals.unknown_cost == 3


def test_a_client_s_absurd_cost_is_unknown_and_its_digits_never_crash_the_reader() -> None:
    claude = ClaudeReader("m")
    claude.feed(b'{"type": "result", "total_cost_usd": 1e308, "usage": {"output_tokens": 7}}\n')
    assert claude.finish().usage == Usage(0, 7, 0, 0, None, "m")
    aider = AiderReader("m")
    digits = "9" * 400
    aider.feed(
        f"Tokens: {digits}k sent, 12 received. Cost: ${digits} message, ${digits} session.\n".encode()
    )
    report = aider.finish()
    assert report.usage == Usage(0, 12, 0, 0, None, "m")


# -- every JSON gitrun writes --------------------------------------------------------------------


@pytest.mark.usefixtures("clis")
def test_every_json_gitrun_writes_refuses_nan_and_infinity() -> None:
    """``allow_nan=False`` at every json.dumps and JSONEncoder of the package:
    a future bug fails loudly rather than writing ``Infinity``."""
    lax = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in ("dumps", "dump", "JSONEncoder"):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
                continue
            strict = any(
                k.arg == "allow_nan"
                and isinstance(k.value, ast.Constant)
                and k.value.value is False
                for k in node.keywords
            )
            if not strict:
                lax.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert lax == []
    with pytest.raises(ValueError, match="not JSON compliant"):
        line_of({"event": "budget", "max_cost_usd": float("inf")})
