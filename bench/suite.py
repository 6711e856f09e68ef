"""The README's test command as a new user meets it: a fresh clone, nothing
activated, both cores busy, run as a background job.

    python bench/suite.py [--busy 2] [--spinners same|other] [--keep] [--durations N]

Clones this repository's HEAD into a temporary directory, starts ``--busy``
processes that spin (`python3 -c 'while True: pass'`), and runs the README's
test line word for word (its virtual environment, `pip install '.[dev]'` and
the suite) in a new session with no terminal, as `cmd &` does. Prints the
wall time of the whole line, of the suite alone (pytest's own count), the
outcome line, and the load average. Target: the suite <= 300 s with both
cores busy.

Where the spinners run decides the suite's share of the two cores, on a
kernel that groups the scheduler by session (``sched_autogroup_enabled``):

- ``--spinners same`` (the default): in the suite's own session, as when
  both are typed in one terminal (``spin & spin & line &``); every runnable
  process gets its share, the suite's workers and their children included;
- ``--spinners other``: in another session (another terminal or login);
  each session gets an equal share, so the suite gets one core at most.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 300.0


def readme_line() -> str:
    for line in (ROOT / "README.md").read_text().splitlines():
        if ".venv/bin/python -m pytest" in line:
            return line.strip()
    raise SystemExit("README.md: no line runs `.venv/bin/python -m pytest`")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="spinning processes (default 2)")
    parser.add_argument(
        "--spinners",
        choices=("same", "other"),
        default="same",
        help="the spinners in the suite's session (default) or in another one",
    )
    parser.add_argument("--keep", action="store_true", help="keep the clone and its log")
    parser.add_argument(
        "--durations", type=int, default=0, help="append pytest's --durations=N (the slowest N)"
    )
    args = parser.parse_args()
    line = readme_line()
    # Not under /tmp: a confined worker gets a /tmp of its own, and the
    # suite's workers run scripts from the clone.
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    where = Path(tempfile.mkdtemp(prefix="gitrun-suite-", dir=base))
    clone = where / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    log = where / "suite.log"
    spin = "python3 -c 'while True: pass'"
    command = line + (f" --durations={args.durations}" if args.durations else "")
    spinners = []
    if args.spinners == "same":  # `spin & spin & line`, in one session
        starts = "".join(f"{spin} & " for _ in range(args.busy))
        command = f"{starts}{command}; status=$?; kill $(jobs -p); exit $status"
    else:
        spinners = [subprocess.Popen(["bash", "-c", f"exec {spin}"]) for _ in range(args.busy)]
    try:
        began = time.monotonic()
        with open(log, "w") as out:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=clone,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a background job: no terminal, its own session
            )
        took = time.monotonic() - began
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    text = log.read_text(errors="replace")
    summary = [s for s in text.splitlines() if re.search(r"\d+ passed|\d+ failed", s)]
    said = summary[-1].strip("= ") if summary else "no pytest summary (see the log)"
    pytest_s = re.search(r" in ([\d.]+)s", said)
    suite = float(pytest_s.group(1)) if pytest_s else float("nan")
    print(f"line: {line}")
    print(
        f"busy: {args.busy} spinning processes in {args.spinners} session;"
        f" load average at the end {os.getloadavg()[0]:.1f}"
    )
    print(f"whole line {took:.0f} s (exit {done.returncode}); the suite {suite:.0f} s: {said}")
    verdict = "PASS" if done.returncode == 0 and suite <= TARGET else "MISS"
    print(f"target: the suite <= {TARGET:.0f} s with both cores busy: {verdict}")
    if args.keep:
        print(f"kept: {where}")
    else:
        shutil.rmtree(where, ignore_errors=True)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
