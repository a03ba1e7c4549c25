"""Dispatch benchmark: N calls against the simulated provider at a fixed latency.

    python benchmarks/dispatch.py [--calls 20000] [--concurrency 64] [--latency-ms 100]

Prints `efficiency: X` = achieved throughput / (concurrency / latency), measured in this one
run, and the harness's CPU-seconds per 1,000 calls (this process only; the simulator runs in
its own process). Target: efficiency >= 0.90.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))

from guardeval.backends.sim import SimServerProcess  # noqa: E402
from guardeval.run.planning import materialise, plan_launch  # noqa: E402
from guardeval.run.run import Run  # noqa: E402
from guardeval.run.runner import execute  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    args = ap.parse_args()

    cohort = REPO / "cohorts" / "demo"
    reps = -(-args.calls // 320)  # the demo cohort has 320 instances
    with tempfile.TemporaryDirectory() as tmp, \
            SimServerProcess(["--latency-ms", f"{args.latency_ms:g}", "--seed", "1"]) as sim:
        guard = Path(tmp) / "bench.toml"
        guard.write_text(
            'name = "bench"\nbackend = "openrouter"\nmodel = "sim/bench"\nprompt = "guardeval-json-v1"\n'
            f'base_url = "{sim.base_url}"\napi_key_env = "GUARDEVAL_BENCH_KEY"\ntimeout_s = 30\n'
            '[provider]\nonly = ["sim"]\nallow_fallbacks = false\n')
        plan = plan_launch(cohort_dir=cohort, guard_path=guard, reps=reps, seed=1, order="rounds", base_url=None)
        run = Path(tmp) / "run"
        materialise(plan, run)
        cpu0, t0 = time.process_time(), time.perf_counter()   # opening the run folder is part of a launch
        with Run.using(run) as opened:
            outcome = execute(opened.folder, concurrency=args.concurrency, max_calls=args.calls, progress=False,
                              handle_signals=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done = outcome.decided
    ideal = args.concurrency / (args.latency_ms / 1000.0)
    rate = done / wall
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"calls: {done} at concurrency {args.concurrency}, latency {args.latency_ms:g} ms")
    print(f"wall: {wall:.2f} s, throughput: {rate:.1f} calls/s, ideal: {ideal:.1f} calls/s")
    print(f"harness CPU: {cpu:.2f} s = {cpu / done * 1000:.3f} CPU-s per 1,000 calls")
    print(f"peak RSS: {peak_mib:.0f} MiB")
    print(f"efficiency: {rate / ideal:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
