"""Confinement of one attempt: the repository read-only but for the task's own paths.

``[executor] isolation = "sandbox"`` starts each attempt of a command-mode run
under bubblewrap (``bwrap``, from the distribution's packages), in a mount
namespace where:

- the whole machine is as it is (network, HOME, the agent CLIs' own config),
  except the repository and its git directory, which are read-only;
- a directory the task owns whole (``work/t1/``, ``work/t1/**``) or the
  nearest literal directory of a glob it owns (``out/`` of ``out/*.json``) is
  writable as it is: writes there outside the task's patterns are judged
  after, by the stray-write audit, as without confinement;
- the directory of a literal output (``out/`` of ``out/t1.json``), shared
  with other tasks' outputs as a rule, is a staging directory of the attempt:
  everything the real one holds is there as a link to a read-only view (so a
  worker reads its neighbours' files and cannot change them), and new files
  land in the staging directory. Each other task's literal owned name there
  is a wall: a read-only mount (of an empty file or directory, or of the real
  one when it is an input of the attempt), so that writing it fails with
  EROFS and renaming over it or removing it with EBUSY, inside the worker.
  A neighbour that owns files by a glob cannot be walled name by name: what
  the worker writes there stays in the staging directory. When the attempt
  ends, the files the task owns move into the work tree and nothing else
  does: a write that got past the walls counts nowhere, and gitrun names it
  (bubblewrap makes each mount in a time that grows with the mounts before
  it, so an attempt walls at most :data:`WALLS` names);
- ``/tmp`` (and ``TMPDIR``, which names it by its own path) is a private
  directory of the attempt, removed after it: the host's ``/tmp`` is not
  seen, and nothing written there reaches it (the repository and the paths
  above stay where they are, even when they lie under ``/tmp``);
- the attempt has a PID namespace of its own: when its worker ends, so does
  every process it started, whatever it did to its environment or session;
- the run's logs directory is writable (the worker's ``GITRUN_USAGE`` file).

A write anywhere else fails with the file system's own error (read-only
file system), so the worker learns it at once.

What ``finish`` needs is written in the attempt's folder as it starts
(``state.json``), so that a driver killed while the attempt ran leaves it to
the next one: ``left_by`` reads it back, and a resume brings the attempt's own
files into the work tree as if its driver had lived (a worker that wrote its
output, orphaned, is done, not dispatched again).

``"none"`` runs workers as they are, with the audit; ``"auto"`` (the
default) is ``sandbox`` where bubblewrap works (but for the claude and
codex presets, which keep their own sandboxes), and ``none`` otherwise, said
once by ``check`` and ``start``.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import functools
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gitrun.definition.load import RunDef
from gitrun.definition.schema import Task
from gitrun.ownership.patterns import Pattern, PatternError, literal_path, matches, parse
from gitrun.processes.proc import clean_env
from gitrun.workers.executor import command_template
from gitrun.workers.presets import find_preset
from gitrun.workers.scratch import KIND as SCRATCH
from gitrun.workers.scratch import Scratch

BWRAP = "bwrap"
# The machine as it is, in a PID namespace of the attempt's own (with its own
# /proc): when the worker's main process ends, bubblewrap's init (pid 1 of
# the namespace, in the worker's process group) ends, and the kernel kills
# everything left in the namespace, whatever it did to its environment,
# session or group. Not --die-with-parent: bubblewrap applies it to its
# launcher too, which would end an attempt with a killed driver, and a
# resume adopts such an orphan's work (left_by): the group kill of a dead
# driver's attempt (gitrun.processes.reaper) ends its namespace as well.
NAMESPACES = ("--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc")
_WILD = re.compile(r"[*?\[\\]")  # a pattern that is not a literal path
INSTALL = "apt-get install bubblewrap (or your distribution's bubblewrap package)"
PROBE_TIMEOUT = 10.0
# What to choose where bubblewrap cannot confine.
FALLBACK = (
    '; or set [executor] isolation = "scratch" (a scratch directory per attempt, no '
    'namespaces) or "none" to run unconfined'
)
STATE = "state.json"  # in an attempt's folder: what finishing it needs
STATE_DRAFT = "state.json.new"
Signature = tuple[int, int, int]  # a file's inode, size and mtime (ns)
# The most neighbours' names one attempt walls off. Each is a mount, and
# bubblewrap reads every mount made before it for each, so the cost grows
# with the square: measured on 2 busy cores, a start took ~7 ms with none,
# ~15 ms with 32, ~55 ms with 128, ~1.7 s with 1,000; bubblewrap refuses
# more than ~3,000 (its 9,000 arguments). Concurrent starts wait on one
# another for the mount table: 160 tasks of 0.2 s at concurrency 16, each
# with 159 neighbours, took 3.6 s with no walls, 9 s with 32 and 23 s with
# 128 (bench/dispatch.py --case width). They are the nearest to the task's
# own name in sorted order; the rest are left to the staging directory
# (counted nowhere).
WALLS = 32


class Unconfinable(Exception):
    """A task whose owned paths cannot be made writable alone; the message says why."""


@dataclass(frozen=True)
class Plan:
    """Which directories of the repository an attempt of one task may write
    (relative to the repository root, "" for the root itself)."""

    writable: tuple[str, ...]  # bound writable as they are
    staged: tuple[str, ...]  # replaced by a staging directory of the attempt


def plan_of(run: RunDef, task: Task) -> Plan:
    """The directories ``task``'s attempts may write. Raises
    :class:`Unconfinable` for a glob with no literal directory (``*.md``):
    making it writable would make the root writable."""
    outputs = set(run.output_paths(task))
    writable: set[str] = set()
    staged: set[str] = set()
    for text in run.owns_of(task):
        try:
            pattern = parse(text)
        except PatternError as exc:  # check refuses these before a launch
            raise Unconfinable(f"task {task.id} owns {text!r}: {exc.reason}") from None
        path = literal_path(pattern)
        if path is not None:
            if path in outputs or os.path.isfile(run.repo / path):
                staged.add(path.rpartition("/")[0])
            else:  # a directory it owns whole, or will make
                writable.add(path)
            continue
        prefix = "/".join(pattern.literal_prefix)  # the names before its first wildcard
        if not prefix:
            raise Unconfinable(_rootless(task.id, text))
        writable.add(prefix)
    # A directory inside one that is writable as it is needs nothing more.
    writable = {d for d in writable if not any(_inside(d, w) for w in writable if w != d)}
    staged = {d for d in staged if not any(_inside(d, w) for w in writable)}
    return Plan(tuple(sorted(writable, key=_depth)), tuple(sorted(staged, key=_depth)))


def _inside(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


def _depth(path: str) -> tuple[int, str]:
    return (path.count("/") + 1 if path else 0, path)


@dataclass
class Claim:
    """Who owns a name in a directory, by a literal path at or beneath it."""

    owners: set[str]
    deeper: bool = False  # some literal path lies beneath it: a directory


Claims = dict[str, dict[str, Claim]]  # directory -> name -> claim


def claims_of(run: RunDef) -> Claims:
    """Every task's literal owned paths, by directory and name (asked once
    a run, for the walls of every attempt's staging directories)."""
    found: Claims = {}
    for task in run.tasks:
        for text in run.owns_of(task):
            try:
                path = literal_path(parse(text))
            except PatternError:  # check refuses these before a launch
                continue
            if path is None:
                continue
            parts = path.split("/")
            for depth, name in enumerate(parts):
                directory = "/".join(parts[:depth])
                claim = found.setdefault(directory, {}).setdefault(name, Claim(set()))
                claim.owners.add(task.id)
                claim.deeper = claim.deeper or depth < len(parts) - 1
    return found


@dataclass
class Confined:
    """One attempt's confinement: the command that starts it, and what
    comes back into the work tree when it ends."""

    repo: Path
    plan: Plan
    folder: Path  # the attempt's own folder (staging directories, TMPDIR)
    owns: tuple[str, ...]  # the task's owned patterns
    own: tuple[str, ...]  # its outputs and other literal owned paths
    inputs: tuple[str, ...]  # the files it reads, as its attempt is told them
    read_only: tuple[Path, ...]  # the git directory, when outside the repository
    writable_extra: tuple[Path, ...]  # the run's logs directory
    task: str = ""  # the task's id, and every task's literal owned names (walls)
    claims: Claims = field(default_factory=dict)
    unmoved: list[str] = field(default_factory=list)  # own files that could not come back
    # Directories removed or replaced in the work tree while it ran (git stash -u,
    # git clean): their binds went with them, so the worker could not write there.
    displaced: list[str] = field(default_factory=list)
    unbound: list[str] = field(default_factory=list)  # own directories behind a link: read-only
    _dirs: dict[str, tuple[int, int]] = field(default_factory=dict)
    _links: dict[str, set[str]] = field(default_factory=dict)
    _walls: dict[str, set[str]] = field(default_factory=dict)  # per staging directory
    # Per staging directory, the own files copied in: name -> (the copy's
    # signature after the copy, the work tree file's as it was copied).
    _copies: dict[str, dict[str, tuple[Signature, Signature]]] = field(default_factory=dict)

    def prefix(self) -> list[str]:
        """The ``bwrap`` arguments that start a command confined (the command follows)."""
        repo = str(self.repo)
        view = self.folder / "view"
        tmp = self.folder / "tmp"
        tmp.mkdir(parents=True)
        # (writable, host source, where the attempt sees it), made outermost first.
        binds = [(False, self.repo, self.repo)]
        binds += [(False, path, path) for path in self.read_only]
        for directory in self.plan.writable:
            (self.repo / directory).mkdir(parents=True, exist_ok=True)
            binds.append((True, self.repo / directory, self.repo / directory))
        walls = WALLS
        for number, directory in enumerate(self.plan.staged):
            (self.repo / directory).mkdir(parents=True, exist_ok=True)
            stage = self.folder / f"stage{number}"
            self._stage(stage, directory, view)
            binds.append((True, stage, self.repo / directory))
            for name, source in self._wall(stage, directory, walls):
                binds.append((False, source, self.repo / directory / name))
            walls -= len(self._walls[stage.name])
        if any(self._links.values()):  # what the links of the staging directories show
            view.mkdir()
            binds.append((False, self.repo, view))
        if "" in self.plan.staged:  # the root staged: its git directory stays itself
            binds.append((False, self.repo / ".git", self.repo / ".git"))
        for path in self.writable_extra:
            path.mkdir(parents=True, exist_ok=True)
            binds.append((True, path, path))
        binds.append((True, tmp, tmp))
        binds.append((True, tmp, Path("/tmp")))  # its /tmp is its own, too
        for directory in (*self.plan.writable, *self.plan.staged):
            self._dirs[directory] = _identity(self.repo / directory)
        args = [BWRAP, *NAMESPACES]
        for writable, source, target in sorted(binds, key=lambda b: len(b[2].parts)):
            if writable and target.is_relative_to(self.repo) and _linked(self.repo, target):
                # A link on the way would bind where it points (inside the
                # repository: its git directory, say): the place stays read-only.
                self.unbound.append(str(target.relative_to(self.repo)))
                continue
            args += ["--bind" if writable else "--ro-bind", str(source), str(target)]
        args += ["--setenv", "TMPDIR", str(tmp), "--chdir", repo, "--"]
        self._save()
        return args

    def _save(self) -> None:
        """Write what :meth:`finish` needs into the attempt's folder (read-only
        to the attempt: it lies in the git directory), for a later driver."""
        state = {
            "writable": self.plan.writable,
            "staged": self.plan.staged,
            "owns": self.owns,
            "dirs": self._dirs,
            "links": {stage: sorted(names) for stage, names in self._links.items()},
            "walls": {stage: sorted(names) for stage, names in self._walls.items()},
            "copies": self._copies,
        }
        draft = self.folder / STATE_DRAFT
        draft.write_text(json.dumps(state, allow_nan=False))
        os.replace(draft, self.folder / STATE)

    def _stage(self, stage: Path, directory: str, view: Path) -> None:
        """Fill ``stage`` as the attempt sees ``directory``: its own files
        already there (copies: the worker may edit them), its inputs there
        (links into the read-only view), and an empty directory where
        another bind goes. Nothing else of the real directory is shown, so
        that a directory of 100,000 outputs costs an attempt nothing."""
        stage.mkdir()
        mounts = self._mounts_in(directory)
        links: set[str] = set()
        copies: dict[str, tuple[Signature, Signature]] = {}
        for name in mounts:
            os.mkdir(stage / name)  # where a deeper bind goes
        for path in self.own:
            mine = _child(path, directory)
            if mine is None or "/" in path[len(directory) + 1 if directory else 0 :]:
                continue  # not directly in this directory
            name = mine
            real = self.repo / path
            if real.is_file() and not real.is_symlink() and name not in mounts:
                shutil.copy2(real, stage / name)
                copies[name] = (_signature(stage / name), _signature(real))
        for path in self.inputs:
            read = _child(path, directory)
            if read is None or read in mounts or read in copies or read in links:
                continue
            name = read
            if os.path.lexists(self.repo / directory / name):
                os.symlink(view / directory / name, stage / name)
                links.add(name)
        self._links[stage.name] = links
        self._copies[stage.name] = copies

    def _wall(self, stage: Path, directory: str, most: int) -> list[tuple[str, Path]]:
        """Make a mount point in ``stage`` for each other task's name in
        ``directory`` (up to ``most``, the nearest to its own); return each
        name with what is mounted there read-only: the real file or
        directory when the attempt reads it (an input), else an empty one,
        so that a neighbour's content is read only where it is declared."""
        claims = self.claims.get(directory, {})
        taken = self._mounts_in(directory) | set(self._copies[stage.name])
        others = sorted(
            name
            for name, claim in claims.items()
            if claim.owners - {self.task} and name not in taken
        )
        # The nearest to its own name in sorted order, where a worker's slip
        # most likely lands (the next item's output, the one before).
        mine = min((n for path in self.own if (n := _child(path, directory))), default="")
        most = min(max(most, 0), len(others))
        start = min(max(0, bisect.bisect_left(others, mine) - most // 2), len(others) - most)
        names = others[start : start + most]
        links = self._links[stage.name]
        for name in links.intersection(names):  # an input: the wall shows the real one
            os.unlink(stage / name)
            links.discard(name)
        inputs = {_child(path, directory) for path in self.inputs}
        empty_file, empty_dir = self.folder / "wall", self.folder / "wall.d"
        walls: list[tuple[str, Path]] = []
        for name in names:
            real = self.repo / directory / name
            try:
                mode = os.lstat(real).st_mode
            except OSError:
                mode = 0
            is_dir = stat.S_ISDIR(mode) or (not mode and claims[name].deeper)
            if is_dir:
                os.mkdir(stage / name)
                empty_dir.mkdir(exist_ok=True)
            else:
                (stage / name).touch()
                empty_file.touch()
            readable = name in inputs and (stat.S_ISDIR(mode) or stat.S_ISREG(mode))
            walls.append((name, real if readable else empty_dir if is_dir else empty_file))
        self._walls[stage.name] = set(names)
        return walls

    def _mounts_in(self, directory: str) -> set[str]:
        """The names in ``directory`` under which another of the plan's binds goes."""
        names = {_child(d, directory) for d in (*self.plan.writable, *self.plan.staged)}
        if directory == "":
            names.add(".git")
        return {name for name in names if name}

    def _owned(self, rel: str) -> bool:
        return any(matches(pattern, rel) for pattern in self._patterns)

    @functools.cached_property
    def _patterns(self) -> list[Pattern]:
        return [parse(text) for text in self.owns]

    def finish(self) -> list[str]:
        """The attempt ended: move the files it made that the task owns into
        the work tree, and return the paths it wrote that the task does not
        own (left out, never in the work tree). The attempt's folder goes."""
        strays: list[str] = []
        self.displaced = [
            d for d, identity in self._dirs.items() if _identity(self.repo / d) != identity
        ]
        try:
            for number, directory in enumerate(self.plan.staged):
                stage = self.folder / f"stage{number}"
                if stage.is_dir():
                    strays += self._bring_back(stage, directory)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        return sorted(strays)

    def _bring_back(self, stage: Path, directory: str) -> list[str]:
        links = self._links.get(stage.name, set())
        copies = self._copies.get(stage.name, {})
        mounts = self._mounts_in(directory) | self._walls.get(stage.name, set())
        strays: list[str] = []
        present: set[str] = set()
        for top, dirs, files in os.walk(stage):
            here = os.path.relpath(top, stage)
            inner = "" if here == "." else here
            if not inner:
                dirs[:] = [d for d in dirs if d not in mounts]
            for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                local = f"{inner}/{name}" if inner else name
                present.add(local)
                source = stage / local
                if not inner and name in mounts:
                    continue  # a wall (a read-only mount point: as it was made)
                if not inner and name in links and _is_our_link(source, self.folder / "view"):
                    continue
                if not inner and name in copies and _signature(source) == copies[name][0]:
                    continue
                rel = f"{directory}/{local}" if directory else local
                if not self._owned(rel):
                    strays.append(rel)
                    continue
                try:
                    _move(source, self.repo / rel, self.repo)
                except OSError as exc:  # judged as not written; said, never a crash
                    self.unmoved.append(f"{rel} ({exc.strerror or exc})")
        for name, (_, was) in copies.items():
            if name not in present:  # the worker removed its own file
                rel = f"{directory}/{name}" if directory else name
                with contextlib.suppress(OSError):  # (not if it changed since: moved here)
                    if _signature(self.repo / rel) == was:
                        os.unlink(self.repo / rel)
        return strays


Isolated = Confined | Scratch  # an attempt's isolation, what finishing it needs


def left_by(folder: Path, repo: Path) -> Isolated | None:
    """The isolation of an attempt in ``repo`` whose driver died while it
    ran (confined, or in a scratch directory), read from its folder (None
    when it had none, or its state is unreadable: then nothing of it is
    brought back, as of any stray write)."""
    try:
        state = json.loads((folder / STATE).read_text())
        if isinstance(state, dict) and state.get("kind") == SCRATCH:
            return Scratch.of_state(state, repo, folder)
        plan = Plan(tuple(state["writable"]), tuple(state["staged"]))
        confined = Confined(repo, plan, folder, tuple(state["owns"]), (), (), (), ())
        confined._dirs = {d: (int(dev), int(ino)) for d, (dev, ino) in state["dirs"].items()}
        confined._links = {stage: set(names) for stage, names in state["links"].items()}
        confined._walls = {stage: set(names) for stage, names in state.get("walls", {}).items()}
        confined._copies = {
            stage: {name: (_sig(now), _sig(was)) for name, (now, was) in files.items()}
            for stage, files in state["copies"].items()
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return confined


def _sig(value: list[int]) -> Signature:
    ino, size, mtime = value
    return int(ino), int(size), int(mtime)


def _linked(repo: Path, path: Path) -> bool:
    """Whether a link lies on the way from ``repo`` to ``path`` inside it (or is ``path``)."""
    inside = os.path.relpath(path, repo)
    return os.path.realpath(path) != os.path.normpath(os.path.join(os.path.realpath(repo), inside))


def _move(source: Path, target: Path, repo: Path) -> None:
    """Move ``source`` to ``target`` whole: a rename, or across file systems
    a copy beside the target under a client temporary's name (the audit
    judges it as the target) renamed into place; never through a link."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if _linked(repo, target.parent):
        raise OSError(errno.ELOOP, "a link lies on the way to it")
    try:
        os.replace(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    draft = target.with_name(f"{target.name}.tmp.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        shutil.copy2(source, draft, follow_symlinks=False)
        os.replace(draft, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(draft)
        raise
    os.unlink(source)


def _child(path: str, directory: str) -> str | None:
    """The name in ``directory`` that ``path`` lies at or under, if it lies inside."""
    if path == directory or (directory and not path.startswith(directory + "/")):
        return None
    rest = path[len(directory) + 1 :] if directory else path
    return rest.partition("/")[0] or None


def _is_our_link(path: Path, view: Path) -> bool:
    try:
        return os.readlink(path).startswith(str(view) + "/")
    except OSError:
        return False


def _identity(path: Path) -> tuple[int, int]:
    """Which directory is at ``path`` (device, inode; zeros when none is)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0, 0
    return st.st_dev, st.st_ino


def _signature(path: Path) -> Signature:
    st = os.stat(path, follow_symlinks=False)
    return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class Isolation:
    """What a run's attempts get: confined, in a scratch directory or
    neither, in one clause for ``check`` and ``start``, or the problem of an
    isolation asked for and not to be had."""

    mode: str = "none"  # "sandbox", "scratch" or "none"
    said: str = ""
    problem: str = ""

    @property
    def confined(self) -> bool:
        return self.mode == "sandbox"


def isolation_of(run: RunDef, env: dict[str, str] | None = None) -> Isolation:
    """How ``run``'s attempts are isolated on this machine (``env``: the
    workers' environment, for the PATH bubblewrap is found on)."""
    executor = run.packet.executor
    if executor.kind != "command" or executor.isolation == "none":
        return Isolation()
    template = command_template(executor)
    srun = template is not None and bool(template) and os.path.basename(template[0]) == "srun"
    record = find_preset(executor.preset)
    hooked = record is not None and record.hooks is not None
    if executor.isolation == "scratch":
        if hooked and executor.command is None:
            return Isolation(
                problem=f'[executor] isolation = "scratch" cannot run the {executor.preset} '
                "preset: its write hooks read the repository, which a scratch directory is not "
                '(every write would be refused); leave isolation = "auto"'
            )
        if srun:
            return Isolation(
                problem='[executor] isolation = "scratch" makes each scratch directory on '
                "this machine, and srun runs the attempt on a Slurm node; set isolation = "
                '"none" there'
            )
        said = "each attempt runs in a scratch directory of its own; only its outputs come back"
        return Isolation(SCRATCH, said)
    auto = executor.isolation == "auto"
    if hooked:  # its own sandbox and gitrun's hooks hold it to its paths
        if auto:
            return Isolation()
        return Isolation(
            problem=f'[executor] isolation = "sandbox" cannot confine the {executor.preset} '
            "preset yet (its write hooks keep records in the git directory, which the sandbox "
            'makes read-only); leave isolation = "auto": its own sandbox ([executor] bash = '
            '"sandbox") and gitrun\'s hooks hold it to its paths',
        )
    if auto and record is not None and record.own_sandbox and executor.command is None:
        return Isolation(said=record.own_sandbox)
    if auto and srun:
        return Isolation(said="workers are not confined: srun runs each attempt on a Slurm node")
    why = probe(env) or _unconfinable(run)
    if why is None:
        return Isolation("sandbox", "each attempt is confined to its own paths (bubblewrap)")
    if auto:
        return Isolation(said=f"workers are not confined: {why}")
    fix = "" if "isolation" in why else FALLBACK
    return Isolation(problem=f'[executor] isolation = "sandbox", but {why}{fix}')


def _unconfinable(run: RunDef) -> str | None:
    """Why some task cannot be confined (a glob with no literal directory), or None."""
    for task in run.tasks:
        for text in run.owns_of(task):
            if _WILD.search(text) is None:
                continue  # a literal path: always confinable
            try:
                if not parse(text).literal_prefix:
                    return str(Unconfinable(_rootless(task.id, text)))
            except PatternError:
                continue  # check names the pattern itself
    return None


def _rootless(task_id: str, text: str) -> str:
    return (
        f"task {task_id} owns {text!r}, which names no directory to make writable (only the "
        "whole repository holds it); put those files in a directory of their own, or set "
        '[executor] isolation = "scratch" or "none"'
    )


def probe(env: dict[str, str] | None = None) -> str | None:
    """Why bubblewrap cannot confine a command here (None: it can)."""
    program = shutil.which(BWRAP, path=(env or os.environ).get("PATH"))
    if program is None:
        return f"bubblewrap (`{BWRAP}`) is not installed: {INSTALL}"
    try:
        done = subprocess.run(
            [program, *NAMESPACES, "--", "true"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot start here ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"bubblewrap cannot make a sandbox here ({said})"
    return None
