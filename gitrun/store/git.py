"""The one door to git. Small named functions over git plumbing.

Behind the door, two ways to start git, each where it was measured to serve
(``python bench/compare.py``):

- What writes to the object database or a ref (blobs, trees, commits, the
  compare-and-swap of a run branch) runs through GitPython's command layer,
  whose failures arrive as ``GitCommandError`` and leave here as gitrun's
  :class:`CommandError`. Only processes that commit pay for importing it.
- Reads run as plain one-shot child processes (:func:`gitrun.processes.proc.run_cmd`):
  the read-only commands (``status``, ``check``, ``log``, hooks) make a handful
  of git calls each, and importing GitPython alone made ``gitrun status`` on
  10,000 tasks 11% slower. ``--version`` and ``--help`` never import it.

Nothing here keeps a GitPython ``Repo`` or its persistent ``cat-file``
processes alive between calls: its README warns that it leaks resources in
long-running processes, and the driver runs for hours.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from gitrun.errors import CommandError, GitrunError, GitUnavailable
from gitrun.processes.proc import clean_env, is_hook_git_var, run_cmd
from gitrun.store.regular import read_regular, remove_file

if TYPE_CHECKING:  # GitPython is imported where it runs, never at start-up
    from git.cmd import Git
    from git.exc import CommandError as GitPythonError

# Every git gitrun runs: core.fsmonitor names a command git runs while it
# scans the work tree, and one a worker planted in .git/config must not run
# inside gitrun's own calls (the audit reports the change to .git/config).
GIT = ("git", "-c", "core.fsmonitor=false")


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """Run ``git -C repo args...`` and return its stdout.

    Paths gitrun passes are file names, never patterns: ``out/[a].json``
    must not match ``out/a.json`` (--literal-pathspecs).
    """
    argv = [*GIT, "--literal-pathspecs", "-C", str(repo), *args]
    return run_cmd(argv, input=input).stdout


def write_git(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """Run a git command that writes objects or refs; return its stdout.

    Through GitPython's command layer, with the options of :func:`git`; its
    ``GitCommandError`` becomes :class:`CommandError` (the command, its exit
    status and git's stderr). GitPython starts git with the whole inherited
    environment plus additions and cannot drop a variable, so inside a git
    hook (GIT_DIR, GIT_INDEX_FILE, ... exported) the command runs as a plain
    child process without them, as everywhere else in gitrun.
    """
    return _write_git(repo, *args, input=input, env=env)[0]


def _write_git(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> tuple[bytes, bytes]:
    """:func:`write_git`, with git's stderr as well as its stdout."""
    argv = [*GIT, "--literal-pathspecs", "-C", str(repo), *args]
    if any(is_hook_git_var(name) for name in os.environ):
        proc = run_cmd(argv, input=input, env=clean_env(env))
        return proc.stdout, proc.stderr
    runner, failure = _command_layer(argv, repo)
    # GitPython hands git a file as its stdin, never bytes.
    with tempfile.TemporaryFile() if input is not None else nullcontext() as stdin:
        if stdin is not None and input is not None:
            stdin.write(input)
            stdin.seek(0)
        try:
            _status, out, err = runner.execute(
                argv,
                istream=stdin,
                env=dict(env) if env else None,
                with_extended_output=True,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
            )
        except failure as exc:
            raise _command_error(argv, exc) from exc
    # GitPython decodes stderr (and strips its last newline) whatever it is asked.
    return out, err.encode(errors="surrogateescape") if isinstance(err, str) else err


_importing: threading.Thread | None = None


def prepare_writes() -> None:
    """Start importing GitPython's command layer in the background.

    A command that is about to commit (``start``, ``resume``) calls this
    first: the import (~50 ms) then overlaps with the checks and reads that
    come before the first write, which waits for it to finish (the module's
    import lock). A failed import is retried, and reported, by that write.
    """
    global _importing
    if _importing is None and "git.cmd" not in sys.modules:
        _importing = threading.Thread(target=_import_command_layer, name="gitrun-import")
        _importing.daemon = True
        _importing.start()


def _import_command_layer() -> None:
    with contextlib.suppress(Exception):
        # deferred: GitPython takes ~60 ms to import; only the commands that use it pay
        import git.cmd  # noqa: F401


def _command_layer(argv: list[str], repo: Path) -> tuple[Git, type[GitPythonError]]:
    """GitPython's command runner for ``repo`` and the base of its errors.

    Not a ``Repo``: one per call costs a third of a git process, and a kept
    one grows persistent ``cat-file`` processes; the command layer holds
    nothing between calls. It also sets LC_ALL=C, so the messages
    :func:`commit_tree` reads are English whatever the user's locale.
    """
    try:
        # deferred: GitPython takes ~60 ms to import; only the commands that use it pay
        from git.cmd import Git
        from git.exc import CommandError as GitPythonError
    except ImportError as exc:  # GitPython looks for git when it is first imported
        if shutil.which(argv[0]) is None:
            raise GitUnavailable.missing() from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GitrunError(
            f"GitPython could not be loaded ({first}); reinstall gitrun with its "
            "dependencies (`pip install --force-reinstall gitrun`)"
        ) from exc
    return Git(str(repo)), GitPythonError


def _command_error(argv: list[str], exc: GitPythonError) -> GitrunError:
    """gitrun's error for a failure GitPython reported: the same sentence a
    plain child process gives (the command, its status, git's last line)."""
    if isinstance(exc.status, int):
        # GitPython keeps git's output only inside its own message.
        said = _unwrap(exc.stderr, "stderr") or _unwrap(exc.stdout, "stdout")
        return GitUnavailable.refusal(said) or CommandError(argv, exc.status, said)
    # The status is the exception that kept git from starting at all.
    return GitUnavailable.missing()


def _unwrap(text: str, label: str) -> str:
    return text.removeprefix(f"\n  {label}: '").removesuffix("'")


def _stdin_path(path: str) -> str:
    """A path as a line of ``--stdin-paths`` or ``--index-info``: git reads a
    line that starts with a double quote as a C-quoted string (a file named
    ``"a".json`` would be read as ``a``), so such a path is quoted."""
    if not path.startswith('"') and "\n" not in path:
        return path
    escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def find_repo_root(start: Path | None = None) -> Path:
    """The top of the work tree containing ``start`` (default: the current directory)."""
    where = (start or Path.cwd()).resolve()
    try:
        out = git(where, "rev-parse", "--show-toplevel")
    except CommandError as exc:
        raise GitrunError(
            f"{where} is not inside a git repository; run `git init` first "
            "or change to your repository"
        ) from exc
    return one_path(out)


def git_dir(repo: Path) -> Path:
    """The repository's .git directory (absolute; handles worktrees)."""
    return one_path(git(repo, "rev-parse", "--absolute-git-dir"))


def one_path(out: bytes) -> Path:
    """The one path a git command printed (``rev-parse --show-toplevel``,
    ``--absolute-git-dir``, ...): its output less the newline git ends it
    with, and nothing else, since a path may hold a newline or end in a
    space. Ask for one such path a call: two would be ambiguous."""
    return Path(out.decode(errors="surrogateescape").removesuffix("\n"))


def changed_paths(repo: Path) -> list[str]:
    """Paths with uncommitted changes or untracked, relative to the root.

    One ``git status -z`` call; renames list both the old and the new path.
    Untracked directories are listed file by file.
    """
    # --no-optional-locks: status would otherwise refresh the user's index
    # under index.lock and make a concurrent `git add` of theirs fail.
    out = git(
        repo,
        "--no-optional-locks",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
    )
    paths: list[str] = []
    for entry in out.decode(errors="surrogateescape").split("\0"):
        if len(entry) > 3:
            paths.append(entry[3:])
    return paths


def ignored_by(repo: Path, paths: list[str]) -> dict[str, str]:
    """Which of ``paths`` git ignores: path -> the rule (``.gitignore:3: out/``).

    Tracked paths are never ignored (git's rule). One ``check-ignore
    --no-index`` call, then one ``ls-files`` for the paths it names, if
    any, to leave out those the index tracks: ``check-ignore`` looking in
    the index itself takes time quadratic in the tracked paths asked about
    (3 s for 10,000 outputs a landed run tracks). A path git refuses to look
    at (beyond a symlink) is asked alone and skipped when git still refuses
    it (the symlink is a check problem).
    """
    if not paths:
        return {}
    proc = _check_ignore(repo, paths)
    if proc.returncode not in (0, 1):
        found: dict[str, str] = {}
        for path in paths:
            alone = _check_ignore(repo, [path])
            if alone.returncode == 0:
                found.update(_ignore_rules(alone.stdout))
    else:
        found = _ignore_rules(proc.stdout)
    for tracked in tracked_paths(repo, sorted(found)):
        del found[tracked]
    return found


def _check_ignore(repo: Path, paths: list[str]) -> subprocess.CompletedProcess[bytes]:
    data = b"".join(p.encode(errors="surrogateescape") + b"\0" for p in paths)
    argv = [*GIT, "-C", str(repo), "check-ignore", "--no-index", "-v", "-z", "--stdin"]
    return run_cmd(argv, input=data, check=False)


def tracked_paths(repo: Path, paths: list[str]) -> set[str]:
    """Those of ``paths`` the index holds, in one ``ls-files`` call.

    git matches every index entry against every pathspec, so a few paths
    are named and more are looked up in the whole listing: 500 pathspecs
    over an index of 200,000 entries took 0.26 s a call (52 s for 100,000
    landed outputs a .gitignore names), the whole listing 0.05 s.
    """
    if not paths:
        return set()
    named = ["--", *paths] if len(paths) <= _FEW_PATHSPECS else []
    out = git(repo, "ls-files", "-z", *named)
    return set(out.decode(errors="surrogateescape").split("\0")) & set(paths)


_FEW_PATHSPECS = 64


def _ignore_rules(out: bytes) -> dict[str, str]:
    fields = out.decode(errors="surrogateescape").split("\0")
    found: dict[str, str] = {}
    for i in range(0, len(fields) - 3, 4):
        source, line, pattern, path = fields[i : i + 4]
        if pattern.startswith("!"):
            continue  # a negated rule matched: the path is not ignored
        found[path] = f"{source}:{line}: {pattern}" if source else pattern
    return found


def refused_paths(repo: Path, paths: list[str]) -> set[str]:
    """Which of ``paths`` git would refuse to record (core.protectNTFS and
    friends: ``.git:x``, ``git~1``, ...), asked of git itself in a scratch
    index, so gitrun's idea of a valid name can never drift from git's."""
    if not paths:
        return set()
    empty = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # need not exist for --index-info
    if object_format(repo) == "sha256":
        empty = "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"
    info = "".join(f"100644 {empty}\t{p}\n" for p in paths).encode(errors="surrogateescape")
    with tempfile.TemporaryDirectory(prefix="gitrun-names-") as scratch:
        env = clean_env({"GIT_INDEX_FILE": str(Path(scratch) / "index")})
        proc = run_cmd(
            [*GIT, "-C", str(repo), "update-index", "--add", "--index-info"],
            input=info,
            env=env,
            check=False,
        )
    said = proc.stderr.decode(errors="surrogateescape").splitlines()
    return {
        line.removeprefix("Ignoring path ") for line in said if line.startswith("Ignoring path ")
    }


def ignored_entries(repo: Path) -> list[str]:
    """Untracked paths git ignores, an ignored directory as one entry (not
    descended). Symlinks are entries of their own: git never follows one."""
    out = git(repo, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    return [p.rstrip("/") for p in out.decode(errors="surrogateescape").split("\0") if p]


def rev_parse(repo: Path, ref: str) -> str | None:
    """The commit a ref names, or None when it does not exist."""
    proc = run_cmd(
        [*GIT, "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        check=False,
    )
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def ref_target(repo: Path, ref: str) -> str | None:
    """The object id a ref holds, even when that object is missing (a prune
    during the run); None when the ref does not exist."""
    out = git(repo, "for-each-ref", "--format=%(objectname)", ref).decode().split()
    return out[0] if out else None


def is_intact(repo: Path, commit: str) -> bool:
    """Whether ``commit`` and every object it reaches are in the object
    database; objects reachable from the repository's other refs (not runs')
    are taken as whole, so only the run's own history is walked."""
    args = ["rev-list", "--objects", "--quiet", commit, "--not"]
    args += ["--exclude=refs/heads/gitrun/*", "--exclude=refs/remotes/*/gitrun/*", "--all"]
    return run_cmd([*GIT, "-C", str(repo), *args], check=False).returncode == 0


def reflog_targets(repo: Path, ref: str) -> list[str]:
    """The commits ``ref`` pointed at, newest first, read from its reflog file
    (``git reflog`` itself refuses a ref whose tip object is missing)."""
    try:
        lines = read_regular(git_dir(repo) / "logs" / ref).decode(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in reversed(lines):
        fields = line.split(" ", 2)
        if len(fields) >= 2 and fields[1] not in found and set(fields[1]) != {"0"}:
            found.append(fields[1])
    return found


def ever_committed(repo: Path, path: str) -> bool:
    """Whether a commit that any ref reaches holds ``path`` (a file, or
    something under a directory), now or in its history."""
    return bool(git(repo, "rev-list", "-1", "--all", "--", path).strip())


def remote_refs(repo: Path, suffix: str) -> list[str]:
    """Remote-tracking refs ending in ``/<suffix>`` (e.g. origin/gitrun/<run>)."""
    out = git(repo, "for-each-ref", "--format=%(refname)", "refs/remotes/")
    return [ref for ref in out.decode().split() if ref.endswith("/" + suffix)]


def object_format(repo: Path) -> str:
    """The repository's hash, "sha1" or "sha256": fixed when it was made, so
    asked of git once per process (a start asked three times)."""
    where = str(repo)
    known = _object_formats.get(where)
    if known is None:
        out = run_cmd([*GIT, "-C", where, "rev-parse", "--show-object-format"], check=False)
        known = out.stdout.decode().strip()
        if not known:
            return "sha1"  # not a repository (yet): not remembered
        _object_formats[where] = known
    return known


_object_formats: dict[str, str] = {}


def new_files(repo: Path, base: str, tip: str, paths: list[str] | None = None) -> set[str]:
    """Files of ``tip`` (all, or those under ``paths``) whose content is not
    what ``base`` holds at the same path: one ``git diff-tree`` rather than
    listing both trees (a change of mode alone is no new content).
    ``--ignore-submodules=none``: diff-tree would otherwise leave out a
    gitlink that .gitmodules or diff.ignoreSubmodules says to ignore, where
    the listings of both trees show it."""
    extra = ["--", *paths] if paths else []  # literal: see git()
    argv = ["diff-tree", "-r", "-z", "--no-renames", "--ignore-submodules=none"]
    out = git(repo, *argv, base, tip, *extra)
    fields = out.decode(errors="surrogateescape").split("\0")
    found = set()
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        _old_mode, _new_mode, old, new, status = meta.lstrip(":").split(" ")
        if status in ("A", "M", "T") and old != new:
            found.add(path)
    return found


def ls_tree(repo: Path, commit: str, paths: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """Files of ``commit`` (all, or those under ``paths``): path -> (mode, blob id)."""
    extra = ["--", *paths] if paths else []
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, *extra)
    files: dict[str, tuple[str, str]] = {}
    for entry in out.decode(errors="surrogateescape").split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, _kind, sha = meta.split(" ")
        files[path] = (mode, sha)
    return files


def blob_sizes(repo: Path, shas: list[str]) -> dict[str, int]:
    """The size of each object in one ``cat-file --batch-check`` call."""
    if not shas:
        return {}
    out = git(repo, "cat-file", "--batch-check", input="".join(f"{s}\n" for s in shas).encode())
    sizes: dict[str, int] = {}
    for line in out.decode().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            sizes[fields[0]] = int(fields[2])
    return sizes


def read_blobs(repo: Path, shas: list[str]) -> dict[str, bytes]:
    """The blobs of ``shas`` the repository has, by id, in one ``cat-file
    --batch`` call (one it lacks is left out)."""
    if not shas:
        return {}
    out = git(repo, "cat-file", "--batch", input="".join(f"{s}\n" for s in shas).encode())
    blobs: dict[str, bytes] = {}
    at = 0
    for sha in shas:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) != 3 or not header[2].isdigit():
            continue  # "<sha> missing" (or ambiguous): nothing follows it
        size = int(header[2])
        if header[1] == b"blob":
            blobs[sha] = out[at : at + size]
        at += size + 1
    return blobs


def is_ancestor(repo: Path, commit: str, of: str) -> bool:
    """Whether ``of``'s history holds ``commit``."""
    argv = [*GIT, "-C", str(repo), "merge-base", "--is-ancestor", commit, of]
    return run_cmd(argv, check=False).returncode == 0


def is_shallow(repo: Path) -> bool:
    """Whether the clone's history is cut short (``git clone --depth``)."""
    return git(repo, "rev-parse", "--is-shallow-repository").strip() == b"true"


def cat_blob(repo: Path, sha: str) -> bytes:
    return git(repo, "cat-file", "blob", sha)


def hash_files(repo: Path, paths: list[str]) -> list[str]:
    """Write the files at ``paths`` (relative to the root) as blobs; their ids in order.

    ``--no-filters`` stores the bytes as they are on disk, which are the bytes
    gitrun validated (the caller compares the ids with its own hashes).
    """
    if not paths:
        return []
    data = "".join(f"{_stdin_path(p)}\n" for p in paths).encode(errors="surrogateescape")
    out = write_git(repo, "hash-object", "-w", "--no-filters", "--stdin-paths", input=data)
    return out.decode().split()


def index_blob_ids(repo: Path) -> dict[str, str]:
    """The blob id of each regular file the index holds (merged entries
    only): path -> id, in one ``ls-files`` call."""
    out = git(repo, "ls-files", "-s", "-z")
    found: dict[str, str] = {}
    for entry in out.decode(errors="surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        fields = meta.split(" ")
        if len(fields) == 3 and fields[0] in ("100644", "100755") and fields[2] == "0":
            found[path] = fields[1]
    return found


def stored_blob_ids(repo: Path, paths: list[str]) -> dict[str, str]:
    """The blob id git would store for each regular file at ``paths``
    (relative to the root; a symlink is followed), by path: its bytes with
    the path's clean filter and end-of-line conversion applied, as ``git
    add`` would store them, so a CRLF work tree's file has its LF clone's
    id. One ``hash-object --stdin-paths`` (writing nothing) for them all;
    a file that went away (or stopped being a regular file) since the
    caller looked is left out."""
    argv = [*GIT, "-C", str(repo), "hash-object", "--stdin-paths"]
    found: dict[str, str] = {}
    rest = paths
    while rest:
        data = "".join(f"{_stdin_path(p)}\n" for p in rest).encode(errors="surrogateescape")
        proc = run_cmd(argv, input=data, check=False)
        ids = proc.stdout.decode().split()
        found.update(zip(rest, ids, strict=False))
        if proc.returncode == 0 and len(ids) == len(rest):
            break
        # git stops at the first file it cannot read: skip that one if it is
        # gone, and go on with the rest; any other failure is git's to tell.
        failed = rest[len(ids)] if len(ids) < len(rest) else None
        if proc.returncode == 0 or failed is None or _is_regular(repo / failed):
            said = (proc.stderr or proc.stdout).decode(errors="replace")
            raise CommandError(argv, proc.returncode, said)
        rest = rest[len(ids) + 1 :]
    return found


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def hash_bytes(repo: Path, data: bytes) -> str:
    out = write_git(repo, "hash-object", "-w", "--no-filters", "--stdin", input=data)
    return out.decode().strip()


def tree_with(
    repo: Path, base: str | None, entries: list[tuple[str, str, str]], index: Path
) -> str:
    """A tree: ``base``'s tree with ``(mode, blob, path)`` entries added or replaced.

    Uses a private index file, never the user's, and removes it afterwards.
    """
    read_tree(repo, base, index)
    tree = write_tree(repo, entries, index)
    remove_file(index)
    return tree


def read_tree(repo: Path, base: str | None, index: Path) -> None:
    """Make the private ``index`` hold exactly ``base``'s tree (nothing, for None)."""
    remove_file(index)
    if base:
        write_git(repo, "read-tree", base, env={"GIT_INDEX_FILE": str(index)})


def write_tree(repo: Path, entries: list[tuple[str, str, str]], index: Path) -> str:
    """Add or replace ``(mode, blob, path)`` entries in the private ``index``
    and write its tree; the index keeps them, so the next commit on top of
    this tree needs no ``read-tree``.

    ``update-index --index-info`` skips a path it refuses ("Ignoring path
    ...", on stderr, exit 0; ``read_index_info`` in git's
    builtin/update-index.c): whenever it says anything at all, every entry
    is looked up in the tree written, and a missing one is an error.
    """
    env = {"GIT_INDEX_FILE": str(index)}
    info = "".join(f"{mode} {sha}\t{_stdin_path(path)}\n" for mode, sha, path in entries)
    data = info.encode(errors="surrogateescape")
    _out, said = _write_git(repo, "update-index", "--add", "--index-info", input=data, env=env)
    tree = write_git(repo, "write-tree", env=env).decode().strip()
    if said.strip():
        _verify_tree(repo, tree, entries)
    return tree


def set_index_entries(repo: Path, entries: list[tuple[str, str, str]], index: Path) -> None:
    """Set ``(mode, object id, path)`` entries in the index file ``index``
    (mode ``0`` removes the path; every other entry stays as it is), then
    refresh its stat data from the work tree, as ``git checkout`` leaves it."""
    env = {"GIT_INDEX_FILE": str(index)}
    info = "".join(f"{mode} {sha}\t{_stdin_path(path)}\n" for mode, sha, path in entries)
    data = info.encode(errors="surrogateescape")
    write_git(repo, "update-index", "--add", "--replace", "--index-info", input=data, env=env)
    write_git(repo, "update-index", "-q", "--refresh", env=env)


def _verify_tree(repo: Path, tree: str, entries: list[tuple[str, str, str]]) -> None:
    """Every entry is in ``tree`` as asked: ``update-index`` skips a path it
    refuses ("Ignoring path ...") and still exits 0, which once made a commit
    titled "t1 done" that lacked t1's file."""
    wanted = {path: (mode, sha) for mode, sha, path in entries}
    found: dict[str, tuple[str, str]] = {}
    paths = sorted(wanted)
    for start in range(0, len(paths), 500):  # command lines have limits
        found.update(ls_tree(repo, tree, paths[start : start + 500]))
    wrong = [path for path in paths if found.get(path) != wanted[path]]
    if wrong:
        shown = ", ".join(repr(p) for p in wrong[:5])
        raise GitrunError(
            f"git would not record {shown} in the commit (a name git refuses); nothing was "
            "committed — rename the output in the task table (`gitrun check` names the rule)"
        )


def commit_tree(repo: Path, tree: str, parents: list[str], message: str) -> str:
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    try:
        return write_git(repo, *args, "-F", "-", input=message.encode()).decode().strip()
    except CommandError as exc:
        if "tell me who you are" not in exc.output and "empty ident" not in exc.output:
            raise
    # No identity configured: commit as gitrun rather than fail a run.
    ident = {
        "GIT_AUTHOR_NAME": "gitrun",
        "GIT_AUTHOR_EMAIL": "gitrun@localhost",
        "GIT_COMMITTER_NAME": "gitrun",
        "GIT_COMMITTER_EMAIL": "gitrun@localhost",
    }
    return write_git(repo, *args, "-F", "-", input=message.encode(), env=ident).decode().strip()


def config_value(repo: Path, key: str, kind: str = "") -> str:
    """The value of ``key`` in the repository's configuration, whole (read
    NUL-terminated: a path may end in a space or hold a newline); "" when
    it is not set. A ``kind`` ("bool", "int", "path") has git normalise it:
    a bool reads "true" or "false" however it was spelled."""
    typed = [f"--type={kind}"] if kind else []
    proc = run_cmd([*GIT, "-C", str(repo), "config", "-z", *typed, "--get", key], check=False)
    return (
        proc.stdout.decode(errors="surrogateescape").removesuffix("\0")
        if proc.returncode == 0
        else ""
    )
