"""Attacks on the kept definition (gitrun/snapshot.py, runs._load_run) and on
the dataclass schema's error sentences (gitrun/settings.py).

Equivalence: whatever a definition holds, the objects made from what a load
kept are the ones a checked load makes (reprs, so 5 and 5.0 differ).
Sentences: a broken definition reads as it did before the schema became
dataclasses. Staleness: anything a load depends on, changed, checks again.
Damage and races: a kept file that is not what was written is a miss, never a
crash, a hang, or wrong values used as they are."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitrun import snapshot
from gitrun.errors import DefinitionError
from gitrun.runs import load_run
from tests.helpers import commit_all

ROOT = Path(__file__).resolve().parent.parent
PACKET = (
    '[run]\nid = "r"\n[model]\ndefault = "m"\n[executor]\nkind = "command"\ncommand = ["true"]\n'
)
TASKS = '[[task]]\nid = "a"\noutputs = ["out/a.json"]\n'
NO_ENV: dict[str, str] = {}


def _define(
    repo: Path, packet: str = PACKET, tasks: str = TASKS, config: str | None = None
) -> None:
    run_dir = repo / ".gitrun/runs/r"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "packet.toml").write_text(packet)
    (run_dir / "tasks.toml").write_text(tasks)
    if config is not None:
        (repo / ".gitrun/config.toml").write_text(config)


def _kept(repo: Path) -> Path:
    return repo / ".git/gitrun/r/definition.json"


def _shown(repo: Path, env: dict[str, str] | None = None) -> str:
    run = load_run(repo, "r", environ=NO_ENV if env is None else env)
    return repr((run.packet, run.tasks, run.keys))


def _fresh_and_kept(repo: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    """A load with nothing kept, then one made from what it kept (asserted to be)."""
    env = NO_ENV if env is None else env
    _kept(repo).unlink(missing_ok=True)
    fresh = load_run(repo, "r", environ=env)
    assert _kept(repo).is_file()
    made = snapshot.read(_kept(repo), fresh.keys[1], "r")
    assert made is not None, "the load kept nothing it can read back"
    again = load_run(repo, "r", environ=env)
    assert repr((made[0], made[1])) == repr((again.packet, again.tasks))
    return repr((fresh.packet, fresh.tasks, fresh.keys)), repr(
        (again.packet, again.tasks, again.keys)
    )


# --- equivalence -----------------------------------------------------------

EQUIVALENT: dict[str, tuple[str, str, str | None, dict[str, str]]] = {
    "ints for floats, sizes, per-stage resources": (
        PACKET
        + "[limits]\nmax_load = 2\nmax_cost_usd = 5\nmax_projection = 2\ntimeout = 90\n"
        + 'kill_grace = 1\n[executor.resources]\nnum_cpus = 2\nnum_gpus = 0\nmemory = "4GiB"\n'
        + 'custom = {d = 1}\n[executor.resources.stages.work]\nnum_cpus = 3\nmemory = "1.5G"\n'
        + "custom = {e = 0}\n",
        TASKS,
        None,
        {},
    ),
    "durations": (
        PACKET + '[limits]\ntimeout = "1h30m"\nkill_grace = "500ms"\nbackoff_base = "1.5s"\n'
        'backoff_cap = "2d"\nbreaker_fast = " 3 s "\nhalt = "fail = 10 %"\n',
        TASKS,
        None,
        {},
    ),
    "values equal to the defaults, written out": (
        PACKET + "[limits]\nconcurrency = 4\ncanary = 1\ntimeout = 1200\nmax_projection = 1.5\n"
        "throttle_patterns = []\n[outputs]\nvalidators = []\n[executor.resources]\n"
        "num_cpus = 1\nmemory = 0\n",
        TASKS,
        None,
        {},
    ),
    "unicode and empty lists": (
        PACKET.replace('default = "m"', 'default = "модель-ü"')
        + '[rules]\ntext = "日本語 \\u2028 🎉"\nacceptance = ["", "é"]\n[model.stages]\n'
        + '"ревью" = "m2"\n',
        '[[task]]\nid = "a"\noutputs = ["out/é.json", {path = "😀/x"}]\nnote = "ñ\\t\\r\\n"\n'
        "inputs = []\nowns = []\n",
        None,
        {},
    ),
    "optional fields given": (
        PACKET,
        '[[task]]\nid = "a"\noutputs = [{path = "x", validators = []}, {path = "y"}, "z"]\n'
        'stage = "work"\nbundle = ""\n',
        None,
        {},
    ),
    "every override": (
        PACKET,
        TASKS,
        None,
        {
            "GITRUN_TIMEOUT": "90s",
            "GITRUN_MAX_LOAD": "3",
            "GITRUN_MAX_COST_USD": "7",
            "GITRUN_MODEL": "x",
            "GITRUN_HALT": "fail=5",
            "GITRUN_CONCURRENCY": "0004",
            "GITRUN_CANARY": "0",
            "GITRUN_MAX_ATTEMPTS": "2",
            "GITRUN_MAX_SPAWNS": "9",
            "GITRUN_PAYLOAD_BUDGET": "100",
            "GITRUN_MAX_TOKENS": "10",
        },
    ),
    "config layers merged": (
        PACKET + '[ownership]\nprotected = ["a/"]\n[limits]\nconcurrency = 2\n',
        TASKS,
        '[limits]\nconcurrency = 9\nmax_attempts = 5\n[ownership]\nprotected = ["b/"]\n'
        'strict = true\n[model.stages]\nreview = "r1"\nwork = "w1"\n[validators.v]\n'
        'kind = "nonempty"\n[executor]\nenv = {Z = "1"}\nargs = ["--x"]\n',
        {},
    ),
    "every validator kind": (
        PACKET + '[validators]\na = {kind = "nonempty"}\nb = {kind = "json"}\n'
        'c = {kind = "jsonl"}\nd = {kind = "toml"}\ne = {kind = "regex", pattern = "^x$"}\n'
        'f = {kind = "json_schema", schema = "s.json"}\ng = {kind = "min_bytes", min = 1}\n'
        'h = {kind = "command", command = ["x", ""]}\n',
        '[[task]]\nid = "a"\noutputs = [{path = "x", validators = ["a", "h"]}]\n',
        None,
        {},
    ),
    "stages, per-stage models": (
        'stages = [{name = "work"}, {name = "review", description = "d"}]\n'
        + PACKET
        + '[model.stages]\nreview = "m2"\n',
        '[[task]]\nid = "a"\noutputs = ["o"]\nstage = "review"\n',
        None,
        {},
    ),
    "the default stage written out": (
        'stages = [{name = "work", description = ""}]\n' + PACKET,
        TASKS,
        None,
        {},
    ),
    "ray": (
        '[run]\nid = "r"\n[model]\ndefault = "m"\n[executor]\nkind = "ray"\n'
        'address = "ray://h:1"\nshared_fs = true\npreset = "p"\nshell = "s"\nbash = "deny"\n',
        TASKS,
        None,
        {},
    ),
    "extreme numbers": (
        PACKET + "[limits]\npayload_budget = 9223372036854775807\nmax_cost_usd = 5e-324\n"
        'max_load = 1e300\n[executor.resources]\nmemory = "9999999T"\n',
        TASKS,
        None,
        {},
    ),
    "negative zero where the default is not zero, or in a table": (
        PACKET + "[executor.resources]\nnum_cpus = -0.0\ncustom = {d = -0.0}\n"
        "[executor.resources.stages.work]\nnum_gpus = -0.0\n",
        TASKS,
        None,
        {},
    ),
}


@pytest.mark.parametrize("name", list(EQUIVALENT))
def test_kept_objects_are_what_a_check_makes(git_repo: Path, name: str) -> None:
    packet, tasks, config, env = EQUIVALENT[name]
    _define(git_repo, packet, tasks, config)
    fresh, kept = _fresh_and_kept(git_repo, env)
    assert kept == fresh


def test_negative_zero_equal_to_its_default_comes_back(git_repo: Path) -> None:
    _define(git_repo, PACKET + "[executor.resources]\nnum_gpus = -0.0\n")
    fresh, kept = _fresh_and_kept(git_repo)
    assert "num_gpus=-0.0" in fresh
    assert kept == fresh


def test_a_big_table_of_tasks_of_every_shape_comes_back(git_repo: Path) -> None:
    lines = []
    for i in range(1500):
        shape = i % 4
        lines.append(f'[[task]]\nid = "t{i}"\n')
        if shape == 0:
            lines.append(f'outputs = ["o/{i}"]\n')
        elif shape == 1:
            lines.append(f'outputs = [{{path = "o/{i}", validators = ["json"]}}, "p/{i}"]\n')
        elif shape == 2:
            lines.append(f'outputs = ["o/{i}"]\nowns = []\ninputs = ["i/{i}"]\nnote = "n"\n')
        else:
            lines.append(f'outputs = [{{path = "o/{i}"}}]\nstage = "work"\nbundle = "b"\n')
    _define(git_repo, tasks="".join(lines))
    assert (git_repo / ".gitrun/runs/r/tasks.toml").stat().st_size > 64 * 1024  # read fast
    fresh, kept = _fresh_and_kept(git_repo)
    assert kept == fresh
    fresh, kept = _fresh_and_kept(git_repo)  # the table from its cache this time
    assert kept == fresh


# --- error sentences (as b029c1c, the schema as pydantic models, wrote them) --

P = ".gitrun/runs/r/packet.toml"
T = ".gitrun/runs/r/tasks.toml"
SENTENCES: dict[str, tuple[str, str, str]] = {
    "typo": (
        PACKET + "[limits]\nconcurency = 3\n",
        TASKS,
        f"{P}:9: limits.concurency: unknown field; remove it or fix the spelling "
        "(did you mean 'concurrency'?)",
    ),
    "text for a number": (
        PACKET + '[limits]\nconcurrency = "4"\n',
        TASKS,
        f"{P}:9: limits.concurrency: expected a whole number such as 4 (got '4')",
    ),
    "true for a number": (
        PACKET + "[limits]\nconcurrency = true\n",
        TASKS,
        f"{P}:9: limits.concurrency: expected a whole number such as 4 (got True)",
    ),
    "out of range": (
        PACKET + "[limits]\ncanary = -1\n",
        TASKS,
        f"{P}:9: limits.canary: input should be greater than or equal to 0 (got -1)",
    ),
    "nan": (
        PACKET + "[limits]\nmax_load = nan\n",
        TASKS,
        f"{P}:9: limits.max_load: expected a finite number (not nan or inf) (got nan)",
    ),
    "a table for a duration": (
        PACKET + "[limits.timeout]\nx = 1\n",
        TASKS,
        f'{P}:8: limits.timeout: expected a duration such as "20m" or "90s"',
    ),
    "text for a table": (
        'limits = "fast"\n' + PACKET,
        TASKS,
        f"{P}:1: limits: expected a table (got 'fast')",
    ),
    "a table for text": (
        PACKET + "[model.stages.review]\nx = 1\n",
        TASKS,
        f"{P}:8: model.stages.review: expected text in quotes, such as \"...\" (got {{'x': 1}})",
    ),
    "run missing": (
        '[model]\ndefault = "m"\n',
        TASKS,
        f"{P}: run: required field is missing; add it",
    ),
    "NUL in a command": (
        PACKET.replace('["true"]', '["tr\\u0000ue"]'),
        TASKS,
        f"{P}:7: executor.command[0]: 'tr\\x00ue' contains a NUL character, which no command "
        "line can carry",
    ),
    "empty command": (
        PACKET.replace('["true"]', "[]"),
        TASKS,
        f'{P}:7: executor.command: is empty; give the program and its arguments, e.g. ["sh", '
        '"-c", "..."]',
    ),
    "bad env name": (
        PACKET + '[executor.env]\n"1A" = "x"\n',
        TASKS,
        f"{P}:8: executor.env: '1A' is not an environment variable name; use letters, digits "
        "and '_'",
    ),
    "bad regex": (
        PACKET + '[validators.v]\nkind = "regex"\npattern = "(x"\n',
        TASKS,
        f"{P}:10: validators.v.pattern: '(x' is not a valid regular expression (missing ), "
        "unterminated subpattern at position 0)",
    ),
    "bad validator kind": (
        PACKET + '[validators.v]\nkind = "jsn"\n',
        TASKS,
        f"{P}:8: validators.v: unknown validator kind 'jsn'; use one of nonempty, json, jsonl, "
        "toml, regex, json_schema, min_bytes, command",
    ),
    "validator kind missing": (
        PACKET + '[validators.v]\npattern = "x"\n',
        TASKS,
        f"{P}:8: validators.v: needs a `kind` (nonempty, json, jsonl, toml, regex, json_schema, "
        "min_bytes, command)",
    ),
    "extra field on a validator": (
        PACKET + '[validators.v]\nkind = "nonempty"\nmin = 3\n',
        TASKS,
        f"{P}:10: validators.v.min: unknown field; remove it or fix the spelling (known fields: "
        "kind)",
    ),
    "stage of the resources as text": (
        PACKET + '[executor.resources.stages]\nwork = "big"\n',
        TASKS,
        f"{P}:9: executor.resources.stages.work: expected a table (got 'big')",
    ),
    "task outputs a number": (
        PACKET,
        '[[task]]\nid = "a"\noutputs = [5]\n',
        f"{T}:3: task[0] (id 'a').outputs[0]: expected text in quotes or a table with path and "
        "validators (got 5)",
    ),
    "task output table with a typo": (
        PACKET,
        '[[task]]\nid = "a"\noutputs = [{pth = "x"}]\n',
        f"{T}:3: task[0] (id 'a').outputs[0].pth: unknown field; remove it or fix the spelling "
        "(did you mean 'path'?)",
    ),
    "task id missing": (
        PACKET,
        '[[task]]\noutputs = ["x"]\n',
        f"{T}:1: task[0].id: required field is missing; add it",
    ),
    "task outputs empty": (
        PACKET,
        '[[task]]\nid = "a"\noutputs = []\n',
        f"{T}:3: task[0] (id 'a').outputs: needs at least one entry (got [])",
    ),
    "task table as a table": (
        PACKET,
        '[task]\nid = "a"\noutputs = ["x"]\n',
        f"{T}:1: task: expected a list such as [\"a\", \"b\"] (got {{'id': 'a', 'outputs': "
        "['x']})",
    ),
}


@pytest.mark.parametrize("name", list(SENTENCES))
def test_a_broken_definition_reads_as_before(git_repo: Path, name: str) -> None:
    packet, tasks, sentence = SENTENCES[name]
    _define(git_repo, packet, tasks)
    with pytest.raises(DefinitionError) as failed:
        load_run(git_repo, "r", environ=NO_ENV)
    assert sentence in failed.value.lines
    assert not _kept(git_repo).exists()


@pytest.mark.parametrize(
    ("name", "environ", "sentence"),
    [
        (
            "duration",
            {"GITRUN_TIMEOUT": "soon"},
            "environment variable GITRUN_TIMEOUT='soon': 'soon' is not a duration; write it "
            'like "20m", "90s" or "1h30m"; fix or unset it',
        ),
        (
            "zero",
            {"GITRUN_CONCURRENCY": "0"},
            "environment variable GITRUN_CONCURRENCY='0': input should be greater than 0; "
            "fix or unset it",
        ),
    ],
)
def test_a_broken_override_after_a_kept_load_reads_as_before(
    git_repo: Path, name: str, environ: dict[str, str], sentence: str
) -> None:
    _define(git_repo)
    load_run(git_repo, "r", environ=NO_ENV)
    assert _kept(git_repo).is_file()
    with pytest.raises(DefinitionError) as failed:
        load_run(git_repo, "r", environ=environ)
    assert failed.value.lines == [sentence], name


@pytest.mark.parametrize("value", ['"json"', "5", '["json"]'])
def test_a_validator_that_is_not_a_table_reads_expected_a_table(git_repo: Path, value: str) -> None:
    _define(git_repo, PACKET + f"[validators]\nv = {value}\n")
    with pytest.raises(DefinitionError) as failed:
        load_run(git_repo, "r", environ=NO_ENV)
    shown = value.replace('"', "'")
    assert failed.value.lines == [f"{P}:9: validators.v: expected a table (got {shown})"]


# --- staleness ---------------------------------------------------------------


def test_config_through_a_symlink_edited_or_retargeted_checks_again(git_repo: Path) -> None:
    _define(git_repo)
    (git_repo / "one.toml").write_text("[limits]\nconcurrency = 7\n")
    (git_repo / "two.toml").write_text("[limits]\nconcurrency = 8\n")
    config = git_repo / ".gitrun/config.toml"
    config.symlink_to(git_repo / "one.toml")
    assert "concurrency=7" in _shown(git_repo)
    (git_repo / "one.toml").write_text("[limits]\nconcurrency = 6\n")  # edited through the link
    assert "concurrency=6" in _shown(git_repo)
    config.unlink()
    config.symlink_to(git_repo / "two.toml")  # another target
    assert "concurrency=8" in _shown(git_repo)
    config.unlink()
    assert "concurrency=4" in _shown(git_repo)  # gone
    config.write_text("[limits]\nconcurrency = 5\n")  # back, as a file
    assert "concurrency=5" in _shown(git_repo)


@pytest.mark.parametrize("swapped", ["packet.toml", "tasks.toml", "run directory", ".gitrun"])
def test_a_symlink_swapped_in_is_refused_though_its_bytes_were_kept(
    git_repo: Path, tmp_path: Path, swapped: str
) -> None:
    _define(git_repo)
    _shown(git_repo)
    run_dir = git_repo / ".gitrun/runs/r"
    if swapped in ("packet.toml", "tasks.toml"):
        real = tmp_path / swapped
        shutil.move(run_dir / swapped, real)
        (run_dir / swapped).symlink_to(real)
    else:
        moved = run_dir if swapped == "run directory" else git_repo / ".gitrun"
        shutil.move(moved, tmp_path / "real")
        moved.symlink_to(tmp_path / "real")
    with pytest.raises(DefinitionError, match="is a symlink"):
        load_run(git_repo, "r", environ=NO_ENV)


def test_overrides_set_changed_and_unset_check_again(git_repo: Path) -> None:
    _define(git_repo, PACKET + "[limits]\ntimeout = 60\n")
    assert "timeout=60.0" in _shown(git_repo)
    assert "timeout=90.0" in _shown(git_repo, {"GITRUN_TIMEOUT": "90s"})
    assert "timeout=90.0" in _shown(git_repo, {"GITRUN_TIMEOUT": "90"})
    assert "timeout=5400.0" in _shown(git_repo, {"GITRUN_TIMEOUT": "1h30m"})
    assert "timeout=60.0" in _shown(git_repo)
    assert "timeout=60.0" in _shown(git_repo, {"GITRUN_UNKNOWN": "1"})  # not an override
    both = {"GITRUN_TIMEOUT": "90s", "GITRUN_MODEL": "o"}
    assert "timeout=90.0" in _shown(git_repo, both) and "default='o'" in _shown(git_repo, both)
    assert "default='m'" in _shown(git_repo, {"GITRUN_TIMEOUT": "90s"})


# Loads run r in a fresh interpreter with the gitrun it is given: its repr.
_LOAD = """
import sys
from pathlib import Path
from gitrun.runs import load_run
run = load_run(Path(sys.argv[1]), "r", environ={})
print(repr((run.packet, run.tasks)))
"""


def _loading_with(source: Path, repo: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    env["PYTHONPATH"] = str(source)
    return subprocess.run(
        [sys.executable, "-c", _LOAD, str(repo)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _load_with(source: Path, repo: Path) -> str:
    proc = _loading_with(source, repo)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _edited_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    source = tmp_path / "copy"
    shutil.copytree(
        ROOT / "gitrun", source / "gitrun", ignore=shutil.ignore_patterns("__pycache__")
    )
    module = source / "gitrun" / name
    text = module.read_text()
    assert old in text, (name, old)
    module.write_text(text.replace(old, new, 1))
    return source


@pytest.mark.parametrize(
    ("module", "old", "new", "before", "after"),
    [
        (
            "settings.py",
            "concurrency: PositiveInt = 4",
            "concurrency: PositiveInt = 6",
            "concurrency=4",
            "concurrency=6",
        ),
        (
            "runview.py",
            'r"overloaded",',
            'r"overloaded", r"slow down",',
            "'overloaded', '",
            "'overloaded', 'slow down'",
        ),
    ],
)
def test_a_checkout_with_another_schema_checks_again(
    git_repo: Path, tmp_path: Path, module: str, old: str, new: str, before: str, after: str
) -> None:
    _define(git_repo)
    assert before in _load_with(ROOT, git_repo)
    copy = _edited_copy(tmp_path, module, old, new)
    assert after in _load_with(copy, git_repo)
    assert before in _load_with(ROOT, git_repo)  # and back


def test_a_checkout_whose_load_adds_a_rule_checks_again(git_repo: Path, tmp_path: Path) -> None:
    _define(git_repo)
    _load_with(ROOT, git_repo)
    copy = _edited_copy(
        tmp_path,
        "runs.py",
        "if packet is not None and packet.run.id != run_id:",
        "if packet is not None and (packet.run.id != run_id or not packet.rules.text):",
    )
    proc = _loading_with(copy, git_repo)
    # what a fresh load with that copy says
    assert proc.returncode != 0 and "run.id is 'r' but the run directory is 'r'" in proc.stderr


# --- damage ------------------------------------------------------------------


def _loaded_once(repo: Path) -> tuple[str, dict[str, object]]:
    """What a load shows, and the values it kept (the header is in ``_HEADER``)."""
    _define(repo, tasks=TASKS + '[[task]]\nid = "b"\noutputs = [{path = "o/b"}]\n')
    shown = _shown(repo)
    head, _, body = _kept(repo).read_bytes().partition(b"\n")
    _HEADER.clear()
    _HEADER.update(json.loads(head))
    return shown, json.loads(body)


_HEADER: dict[str, object] = {}


def _keep(repo: Path, values: object, sealed: bool, text: str | None = None) -> None:
    """Write a kept definition of these values (or this text) under the last
    header: ``sealed`` with their digest, as a gitrun that wrote them would,
    or with the old one, as a hand edit leaves it."""
    body = (json.dumps(values) if text is None else text).encode()
    header = dict(_HEADER)
    if sealed:
        header["sha256"] = hashlib.sha256(body).hexdigest()
    _kept(repo).write_bytes(json.dumps(header).encode() + b"\n" + body)


def test_a_fifo_there_neither_hangs_nor_stays(git_repo: Path) -> None:
    shown, _ = _loaded_once(git_repo)
    _kept(git_repo).unlink()
    os.mkfifo(_kept(git_repo))
    assert _shown(git_repo) == shown
    assert _kept(git_repo).is_file() and _shown(git_repo) == shown


def test_a_symlink_there_is_not_written_through(git_repo: Path, tmp_path: Path) -> None:
    shown, _ = _loaded_once(git_repo)
    victim = tmp_path / "victim.json"
    victim.write_bytes(_kept(git_repo).read_bytes().replace(b'"o/b"', b'"o/evil"'))
    _kept(git_repo).unlink()
    _kept(git_repo).symlink_to(victim)
    assert _shown(git_repo) == shown  # not read through the link
    assert "o/evil" in victim.read_text()  # not written through it either
    assert not _kept(git_repo).is_symlink()


def test_a_file_where_the_run_directory_belongs_is_only_a_miss(git_repo: Path) -> None:
    shown, _ = _loaded_once(git_repo)
    home = git_repo / ".git/gitrun/r"
    shutil.rmtree(home)
    home.write_text("not a directory")
    assert _shown(git_repo) == shown
    assert _shown(git_repo) == shown


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any file")
def test_an_unreadable_or_unwritable_place_is_only_a_miss(git_repo: Path) -> None:
    shown, _ = _loaded_once(git_repo)
    _kept(git_repo).chmod(0)
    home = _kept(git_repo).parent
    home.chmod(0o500)
    try:
        assert _shown(git_repo) == shown
    finally:
        home.chmod(0o700)


@pytest.mark.parametrize(
    "damage",
    [
        "garbage bytes",
        "empty",
        "huge padding",
        "deep inside a task",
        "tasks as text",
        "a task as null",
        "a kind as a list",
        "packet as a list",
        "an unknown kind of output",
    ],
)
def test_damage_with_the_right_key_is_a_miss_or_harmless(git_repo: Path, damage: str) -> None:
    shown, data = _loaded_once(git_repo)
    tasks: list[dict[str, object]] = data["tasks"]  # type: ignore[assignment]
    packet: dict[str, object] = data["packet"]  # type: ignore[assignment]
    if damage == "garbage bytes":
        _kept(git_repo).write_bytes(os.urandom(4096))
    elif damage == "empty":
        _kept(git_repo).write_bytes(b"")
    elif damage == "huge padding":
        data["pad"] = "x" * (32 << 20)
        _HEADER["key"] = "0" * 64
    elif damage == "deep inside a task":
        tasks[0]["inputs"] = []
        text = json.dumps(data).replace('"inputs": []', '"inputs": ' + "[" * 50_000 + "]" * 50_000)
        _keep(git_repo, None, sealed=True, text=text)
    elif damage == "tasks as text":
        data["tasks"] = "ab"
    elif damage == "a task as null":
        tasks[1] = None  # type: ignore[call-overload]
    elif damage == "a kind as a list":
        packet["validators"] = {"v": {"kind": ["json"]}}
    elif damage == "packet as a list":
        data["packet"] = []
    else:
        tasks[1]["outputs"] = [{"path": "o/b", "kind": "regex"}]
    if damage not in ("garbage bytes", "empty", "deep inside a task"):
        _keep(git_repo, data, sealed=True)  # sealed: what it builds must tell
    started = time.monotonic()
    assert _shown(git_repo) == shown
    assert time.monotonic() - started < 10
    assert _shown(git_repo) == shown  # written again


@pytest.mark.parametrize(
    "damage", ["id a number", "outputs text", "tasks a table", "concurrency text", "stages empty"]
)
def test_wrong_types_in_a_kept_definition_are_a_miss(git_repo: Path, damage: str) -> None:
    """Edited by hand: the digest no longer holds. (A sealed forgery is out of
    reach: whoever can write one can rewrite .git's hooks beside it.)"""
    shown, data = _loaded_once(git_repo)
    tasks: list[dict[str, object]] = data["tasks"]  # type: ignore[assignment]
    packet: dict[str, object] = data["packet"]  # type: ignore[assignment]
    if damage == "id a number":
        tasks[0]["id"] = 5
    elif damage == "outputs text":
        tasks[0]["outputs"] = "xy"
    elif damage == "tasks a table":
        data["tasks"] = {}
    elif damage == "concurrency text":
        packet["limits"] = {"concurrency": "many"}
    else:
        packet["stages"] = []
    _keep(git_repo, data, sealed=False)
    assert _shown(git_repo) == shown


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_kept_nan_or_infinity_is_a_miss(git_repo: Path, value: str) -> None:
    shown, data = _loaded_once(git_repo)
    packet: dict[str, object] = data["packet"]  # type: ignore[assignment]
    packet["limits"] = {"timeout": 1.5}
    text = json.dumps(data, separators=(",", ":"))
    _keep(git_repo, None, sealed=True, text=text.replace('"timeout":1.5', f'"timeout":{value}'))
    assert value in _kept(git_repo).read_text()
    assert _shown(git_repo) == shown


_CHECK = [sys.executable, "-m", "gitrun", "check", "r"]


def test_check_does_not_crash_on_a_damaged_kept_definition(git_repo: Path, tmp_path: Path) -> None:
    _, data = _loaded_once(git_repo)
    tasks: list[dict[str, object]] = data["tasks"]  # type: ignore[assignment]
    tasks[0]["outputs"] = [5]
    _keep(git_repo, data, sealed=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    env["TMPDIR"] = str(tmp_path)  # a crash's log
    proc = subprocess.run(_CHECK, cwd=git_repo, capture_output=True, text=True, env=env, timeout=60)
    assert "internal error" not in proc.stderr
    assert proc.returncode == 0, proc.stderr


# --- races -------------------------------------------------------------------


def test_loads_writing_at_once_all_load_and_leave_one_good_file(git_repo: Path) -> None:
    _define(
        git_repo, tasks="".join(f'[[task]]\nid = "t{i}"\noutputs = ["o/{i}"]\n' for i in range(300))
    )
    commit_all(git_repo, "define")
    expected = _shown(git_repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    env["PYTHONPATH"] = str(ROOT)
    for _round in range(2):
        _kept(git_repo).unlink()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _LOAD, str(git_repo)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
        assert len({out for out, _ in outs}) == 1
        assert not [p for p in _kept(git_repo).parent.iterdir() if p.name.endswith(".tmp")]
        run = load_run(git_repo, "r", environ=NO_ENV)
        assert snapshot.read(_kept(git_repo), run.keys[1], "r") is not None
    assert _shown(git_repo) == expected


# A load whose write of the kept definition stops before the rename: the
# temporary file is whole, the kept one not there yet.
_STALLED = """
import os, sys, time
from pathlib import Path
real = os.replace
def stall(src, dst):
    if str(dst).endswith("definition.json"):
        print("stalled", flush=True)
        time.sleep(60)
    real(src, dst)
os.replace = stall
from gitrun.runs import load_run
load_run(Path(sys.argv[1]), "r", environ={})
"""


def test_a_load_killed_while_it_writes_leaves_loads_working(git_repo: Path) -> None:
    shown, _ = _loaded_once(git_repo)
    _kept(git_repo).unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLED, str(git_repo)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "stalled\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    left = [p for p in _kept(git_repo).parent.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1  # what the killed load wrote stays behind, unused
    assert not _kept(git_repo).exists()
    assert _shown(git_repo) == shown
    assert _shown(git_repo) == shown and _kept(git_repo).is_file()
