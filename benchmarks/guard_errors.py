"""A python guard that raises on a third of its calls, against the same guard not raising.

Issue 45: a guard's exception was retried like a provider's outage (six attempts with back-off),
so a third-party guard library that raised on 114 of 320 calls took 272 s instead of about 5 s.
Now a guard's own error is tried once more at once and the call is `guard_error`; the claim is
that a guard raising on a third of its calls finishes within twice the time of the same guard
not raising.

Every figure is a real `python -m guardeval launch` of the demo cohort (--reps 3: 960 calls)
with the guard config a new user writes (every retry setting at its default: max_attempts 6,
retry_initial_s 1, retry_max_s 60; thread isolation, --concurrency 16), against a guard module
written to a temporary folder:

  ok       ~2 ms of pure-Python arithmetic per call (calibrated on this machine at start), then
           allows
  third    the same work, then raises ValueError on the calls whose id's first 8 hex digits are
           divisible by 3 (a third of them, the same calls on every attempt: an input the guard
           cannot read)

"launch" is the whole command (process start to exit); "session" the run's `start` to `stop`
events. The two guards take turns, each launch repeated (--repeats, default 3) and the median
shown; the ratio third / ok is printed, with the load average before and after. The `third`
launch's last lines are checked to name the exception (`guard error ValueError: N calls`).

    python benchmarks/guard_errors.py [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))   # `benchmarks.…`: run as a script, only this file's folder is on the path

from benchmarks.python_guard import calibrate  # noqa: E402

TARGET_S = 0.002          # one call's work

GUARD = '''
import os

ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
UNIT = int(os.environ["GEB_UNIT"])


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def ok(inp):
    spin(UNIT)
    return ALLOW


def third(inp):
    spin(UNIT)
    if int(inp.call_id[:8], 16) % 3 == 0:
        raise ValueError("unknown tool in call " + inp.call_id[:8])
    return ALLOW
'''


def launch(work_dir: Path, env: dict[str, str], fn: str) -> dict[str, Any]:
    cfg = work_dir / f"{fn}.toml"
    cfg.write_text(f'name = "geb-{fn}"\nbackend = "python"\ncallable = "geb_guard:{fn}"\nmodel = "bench"\n'
                   'prompt = "guardeval-json-v1"\n')
    run = Path(tempfile.mkdtemp(dir=work_dir)) / "run"
    args = [sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "3",
            "--run-dir", str(run), "--no-progress"]
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"launch {fn} failed:\n{proc.stderr[-3000:]}")
    events = {e["event"]: e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())}
    stamps = [datetime.fromisoformat(events[k]["at"].replace("Z", "+00:00")) for k in ("start", "stop")]
    attempts = sum(1 for _ in (run / "raw.jsonl").open("rb"))
    named = next((line.strip() for line in proc.stdout.splitlines() if "guard error" in line), None)
    return {"wall_s": wall, "session_s": (stamps[1] - stamps[0]).total_seconds(), "attempts": attempts,
            "decided": events["stop"]["decided"], "named": named, "last_line": proc.stdout.splitlines()[0]}


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    opt = ap.parse_args()
    unit = calibrate(TARGET_S)
    work_dir = Path(tempfile.mkdtemp(prefix="geb-"))
    lib = work_dir / "lib"
    lib.mkdir()
    (lib / "geb_guard.py").write_text(GUARD)
    env = {**os.environ, "GEB_UNIT": str(unit),
           "PYTHONPATH": os.pathsep.join([str(REPO / "harness"), str(lib)])}
    before = load()
    runs: dict[str, list[dict[str, Any]]] = {"ok": [], "third": []}
    for _ in range(opt.repeats):
        for fn in runs:                     # take turns: a change in load falls on both
            runs[fn].append(launch(work_dir, env, fn))
    after = load()
    med = {fn: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "session_s", "attempts")}
           for fn, rs in runs.items()}
    third = runs["third"][-1]
    out = {"calls": 960, "repeats": opt.repeats, "unit_iterations": unit, "load_before": before, "load_after": after,
           "median": med, "ratio_launch": med["third"]["wall_s"] / med["ok"]["wall_s"],
           "ratio_session": med["third"]["session_s"] / med["ok"]["session_s"],
           "third_finished": third["last_line"], "third_names": third["named"]}
    if opt.json:
        print(json.dumps(out, indent=2))
        return
    print(f"960 calls per launch, median of {opt.repeats}; load average {before} before, {after} after")
    print("| guard | attempts | session s | launch s |")
    print("|---|---|---|---|")
    for fn, m in med.items():
        print(f"| {fn} | {m['attempts']:.0f} | {m['session_s']:.2f} | {m['wall_s']:.2f} |")
    print(f"raising on a third / not raising: {out['ratio_launch']:.2f}x over the launch, "
          f"{out['ratio_session']:.2f}x over the session (the claim: at most 2x)")
    print(f"third's launch: {third['last_line']}")
    print(f"  and names its exception: {third['named']}")


if __name__ == "__main__":
    main()
