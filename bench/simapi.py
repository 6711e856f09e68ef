"""The simulated API of `bench/throttle.py`, one call a process.

    python bench/simapi.py --worker SLOTS CEILING SECONDS OUTPUT
    python bench/simapi.py --api API MODEL SECONDS OUTPUT

A call that finds the ceiling's worth of calls held prints what Claude Code
prints when the server throttles and exits 1 at once; a call taken holds
its slot (a lock file) for SECONDS and writes OUTPUT. The bench times the
API from its first call to its last output, against an oracle that pays
nothing to start a call: this process imports only what a call needs, so
that its own start (about 15 ms, against 50 ms as part of the bench's
script) is not counted against the runner that starts it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

THROTTLED = (
    "API Error: Server is temporarily limiting requests (not your usage limit) · Rate limited"
)


def _write(output: str) -> None:
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    stem = os.path.splitext(os.path.basename(output))[0]
    with open(output, "w") as out:
        out.write(f'{{"task": "{stem}"}}\n')


def worker(slots: str, ceiling: int, seconds: float, output: str) -> int:
    """One call of an API with a fixed ceiling: a free slot, or a throttle at once."""
    os.makedirs(slots, exist_ok=True)
    for number in range(ceiling):
        handle = open(os.path.join(slots, f"slot{number}"), "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        time.sleep(seconds)
        _write(output)
        return 0
    print(THROTTLED, file=sys.stderr)
    return 1


def schedule(api: str, model: str) -> list[tuple[float, int]]:
    """A model's ceilings (``schedule-<model>``: a line ``FROM CEILING`` each,
    FROM in seconds after the first call on the model)."""
    with open(os.path.join(api, f"schedule-{model}")) as said:
        return [(float(at), int(ceiling)) for at, ceiling in (line.split() for line in said)]


def api_call(api: str, model: str, seconds: float, output: str) -> int:
    """One call of an API whose ceiling per model follows its schedule: a
    slot is free while fewer calls are held than the ceiling now; calls in
    flight keep theirs when it drops."""
    phases = schedule(api, model)
    slots = os.path.join(api, f"slots-{model}")
    os.makedirs(slots, exist_ok=True)
    log = os.path.join(api, f"calls-{model}.log")
    with open(os.path.join(api, f"gate-{model}"), "w") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        now = time.time()
        first = os.path.join(api, f"first-{model}")
        try:
            with open(first) as said:
                began = float(said.read())
        except FileNotFoundError:
            began = now
            with open(first, "w") as saying:
                saying.write(repr(now))
        ceiling = [c for at, c in phases if now - began >= at][-1]
        held, free = 0, None
        for number in range(max(c for _, c in phases)):
            handle = open(os.path.join(slots, f"slot{number}"), "w")  # noqa: SIM115 - held until exit
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held += 1
                handle.close()
                continue
            if free is None:
                free = handle
            else:
                handle.close()
        accepted = free is not None and held < ceiling
        with open(log, "a") as said:
            said.write(f"{'start' if accepted else 'throttled'} {now}\n")
    if not accepted:
        print(THROTTLED, file=sys.stderr)
        return 1
    time.sleep(seconds)
    _write(output)
    with open(log, "a") as said:
        said.write(f"out {time.time()}\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] not in ("--worker", "--api"):
        print(__doc__, file=sys.stderr)
        return 2
    where, second, seconds, output = argv[1:]
    if argv[0] == "--worker":
        return worker(where, int(second), float(seconds), output)
    return api_call(where, second, float(seconds), output)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
