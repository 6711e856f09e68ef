"""How an attempt's command line is built from the packet's executor table.

The model always comes from configuration through ``{model}``; a literal
model name in a command is a problem ``gitrun check`` reports.

Task data is never code: it reaches a worker only as whole argv elements or
``GITRUN_*`` variables. A placeholder is substituted only
where an argv element is exactly one placeholder, and only where no program
reads that element as code (see :mod:`gitrun.workers.interpreters`); the ``shell``
preset's script gets nothing substituted at all. Every value also reaches the
worker as ``GITRUN_<NAME>`` in its environment, which is how a script reads
it (``"$GITRUN_POINTER"``). A template that breaks the rule is a ``check``
problem, and :func:`render_command` refuses it too.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from gitrun.definition.schema import Executor
from gitrun.errors import GitrunError
from gitrun.guard.install import claude_hooks
from gitrun.guard.sandbox import claude_sandbox
from gitrun.workers.interpreters import code_slots
from gitrun.workers.presets import (
    DEFAULT,
    PRESETS,
    SHELL_PRESET,
    Resume,
    client_of,
    find_preset,
)

PLACEHOLDERS = (
    "pointer", "task", "run", "model", "packet", "attempt", "outputs", "inputs", "stage",
    "claude_settings", "conversation",
)  # fmt: skip
# Filled by gitrun itself, never from the environment: gitrun's hooks and
# Bash sandbox for this repository, as Claude Code `--settings` JSON.
CLAUDE_SETTINGS = "claude_settings"
# Placeholders whose value is a list: one argument per item, or with a flag,
# `{inputs:--read}`, the flag before each item (`--read a --read b`).
LISTS = ("outputs", "inputs")
_NAMES = "|".join(PLACEHOLDERS)
_FLAG = r"-{1,2}[A-Za-z0-9][\w.-]*"
_PLACEHOLDER = re.compile(
    r"\{(?:(?P<list>" + "|".join(LISTS) + r"):(?P<flag>" + _FLAG + r")|(?P<name>" + _NAMES + r"))\}"
)
_OPTION_THEN_PLACEHOLDER = re.compile(r"(-[^=\s]+)=(" + _PLACEHOLDER.pattern + ")")
# What a user meant as a placeholder: a whole argument in braces naming a word.
_LOOKS_LIKE = re.compile(r"\{([A-Za-z_][\w-]*)(?::([^{}]*))?\}")

# Versioned model names, found anywhere in an argument (also inside `sh -c` scripts).
_MODEL_NAME = re.compile(
    r"(?<![\w{./-])("
    r"claude-[\w.-]*\d[\w.-]*|gpt-\d[\w.-]*|chatgpt-[\w.-]+|o[134]-(?:mini|pro)[\w.-]*"
    r"|gemini-\d[\w.-]*|llama-?\d[\w.-]*|mistral-[\w.-]+|mixtral-[\w.-]+|deepseek-[\w.-]+"
    r"|qwen\d?[\w.-]*-\d[\w.-]*|codestral-[\w.-]+|grok-\d[\w.-]*"
    r")(?![\w}])",
    re.IGNORECASE,
)
# Short aliases count only as a whole argument or a --model value.
_MODEL_ALIASES = {"opus", "sonnet", "haiku", "o1", "o3", "o4-mini", "gpt-5"}
# `--model X` anywhere; `-m` is ambiguous (`python -m`, `git commit -m`), so
# its value counts only when it looks like a model name.
_MODEL_FLAG = re.compile(r"(?:^|\s)--model(?:=|\s+)(\S+)")
# What a command writes for the configured model: the placeholder, or in a
# script the variable gitrun sets.
_FROM_CONFIG = {"{model}", "$GITRUN_MODEL", "${GITRUN_MODEL}"}


def command_template(
    executor: Executor, confined: bool = False, resumed: bool = False
) -> list[str] | None:
    """The argv template for a command executor; None when there is none;
    ``confined``: its attempts run under gitrun's sandbox; ``resumed``: the
    try continues a cut-off attempt's conversation (:func:`resumable`).

    `command` replaces the preset entirely; `args` are appended either way.
    A preset whose client runs gitrun's write-time hooks (claude) gets them
    through its settings, so ownership is enforced while the agent writes.
    """
    record = find_preset(executor.preset)
    resume = resumable(executor)
    if executor.command is not None:
        base = list(executor.command)
    elif record is None:
        return None
    elif record.script:
        if not executor.shell:
            return None
        base = [*record.argv, executor.shell]
    else:
        if resume is None:
            base = list(record.argv)
        elif resumed:
            base = list(resume.argv)
        else:  # a try that may be resumed: its conversation kept, under a known id
            base = [w for w in record.argv if w not in resume.drop] + list(resume.given)
        base += preset_extras(executor)
        for old, new in record.when_confined if confined else ():
            # its own sandbox cannot nest in gitrun's (see Preset.when_confined)
            base = [new if word == old else word for word in base]
    return base + list(executor.args)


def resumable(executor: Executor) -> Resume | None:
    """How a command run's cut-off attempts continue their conversation: its
    preset's way, unless ``[executor] resume = false``, its own ``command``
    (whose client gitrun cannot tell how to resume) or a Ray cluster (whose
    nodes keep the conversations) says otherwise."""
    record = find_preset(executor.preset)
    if record is None or executor.command is not None or executor.kind != "command":
        return None
    return record.resume if executor.resume else None


def preset_extras(executor: Executor) -> list[str]:
    """What gitrun adds to a preset's argv: for a client that runs gitrun's
    hooks (claude), the hooks through its settings flag and, by
    ``[executor] bash``, the Bash sandbox with the repository read-only
    (filled in per attempt: it names the repository), or no Bash at all."""
    record = find_preset(executor.preset)
    hooks = record.hooks if record is not None else None
    if hooks is None:
        return []
    if executor.bash == "sandbox":
        return [hooks.settings, "{" + CLAUDE_SETTINGS + "}"]
    extras = [hooks.settings, claude_settings()]
    return extras + (list(hooks.deny_bash) if executor.bash == "deny" else [])


def claude_settings(repo: Path | None = None) -> str:
    """gitrun's hooks as ``--settings`` JSON; with ``repo``, also the Bash
    sandbox that keeps the shell from writing in it."""
    settings: dict[str, object] = {"hooks": claude_hooks()}
    if repo is not None:
        settings["sandbox"] = claude_sandbox(repo)
    return json.dumps(settings, separators=(",", ":"), allow_nan=False)


def nested_sandbox_problem(argv: list[str]) -> str | None:
    """The sentence for a command that runs codex with its own
    workspace-write sandbox, when gitrun's sandbox confines it: codex's
    bubblewrap cannot make its mount points in the repository, read-only
    there, and its worker writes nothing (command_template switches the
    preset's flag for this reason); None for any other command."""
    client = client_of(argv)
    if client is None or not client.when_confined:
        return None
    said = next((w for n in range(len(argv)) if (w := _workspace_write(argv, n))), None)
    if said is None:
        return None
    name = client.name
    return (
        f"[executor] command runs {name} with `{said}` inside gitrun's sandbox, where {name}'s "
        "own sandbox cannot make its mount points in the read-only repository (its workers "
        "would write nothing); pass `--sandbox danger-full-access` instead, as the "
        f"{name} preset does there (gitrun's sandbox still holds each attempt to its task's "
        f'paths), use preset = "{name}", or set [executor] isolation = "none"'
    )


def _workspace_write(argv: list[str], n: int) -> str:
    """The words from ``argv[n]`` that ask for codex's workspace-write sandbox
    (``--sandbox workspace-write``, ``-s ...``, ``--sandbox=...``,
    ``--full-auto``, which implies it, or ``-c sandbox_mode=...``), else ""."""
    flag, value = argv[n], argv[n + 1] if n + 1 < len(argv) else ""
    if flag in ("--full-auto", "--sandbox=workspace-write"):
        return flag
    if flag in ("--sandbox", "-s") and value == "workspace-write":
        return f"{flag} {value}"
    key, _, setting = value.partition("=")
    if flag in ("-c", "--config") and key.strip() == "sandbox_mode":
        return f"{flag} {value}" if setting.strip().strip("'\"") == "workspace-write" else ""
    return ""


def executor_problems(executor: Executor) -> list[str]:
    """Sentences about an executor table that cannot produce a safe command
    (a Ray executor runs the same command on its nodes)."""
    if executor.kind == "external":
        return []
    if executor.command is None and executor.preset is None:
        return [
            f'[executor] has neither `preset` nor `command`; set preset = "{DEFAULT.name}" '
            f"(or {', '.join(n for n in PRESETS if n != DEFAULT.name)}) or "
            'command = ["program", "{pointer}", ...]'
        ]
    if executor.command is None and executor.preset not in PRESETS:
        return [
            f"[executor] preset {executor.preset!r} is unknown; use one of {', '.join(PRESETS)}"
        ]
    if executor.command is None and executor.preset == SHELL_PRESET and not executor.shell:
        return ['[executor] preset "shell" needs `shell = "the command line to run"`']
    template = command_template(executor)
    assert template is not None
    return template_problems(template, _field_namer(executor, template))


def _field_namer(executor: Executor, template: list[str]) -> Callable[[int], str]:
    """``command[2]``, ``args[0]``, ``shell``: where an argument of ``template``
    (the executor's, as built) comes from."""
    own = len(executor.command) if executor.command is not None else -1
    base = len(template) - len(executor.args)  # args come last, after all the rest

    def name(index: int) -> str:
        if executor.command is not None and index < own:
            return f"command[{index}]"
        if executor.command is None and executor.preset == SHELL_PRESET:
            if index == 2:
                return "shell"
            return f"args[{index - 3}]" if index > 2 else f"argument {index} of the preset"
        if index >= base:
            return f"args[{index - base}]"
        return f"argument {index} of the {executor.preset} preset"

    return name


def template_problems(
    template: list[str], field: Callable[[int], str] = lambda i: f"command[{i}]"
) -> list[str]:
    """Why a command template could hand task data to a program as code, or
    names a placeholder gitrun does not know.

    Each problem is one sentence naming the ``[executor]`` field and the fix.
    """
    slots = code_slots(template)
    problems = []
    for index, arg in enumerate(template):
        found = [m[0] for m in _PLACEHOLDER.finditer(arg)]
        if not found:
            if field(index) != "shell":
                problems += _syntax_problems(field(index), arg)
            continue
        where = field(index)
        names = list(dict.fromkeys(_name(m) for m in _PLACEHOLDER.finditer(arg)))
        env = ", ".join(f'"$GITRUN_{n.upper()}"' for n in names)
        marks = " and ".join(dict.fromkeys(found))
        if where == "shell":
            problems.append(
                f"[executor] shell contains {marks}, but the shell preset substitutes nothing "
                f"into its script (task data must never be parsed as code); write {env} there "
                "instead: every value is in the worker's environment as GITRUN_<NAME>"
            )
        elif _PLACEHOLDER.fullmatch(arg) is None:
            split = _OPTION_THEN_PLACEHOLDER.fullmatch(arg)
            own = (
                f'"{split[1]}", "{split[2]}"'
                if split
                else ", ".join(f'"{m}"' for m in dict.fromkeys(found))
            )
            problems.append(
                f"[executor] {where} ({arg!r}) embeds {marks} in a longer string, where a "
                f"program could parse task data as code; make each placeholder an argument of "
                f"its own ({own}), or read {env} inside a script"
            )
        elif index in slots:
            why = slots[index]
            if why == "the program to run":
                fix = "name the program literally"
            elif why.startswith("an argument of"):
                fix = f"write that argument literally, or move {arg} after the program"
            elif why.startswith("part of the command line"):
                fix = (
                    "keep that command line literal and have the program it runs read "
                    f"{env} from its environment, or run the program directly with {arg} "
                    "as an argument of its own"
                )
            else:
                fix = (
                    f"keep that argument literal and pass {arg} as an argument of its own "
                    f"after the script (or read {env} inside it)"
                )
            problems.append(
                f"[executor] {where} is {arg}, which is {why}, so task data would be parsed as "
                f"code; {fix}"
            )
    return problems


def _name(found: re.Match[str]) -> str:
    return found["list"] or found["name"]


def _syntax_problems(where: str, arg: str) -> list[str]:
    """A whole argument written like a placeholder that is none: a misspelt
    name (``{input}``), a flag on a single value (``{task:--id}``), or a
    flag that is not one (``{inputs:read}``)."""
    shape = _LOOKS_LIKE.fullmatch(arg)
    if shape is None:
        return []
    name, flag = shape[1], shape[2]
    known = ", ".join("{" + n + "}" for n in PLACEHOLDERS)
    if name not in PLACEHOLDERS:
        if flag is not None:
            return []  # `{x:>10}` and the like: literal text for the program
        return [
            f"[executor] {where} is {arg!r}, which is not a placeholder gitrun knows; use one "
            f"of {known} (or {{inputs:--flag}} to put a flag before each input)"
        ]
    if name not in LISTS:
        return [
            f"[executor] {where} is {arg!r}, but only {{inputs}} and {{outputs}} take a flag to "
            f'repeat; write the flag as an argument of its own before "{{{name}}}"'
        ]
    return [
        f"[executor] {where} is {arg!r}, whose flag {flag!r} is not an option; write it with "
        f"its dashes: {{{name}:--read}} gives --read before each item"
    ]


def has_placeholder(arg: str) -> bool:
    """Whether an argument of a template holds a placeholder (task data)."""
    return _PLACEHOLDER.search(arg) is not None


def uses_model(argv: list[str] | None) -> bool:
    """Whether a command takes the configured model (``{model}``, or the
    variable in a script); a command executor that names neither runs without
    one. None (an external or unset executor) counts as taking one."""
    if argv is None:
        return True
    return any(name in arg for arg in argv for name in _FROM_CONFIG)


def literal_models(argv: list[str]) -> list[str]:
    """Model names written into a command instead of ``{model}``."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else "{model}"
        if arg == "--model" and value != "{model}":
            found.append(value)
        if arg == "-m" and (value.lower() in _MODEL_ALIASES or _MODEL_NAME.fullmatch(value)):
            found.append(value)
        for value in _MODEL_FLAG.findall(arg):
            if value.strip("'\"") not in _FROM_CONFIG:
                found.append(value.strip("'\""))
        if arg.lower() in _MODEL_ALIASES:
            found.append(arg)
        found += _MODEL_NAME.findall(arg)
    return list(dict.fromkeys(found))


class UnsafeCommand(GitrunError):
    """A command template that would hand task data to a program as code."""


def render_command(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Fill whole-element placeholders; refuse a template that would run task data as code.

    ``gitrun check`` reports the same problems; refusing here too means a run
    whose check was skipped still never executes task data. An element that is
    exactly ``{outputs}`` or ``{inputs}`` becomes one argument per path (in
    ``values`` one per line), and ``{inputs:--read}`` puts ``--read`` before
    each; elements without a placeholder (JSON, scripts) are passed as they are.
    """
    plan = _plan(tuple(template))
    if isinstance(plan, str):
        raise UnsafeCommand(f"refusing to start the worker: {plan}")
    out: list[str] = []
    for kind, text, flag in plan:
        if kind == _LITERAL:
            out.append(text)
        elif kind == _SETTINGS:
            if not values.get("repo"):  # the sandbox names it: never launch without one
                raise UnsafeCommand(f"refusing to start the worker: {text} needs the repository")
            out.append(claude_settings(Path(values["repo"])))
        elif kind == _LIST:
            for path in values.get(text, "").split("\n"):
                if path:
                    # A path is never read as an option: `-rf` goes as `./-rf`.
                    item = f"./{path}" if path.startswith("-") else path
                    out += [flag, item] if flag else [item]
        else:
            out.append(values.get(text, ""))
    return out


_LITERAL, _SETTINGS, _LIST, _VALUE = "literal", "settings", "list", "value"
_Step = tuple[str, str, str | None]  # kind, the text or placeholder name, a list's flag


@functools.lru_cache(maxsize=32)
def _plan(template: tuple[str, ...]) -> tuple[_Step, ...] | str:
    """How :func:`render_command` fills ``template``, or the first reason it
    must refuse it: worked out once per template, not once per attempt (a
    fan-out renders the same template for every task; the answer depends on
    the template alone)."""
    problems = template_problems(list(template))
    if problems:
        return problems[0]
    steps: list[_Step] = []
    for arg in template:
        found = _PLACEHOLDER.fullmatch(arg)
        if found is None:
            steps.append((_LITERAL, arg, None))
        elif _name(found) == CLAUDE_SETTINGS:
            steps.append((_SETTINGS, arg, None))
        elif _name(found) in LISTS:
            steps.append((_LIST, _name(found), found["flag"]))
        else:
            steps.append((_VALUE, _name(found), None))
    return tuple(steps)
