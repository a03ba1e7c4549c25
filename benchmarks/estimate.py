"""Estimator speed and memory (issues 3 and 12): 10,000 bootstrap replicates for
64 bases × 5 conditions × 3 repetitions (target < 1 s) and for 20,000 bases × 5 × 3
(target < 30 s, peak memory < 2 GiB).

Each case runs in a fresh subprocess so its peak RSS (resource.getrusage ru_maxrss) is its own.
Reported: the whole `estimate(rows)` call (validation, per-base rates, all three failure rules,
strata, accuracy, stability, order, worst case, sign tests, ROC metrics, the bootstrap) and,
separately, the bootstrap alone. Rows carry what a run's rows carry: a tool per base (36
tools), the guard's score on valid calls (a composite with a few levels, as the JSON guards
report) and the start time of each call, in the schedule's round order.

    python benchmarks/estimate.py            # both cases
    python benchmarks/estimate.py --case large --bases-per-interaction 1
    python benchmarks/estimate.py --case large --continuous-scores   # every score distinct

With `--continuous-scores` every valid call has its own score value (a probability-like
guard): the ROC bootstrap then costs replicates × distinct scores per condition.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))

CONDITIONS = ["original", "format_placebo", "marker_rewrite", "tool_alias", "combined"]
CASES = {"small": 64, "large": 20000}


def make_rows(n_bases: int, per_interaction: int, reps: int = 3, seed: int = 0,
              continuous: bool = False) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    base_p = rng.uniform(0.1, 0.7, size=n_bases)
    shift = dict(zip(CONDITIONS, [0.0, 0.0, -0.05, 0.1, 0.08]))
    u = rng.random((n_bases, len(CONDITIONS), reps))
    fail = rng.random((n_bases, len(CONDITIONS), reps)) < 0.02
    level = rng.choice([0.4, 0.8, 0.9, 1.0], size=(n_bases, len(CONDITIONS), reps))
    if continuous:   # a score that tracks the decision, every value distinct
        level = rng.random((n_bases, len(CONDITIONS), reps))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n_bases):
        inter = i // per_interaction
        for j, c in enumerate(CONDITIONS):
            for r in range(reps):
                failed = bool(fail[i, j, r])
                decision = None if failed else int(u[i, j, r] < base_p[i] + shift[c])
                # round by round, as `--order rounds` dispatches them: 10 ms apart
                started = t0 + timedelta(seconds=0.01 * ((r * n_bases + i) * len(CONDITIONS) + j))
                rows.append({"base_id": f"b{i:05d}", "interaction_id": f"g{inter:05d}", "domain": f"d{inter % 4}",
                             "condition": c, "repetition": r, "label": int(i % 3 == 0), "tool": f"tool{i % 36:02d}",
                             "decision": decision, "status": "unparseable" if failed else "ok",
                             "score": None if failed else (float(level[i, j, r]) if decision or continuous else 0.0),
                             "started": started.isoformat(timespec="milliseconds").replace("+00:00", "Z")})
    return rows


def run_case(case: str, per_interaction: int, n_boot: int, continuous: bool) -> dict:
    import numpy as np

    from guardeval.estimators import bootstrap as bs
    from guardeval.estimators import estimate

    n_bases = CASES[case]
    rows = make_rows(n_bases, per_interaction, continuous=continuous)
    t0 = time.perf_counter()
    report = estimate(rows, n_boot=n_boot, seed=1)
    t_total = time.perf_counter() - t0
    # The bootstrap alone, on the same cluster structure and the same number of columns.
    n_clusters = report["n_interactions"]
    q = 48
    rng = np.random.default_rng(0)
    cluster_domain = np.arange(n_clusters) % 4
    num_g, den_g = rng.random((n_clusters, q)), rng.integers(1, 4, (n_clusters, q)).astype(float)
    t0 = time.perf_counter()
    bs.bootstrap_ratios(num_g, den_g, cluster_domain, n_boot, seed=1)
    t_boot = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"case": case, "n_bases": n_bases, "n_interactions": n_clusters, "n_rows": len(rows),
            "n_boot": n_boot, "estimate_s": round(t_total, 3), "bootstrap_only_s": round(t_boot, 3),
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "tool_alias_delta": next(c["delta"] for c in report["contrasts"] if c["condition"] == "tool_alias")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--bases-per-interaction", type=int, default=2)
    ap.add_argument("--bootstrap", type=int, default=10000)
    ap.add_argument("--continuous-scores", action="store_true", help="every score value distinct")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_case(args.case, args.bases_per_interaction, args.bootstrap, args.continuous_scores)))
        return
    targets = {"small": ("< 1 s", 1.0), "large": ("< 30 s, < 2 GiB", 30.0)}
    for case in [args.case] if args.case else ["small", "large"]:
        proc = subprocess.run([sys.executable, __file__, "--child", "--case", case, "--bases-per-interaction",
                               str(args.bases_per_interaction), "--bootstrap", str(args.bootstrap),
                               *(["--continuous-scores"] if args.continuous_scores else [])],
                              capture_output=True, text=True, env=dict(os.environ), check=True)
        res = json.loads(proc.stdout)
        label, limit = targets[case]
        ok = res["estimate_s"] < limit and (case == "small" or res["peak_rss_mib"] < 2048)
        print(f"{case}: {res['n_bases']} bases × 5 conditions × 3 reps = {res['n_rows']} rows, "
              f"{res['n_interactions']} interactions, {res['n_boot']} replicates: "
              f"estimate() {res['estimate_s']:.3f} s (bootstrap alone {res['bootstrap_only_s']:.3f} s), "
              f"peak RSS {res['peak_rss_mib']:.0f} MiB — target {label}: {'OK' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
