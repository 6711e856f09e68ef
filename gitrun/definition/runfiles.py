"""The run's own files: the only files gitrun commits besides validated outputs.

They are the run definition in ``.gitrun/runs/<run>/``: ``packet.toml``,
``tasks.toml``, the ledger (its chunks under ``ledger/``), and the bundle and schema
files the definition names inside that directory. Nothing else is committed: not the repository's
``.gitrun/config.toml`` (it may hold secrets and stays where the user keeps
it), not dot-files or dot-directories, not files the definition does not
name, and never a path git ignores. Each is committed as a regular file: a
symlink there is refused, so its target's content is never committed.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gitrun.definition.load import PACKET_NAME, TASKS_NAME, RunDef
from gitrun.definition.outputs import blob_id, blob_on_disk
from gitrun.definition.schema import JsonSchemaValidator
from gitrun.errors import GitrunError
from gitrun.layout import branch_ref
from gitrun.problem import Problem
from gitrun.store import events, git, ledger
from gitrun.store.jsonlines import file_error, parse_lines
from gitrun.store.tomlfile import write_atomic


def own_paths(run: RunDef) -> list[str]:
    """Repository-relative paths of the run's own files: the definition (whether
    its files exist or not) and the ledger's files (those on disk, or the first
    chunk's name when there are none yet)."""
    chunks = ledger.chunk_names(run.repo / run.dir) or [ledger.chunk_name(1)]
    return definition_paths(run) + [f"{run.dir}/{name}" for name in chunks]


def is_ledger_path(run: RunDef, path: str) -> bool:
    """Whether ``path`` (repository-relative) is one of the run's ledger files,
    including chunks not written yet."""
    prefix = run.dir + "/"
    return path.startswith(prefix) and ledger.is_ledger_name(path[len(prefix) :])


def definition_paths(run: RunDef) -> list[str]:
    paths = [f"{run.dir}/{PACKET_NAME}", f"{run.dir}/{TASKS_NAME}"]
    named = [task.bundle for task in run.tasks if task.bundle]
    named += [
        validator.schema
        for validator in run.packet.validators.values()
        if isinstance(validator, JsonSchemaValidator)
    ]
    inside = sorted({p for p in named if p.startswith(run.dir + "/") and _is_plain(p, run.dir)})
    return paths + inside


def _is_plain(path: str, run_dir: str) -> bool:
    """Below the run directory, with no dot-names (``.private/creds``) and no ``..``."""
    rest = path[len(run_dir) + 1 :].split("/")
    return all(part and not part.startswith(".") for part in rest)


def definition_snapshot(run: RunDef) -> dict[str, bytes]:
    """The run definition's files as they are now (packet, task table, bundles,
    schemas): a driver takes this when it starts and commits it, so a change a
    worker makes to them mid-run is never committed (the audit reports it)."""
    files: dict[str, bytes] = {}
    _refuse_linked_dirs(run)
    for path in definition_paths(run):
        _read_regular(run, path, files)
    return files


def definition_files(
    run: RunDef,
    writer: ledger.LedgerWriter | None = None,
    snapshot: dict[str, bytes] | None = None,
    at_tip: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """The run's own files that exist, by path, read as regular files: the
    definition (``snapshot`` when given, else read now) and the ledger.

    ``writer``, the run's live ledger writer if there is one, holds its records
    back while the ledger is read. ``at_tip``, blob ids by path of the files
    on the run's branch when the caller knows them (its committer made that
    commit), saves reading the branch. Raises GitrunError for a file that is a
    symlink or not a regular file (``gitrun check`` reports the same before launch).
    """
    files = dict(snapshot) if snapshot is not None else definition_snapshot(run)
    if at_tip is None:
        at_tip = _ledger_at_tip(run)
    if writer is None:
        fmt = git.object_format(run.repo)
        for name in ledger.chunk_names(run.repo / run.dir):
            path = f"{run.dir}/{name}"
            _read_regular(run, path, files)
            _refuse_foreign_ledger(run, path, files)
            if path in files:
                _keep_committed(run, path, blob_id(files[path], fmt), at_tip, files)
        return files
    with writer.held_for_commit() as written:
        for name, data in list(written.items()):
            _take_written(run, name, data, writer, at_tip, files)
        for name in ledger.chunk_names(run.repo / run.dir):
            if name not in written:
                _read_unless_committed(run, name, writer, at_tip, files)
    return files


def _take_written(
    run: RunDef,
    name: str,
    data: bytes | bytearray,
    writer: ledger.LedgerWriter,
    at_tip: Mapping[str, str],
    files: dict[str, bytes],
) -> None:
    """A chunk of the live writer goes to the commit from what the writer
    wrote (never from the work tree's copy, which a stash or a clean may
    have taken away or put back older), unless the branch holds it as it is."""
    path = f"{run.dir}/{name}"
    stamp = (len(data), -1)  # a chunk only grows: its length names its content
    known = writer.blob_ids.get(name)
    content = None
    if known is not None and known[0] == stamp:
        sha = known[1]
    else:
        if writer.object_format is None:
            writer.object_format = git.object_format(run.repo)
        content = bytes(data)
        sha = blob_id(content, writer.object_format)
        writer.blob_ids[name] = (stamp, sha)
    if at_tip.get(path) == sha:
        writer.forget_committed(name)
        return
    files[path] = content if content is not None else bytes(data)


def _ledger_at_tip(run: RunDef) -> dict[str, str]:
    """The ledger's files on the run's branch: path -> blob id."""
    tip = git.rev_parse(run.repo, branch_ref(run.id))
    return committed_ledger_files(run.repo, run.dir, tip) if tip else {}


def committed_ledger_files(repo: Path, run_dir: str, tip: str) -> dict[str, str]:
    """The ledger's files at ``tip``: repository-relative path -> blob id."""
    where = [f"{run_dir}/{ledger.CHUNK_DIR}"]
    return {
        path: sha
        for path, (_mode, sha) in git.ls_tree(repo, tip, where).items()
        if ledger.is_ledger_name(path[len(run_dir) + 1 :])
    }


def last_committed_chunk(run: RunDef, tip: str | None) -> int:
    """The highest chunk number the run's branch holds at ``tip`` (0: none)."""
    names = (
        [p[len(run.dir) + 1 :] for p in committed_ledger_files(run.repo, run.dir, tip)]
        if tip
        else []
    )
    return max((ledger.chunk_number(n) for n in names), default=0)


def open_ledger(run: RunDef, tip: str | None) -> ledger.LedgerWriter:
    """A writer of the run's ledger whose chunks never take a name the branch
    holds at ``tip`` (its tip), even when the work tree lost that chunk (a
    ``git stash -u`` holds it, ``git clean`` removed it): a chunk put back
    later would clash with it, and records would read out of their order."""
    return ledger.LedgerWriter(run.repo / run.dir, last_committed_chunk(run, tip))


def read_run_ledger(repo: Path, run_dir: str, tip: str | None) -> list[dict[str, Any]]:
    """Every record of the run's ledger, in order: the copy committed at
    ``tip`` (the run branch's tip), each file extended by what the work
    tree's copy adds (records a live driver has not committed yet).

    The work tree's copy alone is not the truth: a ``git stash -u`` takes it
    away, ``git stash pop`` puts back an older copy, ``git clean`` removes
    it. One ``ls-tree``, and one ``cat-file`` only for the files whose copy
    on disk is not the committed one.
    """
    on_disk = repo / run_dir
    if tip is None:
        return ledger.read_ledger(on_disk)
    committed = {
        path[len(run_dir) + 1 :]: sha
        for path, sha in committed_ledger_files(repo, run_dir, tip).items()
    }
    fmt = git.object_format(repo)
    texts = _present(on_disk, ledger.chunk_names(on_disk))
    stale = [n for n, sha in committed.items() if n not in texts or blob_id(texts[n], fmt) != sha]
    blobs = read_blobs(repo, sorted({committed[n] for n in stale}))
    for name in stale:
        branch = blobs[committed[name]].decode("utf-8", errors="replace")
        local = texts.get(name, b"").decode("utf-8", errors="replace")
        texts[name] = ledger.merge_text(local, branch).encode()
    records: list[dict[str, Any]] = []
    for name in sorted(texts, key=ledger.chunk_number):
        records += parse_lines(texts[name].decode("utf-8", errors="replace"))
    return records


def _read_unless_committed(
    run: RunDef,
    name: str,
    writer: ledger.LedgerWriter,
    at_tip: Mapping[str, str],
    files: dict[str, bytes],
) -> None:
    """Read a ledger file for a commit, unless the branch holds it as it is:
    the commit's tree starts from the branch's, so it keeps that file, and a
    long run's commit reads and hashes only its newest chunks."""
    path = f"{run.dir}/{name}"
    full = run.repo / path
    info = _regular(run, path)
    if info is None:
        return
    seen = (info.st_size, info.st_mtime_ns)
    known = writer.blob_ids.get(name)
    if known is not None and known[0] == seen and at_tip.get(path) == known[1]:
        return
    data = full.read_bytes()
    files[path] = data
    _refuse_foreign_ledger(run, path, files)
    if writer.object_format is None:
        writer.object_format = git.object_format(run.repo)
    sha = blob_id(data, writer.object_format)
    writer.blob_ids[name] = (seen, sha)
    _keep_committed(run, path, sha, at_tip, files)


def _keep_committed(
    run: RunDef, path: str, sha: str, at_tip: Mapping[str, str], files: dict[str, bytes]
) -> None:
    """A ledger file read from the work tree (its blob id ``sha``) where the
    branch holds another copy (the work tree's is older, put back by ``git
    stash pop``, or another writer's): the commit keeps every record of
    both, never fewer than the branch holds. One ``cat-file``, only then."""
    committed = at_tip.get(path)
    if committed is None or committed == sha:
        return
    branch = git.cat_blob(run.repo, committed)
    merged = ledger.merge_text(
        files[path].decode(errors="replace"), branch.decode(errors="replace")
    )
    if merged.encode() == branch:
        del files[path]  # the branch's copy holds every record already
    else:
        files[path] = merged.encode()


def _refuse_foreign_ledger(run: RunDef, path: str, files: dict[str, bytes]) -> None:
    """A ledger file is committed only when it is gitrun's: one name for its
    bytes (not a hard link to, say, an ignored .env) and nothing but ledger
    records. Anything else stops the commit with a sentence."""
    data = files.get(path)
    if data is None:
        return
    linked = os.lstat(run.repo / path).st_nlink > 1
    foreign = linked or not _is_ledger_text(data)
    if foreign:
        del files[path]
        why = (
            "has another name (a hard link)"
            if linked
            else "holds lines that are not ledger records"
        )
        raise GitrunError(
            f"{path} {why}, so it is not gitrun's; gitrun will not commit it — move it out of "
            f"{run.dir}/ and resume"
        )


def _is_ledger_text(data: bytes) -> bool:
    """Every line a ledger record (a JSON object naming a task or an event),
    or the remains of one a crash cut short (it starts like one)."""
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if line.lstrip().startswith(b"{"):
                continue  # cut short by a crash: readers skip it
            return False
        if not isinstance(record, dict):
            return False
        if not events.is_record(record):
            return False
    return True


def _regular(run: RunDef, path: str) -> os.stat_result | None:
    """A run file's stat when it exists; GitrunError when it is not a regular file."""
    try:
        info = os.lstat(run.repo / path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise GitrunError(_not_regular(path, info.st_mode))
    return info


def _read_regular(run: RunDef, path: str, files: dict[str, bytes]) -> None:
    if _regular(run, path) is not None:
        files[path] = (run.repo / path).read_bytes()


def _not_regular(path: str, mode: int) -> str:
    kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
    return (
        f"{path} is {kind}; gitrun commits the run's own files only as regular files — "
        "replace it with the file itself"
    )


def _refuse_linked_dirs(run: RunDef) -> None:
    link = _linked_dir(run.repo, run.dir)
    if link is not None:
        raise GitrunError(
            f"{link} is a symlink; the run directory {run.dir} must be a real directory in the "
            "repository — replace the link with the directory"
        )


def _linked_dir(repo: Path, run_dir: str) -> str | None:
    parts = run_dir.split("/")
    for n in range(1, len(parts) + 1):
        current = "/".join(parts[:n])
        try:
            if stat.S_ISLNK(os.lstat(repo / current).st_mode):
                return current
        except OSError:
            return None
    return None


def run_file_problems(run: RunDef) -> list[Problem]:
    """The run's own files must be committable: regular files, not ignored by git."""
    out: list[Problem] = []
    link = _linked_dir(run.repo, run.dir)
    if link is not None:
        out.append(
            Problem(
                "run-file",
                f"{link} is a symlink; the run directory {run.dir} must be a real directory in "
                "the repository — replace the link with the directory",
                path=link,
            )
        )
        return out
    try:
        paths = own_paths(run)
    except GitrunError as exc:  # the ledger's directory is a link or a file
        return [*out, Problem("run-file", str(exc), path=f"{run.dir}/{ledger.CHUNK_DIR}")]
    for path in paths:
        try:
            info = os.lstat(run.repo / path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            out.append(Problem("run-file", _not_regular(path, info.st_mode), path=path))
    for path, rule in sorted(git.ignored_by(run.repo, paths).items()):
        out.append(
            Problem(
                "run-file",
                f"{path} is ignored by git ({rule}); gitrun commits the run definition on the "
                f"run's branch and never commits an ignored path — change that rule so git "
                f"stops ignoring {run.dir}/",
                path=path,
            )
        )
    return out


def _present(root: Path, names: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each of ``names`` (relative to ``root``) that is on disk;
    a missing one is left out, any other failure is one sentence."""
    found: dict[str, bytes] = {}
    for name in names:
        try:
            found[name] = (root / name).read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise file_error(root / name, exc, "read") from exc
    return found


def merge_committed_ledger(repo: Path, blobs: dict[str, str]) -> None:
    """Merge the ledger files a commit holds (path -> blob id) into those on disk.

    A file on disk that matches its commit is left alone; one missing (a fresh
    clone) is written; one that differs keeps its own lines in their order,
    after the committed lines it lacks, so no record is lost or doubled.
    """
    fmt = git.object_format(repo) if blobs else "sha1"
    local = _present(repo, blobs)
    wanted = {p: sha for p, sha in blobs.items() if p not in local or blob_id(local[p], fmt) != sha}
    contents = read_blobs(repo, sorted(set(wanted.values())))
    for path, sha in wanted.items():
        if path not in local:
            # Byte for byte, so the next commit finds the same blob; the branch
            # keeps it, so a copy lost to a power cut is only restored again.
            write_atomic(repo / path, contents[sha], durable=False)
            continue
        ours = local[path].decode("utf-8", errors="replace")
        merged = ledger.merge_text(ours, contents[sha].decode("utf-8", errors="replace"))
        if merged != ours:
            write_atomic(repo / path, merged.encode())


def read_blobs(repo: Path, shas: list[str]) -> dict[str, bytes]:
    """Blobs by id, read by one ``git cat-file --batch`` (a fresh clone of a long
    run has thousands of chunks); a blob the repository lacks is an error."""
    blobs = git.read_blobs(repo, shas)
    for sha in shas:
        if sha not in blobs:
            raise GitrunError(f"the run's branch lacks the ledger blob {sha}; run `git fsck`")
    return blobs


def refuse_rewritten_definition(run: RunDef, tip: str, take_edits: bool = False) -> None:
    """Refuse to resume a run whose definition on disk differs from the one on
    its branch when the audit saw it change while the run was driven: the
    edit is the user's as a rule, but a worker may have rewritten it (another
    executor command, another task), and resume would run that, so it is
    taken only when asked (``take_edits``: ``gitrun resume --take-edits``).
    Once the file matches the committed one again, or is taken, that is
    recorded (a ``definition`` event) and later edits, made while no driver
    runs, are the lead's own and are taken as they are.
    """
    suspect: dict[str, str] = {}  # path -> when the audit saw it change
    for record in ledger.typed(ledger.current_round(ledger.read_ledger(run.repo / run.dir))):
        if isinstance(record, events.Violation) or (
            isinstance(record, events.DefinitionEvent) and record.state == events.CHANGED
        ):
            suspect[record.path] = record.at or "?"
        elif isinstance(record, events.DefinitionEvent) and record.state in SETTLED:
            suspect.pop(record.path, None)
    watched = [p for p in definition_paths(run) if p in suspect]
    if not watched:
        return
    committed = git.ls_tree(run.repo, tip, watched)
    fmt = git.object_format(run.repo)
    settled: dict[str, str] = {}  # path -> VERIFIED (as committed) or TAKEN (the edit)
    for path in watched:
        now = blob_on_disk(run.repo / path, fmt)
        if now is None or now == committed.get(path, ("", ""))[1]:
            settled[path] = events.VERIFIED
            continue
        if take_edits:
            settled[path] = events.TAKEN
            continue
        raise GitrunError(
            f"{path} was edited while the run was driven (at {suspect[path]}) and differs from "
            f"the one committed on gitrun/{run.id}; if the edit is yours, take it with "
            f"`gitrun resume {run.id} --take-edits`; if not (a worker may have rewritten it), "
            f"compare them (`git diff gitrun/{run.id} -- {path}`) and put the committed one back "
            f"(`git show gitrun/{run.id}:{path} > {path}`)"
        )
    writer = open_ledger(run, tip)
    try:
        for path, state in settled.items():
            writer.write(events.DefinitionEvent(path, state))
    finally:
        writer.close()


SETTLED = (events.VERIFIED, events.TAKEN)  # a definition file no longer suspect
