"""What a task's outputs were made from, and which tasks are up to date.

Every valid attempt's ledger record keeps its provenance: ``made_from``, a
digest of the task's definition (its entry in the task table, the packet's
rules, the executor, the model, the validators of its outputs) and a digest
of its inputs (their paths and blob ids as the worker found them at launch);
and ``made``, the blob id of each output it wrote.

A task is *up to date* at a base commit when its outputs there are exactly
those an earlier valid attempt made from the provenance the task has now: it
is not dispatched again. The earlier records come from every ledger the base
commit holds (a landed run's ledger lands with its outputs) and from the
``gitrun/*`` branches the base commit contains. A task that reads an output
of an earlier stage's task that will run is not up to date either. A record
that is damaged, of a newer format, or names other blobs simply matches
nothing: the task runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.definition.inputs import bundle_paths, input_paths
from gitrun.definition.load import RUNS_DIR, RunDef, Task
from gitrun.definition.outputs import blob_on_disk
from gitrun.layout import BRANCH_PREFIX
from gitrun.ownership.patterns import PatternError, matches, parse
from gitrun.store import git, ledger
from gitrun.store.jsonlines import parse_lines

# Part of every definition digest: a change of what goes into one makes every
# earlier digest different, so nothing made under the old rule is up to date.
FORMAT = 1
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class MadeFrom:
    """A task's provenance: the digest of its definition and of its inputs."""

    definition: str
    inputs: str

    def to_json(self) -> dict[str, str]:
        return {"definition": self.definition, "inputs": self.inputs}

    @classmethod
    def from_json(cls, value: object) -> MadeFrom | None:
        """The provenance a record names, or None when it is damaged."""
        if not isinstance(value, dict):
            return None
        definition, inputs = value.get("definition"), value.get("inputs")
        if _is_digest(definition) and _is_digest(inputs):
            assert isinstance(definition, str) and isinstance(inputs, str)
            return cls(definition, inputs)
        return None


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


class Provenance:
    """Digests of a run's tasks; the packet's part is made once per stage."""

    def __init__(self, run: RunDef, object_format: str = "sha1") -> None:
        self.run = run
        self.object_format = object_format
        self._stage_parts: dict[str, bytes] = {}

    def of(self, task: Task) -> MadeFrom:
        """``task``'s provenance now: its definition, and its inputs as on disk."""
        return MadeFrom(self.definition(task), self.inputs(task))

    def definition(self, task: Task) -> str:
        stage = self.run.stage_of(task)
        part = self._stage_parts.get(stage)
        if part is None:
            part = self._stage_parts[stage] = _canonical(self._packet_part(stage))
        outputs = self.run.outputs_of(task)
        entry = [
            task.id,
            stage,
            [
                [o.path, self.run.validators_of(o), self.run.edits_in_place(task, o)]
                for o in outputs
            ],
            task.inputs,
            task.owns,
            task.note,
            task.bundle,
        ]
        return hashlib.sha256(part + b"\n" + _canonical(entry)).hexdigest()

    def _packet_part(self, stage: str) -> dict[str, Any]:
        packet = self.run.packet
        executor = packet.executor
        return {
            "format": FORMAT,
            "rules": dataclasses.asdict(packet.rules),
            "executor": {
                "kind": executor.kind,
                "preset": executor.preset,
                "command": executor.command,
                "shell": executor.shell,
                "args": executor.args,
                "env": executor.env,
                "bash": executor.bash,
            },
            "model": packet.model_for(stage),
            "validators": {
                name: dataclasses.asdict(validator)
                for name, validator in sorted(packet.validators.items())
            },
        }

    def inputs(self, task: Task) -> str:
        """The digest of what the task reads: each input file's path and blob
        id, but not its own outputs (a task that edits a file it also reads
        would otherwise never be up to date: its own edit changed its input)."""
        digest = hashlib.sha256()
        paths = input_paths(self.run.repo, task.inputs)
        if task.bundle:
            paths += [task.bundle, *bundle_paths(self.run, task)]
        own = set(self.run.output_paths(task))
        for path, blob in _files_at(self.run.repo, paths, self.object_format):
            if path not in own:
                digest.update(f"{path}\0{blob}\n".encode(errors="surrogateescape"))
        return digest.hexdigest()


def _canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode(errors="surrogateescape")


def _files_at(repo: Path, paths: Iterable[str], fmt: str) -> Iterable[tuple[str, str]]:
    """Each input's identity now, as the worker will read it: a file's blob
    id; a directory's files', sorted; ``-`` where nothing is. A symlink is
    followed, as a worker's read follows it, and its target is part of the
    identity (``-> target``), so pointing it elsewhere or changing what it
    names both count; a directory is walked through its links too, each
    directory once."""
    for path in paths:
        full = repo / path
        if os.path.isdir(full):
            found = []
            seen: set[tuple[int, int]] = set()
            for folder, dirs, files in os.walk(full, followlinks=True):
                info = os.stat(folder)
                if (info.st_dev, info.st_ino) in seen:
                    dirs.clear()  # a link back up the tree: walked already
                    continue
                seen.add((info.st_dev, info.st_ino))
                dirs.sort()
                rel = Path(folder).relative_to(repo).as_posix()
                found += [f"{rel}/{name}" for name in files]
            for name in sorted(found):
                yield name, _identity(repo / name, fmt)
        else:
            yield path, _identity(full, fmt)


def _identity(full: Path, fmt: str) -> str:
    """A file's blob id, through a symlink with its target named; ``-`` for none."""
    try:
        link = os.readlink(full)
    except OSError:
        link = None
    blob = blob_on_disk(full, fmt, follow=True) or "-"  # follows a link, as the worker will
    return blob if link is None else f"{blob} -> {link}"


def made_of(record: Mapping[str, Any]) -> dict[str, str] | None:
    """The outputs a valid attempt record says it made (path -> blob id), or
    None when it names none or is damaged."""
    made = record.get("made")
    if not isinstance(made, dict) or not made:
        return None
    if all(isinstance(k, str) and isinstance(v, str) for k, v in made.items()):
        return made
    return None


Earlier = dict[MadeFrom, list[dict[str, str]]]


def earlier_outputs(repo: Path, base: str) -> Earlier:
    """What earlier valid attempts made, by provenance, as the ledgers on
    ``base`` and on the ``gitrun/*`` branches it contains record it."""
    commits = [base]
    merged = git.git(
        repo,
        "for-each-ref",
        f"--merged={base}",
        "--format=%(objectname)",
        f"refs/heads/{BRANCH_PREFIX}",
    )
    commits += [c for c in merged.decode().split() if c != base]
    shas: set[str] = set()
    for commit in commits:
        for path, (_mode, sha) in git.ls_tree(repo, commit, [RUNS_DIR]).items():
            _id, _, name = path[len(RUNS_DIR) + 1 :].partition("/")
            if ledger.is_ledger_name(name):
                shas.add(sha)
    earlier: Earlier = {}
    for data in git.read_blobs(repo, sorted(shas)).values():
        for record in parse_lines(data.decode("utf-8", errors="replace")):
            if record.get("outcome") != ledger.VALID or not _readable(record):
                continue
            made_from = MadeFrom.from_json(record.get("made_from"))
            made = made_of(record)
            if made_from is not None and made is not None:
                earlier.setdefault(made_from, []).append(made)
    return earlier


def _readable(record: Mapping[str, Any]) -> bool:
    """A record of a format this version reads (a newer one may mean more)."""
    version = record.get("v", ledger.LEDGER_FORMAT)
    return type(version) is int and version <= ledger.LEDGER_FORMAT


def up_to_date(run: RunDef, base: str | None, object_format: str = "sha1") -> list[str]:
    """The tasks of ``run`` that are up to date at ``base``, stage by stage."""
    if base is None:
        return []
    earlier = earlier_outputs(run.repo, base)
    if not earlier:
        return []
    paths_of = {task.id: run.output_paths(task) for task in run.tasks}
    tops = sorted({path.partition("/")[0] for paths in paths_of.values() for path in paths})
    at_base = git.ls_tree(run.repo, base, tops if len(tops) <= 256 else None)
    provenance = Provenance(run, object_format)
    fresh: list[str] = []
    redone: set[str] = set()  # outputs of earlier stages' tasks that will run
    for stage in run.stage_names:
        will_run: set[str] = set()
        for task in run.tasks:
            if run.stage_of(task) != stage:
                continue
            paths = paths_of[task.id]
            have = {p: at_base[p][1] for p in paths if p in at_base}
            if (
                len(have) == len(paths)
                and have in earlier.get(provenance.of(task), ())
                and not reads_any(run, task, redone)
            ):
                fresh.append(task.id)
                continue
            will_run.update(paths)
        redone |= will_run
    return fresh


def reads_any(run: RunDef, task: Task, paths: Iterable[str]) -> bool:
    """Whether ``task`` may read one of ``paths`` (outputs that will be made
    again): an input naming it, a directory above it, a glob matching it
    (whether or not the file exists yet), or a bundle listing it."""
    wanted = set(paths)
    if not wanted:
        return False
    patterns = []
    for text in task.inputs:
        try:
            patterns.append(parse(text))
        except PatternError:
            continue  # `gitrun check` reports it
    listed = set(bundle_paths(run, task)) if task.bundle else set()
    return any(
        path in listed or any(matches(pattern, path) for pattern in patterns) for path in wanted
    )
