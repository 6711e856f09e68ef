"""The run view (gitrun/runview.py): what ``status`` reads of a definition
without pydantic, cached by content hash. A cached view must give exactly the
status the loaded definition gives, follow every edit and override, never
outlive a definition that stopped loading, and be rebuilt when damaged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.hookrules import find_repo
from gitrun.local import LocalPaths
from gitrun.runs import load_run
from gitrun.runview import DEFINITION_VARS, RunLimits, read_view, source_key, view_key
from gitrun.settings import ENV_OVERRIDES, Limits
from gitrun.state import load_view, read_status
from tests.helpers import commit_all, fake_worker_run
from tests.helpers import run_gitrun as _gitrun

# Which path served, as the status process saw it: did it import pydantic
# (only the serial path loads the definition in the process itself), and
# was a provisional status compared with the checked view (gitrun/viewload.py),
# and with what result?
_STATUS = """
import sys
from gitrun import viewload
from gitrun.entry import main
holds = viewload.view_holds
served = []
viewload.view_holds = lambda *args: served.append(holds(*args)) or served[-1]
sys.argv = ["gitrun", *sys.argv[1:]]
code = main()
sys.stderr.write(f"pydantic={'pydantic' in sys.modules} served={served}\\n")
sys.exit(code)
"""


def _one_cpu() -> None:  # status loads the definition itself, no check beside
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _status(
    repo: Path, *args: str, env: dict[str, str] | None = None, serial: bool = False
) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _STATUS, "status", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_one_cpu if serial else None,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _view_key_now(repo: Path) -> str | None:
    """The key the run view is under, None without one."""
    try:
        return str(json.loads(_view_file(repo).read_bytes().partition(b"\n")[0])["key"])
    except FileNotFoundError:
        return None


@pytest.fixture
def driven(git_repo: Path) -> Path:
    """A run driven to its end: t1 and t3 done, t2 failed for good, over two stages."""
    fake_worker_run(
        git_repo,
        "r",
        3,
        {"tasks": {"t02": "nowrite"}},
        packet={
            # a whole number of seconds: a cold status can guess it (test_viewload)
            "limits": {"max_attempts": 2, "canary": 0, "timeout": 60},
            "stages": [{"name": "one"}, {"name": "two"}],
        },
    )
    tasks = (git_repo / ".gitrun/runs/r/tasks.toml").read_text()
    tasks = tasks.replace('id = "t03"', 'id = "t03"\nstage = "two"')
    (git_repo / ".gitrun/runs/r/tasks.toml").write_text(tasks)
    commit_all(git_repo, "define")
    assert _gitrun(git_repo, "start", "r").returncode == 1
    return git_repo


def _by_definition(repo: Path) -> object:
    """The status of the loaded definition, as ``status --json`` prints it."""
    return json.loads(json.dumps(read_status(repo, "r", load_run(repo, "r")).to_json()))


def _view_file(repo: Path) -> Path:
    return LocalPaths.of(repo, "r").run_view


def test_status_from_the_view_is_the_status_of_the_definition(driven: Path) -> None:
    code, first, err = _status(driven, "r", "--json")
    assert code == 0, err
    assert _view_file(driven).is_file()  # start wrote it
    assert "pydantic=False" in err  # the view served it
    assert json.loads(first) == _by_definition(driven)
    got = json.loads(first)
    assert {tid: t["status"] for tid, t in got["tasks"].items()} == {
        "t01": "done",
        "t02": "failed",
        "t03": "done",
    }
    assert got["stages"]["two"]["done"] == 1


@pytest.mark.parametrize(
    "edit",
    [
        "more attempts",  # the packet: t2 is pending again
        "a new task",  # the task table
        "a stage moved",  # the task table: t3 in stage one
        "config",  # the repository's config.toml
    ],
)
@pytest.mark.parametrize("serial", [False, True], ids=["beside", "serial"])
def test_an_edited_definition_is_read_again(driven: Path, edit: str, serial: bool) -> None:
    _status(driven, "r")  # the view is current
    before = _view_key_now(driven)
    run_dir = driven / ".gitrun/runs/r"
    if edit == "more attempts":
        packet = run_dir / "packet.toml"
        packet.write_text(packet.read_text().replace("max_attempts = 2", "max_attempts = 5"))
    elif edit == "a new task":
        with (run_dir / "tasks.toml").open("a") as handle:
            handle.write('\n[[task]]\nid = "t09"\noutputs = ["out/t09.json"]\n')
    elif edit == "a stage moved":
        tasks = run_dir / "tasks.toml"
        tasks.write_text(tasks.read_text().replace('stage = "two"', 'stage = "one"'))
    else:
        (driven / ".gitrun/config.toml").write_text('[model]\ndefault = "other"\n')
    code, out, err = _status(driven, "r", "--json", serial=serial)
    assert code == 0, err
    # loaded again (in the process on one CPU, by its check beside on two)...
    assert f"pydantic={serial or len(os.sched_getaffinity(0)) < 2}" in err
    assert _view_key_now(driven) not in (None, before)
    assert json.loads(out) == _by_definition(driven)
    code, again, err = _status(driven, "r", "--json")
    assert "pydantic=False" in err and again == out  # ...and cached again


def test_an_override_in_the_environment_is_part_of_the_key(driven: Path) -> None:
    _status(driven, "r")
    env = {**os.environ, "GITRUN_MAX_ATTEMPTS": "4"}
    code, out, err = _status(driven, "r", "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["tasks"]["t02"]["status"] == "pending"
    code, out, err = _status(driven, "r", "--json")
    assert json.loads(out)["tasks"]["t02"]["status"] == "failed"


def test_a_definition_that_stops_loading_is_refused_every_time(driven: Path) -> None:
    _status(driven, "r")
    packet = driven / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text().replace("max_attempts = 2", "max_attempts = 0"))
    for _ in range(2):
        code, out, err = _status(driven, "r")
        assert code != 0 and out == ""
        assert "max_attempts" in err and "Traceback" not in err


def test_a_run_directory_swapped_for_a_symlink_is_refused(driven: Path) -> None:
    """Same bytes, but the directory is now a link: loading refuses it, so
    the view written for the real directory must not answer."""
    _status(driven, "r")
    runs = driven / ".gitrun/runs"
    (runs / "r").rename(driven / "elsewhere")
    (runs / "r").symlink_to(driven / "elsewhere")
    code, _, err = _status(driven, "r")
    assert code != 0 and "is a symlink" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "damage",
    [
        "cut",
        "garbage",
        "no end",
        "a task edited",
        "wrong task shape",
        "unknown stage",
        "limit missing",
        "empty stages",
        "a directory",
        "a fifo",
        "a symlink",
    ],
)
def test_a_damaged_view_is_rebuilt(driven: Path, damage: str) -> None:
    _status(driven, "r")
    view = _view_file(driven)
    data = view.read_bytes()
    head, _, rest = data.partition(b"\n")
    header = json.loads(head)
    view.unlink()
    if damage == "cut":
        view.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        view.write_bytes(b"\x00\xff not json\n# end of the run view\n")
    elif damage == "no end":
        view.write_bytes(data.replace(b"# end of the run view\n", b""))
    elif damage == "a task edited":
        view.write_bytes(data.replace(b'"t03","two"', b'"t03","one"'))
    elif damage in ("wrong task shape", "unknown stage"):  # each with its checksum
        if damage == "wrong task shape":
            rest = b'[["t01", null, "out/t01.json"]]\n# end of the run view\n'
        else:
            rest = rest.replace(b'"t03","two"', b'"t03","nine"')
        header["tasks_sha256"] = hashlib.sha256(rest.split(b"\n")[0]).hexdigest()
        view.write_bytes(json.dumps(header).encode() + b"\n" + rest)
    elif damage == "limit missing":
        del header["limits"]["max_attempts"]
        view.write_bytes(json.dumps(header).encode() + b"\n" + rest)
    elif damage == "empty stages":
        header["stages"] = []
        view.write_bytes(json.dumps(header).encode() + b"\n" + rest)
    elif damage == "a directory":
        view.mkdir()
    elif damage == "a fifo":
        os.mkfifo(view)
    else:
        (driven / "decoy").write_bytes(data)
        view.symlink_to(driven / "decoy")
    code, out, err = _status(driven, "r", "--json")
    assert code == 0, err
    assert json.loads(out) == _by_definition(driven)


def test_the_view_holds_every_limit_and_every_override() -> None:
    """RunLimits declares Limits' fields, and the key reads every variable
    that overrides the packet: a field or variable added on one side only
    fails here."""
    assert set(RunLimits.__annotations__) == {f.name for f in dataclasses.fields(Limits)}
    assert set(DEFINITION_VARS) == set(ENV_OVERRIDES)
    limits = Limits(concurrency=7, halt="fail=10%")
    plain = limits.plain()
    assert plain.to_json() == dataclasses.asdict(limits)
    assert plain.breaker_size == 7 and plain.halt_after(55) == 6


def test_load_view_gives_the_loaded_definitions_shape(driven: Path) -> None:
    where = find_repo(str(driven))
    assert where is not None
    run = load_run(driven, "r")
    view = load_view(where, "r")  # from the cache start wrote
    assert type(view).__name__ == "RunView"
    assert view.stage_names == run.stage_names == ["one", "two"]
    assert view.executor_kind == run.executor_kind
    assert view.limits.to_json() == run.limits.to_json()
    assert [(t.id, view.stage_of(t), view.output_paths(t)) for t in view.tasks] == [
        (t.id, run.stage_of(t), run.output_paths(t)) for t in run.tasks
    ]
    key = view_key(source_key(where.root, "r"), os.environ)
    assert read_view(str(_view_file(driven)), key, driven) is not None
    assert read_view(str(_view_file(driven)), "0" * 64, driven) is None


@pytest.mark.parametrize("name", [".gitrun/config.toml", ".gitrun/runs/r/tasks.toml"])
@pytest.mark.parametrize("kind", ["a directory", "a FIFO"])
def test_a_definition_file_that_is_not_a_file_is_one_sentence(
    driven: Path, kind: str, name: str
) -> None:
    """Neither the key nor loading may trip over (or wait on) a definition
    file that is not a file: one sentence naming the file, at once."""
    _status(driven, "r")
    path = driven / name
    path.unlink(missing_ok=True)
    if kind == "a directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    code, out, err = _status(driven, "r")  # (a hang fails on the timeout)
    assert code != 0 and out == ""
    assert "Traceback" not in err
    assert f"{name}: is {kind}, not a" in err or f"{name}: is not a regular file" in err
