"""The repository files a run's workers run: part of every task's provenance.

A worker is more than its command line: ``sh worker.sh`` runs a script the
repository holds, ``python tools/w.py --config=conf.toml`` a program and its
configuration, a ``json_schema`` validator reads its schema, a ``command``
validator may run a script of its own. Editing one of them changes what
every task makes, so each is an input of every task's provenance
(:class:`gitrun.definition.provenance.Provenance`): editing one reruns every
task, as make would. And each must be committed before a start (``gitrun
check`` refuses otherwise, :mod:`gitrun.proof.check`), so a fresh clone of
the run has the files its resume runs.

Which elements of a command name such a file: one that names an existing
regular file inside the repository, read as the program reads it, from the
repository root (where the executor and the validators run): the program
itself only where it resolves into the repository (a name found on PATH
elsewhere is an installed program, not the repository's), a script or
configuration path, the value of ``--option=PATH``, and the words of a
shell's or an interpreter's code (``sh -c './worker.sh "$1"'``, the
``shell`` preset's script). Placeholders never name one: their values are
task data.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable
from pathlib import Path

from gitrun.definition.load import RunDef
from gitrun.definition.schema import CommandValidator, JsonSchemaValidator
from gitrun.ownership.patterns import PatternError, first_name, matches, parse
from gitrun.processes.proc import clean_env
from gitrun.workers.executor import command_template, has_placeholder
from gitrun.workers.interpreters import code_slots

PROGRAM = "the program to run"  # the reason interpreters.code_slots gives a program


def worker_files(run: RunDef) -> dict[str, str]:
    """The repository files ``run``'s workers and validators run or read,
    by repository-relative path, each with where the definition names it
    (``[executor] command``, ``[validators.shape] schema``)."""
    found: dict[str, str] = {}
    executor = run.packet.executor
    template = command_template(executor) if executor.kind != "external" else None
    if template:
        where = "[executor] shell" if executor.command is None and executor.shell else None
        path = executor.env.get("PATH", os.environ.get("PATH", os.defpath))
        for name in named_files(run.repo, template, path):
            found.setdefault(name, where or "[executor] command")
    for key, validator in sorted(run.packet.validators.items()):
        if isinstance(validator, JsonSchemaValidator):
            for name in _as_file(run.repo, validator.schema):
                found.setdefault(name, f"[validators.{key}] schema")
        elif isinstance(validator, CommandValidator):
            path = clean_env().get("PATH", os.defpath)
            for name in named_files(run.repo, list(validator.command), path):
                found.setdefault(name, f"[validators.{key}] command")
    owned = _owned(run, found)
    return {path: where for path, where in sorted(found.items()) if path not in owned}


def _owned(run: RunDef, paths: Iterable[str]) -> set[str]:
    """Those of ``paths`` a task of ``run`` owns: what the run writes (a
    one-task run's command may name its output) is no file its workers run,
    as a task's own outputs are no inputs of it."""
    wanted = set(paths)
    if not wanted:
        return set()
    firsts = {path.partition("/")[0] for path in wanted}
    owned: set[str] = set()
    for task in run.tasks:
        for text in run.owns_of(task):
            try:
                pattern = parse(text)
            except PatternError:
                continue  # `gitrun check` reports it
            if first_name(pattern) in (*firsts, None):
                owned.update(path for path in wanted if matches(pattern, path))
    return owned


def named_files(repo: Path, argv: list[str], path: str) -> list[str]:
    """The repository files the command line ``argv`` names, run from
    ``repo`` with ``path`` as its PATH, in order (a symlink's target inside
    the repository too)."""
    slots = code_slots(argv)
    found: list[str] = []
    for index, arg in enumerate(argv):
        if has_placeholder(arg):
            continue
        why = slots.get(index)
        if why == PROGRAM:
            program, _ = resolve(repo, arg, path)
            found += _as_file(repo, program) if program else []
            continue
        named = _as_file(repo, arg)
        if not named and arg.startswith("-") and "=" in arg:
            named = _as_file(repo, arg.partition("=")[2])  # --config=conf.toml
        if not named and why is not None:
            named = [n for word in _words(arg) for n in _as_file(repo, word)]  # sh -c CODE
        found += named
    return list(dict.fromkeys(found))


def resolve(repo: Path, name: str, path: str) -> tuple[str | None, str]:
    """Where the program ``name`` is as a command started in ``repo`` with
    ``path`` finds it, or None and why not (a clause: "is not found on PATH")."""
    if "/" in name:
        full = os.path.join(repo, name)
        if not os.path.exists(full):
            return None, "does not exist"
        if not os.path.isfile(full):
            return None, "is not a file"
        if not os.access(full, os.X_OK):
            return None, "is not executable (chmod +x it)"
        return full, ""
    dirs = [d if os.path.isabs(d) else os.path.join(repo, d) for d in path.split(os.pathsep) if d]
    found = shutil.which(name, path=os.pathsep.join(dirs))
    return (found, "") if found else (None, "is not found on PATH")


def _words(code: str) -> list[str]:
    """The words of a shell command line (``;``, ``|``, ``>`` and the like
    apart); none when it does not parse as one."""
    lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return []


def _as_file(repo: Path, text: str) -> list[str]:
    """``text`` as the repository file it names from the root: its
    repository-relative path (and, for a symlink, its target's inside the
    repository), or nothing when it names no regular file there."""
    if not text or "\0" in text:
        return []
    full = os.path.normpath(os.path.join(repo, text))
    root = os.path.normpath(repo)
    rel = os.path.relpath(full, root)
    if not _inside(rel):
        return []
    try:
        if not os.path.isfile(full):
            return []
    except (OSError, ValueError):
        return []
    named = [Path(rel).as_posix()]
    target = os.path.relpath(os.path.realpath(full), os.path.realpath(root))
    if target != rel and _inside(target):
        named.append(Path(target).as_posix())
    return named


def _inside(rel: str) -> bool:
    """Whether a relative path stays in the repository, out of ``.git``."""
    first = rel.split(os.sep, 1)[0]
    return first not in ("..", ".", ".git")
