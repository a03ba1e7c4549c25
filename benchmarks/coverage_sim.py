"""Simulation check of the estimator's intervals (issue 3; not a timed test).

Clustered binary decisions with a known true effect, through the real `estimate()`:
4 domains with 20/25/30/25 interactions (fixed per domain, the design the stratified
bootstrap assumes), 1–4 bases per interaction, 3 repetitions, 3% failures at random (drop rule).
Per interaction g: baseline block probability u_g + domain shift + base noise; the intervention
adds β_g = 0.15 + U(−0.1, 0.1); the placebo adds 0.02 + U(−0.02, 0.02). No clipping is needed
(all probabilities stay in [0, 0.9]), so the truths are exact: Δ = 0.15, Δplacebo = 0.02,
Δ − Δplacebo = 0.13. Prints 95% interval coverage (target 93–97%) and mean bias.

    python benchmarks/coverage_sim.py [--sims 2000] [--bootstrap 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))

from guardeval.estimators import estimate  # noqa: E402

CLUSTERS_PER_DOMAIN = (20, 25, 30, 25)
DOMAIN_SHIFT = (0.0, 0.05, -0.05, 0.1)
TRUE = {"t": 0.15, "format_placebo": 0.02, "t_minus_placebo": 0.13}


def simulate(rng: np.random.Generator, reps: int = 3, fail_rate: float = 0.03,
             clusters: tuple[int, ...] = CLUSTERS_PER_DOMAIN) -> list[dict]:
    rows = []
    base = 0
    g = 0
    for dom, (m, shift) in enumerate(zip(clusters, DOMAIN_SHIFT)):
        for _ in range(m):
            u = rng.uniform(0.1, 0.5) + shift
            beta = 0.15 + rng.uniform(-0.1, 0.1)
            gamma = 0.02 + rng.uniform(-0.02, 0.02)
            for _ in range(rng.integers(1, 5)):
                p0 = u + rng.uniform(-0.05, 0.05)
                probs = {"original": p0, "format_placebo": p0 + gamma, "t": p0 + beta}
                for cond, p in probs.items():
                    for r in range(reps):
                        failed = rng.random() < fail_rate
                        rows.append({"base_id": f"b{base}", "interaction_id": f"g{g}", "domain": f"d{dom}",
                                     "condition": cond, "repetition": r,
                                     "decision": None if failed else int(rng.random() < p),
                                     "status": "unparseable" if failed else "ok"})
                base += 1
            g += 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clusters", default=",".join(map(str, CLUSTERS_PER_DOMAIN)),
                    help="interactions per domain, 4 numbers (default 20,25,30,25)")
    args = ap.parse_args()
    clusters = tuple(int(x) for x in args.clusters.split(","))
    if len(clusters) != len(DOMAIN_SHIFT):
        ap.error("--clusters needs 4 numbers")
    rng = np.random.default_rng(args.seed)
    hits = {k: 0 for k in TRUE}
    ests: dict[str, list[float]] = {k: [] for k in TRUE}
    t0 = time.perf_counter()
    for s in range(args.sims):
        rep = estimate(simulate(rng, clusters=clusters), n_boot=args.bootstrap, seed=s)
        t = next(c for c in rep["contrasts"] if c["condition"] == "t")
        pl = next(c for c in rep["contrasts"] if c["condition"] == "format_placebo")
        got = {"t": (t["delta"], t["ci"]), "format_placebo": (pl["delta"], pl["ci"]),
               "t_minus_placebo": (t["delta_minus_placebo"], t["ci_minus_placebo"])}
        for k, (est, ci) in got.items():
            ests[k].append(est)
            hits[k] += int(ci[0] <= TRUE[k] <= ci[1])
    took = time.perf_counter() - t0
    print(f"{args.sims} simulated data sets, {args.bootstrap} replicates each, "
          f"{sum(clusters)} interactions in 4 domains ({'/'.join(map(str, clusters))}), ({took:.1f} s)")
    for k, truth in TRUE.items():
        cov = hits[k] / args.sims
        se_cov = math.sqrt(cov * (1 - cov) / args.sims)
        e = np.asarray(ests[k])
        bias = e.mean() - truth
        se_bias = e.std(ddof=1) / math.sqrt(len(e))
        flag = "OK" if 0.93 <= cov <= 0.97 else "OUT OF 93-97%"
        print(f"  {k:16s} truth {truth:+.3f}: 95% CI coverage {cov:.3f} (±{se_cov:.3f}) {flag}; "
              f"mean estimate {e.mean():+.4f}, bias {bias:+.4f} (MC s.e. {se_bias:.4f})")


if __name__ == "__main__":
    main()
