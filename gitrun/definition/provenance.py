"""What a task's outputs were made from, and which tasks are up to date.

Every valid attempt's ledger record keeps its provenance: ``made_from``, a
digest of the task's definition (its entry in the task table, the packet's
rules, the executor, the model, the validators of its outputs) and a digest
of its inputs (their paths and blob ids as the worker found them at launch,
and those of the repository files the worker runs: its scripts, its
validators' schemas); and ``made``, the blob id of each output it wrote.

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

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrun.definition.inputs import bundle_paths, input_paths
from gitrun.definition.load import RUNS_DIR, RunDef, Task
from gitrun.definition.outputs import blob_on_disk
from gitrun.layout import BRANCH_PREFIX
from gitrun.ownership.patterns import PatternError, matches, parse
from gitrun.store import git, ledger
from gitrun.store.events import FORMAT as LEDGER_FORMAT
from gitrun.store.events import AttemptRecord, Outcome, read
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
    """Digests of a run's tasks; the packet's part is made once per stage,
    and the worker's files are hashed once, at the first task's.

    ``worker_files``: the repository files the run's workers run (its
    command's scripts and configuration, its validators' schemas and
    command files: :func:`gitrun.workers.workerfiles.worker_files`), inputs
    of every task, so editing one reruns every task."""

    def __init__(self, run: RunDef, worker_files: Iterable[str]) -> None:
        self.run = run
        self.worker_files = sorted(set(worker_files))
        self._worker: list[tuple[str, str]] | None = None  # (path, identity), at the first use
        self._stage_parts: dict[str, bytes] = {}
        self._indexed: dict[str, str] | None = None  # read at the first use

    @property
    def indexed(self) -> dict[str, str]:
        """The blob ids of the files the index held when first asked (a
        later change costs a git process where it applies, never a wrong id)."""
        if self._indexed is None:
            self._indexed = git.index_blob_ids(self.run.repo)
        return self._indexed

    def of(self, task: Task) -> MadeFrom:
        """``task``'s provenance now: its definition, and its inputs as on disk."""
        return self.of_all([task])[0]

    def of_all(self, tasks: Sequence[Task]) -> list[MadeFrom]:
        """The provenance of each of ``tasks`` now; the input files git
        must hash are hashed by one git process for them all."""
        read = [self._files_read(task) for task in tasks]
        wanted = {path for paths in read for path in paths}
        if self._worker is None:
            wanted.update(self.worker_files)  # the same git process hashes them
        identities = _identities(self.run.repo, wanted, self.indexed)
        if self._worker is None:
            self._worker = [(path, identities[path]) for path in self.worker_files]
        return [
            MadeFrom(self.definition(task), _inputs_digest(paths, identities, self._worker))
            for task, paths in zip(tasks, read, strict=True)
        ]

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
            "rules": packet.rules.model_dump(),
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
                name: validator.model_dump()
                for name, validator in sorted(packet.validators.items())
            },
        }

    def _files_read(self, task: Task) -> list[str]:
        """The files the task reads, in order, but not its own outputs (a
        task that edits a file it also reads would otherwise never be up to
        date: its own edit changed its input)."""
        paths = input_paths(self.run.repo, task.inputs)
        if task.bundle:
            paths += [task.bundle, *bundle_paths(self.run, task)]
        own = set(self.run.output_paths(task))
        return [path for path in _files_at(self.run.repo, paths) if path not in own]


def _inputs_digest(
    paths: Iterable[str], identities: Mapping[str, str], worker: Iterable[tuple[str, str]]
) -> str:
    """The digest of what a task reads: each input file's path and identity,
    then each of the worker's files (none adds nothing: a run whose worker
    is no repository file keeps the digests it had)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path}\0{identities[path]}\n".encode(errors="surrogateescape"))
    for path, identity in worker:
        digest.update(f"worker\0{path}\0{identity}\n".encode(errors="surrogateescape"))
    return digest.hexdigest()


def _canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode(errors="surrogateescape")


def _files_at(repo: Path, paths: Iterable[str]) -> Iterable[str]:
    """The files the inputs ``paths`` name: a file (or what is not there)
    itself, a directory's files, sorted. A directory is walked through its
    links, as a worker's read follows them, each directory once."""
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
            yield from sorted(found)
        else:
            yield path


def _identities(repo: Path, paths: Iterable[str], indexed: Mapping[str, str]) -> dict[str, str]:
    """Each input file's identity now, as the worker will read it: the blob
    id git would store for it (its clean filter and end-of-line conversion
    applied, so every clone of one commit gives one id), ``-`` where no
    regular file is. A symlink is followed, as a worker's read follows it,
    and its target is part of the identity (``-> target``), so pointing it
    elsewhere or changing what it names both count.

    A file whose bytes are the blob the index holds for it is that blob, as
    git status takes it (git stores a blob it checked out as it is); only
    the others are hashed by git, all in one process: a launch of a task
    whose inputs are as checked out starts no git process at all.
    """
    names = sorted(paths)
    fmt = git.object_format(repo)
    raw = {name: blob_on_disk(repo / name, fmt, follow=True) for name in names}
    asked = [n for n in names if raw[n] is not None and raw[n] != indexed.get(n)]
    blobs = {n: b for n, b in raw.items() if b is not None and b == indexed.get(n)}
    blobs.update(git.stored_blob_ids(repo, asked))
    identities: dict[str, str] = {}
    for name in names:
        try:
            link: str | None = os.readlink(repo / name)
        except OSError:
            link = None
        blob = blobs.get(name, "-")
        identities[name] = blob if link is None else f"{blob} -> {link}"
    return identities


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
        for line in parse_lines(data.decode("utf-8", errors="replace")):
            record = read(line)
            if not isinstance(record, AttemptRecord) or record.outcome != Outcome.VALID:
                continue
            if not _readable(line):
                continue
            made_from = MadeFrom.from_json(record.made_from)
            made = record.made or None
            if made_from is not None and made is not None:
                earlier.setdefault(made_from, []).append(made)
    return earlier


def _readable(record: Mapping[str, Any]) -> bool:
    """A record of a format this version reads (a newer one may mean more)."""
    version = record.get("v", LEDGER_FORMAT)
    return type(version) is int and version <= LEDGER_FORMAT


def up_to_date(run: RunDef, base: str | None, worker_files: Iterable[str]) -> list[str]:
    """The tasks of ``run`` that are up to date at ``base``, stage by stage
    (``worker_files``: as :class:`Provenance` takes them)."""
    if base is None:
        return []
    earlier = earlier_outputs(run.repo, base)
    if not earlier:
        return []
    paths_of = {task.id: run.output_paths(task) for task in run.tasks}
    tops = sorted({path.partition("/")[0] for paths in paths_of.values() for path in paths})
    at_base = git.ls_tree(run.repo, base, tops if len(tops) <= 256 else None)
    # Only a task whose outputs are all at the base can be up to date.
    whole = [task for task in run.tasks if all(p in at_base for p in paths_of[task.id])]
    made_from = dict(
        zip((t.id for t in whole), Provenance(run, worker_files).of_all(whole), strict=True)
    )
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
                task.id in made_from
                and have in earlier.get(made_from[task.id], ())
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
