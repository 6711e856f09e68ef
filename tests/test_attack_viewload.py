"""Attacks on the cold ``status`` with its check beside (gitrun/viewload.py):
definitions and environments where the plain guess and the checked load
could differ, each compared with the serial path (one CPU by affinity),
which must give the same output, stderr and exit code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_viewload import _cold_status, driven, two_cpus

__all__ = ["driven"]  # the fixture, shared with test_viewload


def _both_ways(repo: Path, env: dict[str, str] | None = None) -> tuple[int, str, list[str]]:
    """The cold status beside the check, after asserting the serial one is the same."""
    code, out, err = _cold_status(repo, serial=False, env=env)
    code2, out2, err2 = _cold_status(repo, serial=True, env=env)
    assert (code, out) == (code2, out2), (err, err2)
    lines = err.splitlines()[:-1]  # the last says which path served
    assert lines == err2.splitlines()[:-1]
    assert "Traceback" not in err + err2 and "internal error" not in err + err2
    return code, out, lines


def _packet_with(repo: Path, line: str) -> None:
    packet = repo / ".gitrun/runs/r/packet.toml"
    assert "timeout = 60\n" in packet.read_text()
    packet.write_text(packet.read_text().replace("timeout = 60\n", f"timeout = 60\n{line}\n", 1))


@two_cpus
@pytest.mark.parametrize(
    "line",
    [
        "max_cost_usd = 5",  # shown in status --json: 5.0 as loaded, 5 as read plainly
        "max_load = 3",
        "max_cost_usd = 0.0",
        "max_cost_usd = -0.0",
        "max_projection = 2",
        "kill_grace = 1",
    ],
)
def test_a_whole_number_in_a_float_field(driven: Path, line: str) -> None:
    _packet_with(driven, line)
    _both_ways(driven)


@two_cpus
@pytest.mark.parametrize(
    "line",
    [
        "max_cost_usd = 1" + "0" * 400,  # no float holds it
        "max_load = 1" + "0" * 400,
        "timeout_x = " + "[" * 3000 + "]" * 3000,  # tomllib recurses and gives up
        "max_load = nan",
        "max_cost_usd = inf",
        "concurrency = true",
        "concurrency = 2.0",
    ],
    ids=["huge int cost", "huge int load", "deep array", "nan", "inf", "bool", "float int"],
)
def test_values_no_guess_can_hold(driven: Path, line: str) -> None:
    packet = driven / ".gitrun/runs/r/packet.toml"
    if line.startswith("concurrency"):  # replaces the packet's own, if any
        packet.write_text(packet.read_text().replace("[limits]\n", f"[limits]\n{line}\n", 1))
    else:
        _packet_with(driven, line)
    _both_ways(driven)


@two_cpus
@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("GITRUN_MAX_COST_USD", "5"),  # loading reads it as 5.0
        ("GITRUN_MAX_LOAD", "3"),
        ("GITRUN_TIMEOUT", "010"),
        ("GITRUN_CONCURRENCY", "010"),
        ("GITRUN_CONCURRENCY", "1e3"),
        ("GITRUN_CONCURRENCY", "+4"),
        ("GITRUN_CONCURRENCY", " 4"),
        ("GITRUN_CONCURRENCY", ""),
        ("GITRUN_CONCURRENCY", "\u0664"),  # an Arabic-Indic four
        ("GITRUN_TIMEOUT", "\u0664"),  # a duration reads it as 4 seconds
        ("GITRUN_HALT", "5"),
        ("GITRUN_HALT", "fail = 1"),
        ("GITRUN_MAX_TOKENS", "9" * 19),
    ],
)
def test_overrides_read_as_loading_reads_them(driven: Path, var: str, value: str) -> None:
    _both_ways(driven, {**os.environ, var: value})


def test_a_view_holds_only_the_same_text(driven: Path) -> None:
    """Python's equality is not the view's: 60 == 60.0 == 60 + 0j."""
    from gitrun.runs import load_run
    from gitrun.runview import view_holds, view_parts, write_view

    path = str(driven / ".git/gitrun/r/run-view.jsonl")
    run = load_run(driven, "r")
    write_view(path, "k", run)
    header = view_parts("k", run)[0]
    assert view_holds(path, header)
    limits = header["limits"]
    assert isinstance(limits, dict) and limits["timeout"] == 60.0
    for value in (60, 60 + 0j):
        assert not view_holds(path, {**header, "limits": {**limits, "timeout": value}})
