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


# -- what the child and the provisional status print ------------------------------------


def _external(repo: Path, tasks: int = 3) -> None:
    """The driven fixture made an external run whose leases file is damaged:
    every status computed warns about it once."""
    packet = repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text().replace("[executor]\n", '[executor]\nkind = "external"\n'))
    (repo / ".git/gitrun/r/leases.json").write_text('{"v": 1, "leases": [1,')


@two_cpus
def test_a_warning_while_computing_a_guess_not_used_is_not_printed(driven: Path) -> None:
    """The definition does not load (its child fails) but the guess computes
    a status, warning about the leases: the serial path never gets that far."""
    _external(driven)
    _packet_with(driven, "colour = 1")
    code, _, err = _both_ways(driven)
    assert code == 1 and "colour" in err[-1] and "leases" not in "\n".join(err)


@two_cpus
def test_a_warning_while_computing_a_guess_used_is_printed_once(driven: Path) -> None:
    _external(driven)
    code, _, err = _both_ways(driven)
    assert code == 0 and len([x for x in err if "leases.json" in x]) == 1


def _big_table(repo: Path, tasks: int = 1500) -> Path:
    """A task table big enough that loading keeps its parse in a cache."""
    from gitrun.runs import CACHE_ABOVE

    path = repo / ".gitrun/runs/r/tasks.toml"
    rows = [f'[[task]]\nid = "t{i:05d}"\noutputs = ["out/t{i:05d}.json"]\n' for i in range(tasks)]
    path.write_text("\n".join(rows))
    assert path.stat().st_size > CACHE_ABOVE
    return path


def _cold_with_a_damaged_cache(repo: Path, serial: bool) -> tuple[int, str, str]:
    cache = repo / ".git/gitrun/r/tasks.cache.json"
    (repo / ".git/gitrun/r/run-view.jsonl").unlink(missing_ok=True)
    cache.write_text('{"v": 1, "sha1": "x", "da')
    return _cold_status(repo, serial, keep_cache=True)


@two_cpus
@pytest.mark.parametrize(
    "damage",
    [
        "",  # loads: the child warns, the guess serves
        "[[task",  # not TOML: the child warns and fails before it rewrites the cache
        "bad id",  # the child warns, rewrites the cache, and fails
    ],
)
def test_the_childs_warning_is_printed_once(driven: Path, damage: str) -> None:
    tasks = _big_table(driven)
    if damage == "bad id":
        tasks.write_text(tasks.read_text().replace('id = "t00005"', 'id = "T 5"'))
    elif damage:
        tasks.write_text(tasks.read_text() + damage + "\n")
    (code, out, err), (code2, out2, err2) = [
        _cold_with_a_damaged_cache(driven, serial) for serial in (False, True)
    ]
    assert (code, out) == (code2, out2)
    assert err.splitlines()[:-1] == err2.splitlines()[:-1]
    assert len([x for x in err.splitlines() if "tasks.cache.json" in x]) == 1
    assert code == (1 if damage else 0)


def test_what_computing_printed_is_said_only_when_its_status_is_used(
    driven: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from tests.test_viewload import _beside, _write_loaded_view

    def noisy(guess: object) -> str:
        sys.stderr.write("gitrun: warning: noted\n")
        return "computed"

    capsys.readouterr()
    assert _beside(driven, lambda: None, noisy) is None  # no view: computed again, said again
    assert capsys.readouterr().err == ""
    assert _beside(driven, lambda: _write_loaded_view(driven), noisy) == "computed"
    assert capsys.readouterr().err == "gitrun: warning: noted\n"


@pytest.mark.parametrize("loads", [True, False])
def test_what_the_child_printed_is_said_once(
    driven: Path, capsys: pytest.CaptureFixture[str], loads: bool
) -> None:
    import sys

    from tests.test_viewload import _beside, _write_loaded_view

    def load() -> None:
        sys.stderr.write("gitrun: warning: from the load\n")
        if not loads:
            raise SystemExit(1)
        _write_loaded_view(driven)

    capsys.readouterr()
    assert _beside(driven, load) == ("computed" if loads else None)
    assert capsys.readouterr().err == "gitrun: warning: from the load\n"
