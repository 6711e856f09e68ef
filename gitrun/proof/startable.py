"""What ``gitrun check`` proves about whether a run can start at all.

**The program.** A run whose program is not installed used to pass ``check`` and fail later,
one attempt at a time (on a one-task run as a "retry storm"). Before a
launch the executor's program must resolve the way the driver will start it
(on the workers' PATH, or as a path from the repository, executable), and a
preset's CLI must answer ``--version``: its first line is printed in
``check``'s summary. The answer is kept per binary (path, size, change
time) in the repository's gitrun folder, so a second ``check`` does not
start a node CLI again.

**The inputs.** Every path a task reads exists in the work tree or at the
base commit, and every glob it reads matches a file there, unless a task of
the run makes it (a later stage reads an earlier one's outputs): a
misspelt ``docs/b1.text`` is a problem naming the task, not a worker that
finds nothing to read.

**A first commit.** A repository without one has no point to fork from.

**The worker's own files.** The repository files the workers run (a
script the command names, its configuration, a validator's schema or
command file: :mod:`gitrun.workers.workerfiles`) are committed: the run's
provenance counts them as git stores them, and a resume on a fresh clone
runs the clone's copy, which only a commit gives it ("cannot open
worker.sh" on the second machine, otherwise). The files in the run
directory that the run's branch carries need no commit of the user's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gitrun.definition.inputs import bundle_paths, input_paths
from gitrun.definition.load import RunDef
from gitrun.definition.runfiles import definition_paths
from gitrun.ownership.claims import Claim
from gitrun.ownership.paths import canonical_problem
from gitrun.ownership.patterns import (
    PatternError,
    first_name,
    intersect,
    literal_path,
    matches,
    parse,
)
from gitrun.problem import Problem
from gitrun.processes.proc import clean_env
from gitrun.proof.beside import owned_beside
from gitrun.store.git import git_dir
from gitrun.store.local import HOME
from gitrun.store.regular import read_regular
from gitrun.store.repo import common_git_dir
from gitrun.store.tomlfile import write_atomic
from gitrun.visible import visible
from gitrun.workers.executor import command_template
from gitrun.workers.presets import find_preset
from gitrun.workers.workerfiles import resolve

VERSION_TIMEOUT = 30.0  # seconds; a node CLI's --version takes about half of one
CACHE_NAME = ".programs.json"  # beside the runs' folders; no run id starts with a dot
MAX_CACHE_BYTES = 1 << 20


@dataclass(frozen=True)
class ProgramCheck:
    problems: list[Problem]
    version: str = ""  # a preset CLI's answer to --version, its first line


def program_check(run: RunDef, path: str | None = None) -> ProgramCheck:
    """Whether the run's workers can start: the program of its command
    resolves and, for a preset, answers ``--version``. ``path``: the
    workers' PATH (default: this process's, as the driver passes it on)."""
    executor = run.packet.executor
    if executor.kind != "command":  # a lead or a Ray node starts the workers
        return ProgramCheck([])
    template = command_template(executor)
    if not template or "{" in template[0]:
        return ProgramCheck([])  # `check` reports an executor without a command
    name = template[0]
    if path is None:
        path = executor.env.get("PATH", os.environ.get("PATH", os.defpath))
    record = find_preset(executor.preset)
    script_starts = _script_program(executor.shell) if record and record.script else None
    if executor.command is None and script_starts is not None:
        found, why = resolve(run.repo, script_starts, path)
        if found is None:
            text = (
                f"{run.packet_path}: [executor] shell starts `{visible(script_starts)}`, which "
                f"{why}; install it, or write there the command your workers run"
            )
            return ProgramCheck([Problem("program", text)])
    found, why = resolve(run.repo, name, path)
    if found is None:
        install = record.install if record is not None and executor.command is None else ""
        fix = (
            f"install it ({install})"
            if install
            else "install it, or name it by its path in [executor] command"
        )
        return ProgramCheck(
            [
                Problem(
                    "program",
                    f"{run.packet_path}: [executor] starts `{visible(name)}`, which {why}; {fix}",
                )
            ]
        )
    if executor.command is not None or record is None or not record.version:
        return ProgramCheck([])
    version, problem = cli_version(run.repo, found, record.version)
    if problem:
        return ProgramCheck(
            [Problem("program", f"{run.packet_path}: [executor] {problem}; reinstall it")]
        )
    return ProgramCheck([], version)


# What a shell script may start with that is no program on PATH.
_SHELL_WORDS = frozenset(
    [
        "!",
        ".",
        ":",
        "[",
        "alias",
        "bg",
        "break",
        "case",
        "cd",
        "command",
        "continue",
        "declare",
        "echo",
        "eval",
        "exec",
        "exit",
        "export",
        "false",
        "fg",
        "for",
        "function",
        "getopts",
        "hash",
        "if",
        "jobs",
        "kill",
        "let",
        "local",
        "printf",
        "pwd",
        "read",
        "readonly",
        "return",
        "set",
        "shift",
        "source",
        "test",
        "time",
        "times",
        "trap",
        "true",
        "type",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "until",
        "wait",
        "while",
        "{",
        "(",
    ]
)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _script_program(script: str | None) -> str | None:
    """The program a shell script's first command names, when it is a plain
    name the shell looks up on PATH (not a builtin, a keyword, a path, an
    assignment or an expansion); None when that cannot be told."""
    try:
        words = shlex.split(script or "", comments=True)
    except ValueError:
        return None
    if not words or words[0] in _SHELL_WORDS or _PLAIN_NAME.fullmatch(words[0]) is None:
        return None
    return words[0]


def cli_version(repo: Path, program: str, ask: tuple[str, ...]) -> tuple[str, str]:
    """The first line ``program`` prints when asked ``ask`` (its preset's
    proof: ``--version``), or "" and a clause saying why there is none; a
    binary's answer is read once."""
    key, cache_path = _key(program), _cache_path(repo)
    cache = _read_cache(cache_path)
    if key is not None and isinstance(cache.get(key), str):
        return str(cache[key]), ""
    shown = " ".join([os.path.basename(program), *ask])
    try:
        proc = subprocess.run(
            [program, *ask],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=VERSION_TIMEOUT,
            env=clean_env(),
            cwd=repo,
        )
    except subprocess.TimeoutExpired:
        return "", f"`{shown}` did not answer within {VERSION_TIMEOUT:g} s"
    except OSError as exc:
        return "", f"`{shown}` cannot start ({exc.strerror or exc})"
    said = [
        visible(line.strip()[:200])
        for line in (proc.stdout + proc.stderr).decode(errors="replace").splitlines()
        if line.strip()
    ]
    if proc.returncode != 0:
        last = f": {said[-1]}" if said else ""
        return "", f"`{shown}` exited {proc.returncode}{last}"
    version = said[0] if said else "(no version printed)"
    if key is not None:
        cache[key] = version
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(
                cache_path,
                json.dumps(cache, sort_keys=True, allow_nan=False).encode(),
                durable=False,
            )
        except OSError:
            pass  # a cache: the next check asks the program again
    return version, ""


def _key(program: str) -> str | None:
    try:
        real = os.path.realpath(program)
        info = os.stat(real)
    except OSError:
        return None
    return f"{real}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}"


def _cache_path(repo: Path) -> Path:
    return Path(common_git_dir(str(git_dir(repo)))) / HOME / CACHE_NAME


def _read_cache(path: Path) -> dict[str, object]:
    try:
        data = json.loads(read_regular(path, limit=MAX_CACHE_BYTES))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def input_problems(run: RunDef, owned: list[Claim], base_files: frozenset[str]) -> list[Problem]:
    """The inputs of ``run``'s tasks that name nothing: no file in the work
    tree or at the base (``base_files``), and none that a task owns."""
    made: _MadeByRun | None = None  # built at the first input not found

    def made_by_run(path: str) -> bool:
        nonlocal made
        made = made or _MadeByRun(owned)
        return made.makes(path)

    def there(path: str) -> bool:
        return path in base_files or os.path.lexists(os.path.join(run.repo, path))

    globs: dict[str, bool] = {}  # a glob's text: whether it names a file
    problems: list[Problem] = []
    for task in run.tasks:
        for text in task.inputs:
            if text in base_files:
                continue  # a tracked file, named as it is: the usual input
            if canonical_problem(text, is_file=False) is not None:
                continue  # a problem of its own
            try:
                pattern = parse(text)
            except PatternError:
                continue  # a problem of its own
            literal = literal_path(pattern)
            if literal is not None:
                if not there(literal) and not made_by_run(literal):
                    problems.append(_missing(run, task.id, text, "does not exist"))
                continue
            if text not in globs:
                first = first_name(pattern)
                globs[text] = (
                    bool(input_paths(run.repo, [text]))
                    or any(matches(pattern, path) for path in base_files)
                    or any(
                        intersect(pattern, c.pattern)
                        for c in owned
                        if first_name(c.pattern) in (first, None)
                    )
                )
            if not globs[text]:
                problems.append(_missing(run, task.id, text, "matches no file"))
        for listed in bundle_paths(run, task):
            if not there(listed) and not made_by_run(listed):
                problems.append(
                    Problem(
                        "input",
                        f"{run.tasks_path}: task {task.id}'s bundle {task.bundle} lists "
                        f"{visible(listed)!r}, which does not exist in the work tree or at the "
                        "base commit; fix the line or add the file",
                        (task.id,),
                        listed,
                    )
                )
    return problems


class _MadeByRun:
    """Whether a path is one the run's tasks make: an owned path, inside
    one, or a folder that owned paths lie in (a task may read a whole
    folder other tasks fill)."""

    def __init__(self, owned: list[Claim]) -> None:
        self.literal = {p for p in (literal_path(c.pattern) for c in owned) if p is not None}
        self.wild = [c.pattern for c in owned if not c.pattern.is_literal]
        self.folders = {p[:at] for p in self.literal for at in _slashes(p)}

    def makes(self, path: str) -> bool:
        parts = path.split("/")
        if path in self.folders or any(
            "/".join(parts[:n]) in self.literal for n in range(1, len(parts) + 1)
        ):
            return True
        return any(matches(pattern, path) for pattern in self.wild)


def _slashes(path: str) -> list[int]:
    return [at for at, char in enumerate(path) if char == "/"]


def _missing(run: RunDef, task: str, text: str, what: str) -> Problem:
    return Problem(
        "input",
        f"{run.tasks_path}: task {task} reads {visible(text)!r}, which {what} in the work tree "
        "or at the base commit; fix the path, or add the file and commit it",
        (task,),
        text,
    )


def worker_file_problems(
    run: RunDef, workers: dict[str, str], base_files: frozenset[str], changed: list[str]
) -> list[Problem]:
    """The files of ``workers`` (path -> where the definition names it) that
    are not committed: untracked, changed since the commit, or absent from
    the base commit (``base_files``; a file git ignores). A file some task
    declares as an input is task data, taken as the attempt finds it (an
    input's provenance is its blob at launch), and a file a run beside this
    one owns is that run's output: neither is refused here."""
    carried = set(definition_paths(run))  # on the run's branch, with the definition
    carried.update(path for task in run.tasks for path in task.inputs)
    dirty = set(changed)
    unsure = [
        path
        for path in workers
        if path not in carried and (path in dirty or path not in base_files)
    ]
    # A run beside this one writes its outputs into the work tree as it goes:
    # a command that names one (a worker waiting for it) names no worker file.
    theirs = owned_beside(run, unsure)
    problems: list[Problem] = []
    for path, where in workers.items():
        if path in carried or path in theirs:
            continue
        shown, quoted = visible(path), shlex.quote(path)
        if path in dirty:
            state = "has uncommitted changes" if path in base_files else "is untracked"
            add = f"git add {quoted}"
        elif path not in base_files:
            state = "is not in the commit the run starts from (git ignores it?)"
            add = f"git add -f {quoted}"
        else:
            continue
        problems.append(
            Problem(
                "worker-file",
                f"{shown} {state}, and the run's workers depend on it ({where} names it); "
                f"commit it ({add} && git commit): a task's provenance counts the committed "
                "file, and a clone that resumes the run has only that",
                path=path,
            )
        )
    return problems
