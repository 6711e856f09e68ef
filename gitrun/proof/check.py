"""The pre-launch proof: every problem that would make a run unsafe or unrunnable.

``check_run`` never stops at the first problem; it returns them all, each a
sentence naming the tasks, a concrete path and the fix.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gitrun.collector import collector_paused
from gitrun.definition.load import GITRUN_DIR, RunDef, Task, load_run
from gitrun.definition.outputs import blob_on_disk
from gitrun.definition.provenance import up_to_date
from gitrun.definition.runfiles import run_file_problems
from gitrun.definition.schema import BUILTIN_VALIDATORS, JsonSchemaValidator
from gitrun.errors import DefinitionError
from gitrun.layout import branch_ref
from gitrun.ownership.claims import OWNS, READS, Claim, OwnerIndex, find_meetings
from gitrun.ownership.paths import canonical_problem
from gitrun.ownership.patterns import (
    Pattern,
    PatternError,
    first_name,
    intersect,
    matches,
    parse,
)
from gitrun.problem import Problem
from gitrun.proof.aliases import case_alias_problems
from gitrun.proof.beside import beside_problems
from gitrun.proof.clientcheck import client_problems
from gitrun.proof.placement import (
    BaseTree,
    base_commit,
    file_dir_clash_problems,
    ignored_problems,
    output_place_problems,
    refused_name_problems,
    symlink_problems,
)
from gitrun.proof.startable import input_problems, program_check, worker_file_problems
from gitrun.store import git, refs
from gitrun.store.branches import find_tip
from gitrun.words import counted
from gitrun.workers.executor import (
    command_template,
    executor_problems,
    literal_models,
    nested_sandbox_problem,
    render_command,
    template_problems,
    uses_model,
)
from gitrun.workers.pointer import attempt_values, render_pointer
from gitrun.workers.ray.executor import ray_problems
from gitrun.workers.sandbox import isolation_of
from gitrun.workers.workerfiles import worker_files

RESERVED = (".git", GITRUN_DIR)
# Files whose every copy, at any depth, changes what git does with the files near it.
GIT_CONTROL_FILES = (".gitattributes", ".gitignore", ".gitmodules")


@dataclass(frozen=True)
class CheckReport:
    problems: list[Problem]
    tasks: int
    stages: int
    claims: int
    pointer_bytes: int
    payload_budget: int
    # Tasks whose outputs at the base are current (gitrun.definition.provenance):
    # a start does not dispatch them.
    up_to_date: list[str] = field(default_factory=list)
    version: str = ""  # what the preset's CLI answered to --version
    isolation: str = ""  # how its attempts are confined, as a clause

    @property
    def summary(self) -> str:
        text = (
            f"{counted(self.tasks, 'task')} in {counted(self.stages, 'stage')}, "
            f"{counted(self.claims, 'owned pattern')}, no overlaps; the largest dispatch takes "
            f"{self.pointer_bytes:,} of {self.payload_budget:,} bytes"
        )
        if self.version:
            text += f"; workers run {self.version}"
        if self.isolation:
            text += f"; {self.isolation}"
        if self.up_to_date:
            fresh = len(self.up_to_date)
            text += (
                f"; {fresh:,} of {counted(self.tasks, 'task')} "
                f"{'is' if fresh == 1 else 'are'} up to date, {self.will_run:,} will run"
            )
        return text

    @property
    def will_run(self) -> int:
        """The tasks a start dispatches: those not up to date."""
        return self.tasks - len(self.up_to_date)


def check_json(problems: list[Problem], report: CheckReport | None) -> dict[str, Any]:
    """``gitrun check --json`` and the MCP ``check`` tool: ready or not, the
    summary and its counts, every problem. The tasks up to date are found
    only for a run without problems: otherwise those counts are null."""
    proven = report is not None and not problems
    return {
        "ready": not problems,
        "summary": report.summary if report is not None else "",
        "tasks": report.tasks if report is not None else None,
        "up_to_date": len(report.up_to_date) if proven and report else None,
        "will_run": report.will_run if proven and report else None,
        "problems": [problem.to_json() for problem in problems],
    }


def check_named(repo: Path, run_id: str) -> tuple[list[Problem], CheckReport | None]:
    """``gitrun check RUN --json`` (and the MCP server's ``check``): every
    problem of the run, a definition that does not load as one problem per
    broken field (code ``definition``, and no report)."""
    try:
        run = load_run(repo, run_id)
    except DefinitionError as exc:
        return [Problem("definition", line, (), exc.path) for line in exc.lines], None
    report = check_run(run)
    return report.problems, report


def check_run(
    run: RunDef, *, check_dirty: bool = True, fork: str | None = None, freshness: bool = True
) -> CheckReport:
    """Every problem of ``run``; ``fork``: the commit a start forks it from,
    read once by the caller, so that the proof is of the commit the branch
    starts at (else the run's recorded fork point, or HEAD); ``freshness``:
    find the tasks up to date there too (a resume, whose round has its
    start record already, does not ask)."""
    with collector_paused():  # a big run's claims and tries are 100,000s of objects
        return _check_run(run, check_dirty, fork, freshness)


def _check_run(
    run: RunDef, check_dirty: bool, fork: str | None, freshness: bool = True
) -> CheckReport:
    problems: list[Problem] = []
    problems += _definition_problems(run)
    owned, read = _claims(run, problems)
    protected, protected_problems = _protected_entries(run)
    problems += protected_problems
    problems += _place_problems(run, owned, protected)
    problems += _overlap_problems(run.tasks_path, itertools.chain(owned, read))
    problems += beside_problems(run, owned)
    outputs, output_problems = _outputs(run, owned)
    problems += output_problems
    changed = git.changed_paths(run.repo)
    fork = fork or base_commit(run)
    base = BaseTree.of(run.repo, fork)
    output_paths = {path for _, path in outputs}
    if fork is None:
        problems.append(
            Problem(
                "no-commit",
                "the repository has no commit yet, so the run has no point to fork from; commit "
                f"it first (git add -A && git commit -m 'gitrun: run {run.id}')",
            )
        )
    problems += input_problems(run, owned, base.files)
    problems += symlink_problems(run, owned, protected, base, changed, output_paths)
    problems += output_place_problems(run, outputs, base)
    problems += case_alias_problems(run, owned, protected, RESERVED)
    problems += file_dir_clash_problems(run, outputs)
    problems += refused_name_problems(run, outputs)
    problems += ignored_problems(run, outputs)
    problems += run_file_problems(run)
    problems += _branch_problems(run)
    workers = worker_files(run)
    if check_dirty:
        problems += _dirty_problems(run, owned, changed)
        problems += worker_file_problems(run, workers, base.files, changed)
    pointer_bytes, pointer_problems = _pointer_problems(run)
    problems += pointer_problems
    problems += _executor_model_problems(run)
    program = program_check(run)
    problems += program.problems
    problems += client_problems(run)
    isolation = isolation_of(run)
    if isolation.problem:
        problems.append(Problem("isolation", f"{isolation.problem}"))
    elif isolation.confined and run.packet.executor.command is not None:
        nested = nested_sandbox_problem(command_template(run.packet.executor) or [])
        if nested is not None:
            problems.append(Problem("isolation", nested))
    return CheckReport(
        problems=problems,
        tasks=len(run.tasks),
        stages=len(run.packet.stages),
        claims=len(owned),
        pointer_bytes=pointer_bytes,
        payload_budget=run.packet.limits.payload_budget,
        up_to_date=(up_to_date(run, fork, workers) if freshness and not problems else []),
        version=program.version,
        isolation=isolation.said,
    )


def stage_symlink_problems(run: RunDef, stage: str) -> list[Problem]:
    """The symlink part of the proof again, for the tasks of ``stage`` just
    before it starts: an earlier stage may have made a link (a task owning
    ``out/*`` may create ``out/ln -> ../data``) that this stage's globs pass
    through."""
    tasks = [t for t in run.tasks if run.stage_of(t) == stage]
    ignored: list[Problem] = []
    owned, _ = _claims(replace(run, tasks=tasks), ignored)
    protected, _ = _protected_entries(run)
    outputs = {path for t in tasks for path in run.output_paths(t)}
    base = BaseTree.of(run.repo, base_commit(run))
    changed = git.changed_paths(run.repo)
    return symlink_problems(run, owned, protected, base, changed, outputs)


def _branch_problems(run: RunDef) -> list[Problem]:
    """What would stop git from moving the run's branch: a stale lock file
    beside it, or a branch of the user's where its name must go."""
    return [
        Problem("branch-blocked", blocked.message, path=blocked.path)
        for blocked in refs.ref_obstacles(run.repo, branch_ref(run.id))
    ]


def _definition_problems(run: RunDef) -> list[Problem]:
    out: list[Problem] = []
    where = run.tasks_path
    if not run.tasks:
        out.append(Problem("no-tasks", f"{where}: the run has no tasks; add [[task]] tables"))
    for task_id, count in Counter(t.id for t in run.tasks).items():
        if count > 1:
            out.append(
                Problem(
                    "duplicate-task",
                    f"{where}: task id {task_id!r} is used {count} times; give each task its own id",
                    (task_id,),
                )
            )
    stage_names = run.stage_names
    for name, count in Counter(stage_names).items():
        if count > 1:
            out.append(
                Problem(
                    "duplicate-stage", f"{run.packet_path}: stage {name!r} is listed {count} times"
                )
            )
    known = ", ".join(stage_names)
    for task in run.tasks:
        if task.stage is not None and task.stage not in stage_names:
            out.append(
                Problem(
                    "unknown-stage",
                    f"{where}: task {task.id} names stage {task.stage!r}, which the packet does not "
                    f"list (stages: {known}); add it to [[stages]] or fix the name",
                    (task.id,),
                )
            )
    for stage in run.packet.model.stages:
        if stage not in stage_names:
            out.append(
                Problem(
                    "unknown-stage",
                    f"{run.packet_path}: [model.stages] names stage {stage!r}, which [[stages]] "
                    f"does not list (stages: {known})",
                )
            )
    out += _validator_problems(run)
    for task in run.tasks:
        bad = canonical_problem(task.bundle, is_file=True) if task.bundle else None
        if bad is not None:
            out.append(
                Problem(
                    bad.code,
                    f"{where}: task {task.id}: bundle {task.bundle!r} {bad.sentence()}",
                    (task.id,),
                    task.bundle,
                )
            )
        elif task.bundle and not (run.repo / task.bundle).is_file():
            out.append(
                Problem(
                    "missing-bundle",
                    f"{where}: task {task.id}: bundle {task.bundle} does not exist; regenerate the "
                    "tasks or remove `bundle`",
                    (task.id,),
                    task.bundle,
                )
            )
    return out


def _validator_problems(run: RunDef) -> list[Problem]:
    out: list[Problem] = []
    declared = run.packet.validators
    known = sorted({*BUILTIN_VALIDATORS, *declared})
    reported: set[tuple[str, str]] = set()
    for name in run.packet.outputs.validators:
        if name not in known:
            out.append(
                Problem(
                    "unknown-validator",
                    f"{run.packet_path}: [outputs] validators names {name!r}, which is neither "
                    f"built in nor declared (known: {', '.join(known)}); declare "
                    f"[validators.{name}] or fix the name",
                )
            )
    for task in run.tasks:
        for output in task.outputs:
            if isinstance(output, str):
                continue  # a plain path takes the packet's validators
            for name in output.validators or []:
                if name not in known and (task.id, name) not in reported:
                    reported.add((task.id, name))
                    out.append(
                        Problem(
                            "unknown-validator",
                            f"{run.tasks_path}: task {task.id}: output {output.path} names "
                            f"validator {name!r}, which is neither built in nor declared "
                            f"(known: {', '.join(known)}); declare [validators.{name}] in the "
                            "packet or fix the name",
                            (task.id,),
                            output.path,
                        )
                    )
    for name, validator in declared.items():
        schema = validator.schema if isinstance(validator, JsonSchemaValidator) else None
        if schema is not None and not (run.repo / schema).is_file():
            out.append(
                Problem(
                    "unknown-validator",
                    f"{run.packet_path}: [validators.{name}] schema {schema} does not exist; "
                    "give a path relative to the repository root",
                    path=schema,
                )
            )
    return out


def _claims(run: RunDef, problems: list[Problem]) -> tuple[list[Claim], list[Claim]]:
    """The owned claims, and the read claims that may meet one of them."""
    found: list[tuple[int, Problem]] = []  # (task's position, problem): owns, then reads
    owned = _task_claims(run, OWNS, found)
    # Two patterns whose first literal names differ never meet (intersect()
    # says no at once), and readers never meet readers: a read whose first
    # name no owner shares is left out (most inputs lie apart from the
    # outputs: 100,000 claims, 20 MB, kept for nothing).
    firsts = {first_name(claim.pattern) for claim in owned}
    read = _task_claims(run, READS, found, None if None in firsts else firsts)
    found.sort(key=lambda item: item[0])  # stable: each task's owns before its reads
    problems += [problem for _, problem in found]
    return owned, read


def _task_claims(
    run: RunDef,
    kind: str,
    found: list[tuple[int, Problem]],
    firsts: Collection[str | None] | None = None,
) -> list[Claim]:
    """The tasks' claims of ``kind`` (only those whose first name is one of
    ``firsts``, or that have none, when given); problems go to ``found``."""
    out: list[Claim] = []
    for position, task in enumerate(run.tasks):
        stage = run.stage_of(task)
        if kind == OWNS:
            texts = run.owns_of(task)
            # A task without owns owns its outputs, which are checked as outputs.
            written = task.owns is not None
        else:
            texts, written = task.inputs, True
        for text in texts:
            bad = canonical_problem(text, is_file=False)
            if bad is not None:
                if written:
                    problem = _claim_problem(run, task, kind, text, bad.code, bad.sentence())
                    found.append((position, problem))
                continue
            try:
                pattern = parse(text)
            except PatternError as exc:
                found.append(
                    (position, _claim_problem(run, task, kind, text, exc.code, exc.reason))
                )
                continue
            if firsts is not None:
                first = first_name(pattern)
                if first is not None and first not in firsts:
                    continue
            out.append(Claim(task.id, text, pattern, kind, stage))
    return out


def _claim_problem(run: RunDef, task: Task, kind: str, text: str, code: str, why: str) -> Problem:
    verb = "owns" if kind == OWNS else "reads"
    return Problem(
        code, f"{run.tasks_path}: task {task.id} {verb} {text!r}, which {why}", (task.id,), text
    )


def _protected_entries(run: RunDef) -> tuple[list[tuple[str, Pattern]], list[Problem]]:
    """The packet's protected entries, parsed; unusable ones become problems."""
    protected: list[tuple[str, Pattern]] = []
    problems: list[Problem] = []
    for text in run.packet.protected:
        bad = canonical_problem(text, is_file=False)
        try:
            if bad is None:
                protected.append((text, parse(text)))
                continue
            reason = bad.sentence()
            code = bad.code
        except PatternError as exc:
            reason, code = exc.reason, exc.code
        problems.append(
            Problem(code, f"{run.packet_path}: [ownership] protected {text!r} {reason}", path=text)
        )
    return protected, problems


def _place_problems(
    run: RunDef, owned: list[Claim], protected: list[tuple[str, Pattern]]
) -> list[Problem]:
    """Owned patterns that cover .git/, gitrun's files or a protected path."""
    out: list[Problem] = []
    shared = [(name, parse(name), True) for name in RESERVED]
    shared += [(text, pattern, False) for text, pattern in protected]
    # Two patterns meet only where their leading names agree: each claim is
    # compared with the entries that share its first name or have none.
    by_first: dict[str, list[int]] = {}
    for n, (_, pattern, _) in enumerate(shared):
        first = pattern.literal_prefix[0] if pattern.literal_prefix else ""
        by_first.setdefault(first, []).append(n)
    anywhere = by_first.get("", [])
    for claim in owned:
        prefix = claim.pattern.literal_prefix
        near = sorted(anywhere + by_first.get(prefix[0], [])) if prefix else range(len(shared))
        for n in near:
            name, pattern, reserved = shared[n]
            witness = intersect(claim.pattern, pattern)
            if witness is None:
                continue
            if reserved:
                out.append(
                    Problem(
                        "reserved-path",
                        f"{run.tasks_path}: task {claim.task} owns {claim.text!r}, which covers "
                        f"{witness} inside {name}/ (git's or gitrun's own files); own something "
                        "narrower",
                        (claim.task,),
                        witness,
                    )
                )
            else:
                out.append(
                    Problem(
                        "protected",
                        f"{run.tasks_path}: task {claim.task} owns {claim.text!r}, which covers "
                        f"the protected shared file {witness}; no task may own it — narrow the "
                        "pattern (or change [ownership] protected in the packet)",
                        (claim.task,),
                        witness,
                    )
                )
    return out


def _overlap_problems(where: str, claims: Iterable[Claim]) -> list[Problem]:
    out: list[Problem] = []
    seen: set[tuple[str, str, str]] = set()

    def conflicts(a: Claim, b: Claim) -> bool:
        if a.kind == OWNS and b.kind == OWNS:
            return True
        return a.stage == b.stage

    for meeting in find_meetings(claims, conflicts):
        a, b = meeting.first, meeting.second
        if a.kind == READS or (b.kind == OWNS and b.task < a.task):
            a, b = b, a
        key = (a.task, b.task, b.kind)
        if key in seen:
            continue
        seen.add(key)
        path = meeting.witness
        if b.kind == OWNS:
            message = (
                f"{where}: tasks {a.task} and {b.task} can both write {path} ({a.task} owns "
                f"{a.text!r}, {b.task} owns {b.text!r}); give every path to one task only"
            )
            code = "overlap"
        else:
            message = (
                f"{where}: task {b.task} reads {path} ({b.text!r}), which task {a.task} of the "
                f"same stage {a.stage!r} writes ({a.text!r}); move the reader to a later stage"
            )
            code = "input-race"
        out.append(Problem(code, message, (a.task, b.task), path))
    return out


def _outputs(run: RunDef, owned: list[Claim]) -> tuple[list[tuple[str, str]], list[Problem]]:
    """The outputs (task, path) fit for the later checks, and problems with the others."""
    out: list[Problem] = []
    usable: list[tuple[str, str]] = []
    by_task: dict[str, list[Claim]] = {}  # made when first needed

    def is_owned(task: Task, listed: Collection[str], path: str) -> bool:
        # An output listed as is in owns is owned by that literal (no `[` or
        # `\` can make the entry a pattern: `*` and `?` were refused above).
        if path in listed and "[" not in path and "\\" not in path:
            return True
        if not by_task:
            for claim in owned:
                by_task.setdefault(claim.task, []).append(claim)
        return any(matches(c.pattern, path) for c in by_task.get(task.id, []))

    for task in run.tasks:
        listed = () if task.owns is None else task.owns if len(task.owns) < 8 else set(task.owns)
        for path in run.output_paths(task):
            bad = canonical_problem(path, is_file=True)
            if bad is not None:
                out.append(
                    Problem(
                        bad.code,
                        f"{run.tasks_path}: task {task.id}: output {path!r} {bad.sentence()}",
                        (task.id,),
                        path,
                    )
                )
                continue
            if "*" in path or "?" in path:
                out.append(
                    Problem(
                        "invalid-output",
                        f"{run.tasks_path}: task {task.id}: output {path!r} has a wildcard; "
                        "outputs are the exact files that prove the task done",
                        (task.id,),
                        path,
                    )
                )
                continue
            if path.rsplit("/", 1)[-1] in GIT_CONTROL_FILES:
                out.append(
                    Problem(
                        "protected",
                        f"{run.tasks_path}: task {task.id}: output {path} would change how git "
                        "treats the files around it (what it ignores, converts or fetches); no "
                        "task may write one — name the output otherwise",
                        (task.id,),
                        path,
                    )
                )
                continue
            usable.append((task.id, path))
            if task.owns is not None and not is_owned(task, listed, path):
                out.append(
                    Problem(
                        "output-not-owned",
                        f"{run.tasks_path}: task {task.id}: output {path} is not covered by its own "
                        f"owns ({', '.join(task.owns) or 'none'}); add it to owns",
                        (task.id,),
                        path,
                    )
                )
    return usable, out


def _dirty_problems(run: RunDef, owned: list[Claim], changed: list[str]) -> list[Problem]:
    if not changed:
        return []
    # Only claims whose first name is a changed path's (or that have none) can own it.
    firsts = {path.split("/", 1)[0] for path in changed}
    index = OwnerIndex(
        [c for c in owned if not c.pattern.literal_prefix or c.pattern.literal_prefix[0] in firsts]
    )
    out: list[Problem] = []
    flagged = [(path, sorted({c.task for c in index.owners(path)})) for path in changed]
    flagged = [(path, owners) for path, owners in flagged if owners]
    the_runs = _as_on_the_branch(run, [path for path, _ in flagged])
    for path, owners in flagged:
        if path not in the_runs:
            who = owners[0] if len(owners) == 1 else ", ".join(owners)
            out.append(
                Problem(
                    "dirty-owned",
                    f"{path} has uncommitted changes or is untracked, and task {who} owns it; "
                    "commit, stash or remove it first (the run would commit it as task output)",
                    tuple(owners),
                    path,
                )
            )
    return out


def _as_on_the_branch(run: RunDef, paths: list[str]) -> set[str]:
    """Those of ``paths`` whose file on disk is the one the run's branch
    holds: a started or finished run's own outputs, not edits in the way."""
    found = find_tip(run.repo, run.id) if paths else None
    if found is None:
        return set()
    # Many paths: the whole tree in one listing, rather than an argv too long.
    committed = git.ls_tree(run.repo, found.tip, paths if len(paths) <= 1000 else None)
    fmt = git.object_format(run.repo)
    return {
        path
        for path in paths
        if path in committed and blob_on_disk(run.repo / path, fmt) == committed[path][1]
    }


def _pointer_problems(run: RunDef) -> tuple[int, list[Problem]]:
    out: list[Problem] = []
    sizes: dict[str, int] = {}  # bytes a pointer takes in a dispatch (not the pointers: 100,000s)
    outputs: dict[str, int] = {}  # characters of the task's output paths
    for task in run.tasks:
        pointer = render_pointer(run, task)
        sizes[task.id] = len(pointer.encode()) + 1
        outputs[task.id] = sum(map(len, run.output_paths(task)))
        if pointer.count("\n") > 1:
            out.append(
                Problem(
                    "pointer-lines",
                    f"{run.tasks_path}: task {task.id}: its pointer is {pointer.count(chr(10)) + 1} "
                    "lines, not two; keep `note` to one line and paths free of line breaks",
                    (task.id,),
                )
            )
    budget = run.packet.limits.payload_budget
    largest, what = _largest_dispatch(run, sizes, outputs)
    if largest > budget:
        out.append(
            Problem(
                "payload-budget",
                f"{run.packet_path}: {what} takes {largest:,} bytes, over "
                f"limits.payload_budget = {budget:,}; shorten notes, group inputs into bundles "
                "(`gitrun new --per-task N`), lower limits.concurrency or raise the budget",
            )
        )
    return largest, out


# What `next` prints around a batch's pointers, at most (cli/external.py).
BATCH_TEXT = 160


def _largest_dispatch(
    run: RunDef, sizes: dict[str, int], outputs: dict[str, int]
) -> tuple[int, str]:
    """The bytes of the largest single dispatch, and what it is: in external
    mode one `next` batch (the ``concurrency`` longest pointers and the text
    around them), in command mode one attempt's rendered argv. Nobody ever
    holds every pointer at once, so the run's size does not count. ``sizes``:
    each task's pointer bytes; ``outputs``: the length of its output paths."""
    if not sizes:
        return 0, "no dispatch"
    if run.packet.executor.kind == "external":
        batch = heapq.nlargest(run.packet.limits.concurrency, sizes.values())
        return sum(batch) + BATCH_TEXT, f"one `gitrun next` batch of {len(batch)} pointers"
    template = command_template(run.packet.executor)
    if template is None or template_problems(template):
        return max(sizes.values()), "one pointer"  # the executor's problem is reported apart
    # The argv grows with the pointer and the outputs: render the few tasks
    # longest in either (rendering all 100,000 would cost seconds).
    tasks = {t.id: t for t in run.tasks}
    candidates = set(heapq.nlargest(8, sizes, key=sizes.__getitem__))
    candidates |= set(heapq.nlargest(8, outputs, key=outputs.__getitem__))
    largest = 0
    for tid in candidates:
        values = attempt_values(run, tasks[tid], run.packet.limits.max_attempts)
        argv = render_command(template, values)
        largest = max(largest, sum(len(arg.encode()) + 1 for arg in argv))
    return largest, "one attempt's command line"


def _executor_model_problems(run: RunDef) -> list[Problem]:
    executor = run.packet.executor
    out = [Problem("executor", f"{run.packet_path}: {msg}") for msg in executor_problems(executor)]
    template = command_template(executor) if executor.kind != "external" else None
    if template is not None:
        for name in literal_models(template):
            out.append(
                Problem(
                    "literal-model",
                    f"{run.packet_path}: [executor] command names the model {name!r} literally; "
                    "write {model} there and set [model] default (or GITRUN_MODEL)",
                )
            )
    if executor.kind == "ray":  # the module imports Ray only when a run drives it
        out += ray_problems(run)
    for stage in run.stage_names if uses_model(template) else ():
        if not run.packet.model_for(stage):
            out.append(
                Problem(
                    "no-model",
                    f"{run.packet_path}: no model is configured for stage {stage!r}; set [model] "
                    "default in the packet or .gitrun/config.toml, or GITRUN_MODEL",
                )
            )
            break
    return out
