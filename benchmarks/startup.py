"""Start-up time of the command line: `guardeval --version` and `--help` against `python -c pass`.

    python benchmarks/startup.py [--runs N]

Each command is run N times (default 30), the three interleaved so that load on the machine
touches them alike; the median wall time of each and the ratios to `python -c pass`, measured in
this one run, are printed. The `guardeval` script next to this interpreter is used when there is
one (an installed or editable guardeval), else `python -m guardeval`. The target is <= 0.4 s.
Also printed: the modules outside the standard library that building the parser imports (the
command modules must import what a command needs only when it runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.4


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="runs of each command (default 30)")
    args = ap.parse_args()
    script = Path(sys.executable).with_name("guardeval")
    gv = [str(script)] if script.is_file() else [sys.executable, "-m", "guardeval"]
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "guardeval --version": [*gv, "--version"],
                "guardeval --help": [*gv, "--help"]}
    for cmd in commands.values():   # warm the page cache
        _time(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            times[name].append(_time(cmd))
    base = statistics.median(times["python -c pass"])
    print(f"{' '.join(gv)}; {args.runs} runs each, interleaved; load average before the last run: "
          f"{os.getloadavg()[0]:.2f}")
    for name, ts in times.items():
        med = statistics.median(ts)
        verdict = "" if name.startswith("python") else ("  (target <= 0.4 s: met)" if med <= TARGET_S
                                                        else "  (target <= 0.4 s: MISSED)")
        print(f"{name:<22} median {med * 1000:7.1f} ms  min {min(ts) * 1000:7.1f} ms  "
              f"ratio to python -c pass {med / base:5.2f}{verdict}")
    probe = ("import sys; from guardeval.cli.app import build_parser; build_parser(); "
             "std = set(sys.stdlib_module_names); "
             "print(sorted({m.split('.')[0] for m in sys.modules} - std - {'guardeval', '__main__'}))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    print(f"non-stdlib modules imported to build the parser: {found.stdout.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
