"""A stand-in for Slurm's ``srun``, behaving the way srun does where gitrun relies on it.

``srun [options] program [args...]`` runs one job step. The real one runs the
program on a compute node under ``slurmstepd``; here the step runs on this
machine but out of srun's process group and session (``--stepd`` below), so a
signal gitrun sends to srun's group reaches the program only the way it
would on a cluster: through srun. What this models, from srun(1):

- srun forwards SIGINT (twice within a second, or once with
  ``--quit-on-interrupt``), SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and
  SIGCONT to the step, waits for it, and exits with its status (128 + the
  signal when a signal ended it);
- the step's output reaches srun's standard output and error through srun;
- a step whose srun is gone (killed outright) is cancelled by Slurm: SIGTERM,
  then SIGKILL after ``KillWait`` (``FAKE_SLURM_KILL_WAIT`` seconds here);
- ``--time`` (minutes, ``M:S``, ``H:M:S`` or ``D-H[:M[:S]]``) cancels the
  step the same way once it runs out, and srun then exits 140 (the state
  TIMEOUT is exit 0:15 in sacct; srun reports it through its own status).

Only the options the recipe uses are understood; any other ``--opt=value`` or
``--flag`` is accepted and ignored, as a harmless stand-in. On a cluster the
step runs on another machine, beyond the reach of gitrun's local sweep for
an attempt's leftovers: the step here is hidden from that sweep the same way
(its ``GITRUN_ATTEMPT_ID`` is dropped), so the tests prove srun's semantics,
not that sweep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

FORWARDED = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)
TIMEOUT_EXIT = 140


def parse_time(text: str) -> float:
    """Seconds of a Slurm time limit."""
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        hours, minutes, seconds = parts[:3]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[:3]
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """srun's options (up to the first non-option) and the step's argv."""
    options: dict[str, str] = {}
    i = 0
    with_value = {"-n": "ntasks", "-t": "time", "-J": "job-name", "-D": "chdir"}
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            options[name] = value
        elif arg in with_value:
            i += 1
            options[with_value[arg]] = argv[i]
        i += 1
    return options, argv[i:]


def srun(argv: list[str]) -> int:
    options, step = parse(argv)
    if not step:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    if options.get("ntasks", "1") != "1":
        print("srun: the fake runs --ntasks=1 only", file=sys.stderr)
        return 1
    limit = parse_time(options["time"]) if options.get("time") else 0.0
    # The step is another machine's: out of srun's group, and out of reach of
    # gitrun's local sweep for an attempt's leftovers (which finds them by this).
    remote_env = {k: v for k, v in os.environ.items() if k != "GITRUN_ATTEMPT_ID"}
    stepd = subprocess.Popen(
        [sys.executable, __file__, "--stepd", str(limit), *step],
        start_new_session=True,
        env=remote_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=options.get("chdir") or None,
    )
    assert stepd.stdout is not None
    relay = threading.Thread(target=_relay, args=(stepd.stdout,), daemon=True)
    interrupts: list[float] = []
    quit_on_interrupt = "quit-on-interrupt" in options

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and not quit_on_interrupt:
            now = time.monotonic()
            interrupts.append(now)
            if len([t for t in interrupts if now - t <= 1.0]) < 2:
                print("srun: interrupt (one more within 1 sec to abort)", file=sys.stderr)
                return
        with contextlib.suppress(ProcessLookupError):
            os.kill(stepd.pid, signum)

    for sig in (signal.SIGINT, *FORWARDED):
        signal.signal(sig, forward)
    relay.start()
    status = stepd.wait()
    relay.join(timeout=5)
    if status == TIMEOUT_EXIT:
        print("srun: error: *** STEP CANCELLED DUE TO TIME LIMIT ***", file=sys.stderr)
        return TIMEOUT_EXIT
    return status


def _relay(stream: object) -> None:
    out = sys.stdout.buffer
    read = stream.read1  # type: ignore[attr-defined]
    while chunk := read(65536):
        out.write(chunk)
        out.flush()


def stepd(limit: float, step: list[str]) -> int:
    """The step's side: run the program in its group, pass on what srun
    forwards, cancel the step when srun is gone or the time is up."""
    srun_pid = os.getppid()
    kill_wait = float(os.environ.get("FAKE_SLURM_KILL_WAIT", "1"))
    task = subprocess.Popen(step, start_new_session=True)
    started = time.monotonic()

    def pass_on(signum: int, _frame: object) -> None:
        _signal_group(task.pid, signum)

    for sig in (signal.SIGINT, *FORWARDED):
        signal.signal(sig, pass_on)
    cancelled_for = ""
    while True:
        try:
            status = task.wait(0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if cancelled_for:
            continue
        if os.getppid() != srun_pid:
            cancelled_for = "srun is gone"
        elif limit and time.monotonic() - started >= limit:
            cancelled_for = "time limit"
        if cancelled_for:
            _cancel(task, kill_wait)
    _signal_group(task.pid, signal.SIGKILL)  # the step ends with its task
    if cancelled_for == "time limit":
        return TIMEOUT_EXIT
    return 128 - status if status < 0 else status


def _cancel(task: subprocess.Popen[bytes], kill_wait: float) -> None:
    """What Slurm does to a cancelled step: SIGCONT and SIGTERM, then SIGKILL
    after KillWait."""
    _signal_group(task.pid, signal.SIGCONT)
    _signal_group(task.pid, signal.SIGTERM)
    deadline = time.monotonic() + kill_wait
    while task.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(task.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stepd"]:
        sys.exit(stepd(float(sys.argv[2]), sys.argv[3:]))
    sys.exit(srun(sys.argv[1:]))
