"""Where the programs of a command line read an argument as code.

Task data is never code: it reaches a worker only as whole argv elements (or
``GITRUN_*`` variables), and never in an element that a program parses as
code. :func:`code_slots` finds those elements in a command template: the
program itself, the script of a shell (``sh -c SCRIPT``, ``bash -lc``,
``sh -e -c``, or a script file), the code of an interpreter (``python -c``,
``perl -e``, ``node -e``, a script path), and the operands of wrappers that
pick or configure the program they run (``env [VAR=x ...]``, ``timeout N``,
``nice``, ``nohup``, ``stdbuf``, ``exec``, ``setsid``, ...), and every part of
a command line that a program hands to a shell (``script -c``, ``su -c``,
``watch``, ``ssh HOST ...``; the table is :mod:`gitrun.workers.wrappers`).

The analysis is deliberately conservative: a program gitrun does not know may
run its arguments as a command (``sudo``, ``flock``, ``docker exec``), so
every later argument named like a shell or interpreter starts a command of its
own. A false alarm costs the packet author one edit (read ``"$GITRUN_X"`` in
the script instead); a miss would run task data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gitrun.workers.wrappers import BUILTINS, WRAPPERS, Wrapper


@dataclass(frozen=True)
class Language:
    """How one shell or interpreter reads its options."""

    code_flags: str = ""  # short options whose value is the program text (python -c, perl -e)
    module_flags: str = ""  # short options whose value is code to load (node -r, ruby -r)
    arg_flags: str = ""  # short options that take a value that is not code
    long_code: frozenset[str] = frozenset()  # long options whose value is the program text
    long_module: frozenset[str] = frozenset()  # long options whose value is code to load
    long_args: frozenset[str] = frozenset()  # long options that take another value
    shell: bool = False  # the first operand is code even after -c (the script)


_SHELL = Language(
    arg_flags="oO",  # -o pipefail, -O extglob (also +o / +O)
    long_args=frozenset({"--rcfile", "--init-file"}),
    shell=True,
)
_FISH = Language(
    code_flags="c",
    module_flags="C",
    arg_flags="dDlp",
    long_code=frozenset({"--command"}),
    long_module=frozenset({"--init-command"}),
)
_PYTHON = Language(
    code_flags="cm", arg_flags="WX", long_args=frozenset({"--check-hash-based-pycs"})
)
_PERL = Language(code_flags="eE", module_flags="M", arg_flags="Ix")
_RUBY = Language(code_flags="e", module_flags="r", arg_flags="ICEFx")
_NODE = Language(
    code_flags="ep",
    module_flags="r",
    long_code=frozenset({"--eval", "--print"}),
    long_module=frozenset({"--require", "--import", "--loader"}),
)
_PHP = Language(code_flags="rBREF", arg_flags="cdz")
_LUA = Language(code_flags="e", module_flags="l")
_RSCRIPT = Language(code_flags="e")
_AWK = Language(
    code_flags="ef",
    module_flags="il",
    arg_flags="vF",
    long_code=frozenset({"--source", "--file", "--exec"}),
    long_module=frozenset({"--include", "--load"}),
    long_args=frozenset({"--assign", "--field-separator"}),
)
_SED = Language(
    code_flags="ef",
    arg_flags="l",
    long_code=frozenset({"--expression", "--file"}),
    long_args=frozenset({"--line-length"}),
)
_TCL = Language(code_flags="ce")
_PWSH = Language(
    code_flags="cef",
    long_code=frozenset(
        {"-command", "-commandwithargs", "-encodedcommand", "-file", "-cwa", "-ec"}
    ),
)

_LANGUAGES: dict[str, Language] = {
    **dict.fromkeys(
        ("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash", "csh", "tcsh"),
        _SHELL,
    ),
    "fish": _FISH,
    "python": _PYTHON,
    "perl": _PERL,
    "ruby": _RUBY,
    **dict.fromkeys(("node", "nodejs", "bun"), _NODE),  # deno: see gitrun.workers.wrappers
    "php": _PHP,
    **dict.fromkeys(("lua", "luajit"), _LUA),
    "rscript": _RSCRIPT,
    **dict.fromkeys(("awk", "gawk", "mawk", "nawk"), _AWK),
    **dict.fromkeys(("sed", "gsed"), _SED),
    **dict.fromkeys(("expect", "tclsh", "wish", "osascript"), _TCL),
    **dict.fromkeys(("pwsh", "powershell"), _PWSH),
}
_VERSIONED = re.compile(r"(python|pypy|perl|ruby|node|php|lua)[\d.]*")
# bash5, bash-5.2, zsh5.9, ksh93, sh.exe (the suffix is dropped first): a
# shell under a versioned name is still that shell.
_SHELL_NAME = re.compile(r"(ba|da|z|k|c|tc|fi|mk|y|po|a)?sh(?:[-.]?\d[\d.]*)?")


def program_name(arg: str) -> str:
    """``/usr/bin/python3.12`` -> ``python``; ``bash-5.2`` -> ``bash``;
    ``C:\\Windows\\System32\\cmd.exe`` -> ``cmd``."""
    name = re.split(r"[/\\]", arg)[-1].lower().removesuffix(".exe")
    found = _VERSIONED.fullmatch(name)
    if found:
        return "python" if found[1] == "pypy" else found[1]
    shell = _SHELL_NAME.fullmatch(name)
    if shell:
        return f"{shell[1] or ''}sh"
    return name


def code_slots(argv: list[str]) -> dict[int, str]:
    """Indices of ``argv`` whose element a program would read as code, each
    with a few words saying why (for the message)."""
    slots: dict[int, str] = {}
    if _command_at(argv, 0, slots):
        return slots
    # A program gitrun does not know may run its arguments as a command: the
    # first one named like a shell, an interpreter or a wrapper starts one.
    # Arguments a known interpreter passes on to its (literal) script are
    # data, so the search ends there: ["sh", "-c", SCRIPT, "sh", "{pointer}"]
    # is safe.
    for index in range(1, len(argv)):
        name = program_name(argv[index])
        known = name in _LANGUAGES or (name in WRAPPERS and name not in BUILTINS)
        if index not in slots and known and _command_at(argv, index, slots):
            break
    return slots


def _command_at(argv: list[str], index: int, slots: dict[int, str]) -> bool:
    """Mark the command starting at ``index``; whether every argument after
    it is accounted for (its program is a known shell or interpreter, or a
    wrapper that takes the rest as a command line)."""
    while index < len(argv):
        slots.setdefault(index, "the program to run")
        name = program_name(argv[index])
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            language = _LANGUAGES.get(name)
            if language is not None:
                _language_slots(argv, index, name, language, slots)
            return language is not None
        following, accounted = _after_wrapper(argv, index, name, wrapper, slots)
        if following is None:
            return accounted
        index = following
    return False


def _after_wrapper(
    argv: list[str], start: int, name: str, wrapper: Wrapper, slots: dict[int, str]
) -> tuple[int | None, bool]:
    """Mark a wrapper's own arguments. Return the index of the program it
    runs, or None and whether the rest is accounted for (a command line:
    all code) or not (no program gitrun can find)."""
    why = f"an argument of {name}, before the program it runs"
    index = start + 1
    operands = wrapper.operands
    then_code = wrapper.then_code

    def rest_is_code(index: int, how: str) -> tuple[None, bool]:
        for rest in range(index, len(argv)):
            slots[rest] = how
        return None, True

    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            slots.setdefault(index, why)
            index += 1
            if then_code and operands == 0:
                return rest_is_code(index, f"part of the command line {name} gives a shell")
            if wrapper.needs_dashdash or operands == 0:
                return index, False
            continue
        if arg.startswith("--"):
            slots.setdefault(index, why)
            option, has_value, _ = arg.partition("=")
            index += 1
            if option in wrapper.long_rest_code:
                return rest_is_code(index, f"the command line of {name} {option}")
            if option in wrapper.long_argv:
                then_code, operands = False, 0
            arity = _long_arity(wrapper, option)
            for _ in range(0 if has_value else arity):
                if index >= len(argv):
                    break
                slots[index] = _value_reason(wrapper, name, option, why)
                index += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            slots.setdefault(index, why)
            letters = arg[1:]
            index += 1
            if any(letter in wrapper.rest_is_code for letter in letters):
                return rest_is_code(index, f"the command line of {name} {arg}")
            for pos, letter in enumerate(letters):
                if letter in wrapper.argv_flags:
                    then_code, operands = False, 0
                if letter in wrapper.code_flags + wrapper.arg_flags + wrapper.program_flags:
                    if pos == len(letters) - 1 and index < len(argv):
                        slots[index] = _value_reason(wrapper, name, f"-{letter}", why)
                        index += 1
                    break
            continue
        if operands > 0 or (wrapper.assignments and "=" in arg):
            slots.setdefault(index, why)
            if not (wrapper.assignments and "=" in arg):
                operands -= 1
            index += 1
            continue
        if then_code:
            return rest_is_code(index, f"part of the command line {name} gives a shell")
        if wrapper.needs_dashdash:
            slots.setdefault(index, why)
            index += 1
            continue
        if wrapper.subcommands is not None:
            sub = wrapper.subcommands.get(arg, wrapper.subcommands.get("*"))
            slots.setdefault(index, why)
            if sub is None:
                return None, False  # a subcommand that runs no program
            return _after_wrapper(argv, index, f"{name} {arg}", sub, slots)
        return index, False
    return None, False


def _long_arity(wrapper: Wrapper, option: str) -> int:
    """How many values a wrapper's long option takes."""
    if option in wrapper.long_arity:
        return wrapper.long_arity[option]
    if option in wrapper.long_code | wrapper.long_args | wrapper.long_program:
        return 1
    if wrapper.long_flags is not None and option not in wrapper.long_flags:
        return 1
    return 0


def _value_reason(wrapper: Wrapper, name: str, option: str, why: str) -> str:
    """Why the value of a wrapper's option is a slot: a command line, a program, or an argument."""
    letter = option[1] if len(option) == 2 else ""
    if option in wrapper.long_code or (letter and letter in wrapper.code_flags):
        return f"the command line of {name} {option}"
    if option in wrapper.long_program or (letter and letter in wrapper.program_flags):
        return "the program to run"
    return why


def _language_slots(
    argv: list[str], start: int, name: str, language: Language, slots: dict[int, str]
) -> None:
    """Mark the code arguments of a shell or interpreter at ``start``."""
    index = start + 1
    got_text = False  # the program text came with an option (python -c, perl -e)
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            index += 1
            break
        option, has_value, _ = arg.partition("=")
        if option.lower() in language.long_code | language.long_module:
            # --eval CODE (and pwsh -Command CODE ...: the rest is one command line)
            got_text = got_text or option.lower() in language.long_code
            index += 1
            if not has_value:
                if not arg.startswith("--"):
                    for rest in range(index, len(argv)):
                        slots[rest] = f"the code {name} {arg} runs"
                    return
                if index < len(argv):
                    slots[index] = f"the code {name} {option} runs"
                    index += 1
            continue
        if arg.startswith("--"):
            index += 2 if option in language.long_args and not has_value else 1
            continue
        if len(arg) > 1 and (arg[0] == "-" or (language.shell and arg[0] == "+")):
            letters = arg[1:]
            index += 1
            for pos, letter in enumerate(letters):
                last = pos == len(letters) - 1
                if letter in language.code_flags + language.module_flags:
                    got_text = got_text or letter in language.code_flags
                    if last and index < len(argv):
                        slots[index] = f"the code {name} -{letter} runs"
                        index += 1
                    break
                if letter in language.arg_flags:
                    index += 1 if last else 0
                    break
            continue
        break
    if index < len(argv) and (language.shell or not got_text):
        what = "script" if language.shell else "script or program text"
        slots[index] = f"the {what} {name} runs"
