"""Which 95% interval covers with few interactions? (issue 26 §5; BENCHMARKS.md §6.) The
choice behind `estimate`'s t-calibrated percentile interval, measured against the alternatives
on the same bootstrap replicates of the same synthetic data (guardeval.estimators.synthetic):

* `percentile`: the replicates' 2.5% and 97.5% quantiles (guardeval before issue 26);
* `t-calibrated`: the quantiles at the level whose normal quantile is t_{df}'s (now used);
* `t-stretched`: the percentile distances from the estimate scaled by t_{df}/z;
* `studentized`: estimate ± t_{df}·SE, SE the bootstrap standard deviation;
* `BCa`: bias-corrected and accelerated, acceleration from a leave-one-interaction-out jackknife.

df = interactions − domains. Quantities: Δ of each condition, Δ − placebo of each intervention,
each condition's block rate (drop rule, 2% failed calls), at 16, 32, 64 and 256 interactions.

    python benchmarks/interval_methods.py [--sims 600] [--bootstrap 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))

from guardeval.estimators import synthetic as sy  # noqa: E402
from guardeval.estimators.bootstrap import calibrated_level, cluster_sums, iter_counts  # noqa: E402

METHODS = ("percentile", "t-calibrated", "t-stretched", "studentized", "BCa")


def columns(p: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    num, den, names = [], [], []
    for j, c in enumerate(sy.CONDITIONS[1:], start=1):
        m = has[:, j] & has[:, 0]
        num.append(np.where(m, p[:, j] - p[:, 0], 0.0))
        den.append(m.astype(float))
        names.append(("Δ", c))
    for j, c in enumerate(sy.CONDITIONS[2:], start=2):
        m = has[:, j] & has[:, 0] & has[:, 1]
        num.append(np.where(m, p[:, j] - p[:, 1], 0.0))
        den.append(m.astype(float))
        names.append(("Δ − placebo", c))
    for j, c in enumerate(sy.CONDITIONS):
        num.append(np.where(has[:, j], p[:, j], 0.0))
        den.append(has[:, j].astype(float))
        names.append(("block rate", c))
    return np.column_stack(num), np.column_stack(den), names


def intervals(point: float, reps: np.ndarray, jack: np.ndarray, df: float) -> dict[str, tuple[float, float]]:
    lo, hi = np.quantile(reps, [0.025, 0.975])
    lv = calibrated_level(0.95, df)
    t = stats.t.ppf(0.975, df)
    f = t / stats.norm.ppf(0.975)
    se = reps.std(ddof=1)
    z0 = stats.norm.ppf(np.clip((reps < point).mean() + 0.5 * (reps == point).mean(), 1e-6, 1 - 1e-6))
    dj = jack.mean() - jack
    a = (dj ** 3).sum() / (6 * ((dj ** 2).sum() ** 1.5 + 1e-300))
    zs = stats.norm.ppf([0.025, 0.975])
    bca = np.quantile(reps, stats.norm.cdf(z0 + (z0 + zs) / (1 - a * (z0 + zs))))
    return {"percentile": (lo, hi), "t-calibrated": tuple(np.quantile(reps, [(1 - lv) / 2, (1 + lv) / 2])),
            "t-stretched": (point - (point - lo) * f, point + (hi - point) * f),
            "studentized": (point - t * se, point + t * se), "BCa": (bca[0], bca[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=600)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print("| interactions | quantity | " + " | ".join(METHODS) + " |")
    print("|---|---|" + "---|" * len(METHODS))
    for g in (16, 32, 64, 256):
        d = sy.design(g)
        truth = sy.truth(sy.EFFECTS, d)
        rng = np.random.default_rng(args.seed)
        hits: dict[tuple[str, str], list[bool]] = {}
        for s in range(args.sims):
            pop = sy.population(d, rng)
            prob = pop.probabilities(sy.EFFECTS)
            n, k = prob.shape
            blocks = rng.random((n, k, d.reps)) < prob[:, :, None]
            ok = rng.random((n, k, d.reps)) >= pop.model.fail_rate
            S, N = (blocks & ok).sum(2), ok.sum(2)
            has = N > 0
            p = np.where(has, S / np.maximum(N, 1), np.nan)
            num, den, names = columns(p, has)
            ng = int(pop.base_cluster.max()) + 1
            cd = np.array([pop.base_domain[pop.base_cluster == c][0] for c in range(ng)])
            num_g, den_g = cluster_sums(num, pop.base_cluster, ng), cluster_sums(den, pop.base_cluster, ng)
            point = num.sum(0) / den.sum(0)
            reps = np.vstack([(w @ num_g) / (w @ den_g) for w in iter_counts(cd, args.bootstrap, s)])
            jack = np.vstack([np.delete(num_g, c, 0).sum(0) / np.delete(den_g, c, 0).sum(0) for c in range(ng)])
            df = float(ng - len(np.unique(cd)))
            for j, (kind, c) in enumerate(names):
                true = {"Δ": truth.delta, "Δ − placebo": truth.corrected, "block rate": truth.block_rate}[kind][c]
                for m, (lo, hi) in intervals(point[j], reps[:, j], jack[:, j], df).items():
                    hits.setdefault((kind, m), []).append(bool(lo <= true <= hi))
        for kind in ("Δ", "Δ − placebo", "block rate"):
            print(f"| {g} | {kind} | " + " | ".join(f"{np.mean(hits[(kind, m)]):.3f}" for m in METHODS) + " |")
    print(f"\n{args.sims} data sets per size, {args.bootstrap} replicates; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
