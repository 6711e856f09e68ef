"""A cold ``status`` on two CPUs (gitrun/viewload.py): the definition is
checked by a forked child while the parent computes from a plain reading.
Whatever the definition, the answer must be the one the serial path gives
(the same output, the same one-sentence error, the same exit code); the
provisional answer is used only when the checked view is exactly the guess;
and the child is always reaped, killed when the parent is interrupted."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from gitrun import viewload
from gitrun.hookrules import find_repo
from gitrun.runs import load_run
from gitrun.runview import source_key, view_key, view_path, write_view
from gitrun.settings import Limits, Packet, RunSection
from gitrun.state import read_status
from tests.test_runview import _by_definition, _status
from tests.test_runview import driven as driven  # the fixture

two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="one CPU here: status takes the serial path only"
)


def _cold_status(
    repo: Path, serial: bool, env: dict[str, str] | None = None, keep_cache: bool = False
) -> tuple[int, str, str]:
    """``status r --json`` with no run view, no kept definition and (unless
    ``keep_cache``) no parsed task table, as on a fresh clone."""
    for name in (
        "run-view.jsonl",
        "definition.json",
        *(() if keep_cache else ("tasks.cache.json",)),
    ):
        (repo / ".git/gitrun/r" / name).unlink(missing_ok=True)
    return _status(repo, "r", "--json", env=env, serial=serial)


def test_the_guess_starts_from_the_settings_defaults() -> None:
    """A default changed in settings.py and not here fails this test (a
    guess from stale defaults would only be slower, never wrong)."""
    assert dataclasses.asdict(Limits()) == viewload.DEFAULT_LIMITS
    assert [s.name for s in Packet(run=RunSection(id="r")).stages] == viewload.DEFAULT_STAGES


def _edit(repo: Path, edit: str) -> dict[str, str] | None:
    """Change the definition (``edit``); the environment to run status in."""
    run_dir = repo / ".gitrun/runs/r"
    packet, tasks = run_dir / "packet.toml", run_dir / "tasks.toml"
    if edit == "config limits":
        (repo / ".gitrun/config.toml").write_text(
            '[limits]\nmax_attempts = 5\nconcurrency = 2\n[executor]\nkind = "command"\n'
        )
        packet.write_text(packet.read_text().replace("max_attempts = 2\n", ""))
    elif edit == "a duration in words":
        packet.write_text(packet.read_text().replace("timeout = 60", 'timeout = "2m"'))
    elif edit == "a halt policy":
        packet.write_text(packet.read_text().replace("canary = 0", 'canary = 0\nhalt = "fail=50%"'))
    elif edit == "an override":
        return {**os.environ, "GITRUN_MAX_ATTEMPTS": "4"}
    elif edit == "a comment in the task table":  # outside the plain subset: tomllib reads it
        tasks.write_text("# generated\n" + tasks.read_text())
    elif edit == "no stages":
        data = re.sub(r"stages = \[[^]]*\]\n", "", packet.read_text())
        assert "stages" not in data
        packet.write_text(data)
        tasks.write_text(tasks.read_text().replace('stage = "two"\n', ""))
    elif edit == "external":
        packet.write_text(
            packet.read_text().replace("[executor]\n", '[executor]\nkind = "external"\n')
        )
    return None


@two_cpus
@pytest.mark.parametrize(
    ("edit", "served"),
    [
        ("as run", "[True]"),
        ("config limits", "[True]"),
        ("a duration in words", "[]"),  # "2m": no guess, the child's view is read
        ("a halt policy", "[True]"),
        ("an override", "[True]"),
        ("a comment in the task table", "[]"),  # outside the plain subset: no guess
        ("no stages", "[True]"),
        ("external", "[True]"),
    ],
)
def test_a_cold_status_beside_the_check_is_the_serial_one(
    driven: Path, edit: str, served: str
) -> None:
    env = _edit(driven, edit)
    code, beside, err = _cold_status(driven, serial=False, env=env)
    assert code == 0, err
    assert f"pydantic=False served={served}" in err  # the parent never loaded the definition...
    assert (driven / ".git/gitrun/r/run-view.jsonl").is_file()  # ...its child did
    code, serial, err = _cold_status(driven, serial=True, env=env)
    assert code == 0, err
    assert "pydantic=True" in err  # one CPU: loaded in the process
    assert json.loads(beside) == json.loads(serial)
    if env is None:
        assert json.loads(beside) == _by_definition(driven)


@two_cpus
@pytest.mark.parametrize(
    "broken",
    [
        ("max_attempts = 2", "max_attempts = 0"),  # a limit out of range
        ("canary = 0", "canary = 0\ncolour = 3"),  # an unknown field
        ('{ name = "one" }', "{ name = 4 }"),  # a stage named by a number
        ("[run]", "[run"),  # not TOML
    ],
)
def test_a_definition_that_does_not_load_gives_the_same_error(
    driven: Path, broken: tuple[str, str]
) -> None:
    packet = driven / ".gitrun/runs/r/packet.toml"
    assert broken[0] in packet.read_text()
    packet.write_text(packet.read_text().replace(*broken, 1))
    results = [_cold_status(driven, serial) for serial in (False, True)]
    (code, out, err), (code2, out2, err2) = results
    assert code == code2 != 0 and out == out2 == ""
    drop = ("pydantic=",)
    assert [x for x in err.splitlines() if not x.startswith(drop)] == [
        x for x in err2.splitlines() if not x.startswith(drop)
    ]
    assert "Traceback" not in err and "packet.toml" in err
    assert not (driven / ".git/gitrun/r/run-view.jsonl").exists()


@two_cpus
def test_a_task_table_that_does_not_load_gives_the_same_error(driven: Path) -> None:
    tasks = driven / ".gitrun/runs/r/tasks.toml"
    tasks.write_text(tasks.read_text().replace('id = "t02"', 'id = "T 02"'))
    (code, out, err), (code2, _, err2) = [_cold_status(driven, s) for s in (False, True)]
    assert code == code2 != 0 and out == ""
    assert err.splitlines()[:-1] == err2.splitlines()[:-1] and "tasks.toml" in err


# -- the fork itself, in this process ------------------------------------------------


def _view_args(repo: Path) -> tuple[str, str]:
    found = find_repo(str(repo))
    assert found is not None
    return view_path(found.git_dir, "r"), view_key(source_key(found.root, "r"), os.environ)


def _beside(
    repo: Path, load: Callable[[], object], compute: Callable[[object], str] | None = None
) -> str | None:
    """A check beside, its child running ``load`` instead of loading the run."""
    (repo / ".git/gitrun/r/run-view.jsonl").unlink(missing_ok=True)
    found = find_repo(str(repo))
    assert found is not None
    original = viewload.load_view
    viewload.load_view = lambda *args: load()  # type: ignore[assignment]
    try:
        beside = viewload.Beside(found, "r", _view_args(repo))
    finally:
        viewload.load_view = original
    return beside.status(compute or (lambda guess: "computed"))


def _write_loaded_view(repo: Path) -> None:
    """What the child of status does: load the run and write its view."""
    run = load_run(repo, "r")
    write_view(_view_args(repo)[0], run.keys[1], run)


def test_the_guess_serves_only_when_the_checked_view_is_the_guess(driven: Path) -> None:
    key_now = _view_args(driven)
    assert _beside(driven, lambda: _write_loaded_view(driven)) == "computed"

    # A checked view under the same key that is not the guess: a concurrent
    # edit the parent's guess did not see. Not used.
    def other_view() -> None:
        run = load_run(driven, "r")
        object.__setattr__(run, "tasks", run.tasks[:2])
        write_view(key_now[0], key_now[1], run)

    assert _beside(driven, other_view) is None
    assert _beside(driven, lambda: None) is None  # the child wrote no view


def test_a_child_that_fails_leaves_it_to_the_usual_path(driven: Path) -> None:
    def fail() -> None:
        raise SystemExit(0)  # even a clean-looking exit of the load is a failure

    assert _beside(driven, fail) is None
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # reaped: no child of this process is left


def test_an_error_while_computing_is_computed_again(driven: Path) -> None:
    def broken(guess: object) -> str:
        raise OSError("the ledger went away")

    assert _beside(driven, lambda: _write_loaded_view(driven), broken) is None
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_an_interrupted_parent_kills_and_reaps_its_child(driven: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"

    def hang() -> None:
        pid_file.write_text(str(os.getpid()))
        time.sleep(120)

    def interrupted(guess: object) -> str:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _beside(driven, hang, interrupted)
    assert time.monotonic() - started < 30  # not a wait for the 120 s sleep
    pid = int(pid_file.read_text())
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_guess_is_declined_outside_the_plain_subset(driven: Path) -> None:
    root = str(driven)
    assert viewload.guess_view(root, "r", {}) is not None
    assert viewload.guess_view(root, "r", {"GITRUN_TIMEOUT": "5m"}) is None
    tasks = driven / ".gitrun/runs/r/tasks.toml"
    tasks.write_text(tomli_w.dumps({"task": [{"id": "t1", "outputs": [{"path": "a"}]}]}))
    assert viewload.guess_view(root, "r", {}) is None  # an inline table: tomllib's
    tasks.unlink()
    assert viewload.guess_view(root, "r", {}) is None


def test_no_check_beside_while_another_thread_runs(driven: Path) -> None:
    """A forked child inherits every lock another thread holds: no fork then."""
    import threading

    assert viewload.worth_it() == (len(os.sched_getaffinity(0)) >= 2)
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(30,))
    thread.start()
    try:
        assert not viewload.worth_it()
        found = find_repo(str(driven))
        assert found is not None
        (driven / ".git/gitrun/r/run-view.jsonl").unlink()
        assert viewload.begin_at(found, "r") == (None, None)
    finally:
        release.set()
        thread.join()


def test_no_check_beside_without_waitid(driven: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has fork but not waitid, which the child's end is seen with
    before it is reaped: status there loads the definition itself."""
    monkeypatch.delattr(os, "waitid", raising=False)
    assert not viewload.worth_it()
    found = find_repo(str(driven))
    assert found is not None
    (driven / ".git/gitrun/r/run-view.jsonl").unlink()
    assert viewload.begin_at(found, "r") == (None, None)
    assert json.loads(json.dumps(read_status(driven, "r").to_json())) == _by_definition(driven)


@two_cpus
def test_status_reaps_its_child_when_it_fails_before_reading(
    driven: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status starts the check beside before it imports the rest: an import
    that fails (or a Ctrl-C during it) must not leave the child to init."""
    from gitrun import quickcmd

    (driven / ".git/gitrun/r/run-view.jsonl").unlink()
    monkeypatch.setitem(sys.modules, "gitrun.state", None)  # its import fails
    monkeypatch.chdir(driven)
    with pytest.raises(ImportError):
        quickcmd.status(None, "r", as_json=True, show_all=False)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # reaped: no child of this process is left
