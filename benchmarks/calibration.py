"""Do the printed words hold their stated error rates? (issue 26; docs/estimators.md, How we know
the verdicts hold.) Not a timed test: a Monte-Carlo check of every decision `estimate` and
`compare` print, on decision tables with a known truth (guardeval.estimators.synthetic: base and
interaction random effects, condition effects that vary by interaction and base, repetitions as
Bernoulli draws, 2% failed calls), run through the library calls the CLI makes (`estimate`,
`compare_inputs`, `plan_rows`) and read from the fields the printed text reads (the text is
checked against them on every data set).

Cells, each with its Monte-Carlo standard error:

* **null**: no condition has any effect (conditions exchangeable). Family-wise rate of each kind of
  decision `estimate` prints: a Δ "differs from 0", a Δ − placebo "differs from 0", a star.
* **two identical guards** and **three identical guards** (one decision model, each guard its own
  calls): family-wise rate of any B − A "differs from 0" (Δ, corrected), "ranking changed: yes"
  (conditions' order) and "guard order changed … yes".
* **coverage** of every 95% interval kind (Δ, Δ − placebo, block rate; B − A of Δ and of Δ −
  placebo, between two guards that differ) at 16, 32, 64 and 256 interactions.
* **power at plan's MDE**: plan's predicted MDE for the design (from a large pilot of the same
  model), the true corrected effect set to it; the share of data sets whose test rejects at α
  (and at α/m with the Holm-level MDE). Nominal 0.80.
* **TOST at the margin**: the true corrected effect exactly at +M: the share of "within ±M".
* **effects that vary by base** (issue 50): 6 to 44 interactions, balanced and unbalanced, under
  the homogeneous model and `synthetic.LogitModel` (every base its own effect on the logit scale:
  SD 0.35 for the placebo, whose mean effect is 0, and 0.6 for the interventions). Vectorised: the
  calls are drawn as arrays and one `Quantities.run` per data set computes every interval and p
  `estimate` and `compare` print for them (the same quantities, replicates and flips; checked
  against `estimate` and `compare` by tests/test_calibration.py). Coverage of each kind, the
  family-wise rate of "differs" (Holm) under the null and for two identical guards, interval/p
  agreement on every row, and the procedure each design got.
* **small designs** (issue 35): 6, 8, 12 and 16 interactions, balanced and unbalanced (one large
  interaction, domains holding a single interaction): coverage of every 95% interval kind (an
  absent interval, printed with its reason, counts as covering and is tallied), the family-wise
  rate of every decision kind under the null (one guard; two identical guards), and the share of
  rows whose unadjusted interval excludes 0 exactly when the unadjusted p is below α.

* **failed calls** (issue 45), at the headline design: (a) a null guard whose calls fail
  completely at random, 10% and 30% of them: the family-wise rate of every decision (Δ, Δ −
  placebo, a star, "failed calls depend on the condition") must stay at or below α in its family;
  (b) a null guard that fails exactly when it would have blocked, under one condition (tool_alias)
  only: the headline rests on a biased subset, so `robust` must be false for that contrast in at
  least 95% of data sets, and `depends_on_condition` must say "differs" in at least 80%.

    python benchmarks/calibration.py [--sims 200] [--coverage-sims N] [--bootstrap 2000] [--seed 0]
                                     [--small-sims N] [--only-small] [--small-design NAME ...]
                                     [--only-failed] [--failed-sims N]
                                     [--only-varying] [--varying-sims N] [--varying-design NAME ...]
                                     [--generator homogeneous|heterogeneous]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))

from guardeval.estimators import effects as fx  # noqa: E402
from guardeval.estimators import estimate  # noqa: E402
from guardeval.estimators import synthetic as sy  # noqa: E402
from guardeval.estimators.bootstrap import Estimate  # noqa: E402
from guardeval.estimators.bootstrap import effective_df as bootstrap_effective_df  # noqa: E402
from guardeval.estimators.compare.compare import CompareInput, compare_inputs  # noqa: E402
from guardeval.estimators.compare.compare_text import text as compare_text  # noqa: E402
from guardeval.estimators.planning.plan import plan_rows  # noqa: E402
from guardeval.estimators.quantities import Key, Quantities  # noqa: E402
from guardeval.estimators.report.report import markdown  # noqa: E402
from guardeval.estimators.verdicts.decisions import significant  # noqa: E402
from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN  # noqa: E402
from guardeval.estimators.verdicts.holm import holm  # noqa: E402
from guardeval.estimators.verdicts.record import headline_significant as starred  # noqa: E402

ALPHA = 0.05
HEADLINE = sy.design(44, 64)          # the issue's design: 64 bases in 44 interactions, 4 domains, 3 repetitions
SIZES = (16, 32, 64, 256)
# A second guard that reads the provenance marker more (B − A of its corrected effect is +0.10).
OTHER = {**sy.EFFECTS, "provenance_marker": 0.20}
TOST_MARGIN = 0.10
TOST_DESIGN = sy.design(256, 384)
# Small designs (issue 35): balanced (1.5 bases per interaction, 4 domains) and unbalanced ones
# (one interaction holding a third or more of the bases; domains with a single interaction).
SMALL = {
    "6": sy.design(6, 8), "8": sy.design(8, 12), "12": sy.design(12, 18), "16": sy.design(16, 24),
    "6 unbalanced": sy.Design(((6, 1), (1,), (1,), (1, 1))),
    "8 unbalanced": sy.Design(((8, 1, 1), (1,), (1,), (1, 1, 1))),
    "12 unbalanced": sy.Design(((8, 1, 1, 1, 1), (1,), (2, 1, 1), (1, 1, 1))),
}


@dataclass
class Rate:
    """A proportion over data sets with its Monte-Carlo standard error."""

    hits: list[float] = field(default_factory=list)

    def add(self, x: float | np.floating) -> None:   # a share from np.mean, or 0/1
        self.hits.append(float(x))

    @property
    def value(self) -> float:
        return float(np.mean(self.hits)) if self.hits else math.nan

    @property
    def se(self) -> float:
        n = len(self.hits)
        return float(np.std(self.hits, ddof=1) / math.sqrt(n)) if n > 1 else math.nan

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f} ± {self.se:.{digits}f}"


def _tables(pop: sy.Population, effects: Sequence[Mapping[str, float]], rng: np.random.Generator) -> list[Any]:
    return sy.guards(pop, effects, rng)


def _inputs(tables: Sequence[Any]) -> list[CompareInput]:
    return [CompareInput(f"g{k + 1}", t, sy.ROLES) for k, t in enumerate(tables)]


def _estimate(rows: Any, n_boot: int, seed: int) -> dict[str, Any]:
    return dict(estimate(rows, roles=sy.ROLES, n_boot=n_boot, seed=seed, alpha=ALPHA))


# Condition families as a cohort's record names them (issue 48): Holm within each family.
FAMILIES = {"provenance_marker": "markers", "tool_alias": "names", "threat_names": "names"}


def _estimate_families(rows: Any, n_boot: int, seed: int) -> dict[str, Any]:
    return dict(estimate(rows, roles=sy.ROLES, n_boot=n_boot, seed=seed, alpha=ALPHA, families=FAMILIES))


def _compare(tables: Sequence[Any], n_boot: int, seed: int) -> dict[str, Any]:
    return dict(compare_inputs(_inputs(tables), n_boot=n_boot, seed=seed, alpha=ALPHA))


# -- what the outputs say, read from the fields the text reads (and checked against the text) ----

def estimate_says(report: Mapping[str, Any]) -> dict[str, bool]:
    delta = any(significant(c["equivalence"]) for c in report["contrasts"])
    corr = any(significant(c["equivalence_minus_placebo"]) for c in report["contrasts"])
    star = any(starred(c) for c in report["contrasts"])
    md = markdown(report)
    # report.md prints each verdict; its count of "differs from 0" is the fields' count.
    n = sum(bool(significant(c[k])) for c in report["contrasts"] for k in ("equivalence", "equivalence_minus_placebo"))
    table = md.split("## Effects", 1)[1].split("\n\n", 2)[1]
    assert table.count("differs from 0") == n, "report.md disagrees with the decision fields"
    fams = report["families"]
    if any(":" in q for q in fams):
        # Condition families: one Holm family per condition family and quantity (its count named).
        nd = sum(f.get("quantity") == "delta" for f in fams.values())
        nc = sum(f.get("quantity") == "delta_minus_placebo" for f in fams.values())
        return {f"Δ differs ({nd} families)": delta, f"Δ − placebo differs ({nc} families)": corr,
                f"a star ({nc} families)": star, f"any of these ({nd + nc} families)": delta or corr}
    return {"Δ differs": delta, "Δ − placebo differs": corr, "a star": star, "any of these (2 families)": delta or corr}


def compare_says(result: Mapping[str, Any]) -> dict[str, bool]:
    rows = [r for p in result["pairs"] for r in p["conditions"]]
    delta = any(significant(r["equivalence"]) for r in rows)
    corr = any(significant(r["equivalence_minus_placebo"]) for r in rows)
    ranking = any(p["ranking_changed"] for p in result["pairs"])
    order = any(s["ranking_changed"] for s in result["ranking_stability"]["by_condition"].values())
    words = compare_text(result)
    assert ("ranking changed: yes" in words) == ranking and ("changed under" in words)
    assert any(f"changed under {c}: yes" in words for c in result["ranking_stability"]["by_condition"]) == order
    return {"B − A of Δ differs": delta, "B − A of Δ − placebo differs": corr, "ranking changed: yes": ranking,
            "guard order changed: yes": order, "any of these (4 families)": delta or corr or ranking or order}


# -- the cells ------------------------------------------------------------------------------------

def null_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None]) -> dict[str, dict[str, Rate]]:
    out: dict[str, dict[str, Rate]] = {"estimate, null": {}, "estimate, null, condition families": {},
                                       "compare, 2 identical guards": {}, "compare, 3 identical guards": {}}
    for s in range(sims):
        pop = sy.population(HEADLINE, rng)
        null = _tables(pop, [sy.NULL], rng)[0]
        for k, v in estimate_says(_estimate(null, n_boot, s)).items():
            out["estimate, null"].setdefault(k, Rate()).add(v)
        for k, v in estimate_says(_estimate_families(null, n_boot, s)).items():
            out["estimate, null, condition families"].setdefault(k, Rate()).add(v)
        three = _tables(pop, [sy.EFFECTS] * 3, rng)
        for k, v in compare_says(_compare(three[:2], n_boot, s)).items():
            out["compare, 2 identical guards"].setdefault(k, Rate()).add(v)
        for k, v in compare_says(_compare(three, n_boot, s)).items():
            out["compare, 3 identical guards"].setdefault(k, Rate()).add(v)
        progress(f"null cells {s + 1}/{sims}")
    return out


def _covers(ci: Sequence[float] | None, truth: float) -> float:
    return float(ci is not None and ci[0] <= truth <= ci[1])


def coverage_cells(sims: int, n_boot: int, sizes: Sequence[int], rng: np.random.Generator,
                   progress: Callable[[str], None]) -> dict[int, dict[str, Rate]]:
    """Per design, the share of each kind's 95% intervals that cover the truth (per data set,
    averaged over the kind's conditions; the s.e. is over data sets)."""
    out: dict[int, dict[str, Rate]] = {}
    for g in sizes:
        d = sy.design(g)
        ta, tb = sy.truth(sy.EFFECTS, d), sy.truth(OTHER, d)
        cells: dict[str, Rate] = {k: Rate() for k in ("Δ", "Δ − placebo", "block rate", "B − A of Δ",
                                                      "B − A of Δ − placebo")}
        for s in range(sims):
            pop = sy.population(d, rng)
            a, b = _tables(pop, [sy.EFFECTS, OTHER], rng)
            rep = _estimate(a, n_boot, s)
            cs = rep["contrasts"]
            cells["Δ"].add(np.mean([_covers(c["ci"], ta.delta[c["condition"]]) for c in cs]))
            cells["Δ − placebo"].add(np.mean([_covers(c["ci_minus_placebo"], ta.corrected[c["condition"]])
                                              for c in cs if c["condition"] in ta.corrected]))
            cells["block rate"].add(np.mean([_covers(ci, ta.block_rate[c]) for c, ci in rep["block_rate_ci"].items()]))
            res = _compare([a, b], n_boot, s)
            rows = res["pairs"][0]["conditions"]
            cells["B − A of Δ"].add(np.mean([_covers(r["ci_difference"], tb.delta[r["condition"]] - ta.delta[r["condition"]])
                                             for r in rows]))
            cells["B − A of Δ − placebo"].add(np.mean([
                _covers(r["ci_difference_minus_placebo"], tb.corrected[r["condition"]] - ta.corrected[r["condition"]])
                for r in rows if r["condition"] in ta.corrected]))
            progress(f"coverage at {g} interactions {s + 1}/{sims}")
        out[g] = cells
    return out


def _agrees(ci: Sequence[float] | None, p: float | None, alpha: float = ALPHA) -> float | None:
    """1 when "the unadjusted interval excludes 0" and "the unadjusted p < α" say the same."""
    if p is None:
        return None
    return float((ci is not None and (ci[0] > 0 or ci[1] < 0)) == (p < alpha))


def _cover(absent: dict[str, int], kind: str, ci: Sequence[float] | None,
           truth: float) -> float:
    if ci is None:
        absent[kind] = absent.get(kind, 0) + 1
        return 1.0
    return _covers(ci, truth)


def small_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None],
                designs: Mapping[str, sy.Design] = SMALL) -> dict[str, dict[str, Any]]:
    """Per small design: coverage (one guard, and B − A between two guards that differ), the
    family-wise rate of every decision kind under the null, and interval/p agreement."""
    out: dict[str, dict[str, Any]] = {}
    for name, d in designs.items():
        ta, tb = sy.truth(sy.EFFECTS, d), sy.truth(OTHER, d)
        cov = {k: Rate() for k in ("Δ", "Δ − placebo", "block rate", "B − A of Δ", "B − A of Δ − placebo")}
        absent: dict[str, int] = {}
        null: dict[str, Rate] = {}
        agree = Rate()
        decidable: dict[str, bool | None] = {}
        for s in range(sims):
            pop = sy.population(d, rng)
            a, b = _tables(pop, [sy.EFFECTS, OTHER], rng)
            rep = _estimate(a, n_boot, s)
            cs = rep["contrasts"]
            cov["Δ"].add(np.mean([_cover(absent, "Δ", c["ci"], ta.delta[c["condition"]]) for c in cs]))
            cov["Δ − placebo"].add(np.mean([_cover(absent, "Δ − placebo", c["ci_minus_placebo"],
                                                   ta.corrected[c["condition"]]) for c in cs
                                            if c["condition"] in ta.corrected]))
            cov["block rate"].add(np.mean([_cover(absent, "block rate", ci, ta.block_rate[c])
                                           for c, ci in rep["block_rate_ci"].items()]))
            res = _compare([a, b], n_boot, s)
            rows = res["pairs"][0]["conditions"]
            cov["B − A of Δ"].add(np.mean([_cover(absent, "B − A of Δ", r["ci_difference"],
                                                  tb.delta[r["condition"]] - ta.delta[r["condition"]]) for r in rows]))
            cov["B − A of Δ − placebo"].add(np.mean([
                _cover(absent, "B − A of Δ − placebo", r["ci_difference_minus_placebo"],
                       tb.corrected[r["condition"]] - ta.corrected[r["condition"]])
                for r in rows if r["condition"] in ta.corrected]))
            for q, f in rep["families"].items():
                decidable[f"estimate {q}"] = f.get("decidable")
            # the null: one guard with no effect, and two identical guards
            null_rep = _estimate(_tables(pop, [sy.NULL], rng)[0], n_boot, s)
            twins = _compare(_tables(pop, [sy.EFFECTS] * 2, rng), n_boot, s)
            for k, v in (*estimate_says(null_rep).items(), *compare_says(twins).items()):
                null.setdefault(k, Rate()).add(v)
            for r in (rep, null_rep):
                for c in r["contrasts"]:
                    for ci, p in ((c["ci"], c["p"]), (c["ci_minus_placebo"], c["p_minus_placebo"])):
                        x = _agrees(ci, p)
                        if x is not None:
                            agree.add(x)
            for r in (res, twins):
                for row in r["pairs"][0]["conditions"]:
                    for ci, p in ((row["ci_difference"], row["p_difference"]),
                                  (row["ci_difference_minus_placebo"], row["p_difference_minus_placebo"])):
                        x = _agrees(ci, p)
                        if x is not None:
                            agree.add(x)
            progress(f"small design {name} {s + 1}/{sims}")
        out[name] = {"interactions": d.n_interactions, "bases": d.n_bases, "coverage": cov, "absent": absent,
                     "null": null, "agreement": agree, "decidable": decidable}
    return out


def small_report(res: Mapping[str, Mapping[str, Any]], sims: int) -> list[str]:
    first = next(iter(res.values()))
    kinds = list(first["coverage"])
    out = ["", f"Small designs ({sims} data sets per design; 4 domains, 3 repetitions; 95% intervals; an absent "
               "interval (printed with its reason) counts as covering, tallied in 'absent'):", "",
           "| design | bases | " + " | ".join(kinds) + " | absent | interval ⇔ p agreement |",
           "|---|---|" + "---|" * (len(kinds) + 2)]
    for name, r in res.items():
        absent = ", ".join(f"{k} {v}" for k, v in r["absent"].items()) or "0"
        out.append(f"| {name} | {r['bases']} | " + " | ".join(r["coverage"][k].text() for k in kinds)
                   + f" | {absent} | {r['agreement'].value:.4f} of {len(r['agreement'].hits)} rows |")
    nkinds = list(first["null"])
    out += ["", "Family-wise false-positive rate under the null (one guard with no effect; two identical guards; "
                f"nominal ≤ {ALPHA} per family, a union of n families ≤ n·{ALPHA}):", "",
            "| design | " + " | ".join(nkinds) + " | can decide (Δ; Δ − placebo) |", "|---|" + "---|" * (len(nkinds) + 1)]
    for name, r in res.items():
        dec = "; ".join("yes" if v else "no" for v in r["decidable"].values())
        out.append(f"| {name} | " + " | ".join(r["null"][k].text() for k in nkinds) + f" | {dec} |")
    return out


# -- effects that vary by base (issue 50) ----------------------------------------------------------


def unbalanced(g: int) -> sy.Design:
    """`g` interactions, one of them holding about 2g/3 bases (a third or more of the design);
    one domain holding a single interaction, one with (2, 1, 1), the rest single-base (issue 35's
    shape, for any size from 8)."""
    rest = g - 4
    n0, n3 = (rest + 1) // 2, rest // 2
    return sy.Design((((2 * g) // 3,) + (1,) * (n0 - 1), (1,), (2, 1, 1), (1,) * n3))


VARYING_SIZES = (6, 8, 12, 16, 20, 24, 28, 32, 44)
VARYING = {**{str(g): sy.design(g) for g in VARYING_SIZES},
           "6 unbalanced": SMALL["6 unbalanced"], "8 unbalanced": SMALL["8 unbalanced"],
           "12 unbalanced": SMALL["12 unbalanced"],
           **{f"{g} unbalanced": unbalanced(g) for g in VARYING_SIZES if g > 12}}
# generator -> (model, a guard's effects, the null's model): the heterogeneous null gives every
# condition the same spread of per-base effects, so every true Δ is exactly 0.
GENERATORS: dict[str, tuple[sy.AnyModel, Mapping[str, float], sy.AnyModel]] = {
    "homogeneous": (sy.Model(), sy.EFFECTS, sy.Model()),
    "heterogeneous": (sy.LogitModel(), sy.HET_EFFECTS, sy.HET_NULL_MODEL),
}
VARYING_KINDS = ("Δ", "placebo's Δ", "Δ − placebo", "B − A of Δ", "B − A of Δ − placebo")
VARYING_FAMILIES = ("Δ differs", "Δ − placebo differs", "B − A of Δ differs", "B − A of Δ − placebo differs")


def cluster_domain(d: sy.Design) -> np.ndarray:
    return np.array([dom for dom, sizes in enumerate(d.sizes) for _ in sizes], dtype=np.int64)


def add_guard(qs: Quantities, tag: str, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Each contrast's Δ and Δ − placebo of one guard's counts, as `estimate` adds them for the
    headline (drop) rule (contrasts.add_contrasts); returns the rates."""
    p = fx.base_rates(s, n)
    b, pl = 0, sy.CONDITIONS.index(sy.PLACEBO)
    for ci, c in enumerate(sy.CONDITIONS[1:], 1):
        paired = (n[:, ci] > 0) & (n[:, b] > 0)
        qs.add(("delta", tag, c), p[:, ci] - p[:, b], paired)
        if ci != pl:
            qs.add(("corrected", tag, c), p[:, ci] - p[:, pl], paired & (n[:, pl] > 0))
    return p


def add_difference(qs: Quantities, pa: np.ndarray, na: np.ndarray, pb: np.ndarray, nb: np.ndarray) -> None:
    """B − A of each Δ and Δ − placebo, as `compare` adds them (its "diff" and "cdiff")."""
    b, pl = 0, sy.CONDITIONS.index(sy.PLACEBO)
    for ci, c in enumerate(sy.CONDITIONS[1:], 1):
        ma, mb = (na[:, ci] > 0) & (na[:, b] > 0), (nb[:, ci] > 0) & (nb[:, b] > 0)
        qs.add(("diff", c), (pb[:, ci] - pb[:, b]) - (pa[:, ci] - pa[:, b]), ma & mb)
        if ci != pl:
            qa, qb = ma & (na[:, pl] > 0), mb & (nb[:, pl] > 0)
            qs.add(("cdiff", c), (pb[:, ci] - pb[:, pl]) - (pa[:, ci] - pa[:, pl]), qa & qb)


def varying_data_set(d: sy.Design, generator: str, rng: np.random.Generator, n_boot: int,
                     seed: int) -> dict[Key, Estimate]:
    """One data set: a guard, its identical twin (each its own calls) and a null guard on a
    population of its own; every interval and p in one `Quantities.run` (as `estimate` and
    `compare` run it with this seed: a quantity's result depends only on its own columns)."""
    model, effects, null_model = GENERATORS[generator]
    pop = sy.population(d, rng, model)
    sa, na = sy.counts(*sy.calls(pop, effects, rng))
    sb, nb = sy.counts(*sy.calls(pop, effects, rng))
    npop = sy.population(d, rng, null_model)
    s0, n0 = sy.counts(*sy.calls(npop, sy.NULL, rng))
    qs = Quantities()
    pa = add_guard(qs, "guard", sa, na)
    pb = fx.base_rates(sb, nb)
    add_guard(qs, "null", s0, n0)
    add_difference(qs, pa, na, pb, nb)
    return qs.run(pop.base_cluster, cluster_domain(d), n_boot, seed, DEFAULT_MARGIN, 1 - ALPHA)


def _family_differs(est: Mapping[Any, Mapping[str, Any]], keys: Sequence[Any]) -> bool:
    """Any member of the family "differs from 0" after Holm at α (decisions.decide_family)."""
    return any(a is not None and a < ALPHA for a in holm([est[k]["p"] for k in keys]))


def varying_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None],
                  designs: Mapping[str, sy.Design] = VARYING, generators: Sequence[str] = tuple(GENERATORS)
                  ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per generator and design: coverage of each kind (a data set's share of the kind's intervals
    that cover; an absent interval counts as covering and is tallied), the family-wise rate of
    each family's "differs" under the null (Δ, Δ − placebo: the null guard; B − A: two identical
    guards), interval/p agreement over every row, and the procedure that decided."""
    conds = sy.CONDITIONS[1:]
    interventions = [c for c in conds if c != sy.PLACEBO]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for generator in generators:
        model, effects, _ = GENERATORS[generator]
        out[generator] = {}
        for name, d in designs.items():
            t = sy.truth(effects, d, model)
            cov = {k: Rate() for k in VARYING_KINDS}
            null = {k: Rate() for k in VARYING_FAMILIES}
            agree, absent, methods = Rate(), 0, set()
            for s in range(sims):
                est = varying_data_set(d, generator, rng, n_boot, s)

                def cover(key: Any, truth: float, est: Mapping[Any, Mapping[str, Any]] = est) -> float:
                    nonlocal absent
                    ci = est[key]["ci"]
                    absent += ci is None
                    return 1.0 if ci is None else _covers(ci, truth)

                cov["Δ"].add(np.mean([cover(("delta", "guard", c), t.delta[c]) for c in conds]))
                cov["placebo's Δ"].add(cover(("delta", "guard", sy.PLACEBO), t.delta[sy.PLACEBO]))
                cov["Δ − placebo"].add(np.mean([cover(("corrected", "guard", c), t.corrected[c]) for c in interventions]))
                cov["B − A of Δ"].add(np.mean([cover(("diff", c), 0.0) for c in conds]))
                cov["B − A of Δ − placebo"].add(np.mean([cover(("cdiff", c), 0.0) for c in interventions]))
                null["Δ differs"].add(_family_differs(est, [("delta", "null", c) for c in conds]))
                null["Δ − placebo differs"].add(_family_differs(est, [("corrected", "null", c) for c in interventions]))
                null["B − A of Δ differs"].add(_family_differs(est, [("diff", c) for c in conds]))
                null["B − A of Δ − placebo differs"].add(_family_differs(est, [("cdiff", c) for c in interventions]))
                for r in est.values():
                    x = _agrees(r["ci"], r["p"])
                    if x is not None:
                        agree.add(x)
                    if r["method"] is not None:
                        methods.add(r["method"])
                progress(f"{generator} {name} {s + 1}/{sims}")
            out[generator][name] = {"interactions": d.n_interactions, "bases": d.n_bases,
                                    "effective_df": round(effective_df(d), 1), "coverage": cov, "null": null,
                                    "agreement": agree, "absent": absent, "method": ", ".join(sorted(methods))}
    return out


def effective_df(d: sy.Design) -> float:
    """The design's effective degrees of freedom as the switch reads them, every base present:
    (Σ n_g)² / Σ n_g² interactions (n_g: bases of interaction g) minus domains, at least 1."""
    n = np.array([s for sizes in d.sizes for s in sizes], dtype=np.float64)
    return bootstrap_effective_df(n, cluster_domain(d))


def varying_report(res: Mapping[str, Mapping[str, Mapping[str, Any]]], sims: int) -> list[str]:
    out: list[str] = []
    for generator, designs in res.items():
        out += ["", f"{generator} effects ({sims} data sets per design; 95% intervals; ± one Monte-Carlo s.e.):", "",
                "| design | bases | effective df | procedure | " + " | ".join(VARYING_KINDS)
                + " | absent | interval ⇔ p |", "|---|---|---|---|" + "---|" * (len(VARYING_KINDS) + 2)]
        for name, r in designs.items():
            out.append(f"| {name} | {r['bases']} | {r['effective_df']:g} | {r['method']} | "
                       + " | ".join(r["coverage"][k].text() for k in VARYING_KINDS)
                       + f" | {r['absent']} | {r['agreement'].value:.4f} of {len(r['agreement'].hits)} |")
        out += ["", f"{generator}: family-wise rate of \"differs\" (Holm at α {ALPHA}; nominal ≤ {ALPHA} per family; "
                    "Δ and Δ − placebo: a guard with no effect; B − A: two identical guards):", "",
                "| design | " + " | ".join(VARYING_FAMILIES) + " |", "|---|" + "---|" * len(VARYING_FAMILIES)]
        for name, r in designs.items():
            out.append(f"| {name} | " + " | ".join(r["null"][k].text() for k in VARYING_FAMILIES) + " |")
    return out


def plan_mde(rng: np.random.Generator, effects: Mapping[str, float]) -> tuple[float, float, int]:
    """plan's predicted MDE (nominal, Holm level, m) of the marker's corrected effect at the
    headline design, from a pilot eight times its size of the same model (so its components are
    estimated closely)."""
    big = sy.design(HEADLINE.n_interactions * 8, HEADLINE.n_bases * 8)
    pilot = _tables(sy.population(big, rng), [effects], rng)[0]
    plan = plan_rows(pilot, roles=sy.ROLES, bases=[HEADLINE.n_bases], reps=[HEADLINE.reps])
    e = next(e for e in plan["designs"][0]["effects"]
             if e["quantity"] == "corrected" and e["condition"] == "provenance_marker")
    return float(e["mde"]), float(e["mde_holm"]), int(plan["holm_m"]["corrected"])


def power_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None]
                ) -> dict[str, tuple[float, Rate]]:
    out: dict[str, tuple[float, Rate]] = {}
    nominal, holm, m = plan_mde(rng, sy.EFFECTS)
    for label, target, level in (("α", nominal, ALPHA), (f"α/{m} (Holm's first step)", holm, ALPHA / m)):
        effects = {**sy.EFFECTS, "provenance_marker": sy.EFFECTS[sy.PLACEBO] + target}
        rate = Rate()
        for s in range(sims):
            rows = _tables(sy.population(HEADLINE, rng), [effects], rng)[0]
            c = next(c for c in _estimate(rows, n_boot, s)["contrasts"] if c["condition"] == "provenance_marker")
            rate.add(c["p_minus_placebo"] is not None and c["p_minus_placebo"] < level)
            progress(f"power at plan's MDE ({label}) {s + 1}/{sims}")
        out[label] = (target, rate)
    return out


def tost_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None]) -> dict[str, Rate]:
    """The true corrected effect of the marker exactly at +M (and, for power, at 0)."""
    out = {"within ±M claimed, truth +M (its own TOST)": Rate(), "within ±M claimed, truth +M (after Holm)": Rate(),
           "within ±M claimed, truth 0 (after Holm)": Rate()}
    for s in range(sims):
        pop = sy.population(TOST_DESIGN, rng)
        edge = {**sy.EFFECTS, "provenance_marker": sy.EFFECTS[sy.PLACEBO] + TOST_MARGIN}
        zero = {**sy.EFFECTS, "provenance_marker": sy.EFFECTS[sy.PLACEBO]}
        for effects, keys in ((edge, ("within ±M claimed, truth +M (its own TOST)",
                                      "within ±M claimed, truth +M (after Holm)")),
                              (zero, ("within ±M claimed, truth 0 (after Holm)",))):
            rows = _tables(pop, [effects], rng)[0]
            rep = estimate(rows, roles=sy.ROLES, n_boot=n_boot, seed=s, alpha=ALPHA, margin=TOST_MARGIN)
            eq = next(c for c in rep["contrasts"] if c["condition"] == "provenance_marker")["equivalence_minus_placebo"]
            for k in keys:
                out[k].add(eq["p_tost"] < ALPHA if "own TOST" in k else bool(eq["equivalent"]))
        progress(f"TOST at the margin {s + 1}/{sims}")
    return out


FAIL_RATES = (0.10, 0.30)
FAILING_CONDITION = "tool_alias"


def failed_cells(sims: int, n_boot: int, rng: np.random.Generator, progress: Callable[[str], None]
                 ) -> dict[str, dict[str, Rate]]:
    """(a) missing completely at random on a null guard, at each rate of FAIL_RATES; (b) a null
    guard whose calls under FAILING_CONDITION fail exactly when they would have blocked."""
    out: dict[str, dict[str, Rate]] = {}
    for rate in FAIL_RATES:
        cell = out.setdefault(f"(a) {rate:.0%} fail at random, null guard", {})
        for s in range(sims):
            pop = sy.population(HEADLINE, rng, sy.Model(fail_rate=rate))
            rep = _estimate(_tables(pop, [sy.NULL], rng)[0], n_boot, s)
            says = {**estimate_says(rep), "failed calls depend on the condition": bool(
                rep["excluded"]["depends_on_condition"]["differs"])}
            says["any headline not robust"] = any((c.get("bounds") or {}).get("robust") is False
                                                  for c in rep["contrasts"] if c["headline"] != "placebo")
            for k, v in says.items():
                cell.setdefault(k, Rate()).add(v)
            progress(f"failed calls at random ({rate:.0%}) {s + 1}/{sims}")
    cell = out.setdefault(f"(b) fails exactly when it would block, under {FAILING_CONDITION} only, null guard", {})
    for s in range(sims):
        rows = _tables(sy.population(HEADLINE, rng, sy.Model(fail_rate=0.0)), [sy.NULL], rng)[0]
        for r in rows:
            if r["condition"] == FAILING_CONDITION and r["decision"] == 1:
                r["decision"], r["status"] = None, "unparseable"
        rep = _estimate(rows, n_boot, s)
        c = next(c for c in rep["contrasts"] if c["condition"] == FAILING_CONDITION)
        dep = rep["excluded"]["depends_on_condition"]
        says = {f"{FAILING_CONDITION} starred (the biased subset)": bool(starred(c)),
                f"{FAILING_CONDITION} robust: false": (c["bounds"] or {}).get("robust") is False,
                "depends_on_condition: differs": bool(dep["differs"]),
                f"depends_on_condition names {FAILING_CONDITION}": bool(dep["members"][FAILING_CONDITION]["differs"]),
                "any other condition said to differ in failures": any(
                    m["differs"] for k, m in dep["members"].items() if k != FAILING_CONDITION)}
        for k, v in says.items():
            cell.setdefault(k, Rate()).add(v)
        progress(f"failed calls that follow the decision {s + 1}/{sims}")
    return out


# The bar each failed-call row is held to: (at most, at least); None where the row is descriptive.
FAILED_BARS: dict[str, tuple[float | None, float | None]] = {
    "Δ differs": (ALPHA, None), "Δ − placebo differs": (ALPHA, None), "a star": (ALPHA, None),
    "any of these (2 families)": (2 * ALPHA, None), "failed calls depend on the condition": (ALPHA, None),
    f"{FAILING_CONDITION} robust: false": (None, 0.95), "depends_on_condition: differs": (None, 0.80),
}


def failed_report(res: Mapping[str, Mapping[str, Rate]], sims: int) -> list[str]:
    out = ["", f"Failed calls ({sims} data sets per cell; {HEADLINE.n_bases} bases in {HEADLINE.n_interactions} "
               f"interactions, 4 domains, {HEADLINE.reps} repetitions; no condition has any effect):", "",
           "| cell | decision | rate | bar | within 2 s.e. |", "|---|---|---|---|---|"]
    for cell, kinds in res.items():
        for k, r in kinds.items():
            most, least = FAILED_BARS.get(k, (None, None))
            if most is not None:
                bar, ok = f"≤ {most:g}", r.value - 2 * r.se <= most
            elif least is not None:
                bar, ok = f"≥ {least:g}", r.value + 2 * r.se >= least
            else:
                bar, ok = "—", None
            out.append(f"| {cell} | {k} | {r.text()} | {bar} | {'—' if ok is None else 'yes' if ok else 'NO'} |")
    return out


def run(sims: int, n_boot: int, seed: int, sizes: Sequence[int] = SIZES, coverage_sims: int | None = None,
        progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"null": null_cells(sims, n_boot, rng, progress),
            "coverage": coverage_cells(coverage_sims or sims, n_boot, sizes, rng, progress),
            "power": power_cells(sims, n_boot, rng, progress),
            "tost": tost_cells(sims, n_boot, rng, progress)}


def report(res: Mapping[str, Any], sims: int, n_boot: int, coverage_sims: int | None = None) -> list[str]:
    out = [f"{sims} simulated data sets per cell ({coverage_sims or sims} per coverage cell), {n_boot} bootstrap "
           f"replicates, decisions at α {ALPHA}; ± is one Monte-Carlo standard error", "",
           f"Family-wise false-positive rate ({HEADLINE.n_bases} bases in {HEADLINE.n_interactions} interactions, "
           f"4 domains, {HEADLINE.reps} repetitions; nominal ≤ {ALPHA}):", "",
           "| cell | decision | rate | nominal | within 2 s.e. |", "|---|---|---|---|---|"]
    for cell, kinds in res["null"].items():
        for k, r in kinds.items():
            # A union of several families' decisions is held at (families) × α, not α.
            n = int(k.split("(")[1].split()[0]) if "families)" in k else 1
            ok = r.value - 2 * r.se <= n * ALPHA
            out.append(f"| {cell} | {k} | {r.text()} | ≤ {n * ALPHA:g} | {'yes' if ok else 'NO'} |")
    out += ["", "Coverage of 95% intervals (nominal 0.95; target 0.935–0.965 from 32 interactions):", "",
            "| interactions | " + " | ".join(next(iter(res["coverage"].values()))) + " |",
            "|---|" + "---|" * len(next(iter(res["coverage"].values())))]
    for g, cells in res["coverage"].items():
        out.append(f"| {g} | " + " | ".join(r.text() for r in cells.values()) + " |")
    out += ["", f"Power at the MDE `plan` predicts ({HEADLINE.n_bases} bases, {HEADLINE.reps} repetitions; "
                "the marker's corrected effect; nominal 0.80):", "", "| level | true effect = plan's MDE | power |",
            "|---|---|---|"]
    for label, (target, r) in res["power"].items():
        out.append(f"| {label} | {target:.4f} | {r.text()} |")
    out += ["", f"Equivalence at the margin (±{TOST_MARGIN:g}; {TOST_DESIGN.n_bases} bases in "
                f"{TOST_DESIGN.n_interactions} interactions; nominal ≤ {ALPHA} at the margin):", "",
            "| claim | rate |", "|---|---|"]
    for k, r in res["tost"].items():
        out.append(f"| {k} | {r.text()} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=200, help="data sets per cell (default 200)")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates per estimate (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coverage-sims", type=int, help="data sets per coverage cell (default: --sims)")
    ap.add_argument("--small-sims", type=int, help="data sets per small design (default: --sims)")
    ap.add_argument("--only-small", action="store_true", help="only the small designs (issue 35)")
    ap.add_argument("--small-design", action="append", choices=list(SMALL),
                    help="run only this small design (repeatable; default: all)")
    ap.add_argument("--failed-sims", type=int, help="data sets per failed-call cell (default: --sims)")
    ap.add_argument("--only-failed", action="store_true", help="only the failed-call cells (issue 45)")
    ap.add_argument("--only-varying", action="store_true", help="only effects that vary by base (issue 50)")
    ap.add_argument("--varying-sims", type=int, help="data sets per design for issue 50's cells (default: --sims)")
    ap.add_argument("--varying-design", action="append", choices=list(VARYING),
                    help="run only this design in issue 50's cells (repeatable; default: all)")
    ap.add_argument("--generator", action="append", choices=list(GENERATORS),
                    help="issue 50's cells under this generator only (repeatable; default: both)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    last = [0.0]

    def progress(msg: str) -> None:
        if time.perf_counter() - last[0] > 10:
            last[0] = time.perf_counter()
            print(f"  [{time.perf_counter() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    print(f"load average {os.getloadavg()[0]:.1f}")
    if args.only_varying:
        chosen_v = {k: VARYING[k] for k in (args.varying_design or VARYING)}
        vs = args.varying_sims or args.sims
        res_v = varying_cells(vs, args.bootstrap, np.random.default_rng(args.seed + 2), progress, chosen_v,
                              args.generator or tuple(GENERATORS))
        print("\n".join(varying_report(res_v, vs)))
        print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")
        return
    small_sims = args.small_sims or args.sims
    failed_sims = args.failed_sims or args.sims
    if args.only_failed:
        res_f = failed_cells(failed_sims, args.bootstrap, np.random.default_rng(args.seed + 2), progress)
        print(f"{args.bootstrap} bootstrap replicates; ± is one Monte-Carlo standard error")
        print("\n".join(failed_report(res_f, failed_sims)))
        print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")
        return
    if not args.only_small:
        res = run(args.sims, args.bootstrap, args.seed, coverage_sims=args.coverage_sims, progress=progress)
        print("\n".join(report(res, args.sims, args.bootstrap, args.coverage_sims)))
    chosen = {k: SMALL[k] for k in (args.small_design or SMALL)}
    small = small_cells(small_sims, args.bootstrap, np.random.default_rng(args.seed + 1), progress, chosen)
    print(f"{args.bootstrap} bootstrap replicates (random flips where a design has more than 16 interactions); "
          "± is one Monte-Carlo standard error")
    print("\n".join(small_report(small, small_sims)))
    if not args.only_small:
        res_f = failed_cells(failed_sims, args.bootstrap, np.random.default_rng(args.seed + 2), progress)
        print("\n".join(failed_report(res_f, failed_sims)))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
