"""Programs that run another program, or a command line: how to read their arguments.

:func:`gitrun.workers.interpreters.code_slots` walks a command template through this
table. For each program it says which options take a value, which values are
a command line a shell parses (``su -c``, ``flock -c``) or the program to
run (``su -s``, ``docker run --entrypoint``), how many fixed operands come
before what it runs (``timeout``'s duration, ``ssh``'s host), and whether
what follows is an argv program (analysed in turn) or a command line (every
element of it is code). Entries follow each program's manual; the comments
say what each does with its operands. Where an option's arity is unknown the
reading errs towards marking more as code: a false alarm costs one edit, a
miss runs task data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Wrapper:
    """A program that runs another one, or a command line: its options, then
    fixed operands, then what follows (a program and its arguments as argv,
    or a command line a shell parses)."""

    arg_flags: str = ""  # short options with a value
    long_args: frozenset[str] = frozenset()
    code_flags: str = ""  # short options whose value is a command line (env -S, flock -c)
    long_code: frozenset[str] = frozenset()
    program_flags: str = ""  # short options whose value is the program to run (su -s)
    long_program: frozenset[str] = frozenset()
    long_arity: Mapping[str, int] = field(default_factory=dict)  # bwrap --bind SRC DEST
    long_flags: frozenset[str] | None = None  # if set, every other long option takes a value
    operands: int = 0  # operands before the program (timeout's duration, ssh's host)
    assignments: bool = False  # NAME=VALUE operands (env)
    rest_is_code: str = ""  # short flags after which the rest is one command line (sudo -s)
    long_rest_code: frozenset[str] = frozenset()
    then_code: bool = False  # what follows the fixed operands is a shell command line
    argv_flags: str = ""  # short options that make what follows an argv program (watch -x)
    long_argv: frozenset[str] = frozenset()
    subcommands: Mapping[str, Wrapper] | None = None  # docker run, uv run; "*": any other
    needs_dashdash: bool = False  # the program comes only after "--" (kubectl exec)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Run a command line with a shell, or hand it to one elsewhere: every operand
# after their options (and fixed operands) is code, and so is the value of
# their command options.
_SU = Wrapper(
    arg_flags="gGw",
    long_args=_words("--group --supp-group --whitelist-environment"),
    code_flags="c",  # su -c COMMAND: passed to the shell's -c
    long_code=_words("--command --session-command"),
    program_flags="s",  # su -s SHELL: the program that runs it
    long_program=_words("--shell"),
    operands=1,  # the user; every later argument goes to the user's shell
    then_code=True,
)
# `npx [-p PKG] [-c CMD] BIN [ARGS]`: -c is a shell command line, a package
# binary otherwise runs as argv.
_NPX = Wrapper(
    arg_flags="p", long_args=_words("--package"), code_flags="c", long_code=_words("--call")
)
# `npm run SCRIPT -- ARGS` appends ARGS to a package.json script line that a
# shell runs; `npm exec` is npx. Any other subcommand: all of it is code.
_SCRIPT_RUNNER = Wrapper(
    subcommands={"exec": _NPX, "x": _NPX, "dlx": _NPX, "*": Wrapper(then_code=True)}
)
_DOCKER_RUN = Wrapper(
    arg_flags="acehlmpuvw",
    long_program=_words("--entrypoint"),
    long_flags=_words(
        "--rm --init --privileged --read-only --detach --interactive --tty --publish-all "
        "--no-healthcheck --oom-kill-disable --sig-proxy --quiet --disable-content-trust "
        "--use-api-socket --help"
    ),
    operands=1,  # the image
)
_DOCKER_EXEC = Wrapper(
    arg_flags="euw",
    long_flags=_words("--detach --interactive --tty --privileged --help"),
    operands=1,  # the container
)
_DOCKER = Wrapper(
    arg_flags="cHl",
    long_args=_words("--config --context --host --log-level --tlscacert --tlscert --tlskey"),
    subcommands={"run": _DOCKER_RUN, "create": _DOCKER_RUN, "exec": _DOCKER_EXEC},
)
_KUBECTL = Wrapper(
    subcommands=dict.fromkeys(("exec", "run", "debug"), Wrapper(needs_dashdash=True)),
)
_UVX = Wrapper(
    arg_flags="pw",
    long_args=_words("--from --with --with-editable --with-requirements --python --index"),
)
_UV_RUN = Wrapper(
    arg_flags="pw",
    long_args=_words(
        "--with --with-editable --with-requirements --python --package --extra --group "
        "--only-group --no-group --env-file --directory --project --index --default-index "
        "--index-url --extra-index-url --find-links --config-file --cache-dir --color"
    ),
)
_CONDA_RUN = Wrapper(arg_flags="np", long_args=_words("--name --prefix --cwd"))
# make expands --eval text and its makefiles ($(shell ...) runs a command),
# and a NAME=VALUE operand is a variable it expands: every operand is code.
_MAKE = Wrapper(
    arg_flags="CIjlOoW",
    long_args=_words(
        "--directory --include-dir --jobs --load-average --output-sync --old-file "
        "--assume-old --what-if --new-file --assume-new"
    ),
    code_flags="Ef",
    long_code=_words("--eval --file --makefile"),
    then_code=True,
)
# Editors and debuggers run commands given as options (vim -c, nvim --cmd,
# emacs --eval, gdb -ex) and as operands (vim +CMD, gdb's program): all code.
_VIM = Wrapper(arg_flags="iuUTrwWs", code_flags="cS", long_code=_words("--cmd"), then_code=True)
_EMACS = Wrapper(
    arg_flags="dLt",
    code_flags="lf",
    long_code=_words("--eval --execute --load --funcall --script"),
    then_code=True,
)
_GDB = Wrapper(
    arg_flags="pcsedD",
    code_flags="x",
    long_code=_words("--eval-command --init-eval-command --command --init-command"),
    then_code=True,
)
# git -c NAME=VALUE sets any configuration (an alias `!cmd`, core.pager,
# core.sshCommand): code. Its subcommand picks the program (aliases too), and
# a few subcommands run a command line or a program.
_GIT = Wrapper(
    arg_flags="C",
    long_args=_words("--git-dir --work-tree --namespace --super-prefix --attr-source"),
    code_flags="c",
    long_code=_words("--config-env"),
    long_program=_words("--exec-path"),
    subcommands={
        "rebase": Wrapper(
            arg_flags="sX",
            long_args=_words("--onto --strategy --strategy-option"),
            code_flags="x",
            long_code=_words("--exec"),
        ),
        "submodule": Wrapper(subcommands={"foreach": Wrapper(then_code=True)}),
        "bisect": Wrapper(subcommands={"run": Wrapper()}),
        "filter-branch": Wrapper(then_code=True),
        "difftool": Wrapper(code_flags="x", long_code=_words("--extcmd")),
    },
)
# rsync -e/--rsh is the remote shell command line, --rsync-path runs on the
# remote side; its operands are paths (the first is read as a program here,
# which errs towards a false alarm).
_RSYNC = Wrapper(
    arg_flags="BfT",
    long_args=_words(
        "--filter --exclude --include --exclude-from --include-from --files-from --temp-dir "
        "--block-size --log-file --password-file --partial-dir --compare-dest --copy-dest "
        "--link-dest --backup-dir --suffix --chmod --chown --timeout --bwlimit"
    ),
    code_flags="eM",
    long_code=_words("--rsh --rsync-path --remote-option"),
)
# A terminal's -e runs the rest (as argv, or through a shell when it is one word).
_TERMINAL = Wrapper(rest_is_code="e", long_rest_code=_words("--command"))
# deno eval CODE, deno task (a shell line), deno SCRIPT: code; deno run SCRIPT ARGS: argv.
_DENO = Wrapper(
    subcommands={
        "run": Wrapper(
            arg_flags="c",
            long_args=_words("--config --import-map --location --seed --cert --lock --env-file"),
            long_code=_words("--preload --import"),
        ),
        "*": Wrapper(then_code=True),
    }
)

WRAPPERS: dict[str, Wrapper] = {
    "env": Wrapper(
        arg_flags="uCP",
        long_args=frozenset({"--unset", "--chdir"}),
        code_flags="S",
        long_code=frozenset({"--split-string"}),
        assignments=True,
    ),
    "timeout": Wrapper(
        arg_flags="sk", long_args=frozenset({"--signal", "--kill-after"}), operands=1
    ),
    "nice": Wrapper(arg_flags="n", long_args=frozenset({"--adjustment"})),
    "nohup": Wrapper(),
    "stdbuf": Wrapper(arg_flags="ioe", long_args=frozenset({"--input", "--output", "--error"})),
    "exec": Wrapper(arg_flags="a"),
    "setsid": Wrapper(),
    "time": Wrapper(arg_flags="fo", long_args=frozenset({"--format", "--output"})),
    "command": Wrapper(),
    "builtin": Wrapper(),
    "ionice": Wrapper(arg_flags="cnp"),
    "taskset": Wrapper(operands=1),
    "chrt": Wrapper(arg_flags="TPD", operands=1),
    "unbuffer": Wrapper(),
    # sudo -s / -i with operands: they form one command line for the shell.
    "sudo": Wrapper(
        arg_flags="ugCDhprtUT",
        long_args=frozenset({"--user", "--group", "--chdir", "--host", "--prompt"}),
        rest_is_code="si",
        long_rest_code=_words("--shell --login"),
    ),
    "doas": Wrapper(arg_flags="uC", rest_is_code="s"),
    # flock LOCK -c COMMAND: a shell command line; flock LOCK PROGRAM ARGS: argv.
    "flock": Wrapper(
        arg_flags="wE",
        long_args=frozenset({"--timeout", "--conflict-exit-code"}),
        code_flags="c",
        long_code=frozenset({"--command"}),
        operands=1,
    ),
    # xargs runs its operands as argv (with -I it substitutes into argv
    # elements); it never hands them to a shell.
    "xargs": Wrapper(
        arg_flags="adEeIiLlnPs",
        long_args=frozenset({"--arg-file", "--delimiter", "--max-args", "--max-procs"}),
    ),
    # script -c COMMAND runs COMMAND with $SHELL -c; its operand is the log
    # file (BSD script runs later operands as a command): nothing is argv.
    "script": Wrapper(
        arg_flags="BEIOTmo",
        long_args=_words(
            "--log-io --echo --log-in --log-out --log-timing --logging-format --output-limit"
        ),
        code_flags="c",
        long_code=_words("--command"),
        then_code=True,
    ),
    "su": _SU,
    # runuser: like su, except `-u USER [--] PROGRAM ARGS`, which runs argv.
    "runuser": Wrapper(
        arg_flags="gGwu",
        long_args=_words("--group --supp-group --whitelist-environment --user"),
        code_flags="c",
        long_code=_words("--command --session-command"),
        program_flags="s",
        long_program=_words("--shell"),
        operands=1,
        then_code=True,
        argv_flags="u",
        long_argv=_words("--user"),
    ),
    # sg GROUP [-c] COMMAND: COMMAND goes to /bin/sh -c.
    "sg": Wrapper(code_flags="c", operands=1, then_code=True),
    # watch joins every operand and runs the result with `sh -c`; with
    # -x/--exec it runs them as argv.
    "watch": Wrapper(
        arg_flags="nq",
        long_args=_words("--interval --equexit"),
        then_code=True,
        argv_flags="x",
        long_argv=_words("--exec"),
    ),
    # ssh DEST COMMAND...: the operands after the destination are joined into
    # one line for the remote shell; -o ProxyCommand=... is a local one.
    "ssh": Wrapper(arg_flags="BbcDEeFIiJLlmOpQRSWw", code_flags="o", operands=1, then_code=True),
    "rsh": Wrapper(arg_flags="l", operands=1, then_code=True),
    "mosh": Wrapper(
        arg_flags="p",
        long_args=_words("--client --server --port --predict --family --bind-server"),
        long_code=_words("--ssh"),
        operands=1,
        then_code=True,
    ),
    # tmux and screen take commands (new-session 'CMD', -X stuff TEXT) that a
    # shell or the terminal runs: every operand is code.
    "tmux": Wrapper(arg_flags="fLST", code_flags="c", then_code=True),
    "screen": Wrapper(arg_flags="cehpStT", program_flags="s", rest_is_code="X", then_code=True),
    # nix-shell --run/--command CMD is a shell line; its operands and --arg
    # values are Nix expressions: all code.
    "nix-shell": Wrapper(
        arg_flags="IAj",
        long_args=_words("--attr --include --max-jobs"),
        long_code=_words("--run --command"),
        then_code=True,
    ),
    "npx": _NPX,
    "npm": _SCRIPT_RUNNER,
    "pnpm": _SCRIPT_RUNNER,
    "yarn": _SCRIPT_RUNNER,
    # GNU parallel joins its command operands into a shell line (and with no
    # command runs its arguments as commands): all code.
    "parallel": Wrapper(then_code=True),
    "sem": Wrapper(then_code=True),
    # at and batch read a shell script (-f FILE, or stdin) run later by a shell.
    "at": Wrapper(arg_flags="qt", code_flags="f", then_code=True),
    "batch": Wrapper(arg_flags="qt", code_flags="f", then_code=True),
    # entr -s: its first operand is run with $SHELL -c.
    "entr": Wrapper(rest_is_code="s"),
    # Wrappers that run their operands as argv: the wrapped program is analysed.
    "chroot": Wrapper(long_args=_words("--userspec --groups"), operands=1),
    "unshare": Wrapper(
        arg_flags="SGRw",
        long_args=_words(
            "--setuid --setgid --root --wd --propagation --setgroups --map-user --map-group "
            "--map-users --map-groups"
        ),
    ),
    "nsenter": Wrapper(arg_flags="tSG", long_args=_words("--target --setuid --setgid")),
    "firejail": Wrapper(),  # its options are --name=value
    "systemd-run": Wrapper(
        arg_flags="upHME",
        long_args=_words(
            "--unit --property --host --machine --setenv --description --slice --uid --gid "
            "--nice --working-directory --service-type --on-active --on-boot --on-startup "
            "--on-unit-active --on-unit-inactive --on-calendar --path-property "
            "--socket-property --timer-property"
        ),
    ),
    "bwrap": Wrapper(
        long_arity={
            **dict.fromkeys(
                _words(
                    "--bind --bind-try --ro-bind --ro-bind-try --dev-bind --dev-bind-try "
                    "--symlink --setenv --file --bind-data --ro-bind-data --chmod"
                ),
                2,
            ),
            **dict.fromkeys(
                _words(
                    "--unsetenv --chdir --dir --tmpfs --proc --dev --mqueue --uid --gid "
                    "--hostname --args --seccomp --add-seccomp-fd --lock-file --sync-fd "
                    "--info-fd --json-status-fd --block-fd --userns-block-fd --userns "
                    "--userns2 --pidns --cap-add --cap-drop --perms --size --remount-ro "
                    "--overlay-src --tmp-overlay --ro-overlay --exec-label --file-label "
                    "--argv0"
                ),
                1,
            ),
            "--overlay": 3,
        }
    ),
    "docker": _DOCKER,
    "podman": _DOCKER,
    "nerdctl": _DOCKER,
    "kubectl": _KUBECTL,
    "oc": _KUBECTL,
    "uv": Wrapper(
        long_args=_words("--directory --project --cache-dir --config-file --color"),
        subcommands={"run": _UV_RUN, "tool": Wrapper(subcommands={"run": _UVX})},
    ),
    "uvx": _UVX,
    "poetry": Wrapper(
        arg_flags="C", long_args=_words("--directory --project"), subcommands={"run": Wrapper()}
    ),
    "conda": Wrapper(subcommands={"run": _CONDA_RUN}),
    "mamba": Wrapper(subcommands={"run": _CONDA_RUN}),
    "micromamba": Wrapper(subcommands={"run": _CONDA_RUN}),
    "pipx": Wrapper(
        subcommands={"run": Wrapper(long_args=_words("--spec --python --pip-args --index-url"))}
    ),
    **dict.fromkeys(("make", "gmake", "bmake"), _MAKE),
    **dict.fromkeys(("vim", "nvim", "vi", "gvim", "rvim", "vimdiff"), _VIM),
    **dict.fromkeys(("emacs", "emacsclient"), _EMACS),
    **dict.fromkeys(("gdb", "gdb-multiarch", "lldb"), _GDB),
    "git": _GIT,
    "rsync": _RSYNC,
    **dict.fromkeys(
        ("xterm", "uxterm", "urxvt", "rxvt", "konsole", "alacritty", "kitty"), _TERMINAL
    ),
    "deno": _DENO,
    # busybox APPLET ARGS (toybox too): the applet is the program, analysed in turn.
    "busybox": Wrapper(),
    "toybox": Wrapper(),
    # cmd /c LINE, cmd /k LINE: a command line; /-options are operands here.
    "cmd": Wrapper(then_code=True),
}
# Shell builtins (in argv they only ever make sense first): never looked for
# further along, where they are ordinary words (`codex exec ...`).
BUILTINS = frozenset({"exec", "command", "builtin"})
