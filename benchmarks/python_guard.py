"""What a python guard's calls cost through guardeval, with worker threads and worker processes.

Every figure is a real `python -m guardeval launch` on the demo cohort (--reps 3: 960 calls),
writing its run folder, against a guard module written to a temporary folder:

  noop         returns at once: the harness's own cost per call
  work         ~5 ms of pure-Python arithmetic per call (calibrated on this machine at start)
  per_thread   `work`, plus a 0.26 s pure-Python set-up kept in `threading.local` (a policy
               that is not thread-safe, compiled once per thread: the idiom of issue 40)
  per_process  `work`, plus the same set-up done once per process, calls serialised by a lock

Tables:

1. Per-call cost: noop and work, isolation thread and process, --concurrency 1 and 8. The
   direct figure is the function called in a loop in this process; "through guardeval" is
   the session's window (events.jsonl: `start` to `stop`, worker start-up included) divided
   by the calls; overhead = through guardeval - direct.
2. A CPU-bound guard over 960 calls (`work` at --concurrency 8): thread against process, whole
   launch (process start to exit, CPU of the launch and its workers from wait4) and session.
3. State per thread against state per process (thread isolation, default concurrency 16).

Each launch is repeated (--repeats, default 3) and the median shown, with the load average
before and after each table: the machine may be shared. --quick: 96 calls, one repeat.

    python benchmarks/python_guard.py [--quick] [--repeats N] [--json]
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
sys.path.insert(0, str(REPO / "harness"))

from guardeval.backends.python_guard.types import GuardInput  # noqa: E402

Key = tuple[str, str, "int | None"]     # (guard function, isolation, --concurrency or None: the default)
TARGET_S = 0.005          # one unit of work
SETUP_UNITS = 52          # the per-thread / per-process set-up: 52 units, ~0.26 s

GUARD = '''
import os, threading

ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
UNIT = int(os.environ["PGB_UNIT"])
SETUP_UNITS = int(os.environ["PGB_SETUP_UNITS"])


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def noop(inp):
    return ALLOW


def work(inp):
    spin(UNIT)
    return ALLOW


_local = threading.local()


def per_thread(inp):
    if not hasattr(_local, "policy"):
        _local.policy = spin(UNIT * SETUP_UNITS)     # built once per thread
    spin(UNIT)
    return ALLOW


_lock = threading.Lock()
_policy = None


def per_process(inp):
    global _policy
    with _lock:
        if _policy is None:
            _policy = spin(UNIT * SETUP_UNITS)       # built once per process
        spin(UNIT)
    return ALLOW
'''


def spin(n: int) -> int:
    """The guard's unit of work (the same loop as GUARD's)."""
    x = 0
    for i in range(n):
        x += i * i
    return x


def calibrate(target_s: float = TARGET_S) -> int:
    """Loop iterations of `spin` that take about `target_s` of CPU here (median of 15 timings; CPU
    time, so that other work on the machine does not shrink the unit). benchmarks/guard_errors.py
    uses it too."""
    n = 10_000
    while True:
        times = []
        for _ in range(15):
            t0 = time.thread_time()
            spin(n)
            times.append(time.thread_time() - t0)
        took = statistics.median(times)
        if took > target_s / 4:
            return max(1, round(n * target_s / took))
        n *= 4


def direct_ms(lib: Path, fn: str, calls: int) -> float:
    """The guard called in a loop in this process, ms per call (set-up excluded: one call first)."""
    sys.path.insert(0, str(lib))
    import pgb_guard  # type: ignore[import-not-found]

    f = getattr(pgb_guard, fn)
    inp = GuardInput(messages=[{"role": "user", "content": "x"}], user_request="x", history=[], current_action={},
                     tool_descriptions=[], call_id="c", parser="json-three-field")
    f(inp)
    t0 = time.perf_counter()
    for _ in range(calls):
        f(inp)
    return (time.perf_counter() - t0) / calls * 1000


def launch(work_dir: Path, lib: Path, env: dict[str, str], fn: str, isolation: str, concurrency: int | None,
           calls: int) -> dict[str, float]:
    cfg = work_dir / f"{fn}-{isolation}.toml"
    cfg.write_text(f'name = "pgb"\nbackend = "python"\ncallable = "pgb_guard:{fn}"\nmodel = "bench"\n'
                   f'prompt = "guardeval-json-v1"\nisolation = "{isolation}"\ntimeout_s = 600\n')
    run = Path(tempfile.mkdtemp(dir=work_dir)) / "run"
    args = [sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "3",
            "--run-dir", str(run), "--no-progress", "--max-calls", str(calls)]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"launch {fn} {isolation} failed:\n{err[-3000:]}")
    events = {e["event"]: e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())}
    stamps = [datetime.fromisoformat(events[k]["at"].replace("Z", "+00:00")) for k in ("start", "stop")]
    if events["stop"]["decided"] != calls:
        raise SystemExit(f"launch {fn} {isolation}: {events['stop']['decided']} of {calls} decided")
    return {"wall_s": wall, "session_s": (stamps[1] - stamps[0]).total_seconds(),
            "cpu_s": usage.ru_utime + usage.ru_stime}


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="96 calls per launch, one repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", choices=("per-call", "cpu-bound", "state"), action="append",
                    help="run only these tables (repeatable; default: all)")
    ap.add_argument("--json", action="store_true")
    opt = ap.parse_args()
    only = set(opt.only or ("per-call", "cpu-bound", "state"))
    calls = 96 if opt.quick else 960
    repeats = opt.repeats or (1 if opt.quick else 3)
    unit = calibrate()
    work_dir = Path(tempfile.mkdtemp(prefix="pgb-"))
    lib = work_dir / "lib"
    lib.mkdir()
    (lib / "pgb_guard.py").write_text(GUARD)
    os.environ.update(PGB_UNIT=str(unit), PGB_SETUP_UNITS=str(SETUP_UNITS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "harness"), str(lib)])}
    out: dict[str, Any] = {"calls": calls, "repeats": repeats, "unit_iterations": unit, "cpus": os.cpu_count(),
                           "tables": {}}
    started = time.monotonic()

    measured: dict[Key, dict[str, float]] = {}

    def measure(*keys: Key) -> list[dict[str, float]]:
        """Medians of each case; the cases of one table take turns, so a change in the
        machine's load falls on all of them."""
        todo = [k for k in keys if k not in measured]
        runs: dict[Key, list[dict[str, float]]] = {k: [] for k in todo}
        for _ in range(repeats):
            for k in todo:
                runs[k].append(launch(work_dir, lib, env, *k, calls))
        measured.update({k: median_of(v) for k, v in runs.items()})
        return [measured[k] for k in keys]

    if "per-call" in only:
        per_call(measure, lib, calls, out)
    if "cpu-bound" in only:
        cpu_bound(measure, out)
    if "state" in only:
        state(measure, calls, out)
    out["took_s"] = time.monotonic() - started
    print(f"\n(calibration: {unit:,} loop iterations per ~5 ms unit; {out['took_s']:.0f} s in all)")
    if opt.json:
        print(json.dumps(out, indent=1))


def per_call(measure: Any, lib: Path, calls: int, out: dict[str, Any]) -> None:
    rows = []
    before = load()
    cases = [(fn, isolation, c) for fn in ("noop", "work") for isolation in ("thread", "process") for c in (1, 8)]
    results = dict(zip(cases, measure(*cases), strict=True))
    for fn in ("noop", "work"):
        direct = direct_ms(lib, fn, 200)
        for isolation in ("thread", "process"):
            for c in (1, 8):
                m = results[(fn, isolation, c)]
                per_call = m["session_s"] / calls * 1000
                rows.append({"guard": fn, "isolation": isolation, "concurrency": c, "direct_ms": direct,
                             "through_ms": per_call, "overhead_ms": per_call - direct, **m})
    out["tables"]["per_call"] = {"rows": rows, "load_before": before, "load_after": load()}
    print(f"\n1. Per-call cost, {calls} calls (load average {before} before, {load()} after)")
    print(f"{'guard':6} {'isolation':9} {'c':>2} {'direct ms':>9} {'through ms':>10} {'overhead ms':>11} "
          f"{'launch s':>8} {'CPU s':>6}")
    for r in rows:
        print(f"{r['guard']:6} {r['isolation']:9} {r['concurrency']:>2} {r['direct_ms']:9.3f} {r['through_ms']:10.3f} "
              f"{r['overhead_ms']:11.3f} {r['wall_s']:8.2f} {r['cpu_s']:6.2f}")


def cpu_bound(measure: Any, out: dict[str, Any]) -> None:
    """`work` at --concurrency 8, thread against process (measured for table 1 when it ran)."""
    before = load()
    t8, p8 = measure(("work", "thread", 8), ("work", "process", 8))
    out["tables"]["cpu_bound"] = {"thread": t8, "process": p8, "launch_ratio": t8["wall_s"] / p8["wall_s"],
                                  "session_ratio": t8["session_s"] / p8["session_s"], "load_before": before,
                                  "load_after": load()}
    print(f"\n2. ~5 ms pure-Python guard, {out['calls']} calls at --concurrency 8 on {os.cpu_count()} CPUs: launch "
          f"{t8['wall_s']:.2f} s with threads, {p8['wall_s']:.2f} s with processes: "
          f"{t8['wall_s'] / p8['wall_s']:.2f}x (session {t8['session_s']:.2f} s / {p8['session_s']:.2f} s: "
          f"{t8['session_s'] / p8['session_s']:.2f}x; load average {before} before, {load()} after)")


def state(measure: Any, calls: int, out: dict[str, Any]) -> None:
    """State per thread against per process, thread isolation, the default concurrency."""
    before = load()
    local, shared = measure(("per_thread", "thread", None), ("per_process", "thread", None))
    out["tables"]["state"] = {"per_thread": local, "per_process": shared, "launch_ratio": local["wall_s"] / shared["wall_s"],
                              "session_ratio": local["session_s"] / shared["session_s"], "load_before": before,
                              "load_after": load()}
    print(f"\n3. State per thread / per process (0.26 s set-up, ~5 ms calls), {calls} calls at the default concurrency "
          f"(load average {before} before, {load()} after): launch {local['wall_s']:.2f} s / {shared['wall_s']:.2f} s = "
          f"{local['wall_s'] / shared['wall_s']:.2f}x; session {local['session_s']:.2f} s / {shared['session_s']:.2f} s = "
          f"{local['session_s'] / shared['session_s']:.2f}x")


if __name__ == "__main__":
    main()
