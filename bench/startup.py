"""Start-up time: `gitrun --version` against `python3 -c pass`. Target: <= 6x.

    python bench/startup.py [--repeat 30]

Runs the installed `gitrun` console script next to this interpreter (or
`python -m gitrun` when there is none), each command `--repeat` times,
and reports medians.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    script = Path(sys.executable).parent / "gitrun"
    gitrun = [str(script)] if script.exists() else [sys.executable, "-m", "gitrun"]
    rows = {
        "python3 -c pass": [sys.executable, "-c", "pass"],
        "gitrun --version": [*gitrun, "--version"],
        "gitrun --help": [*gitrun, "--help"],
    }
    results = {}
    for name, argv in rows.items():
        median, _ = median_seconds(
            lambda argv=argv: subprocess.run(argv, capture_output=True, check=True), args.repeat
        )
        results[name] = median
        print(f"{name:<20} median {median * 1000:7.1f} ms")
    ratio = results["gitrun --version"] / results["python3 -c pass"]
    print(f"gitrun --version / python3 -c pass: {ratio:.1f}x (target <= 6)")
    print(
        f"gitrun --help / python3 -c pass:    {results['gitrun --help'] / results['python3 -c pass']:.1f}x"
    )
    print(f"machine: {machine()}")
    return 0 if ratio <= 6 else 1


if __name__ == "__main__":
    sys.exit(main())
