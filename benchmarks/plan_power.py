"""Is `guardeval plan` right? Power at its predicted MDE and its predicted SE, by simulation.

Two pilots:

* **sim**: the demo cohort (64 bases, 44 interactions, 4 domains) x 5 conditions x 3
  repetitions against the simulated provider (`harness/guardeval/backends/sim`, 960 calls), or `--pilot RUN`;
* **synthetic**: a decision table of the same shape drawn from a model with all three
  components non-zero (`guardeval.estimators.planning.plan_sim.TwoPoint`, a = 0.1, b = 0.15, q = 0.4,
  θ = 0.1); its estimates are printed beside the truth;
* **known**: that model's true components in place of the estimates, so the between-interaction
  term is exercised (the simulated provider has none, and one 64-base pilot estimates it poorly).

`guardeval plan PILOT --json` (a subprocess, as a user runs it) gives each corrected effect's
components and, per design, the predicted SE and MDE. For each design and each corrected effect,
the hierarchical model with those components (two-point u_g = ±σ_G, v_i = ±σ_B; the reference
rate q fitted so that σ²_W is the estimate; see plan_sim) is set to a true effect equal to the
predicted MDE, and `--sims` data sets are drawn with the design's interactions (the pilot's
interaction sizes, repeated for more bases). Each data set is tested as `estimate` tests it:
the stratified interaction-cluster bootstrap (the same weights, `bootstrap.iter_counts`, seed 0,
`--bootstrap` replicates) and its t-calibrated percentile p-value, rejecting at 0.05 (and, for the Holm
column, with the true effect at the Holm-level MDE, at 0.05/m). Printed per row: predicted SE,
the empirical SD of the estimates, the mean bootstrap SE, and the power observed at the
predicted MDE against 0.80 (its Monte-Carlo s.e. is sqrt(0.16/sims)).

    python benchmarks/plan_power.py [--sims 2000] [--bootstrap 2000] [--seed 0] [--pilot RUN]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))

from guardeval.estimators.bootstrap import bootstrap_p, iter_counts  # noqa: E402
from guardeval.estimators.planning.plan import Components  # noqa: E402
from guardeval.estimators.planning.plan_sim import TwoPoint, fit_q, simulate, structure  # noqa: E402
from guardeval.estimators.verdicts.power import mde  # noqa: E402

SYNTHETIC = TwoPoint(q=0.4, theta=0.1, a=0.1, b=0.15)
DESIGNS = ((1, 3), (2, 1), (4, 2))   # (multiple of the pilot's bases, repetitions)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "harness") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True, env=_env(),
                          cwd=REPO, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"guardeval {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def sim_pilot(folder: Path) -> Path:
    from guardeval.backends.sim import SimServerProcess

    guard = folder / "g.toml"
    with SimServerProcess(["--seed", "7"], env=_env()) as sim:
        guard.write_text(f'name = "sim-pilot"\nbackend = "openrouter"\nmodel = "sim/server-profile"\n'
                         f'prompt = "guardeval-json-v1"\nbase_url = "{sim.base_url}"\n'
                         'api_key_env = "GUARDEVAL_BENCH_KEY"\nprice_in_per_mtok = 1.0\nprice_out_per_mtok = 5.0\n'
                         '[provider]\nonly = ["sim"]\nallow_fallbacks = false\n')
        run = folder / "pilot"
        _cli("launch", "--cohort", str(REPO / "cohorts" / "demo"), "--guard", str(guard), "--reps", "3",
             "--run-dir", str(run), "--no-progress", "--no-preflight")
    return run


def pilot_sizes(rows: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Bases per interaction, per domain, in sorted order (as the estimators index them)."""
    inter: dict[str, tuple[str, set[str]]] = {}
    for r in rows:
        inter.setdefault(r["interaction_id"], (r["domain"], set()))[1].add(r["base_id"])
    domains = sorted({d for d, _ in inter.values()})
    return [[len(b) for i, (d, b) in sorted(inter.items()) if d == dom] for dom in domains]


def synthetic_table(path: Path, sizes: list[list[int]], reps: int, seed: int) -> None:
    cluster, domain = structure(sizes)
    rng = np.random.default_rng(seed)
    sim = simulate(SYNTHETIC, cluster, domain, reps, rng)
    base_s = rng.binomial(reps, SYNTHETIC.q, size=len(cluster))
    with open(path, "w") as fh:
        for i, g in enumerate(cluster):
            for cond, blocks in (("original", base_s[i]), ("format_placebo", sim.s_k[i]), ("alias", sim.s_c[i])):
                for r in range(reps):
                    fh.write(json.dumps({"base_id": f"b{i:04d}", "interaction_id": f"g{g:03d}",
                                         "domain": f"d{domain[g]}", "condition": cond, "repetition": r,
                                         "decision": int(r < blocks), "status": "ok"}) + "\n")


def planned_se(model: TwoPoint, flat: list[int], reps: int) -> float:
    """The planner's formula (`Components.se`) on the model's exact components."""
    n = sum(flat)
    comp = Components(quantity="corrected", condition="c", reference="k", estimate=model.theta, n_bases=n,
                      n_interactions=len(flat), n_domains=1, reps=reps, between_interactions=model.a ** 2,
                      between_bases=model.b ** 2, within_base=model.within,
                      cluster_factor=sum(x * x for x in flat) / n, pilot_se=math.nan, truncated=[])
    return comp.se(n, reps)


def model_at_mde(start: float, a: float, b: float, within: float, flat: list[int], reps: int,
                 alpha: float, df: float) -> TwoPoint:
    """The model with components (a², b², σ²_W as near `within` as a Bernoulli model allows) whose
    true effect is the MDE the planner's formula gives for it: a fixed point, a few steps."""
    theta = start
    for _ in range(50):
        model = TwoPoint(q=fit_q(theta, a, b, within), theta=theta, a=a, b=b)
        nxt = mde(planned_se(model, flat, reps), alpha, df=df)
        if abs(nxt - theta) < 1e-9:
            break
        theta = nxt
    return TwoPoint(q=fit_q(theta, a, b, within), theta=theta, a=a, b=b)


def power_cell(model: TwoPoint, sizes: list[list[int]], reps: int, level: float, sims: int, n_boot: int,
               rng: np.random.Generator) -> dict[str, float]:
    """`sims` data sets of one design: estimates, bootstrap SEs, rejections at `level`."""
    cluster, domain = structure(sizes)
    g = len(domain)
    w = np.vstack(list(iter_counts(domain, n_boot, 0)))           # estimate's replicate weights, seed 0
    den = w @ np.bincount(cluster, minlength=g).astype(np.float64)
    nums = np.empty((g, sims))
    est = np.empty(sims)
    for s in range(sims):
        x = simulate(model, cluster, domain, reps, rng).x
        nums[:, s] = np.bincount(cluster, weights=x, minlength=g)
        est[s] = x.mean()
    reps_ratio = (w @ nums) / den[:, None]                        # (replicates x data sets)
    # estimate's p: the percentile p t-calibrated for the interactions minus the domains
    df = float(g - len(sizes))
    p = np.array([bootstrap_p(reps_ratio[:, s], df) for s in range(sims)])
    return {"sd": float(est.std(ddof=1)), "boot_se": float(reps_ratio.std(axis=0, ddof=1).mean()),
            "power": float((p < level).mean()), "mean": float(est.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pilot", help="a finished run to use as the sim pilot (default: launch the demo cohort)")
    args = ap.parse_args()
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.sims} data sets per row, {args.bootstrap} replicates")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run = Path(args.pilot) if args.pilot else sim_pilot(folder)
        from guardeval.estimators.runs import load_run
        from guardeval.run.run import Run

        with Run.using(run) as pilot:
            sizes = pilot_sizes(load_run(pilot)[2])
        n_pilot = sum(map(sum, sizes))
        table = folder / "synthetic.jsonl"
        synthetic_table(table, sizes, 3, args.seed)
        pilots = [("sim", [str(run)]), ("synthetic", ["--table", str(table)]), ("known", ["--table", str(table)])]
        bases = ",".join(str(k * n_pilot) for k, _ in DESIGNS)
        reps = ",".join(sorted({str(r) for _, r in DESIGNS}))
        print(f"pilot structure: {n_pilot} bases in {sum(map(len, sizes))} interactions, {len(sizes)} domains; "
              f"pilot launched/planned in {time.time() - t0:.1f} s")
        rows = []
        worst = {"power": 0.0, "se": 0.0}
        for name, src in pilots:
            plan = json.loads(_cli("plan", *src, "--bases", bases, "--reps", reps, "--json"))
            m = plan["holm_m"]["corrected"]
            for comp in (c for c in plan["components"] if c["quantity"] == "corrected"):
                a = math.sqrt(comp["between_interactions"])
                b = math.sqrt(comp["between_bases"] or 0.0)
                if name == "known":   # the synthetic pilot's true components, all three non-zero
                    a, b, comp = SYNTHETIC.a, SYNTHETIC.b, {**comp, "within_base": SYNTHETIC.within}
                for k, r in DESIGNS:
                    d = next(d for d in plan["designs"] if (d["bases"], d["reps"]) == (k * n_pilot, r))
                    e = next(e for e in d["effects"] if e["quantity"] == "corrected"
                             and e["condition"] == comp["condition"])
                    levels = [("0.05", e["mde"], 0.05)] + ([(f"0.05/{m}", e["mde_holm"], 0.05 / m)] if m > 1 else [])
                    flat = [x for s in sizes for x in s] * k
                    for label, target, level in levels:
                        model = model_at_mde(target, a, b, comp["within_base"], flat, r, level,
                                             float(len(flat) - len(sizes)))
                        se = planned_se(model, flat, r)
                        cell = power_cell(model, [s * k for s in sizes], r, level, args.sims, args.bootstrap, rng)
                        rows.append((name, comp["condition"], f"{k * n_pilot} x {r}", label, e["se"], model.within,
                                     model.theta, se, cell["sd"], cell["boot_se"], cell["power"]))
                        worst["power"] = max(worst["power"], abs(cell["power"] - 0.80))
                        worst["se"] = max(worst["se"], abs(cell["sd"] / se - 1))
            if name == "synthetic":
                c = next(c for c in plan["components"] if c["quantity"] == "corrected")
                print(f"synthetic pilot's estimates: σ²_G {c['between_interactions']:.4f} (truth "
                      f"{SYNTHETIC.a ** 2:.4f}), σ²_B {c['between_bases']:.4f} ({SYNTHETIC.b ** 2:.4f}), σ²_W "
                      f"{c['within_base']:.4f} ({SYNTHETIC.within:.4f})")
    head = ("pilot", "effect", "design", "alpha", "plan's SE", "model σ²_W", "true effect = MDE", "predicted SE",
            "empirical SD", "mean bootstrap SE", "power")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join([*row[:4], *(f"{v:.4f}" for v in row[4:10]), f"{row[10]:.3f}"]) + " |")
    mcse = math.sqrt(0.16 / args.sims)
    print(f"\nlargest |power - 0.80| = {worst['power']:.3f} (Monte-Carlo s.e. of one power {mcse:.3f}); "
          f"largest |empirical SD / predicted SE - 1| = {worst['se']:.3f} "
          f"(Monte-Carlo s.e. of an SD about {1 / math.sqrt(2 * args.sims):.3f})")
    powers = np.array([row[10] for row in rows])
    print(f"mean power over the {len(rows)} rows {powers.mean():.3f}; rows within ±0.05 of 0.80: "
          f"{int((np.abs(powers - 0.80) <= 0.05).sum())} of {len(rows)}")
    print(f"total {time.time() - t0:.1f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
