"""How an attempt's command line is built from the packet's executor table.

The model always comes from configuration through ``{model}``; a literal
model name in a command is a problem ``gitrun check`` reports.

Task data is never code (DESIGN.md rule 9). A placeholder is substituted only
where an argv element is exactly one placeholder, and only where no program
reads that element as code (see :mod:`gitrun.interpreters`); the ``shell``
preset's script gets nothing substituted at all. Every value also reaches the
worker as ``GITRUN_<NAME>`` in its environment, which is how a script reads
it (``"$GITRUN_POINTER"``). A template that breaks the rule is a ``check``
problem, and :func:`render_command` refuses it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from gitrun.errors import GitrunError
from gitrun.interpreters import code_slots
from gitrun.settings import Executor

PLACEHOLDERS = ("pointer", "task", "run", "model", "packet", "attempt", "outputs", "stage")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_OPTION_THEN_PLACEHOLDER = re.compile(r"(-[^=\s]+)=(\{(?:" + "|".join(PLACEHOLDERS) + r")\})")

# Each preset's exact argv; README.md documents them. The packet may replace
# any of them with its own `command`.
PRESETS: dict[str, list[str]] = {
    "claude": [
        "claude", "-p", "{pointer}", "--model", "{model}",
        "--permission-mode", "acceptEdits", "--output-format", "text",
    ],
    "codex": ["codex", "exec", "--model", "{model}", "--sandbox", "workspace-write", "{pointer}"],
    "gemini": ["gemini", "--model", "{model}", "--yolo", "--prompt", "{pointer}"],
    "aider": [
        "aider", "--model", "{model}", "--no-auto-commits", "--yes-always",
        "--message", "{pointer}",
    ],
}  # fmt: skip
SHELL_PRESET = "shell"

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


def command_template(executor: Executor) -> list[str] | None:
    """The argv template for a command executor; None when there is none.

    `command` replaces the preset entirely; `args` are appended either way.
    The claude preset also gets gitrun's write-time hooks through
    `--settings`, so ownership is enforced while the agent writes.
    """
    if executor.command is not None:
        base = list(executor.command)
    elif executor.preset == SHELL_PRESET:
        if not executor.shell:
            return None
        base = ["sh", "-c", executor.shell]
    elif executor.preset in PRESETS:
        base = list(PRESETS[executor.preset])
        if executor.preset == "claude":
            base += ["--settings", claude_settings()]
    else:
        return None
    return base + list(executor.args)


def claude_settings() -> str:
    import json

    from gitrun.install import claude_hooks

    return json.dumps({"hooks": claude_hooks()}, separators=(",", ":"))


def executor_problems(executor: Executor) -> list[str]:
    """Sentences about an executor table that cannot produce a safe command."""
    if executor.kind != "command":
        return []
    if executor.command is None and executor.preset is None:
        return [
            '[executor] has neither `preset` nor `command`; set preset = "claude" (or codex, '
            'gemini, aider, shell) or command = ["program", "{pointer}", ...]'
        ]
    if executor.command is None and executor.preset not in (*PRESETS, SHELL_PRESET):
        return [
            f"[executor] preset {executor.preset!r} is unknown; use one of "
            f"{', '.join([*PRESETS, SHELL_PRESET])}"
        ]
    if executor.command is None and executor.preset == SHELL_PRESET and not executor.shell:
        return ['[executor] preset "shell" needs `shell = "the command line to run"`']
    template = command_template(executor)
    assert template is not None
    return template_problems(template, _field_namer(executor))


def _field_namer(executor: Executor) -> Callable[[int], str]:
    """``command[2]``, ``args[0]``, ``shell``: where an argument of the template comes from."""
    own = len(executor.command) if executor.command is not None else -1

    def name(index: int) -> str:
        if executor.command is not None and index < own:
            return f"command[{index}]"
        if executor.command is None and executor.preset == SHELL_PRESET:
            if index == 2:
                return "shell"
            return f"args[{index - 3}]" if index > 2 else f"argument {index} of the preset"
        base = len(PRESETS.get(executor.preset or "", [])) + 2 * (executor.preset == "claude")
        if executor.command is not None:
            base = own
        if index >= base:
            return f"args[{index - base}]"
        return f"argument {index} of the {executor.preset} preset"

    return name


def template_problems(
    template: list[str], field: Callable[[int], str] = lambda i: f"command[{i}]"
) -> list[str]:
    """Why a command template could hand task data to a program as code.

    Each problem is one sentence naming the ``[executor]`` field and the fix.
    """
    slots = code_slots(template)
    problems = []
    for index, arg in enumerate(template):
        names = list(dict.fromkeys(_PLACEHOLDER.findall(arg)))
        if not names:
            continue
        where = field(index)
        env = ", ".join(f'"$GITRUN_{n.upper()}"' for n in names)
        marks = " and ".join("{" + n + "}" for n in names)
        if where == "shell":
            problems.append(
                f"[executor] shell contains {marks}, but the shell preset substitutes nothing "
                f"into its script (task data must never be parsed as code); write {env} there "
                "instead: every value is in the worker's environment as GITRUN_<NAME>"
            )
        elif _PLACEHOLDER.fullmatch(arg) is None:
            split = _OPTION_THEN_PLACEHOLDER.fullmatch(arg)
            own = f'"{split[1]}", "{split[2]}"' if split else ", ".join(f'"{{{n}}}"' for n in names)
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
            if value.strip("'\"") != "{model}":
                found.append(value.strip("'\""))
        if arg.lower() in _MODEL_ALIASES:
            found.append(arg)
        found += _MODEL_NAME.findall(arg)
    return list(dict.fromkeys(found))


class UnsafeCommand(GitrunError):
    """A command template that would hand task data to a program as code."""


def render_command(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Fill whole-element placeholders; refuse a template that breaks rule 9.

    ``gitrun check`` reports the same problems; refusing here too means a run
    whose check was skipped still never executes task data. An element that is
    exactly ``{outputs}`` becomes one argument per output; elements without a
    placeholder (JSON, scripts) are passed as they are.
    """
    problems = template_problems(template)
    if problems:
        raise UnsafeCommand(f"refusing to start the worker: {problems[0]}")
    out: list[str] = []
    for arg in template:
        found = _PLACEHOLDER.fullmatch(arg)
        if found is None:
            out.append(arg)
        elif found[1] == "outputs":
            out += [line for line in values.get("outputs", "").split("\n") if line]
        else:
            out.append(values.get(found[1], ""))
    return out
