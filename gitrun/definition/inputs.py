"""The files a task reads: its inputs as the work tree holds them now."""

from __future__ import annotations

import os
from pathlib import Path

from gitrun.definition.load import RunDef, Task
from gitrun.ownership.patterns import PatternError, literal_path, matches, parse
from gitrun.store.regular import read_regular

MAX_BUNDLE_BYTES = 64 << 20


def task_inputs(run: RunDef, task: Task) -> list[str]:
    """What ``{inputs}`` gives for one task: its input files, or for a task
    with a bundle the bundle file, as its pointer says (a bundle is for more
    inputs than one argv, or one environment variable, can carry)."""
    if task.bundle:
        return [task.bundle]
    return input_paths(run.repo, task.inputs)


def input_paths(repo: Path, inputs: list[str]) -> list[str]:
    """The files a task's inputs name, for ``{inputs}`` and ``GITRUN_INPUTS``:
    a plain path as written (escapes removed), a glob as the regular files it
    matches in the work tree now, sorted, without following a symlink."""
    paths: list[str] = []
    for text in inputs:
        try:
            pattern = parse(text)
        except PatternError:
            continue  # `gitrun check` reports it
        literal = literal_path(pattern)
        if literal is not None:
            paths.append(literal)
            continue
        base = repo.joinpath(*pattern.literal_prefix)
        if base.is_symlink():
            continue
        found = []
        for folder, dirs, files in os.walk(base):
            rel = Path(folder).relative_to(repo).as_posix()
            dirs[:] = sorted(d for d in dirs if not (rel == "." and d == ".git"))
            for name in files:
                path = name if rel == "." else f"{rel}/{name}"
                full = Path(folder) / name
                if matches(pattern, path) and full.is_file() and not full.is_symlink():
                    found.append(path)
        paths += sorted(found)
    return list(dict.fromkeys(paths))


def bundle_paths(run: RunDef, task: Task) -> list[str]:
    """The inputs a task's bundle file lists, one path a line ([] without a
    bundle, or when it cannot be read: ``gitrun check`` reports that)."""
    if not task.bundle:
        return []
    try:
        data = read_regular(run.repo / task.bundle, follow=False, limit=MAX_BUNDLE_BYTES)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="surrogateescape").splitlines()
    return [line.strip() for line in lines if line.strip()]
