"""Guards on one schedule (replicates on other guards or models), compared (docs/estimators.md,
compare): every pair's difference of Δ and of the placebo-corrected effect under one paired
cluster bootstrap (one resampled set of interactions per replicate, applied to every input),
a leaderboard per condition, and whether orders reverse.

Every verdict is a Holm decision within a family fixed before the data are seen
(decisions.py): with two inputs, the pair's conditions; with three or more, every pair × every
condition. An order has reversed only when both orders are established (an intersection–union
test: the earlier order significant one way and the later one the other way), with one Holm
family over every pair and condition fixed in advance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, cast

import numpy as np

from guardeval.errors import CheckFailed, InputError
from guardeval.estimators import accuracy as acc
from guardeval.estimators import effects as fx
from guardeval.estimators import excluded as ex
from guardeval.estimators.bootstrap import cluster_sums
from guardeval.estimators.compare.compare_types import (
    CompareFamily,
    CompareResult,
    ConditionStability,
    HolmFamily,
    InputPlaceboCheck,
    InputSource,
    Pair,
    PairRow,
    RankingStability,
    Reversal,
    no_source,
)
from guardeval.estimators.compare.leaderboard import F1, leaderboard
from guardeval.estimators.compare.ranking import kendall_tau_b, ranking, reversed_pairs
from guardeval.estimators.core import DEFAULT_PLACEBO, inference_record, resolve_conditions, validated
from guardeval.estimators.quantities import RATE, Estimates, Quantities
from guardeval.estimators.quarantine import quarantine_summary
from guardeval.estimators.table import MISSING
from guardeval.estimators.types import End
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts import robust as rb
from guardeval.estimators.verdicts.decidable import cannot_decide_sentence, family_decidability
from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN, check_margin, equivalence
from guardeval.estimators.verdicts.holm import holm
from guardeval.estimators.verdicts.power import ALPHA

RANKING_RULE = ("the conditions' order by Δ changed between two guards when, for a pair of conditions, the order "
                "in one guard is significant one way and in the other the opposite way (intersection–union: "
                "p = the larger of the two two-sided p-values of Δx − Δy), Holm over every pair of guards × every pair "
                "of conditions; changed when one has a Holm-adjusted p < α")
GUARD_ORDER = ("guards ordered by block rate; a pair of guards has reversed under a condition when its order under "
               "the baseline is significant one way and its order under the condition the opposite way "
               "(intersection–union: p = the larger of the two two-sided p-values of the difference in block rate), "
               "Holm over every pair of guards × every non-baseline condition; changed when one has a Holm-adjusted "
               "p < α. Kendall's τ describes the two orders; it decides nothing")

__all__ = ["CompareInput", "compare", "compare_inputs", "ranking", "reversed_pairs"]


@dataclass
class CompareInput:
    """One guard's decisions on the shared schedule: a run's table or a decision table."""

    label: str
    rows: Iterable[Any]
    roles: Mapping[str, str] = field(default_factory=dict)
    baseline: str | None = None     # the input's own default (a run's cohort baseline)
    placebo: str | None = None      # the input's own default (a run's placebo)
    complete: bool = True
    source: InputSource = field(default_factory=no_source)   # recorded as the input's `source`


def _check_structure(designs: Sequence[fx.Design], labels: Sequence[str]) -> None:
    """Every input has the bases, interactions, domains and conditions of the first; else the
    first base (or condition) that differs is named."""
    d0 = designs[0]
    for d, label in zip(designs[1:], labels[1:]):
        if d.base_ids != d0.base_ids:
            a, b = set(d0.base_ids), set(d.base_ids)
            first = min(a ^ b)
            who, other = (labels[0], label) if first in a else (label, labels[0])
            raise InputError(f"inputs {labels[0]!r} and {label!r} do not have the same bases: base {first!r} is in "
                             f"{who!r}, not in {other!r}", field="base_id")
        for i, base in enumerate(d0.base_ids):
            g0, g = d0.base_cluster[i], d.base_cluster[i]
            if d0.cluster_ids[g0] != d.cluster_ids[g] or d0.domains[d0.cluster_domain[g0]] != d.domains[d.cluster_domain[g]]:
                raise InputError(f"inputs {labels[0]!r} and {label!r} differ at base {base!r}: interaction or "
                                 "domain", field="base_id")
        if set(d.conditions) != set(d0.conditions):
            first = min(set(d.conditions) ^ set(d0.conditions))
            raise InputError(f"inputs {labels[0]!r} and {label!r} do not have the same conditions: {first!r} is "
                             "in one only", field="condition")


def _check_named(designs: Sequence[fx.Design], labels: Sequence[str], name: str, what: str) -> None:
    for d, label in zip(designs, labels):
        if name not in d.conditions:
            raise InputError(f"the {what} condition {name!r} has no rows in input {label!r} (conditions: "
                             f"{', '.join(d.conditions)})", field=what)


def _f1(d: fx.Design, rule: str, c: int) -> F1:
    v, counted = fx.row_values(d, rule)
    label = d.base_label[d.row_base]
    sel = counted & (d.row_cond == c) & ~np.isnan(label)
    units = acc.evaluation_units(label[sel].astype(np.int64), v[sel].astype(np.int64), d.base_cluster[d.row_base[sel]])
    return {"row_f1": units["row_f1"], "interaction_f1": units["interaction_f1"]}


def _tau_statistic(qs: Quantities, c: str, rates_b: list[np.ndarray], rates_c: list[np.ndarray],
                   has_b: list[np.ndarray], has_c: list[np.ndarray], base_cluster: np.ndarray, n_clusters: int) -> None:
    """Kendall's τ_b between the guards' block rates under the baseline and under c, in every replicate."""
    cols = []
    for pb, pc, hb, hc in zip(rates_b, rates_c, has_b, has_c):
        cols += [np.where(hb, pb, 0.0), hb.astype(np.float64), np.where(hc, pc, 0.0), hc.astype(np.float64)]
    feats = cluster_sums(np.column_stack(cols), base_cluster, n_clusters)

    def rates(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            rb = np.where(sums[:, 1::4] > 0, sums[:, 0::4] / sums[:, 1::4], np.nan)
            rc = np.where(sums[:, 3::4] > 0, sums[:, 2::4] / sums[:, 3::4], np.nan)
        return rb, rc

    # The point: block rates summed over bases as the leaderboard's are.
    point_b = np.array([[pb[hb].mean() if hb.any() else np.nan for pb, hb in zip(rates_b, has_b)]])
    point_c = np.array([[pc[hc].mean() if hc.any() else np.nan for pc, hc in zip(rates_c, has_c)]])
    tau = float(kendall_tau_b(point_b, point_c)[0])
    qs.add_statistic([("tau", c)], [tau if np.isfinite(tau) else None], feats,
                     lambda sums: kendall_tau_b(*rates(sums))[:, None])


def _eq(q: Mapping[str, Any] | None, margin: float, m: int | None, alpha: float) -> Any:
    return equivalence(q, margin, m, alpha)


def compare_inputs(inputs: Sequence[CompareInput], *, baseline: str | None = None, placebo: str | None = None,
                   family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
                   failure_rule: str = "drop", missing: str = "exclude", margin: float = DEFAULT_MARGIN,
                   allow_partial: bool = False, allow_unpublishable: bool = False,
                   alpha: float = ALPHA) -> CompareResult:
    """The comparison of two or more inputs of one schedule (docs/estimators.md, compare).

    Raises InputError for fewer than two inputs, duplicate labels, a bad option, a baseline or
    placebo some input lacks, or inputs whose bases differ; CheckFailed for an incomplete input
    unless `allow_partial`."""
    if len(inputs) < 2:
        raise InputError(f"compare needs at least two inputs, got {len(inputs)}")
    labels = [i.label for i in inputs]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        raise InputError(f"two inputs have the label {dup!r} (--label gives each its own)", field="label")
    margin = check_margin(margin)
    alpha = dc.check_alpha(alpha)
    fx.check_rule(failure_rule)
    if n_boot < 1:
        raise InputError("the number of bootstrap replicates must be >= 1", field="bootstrap")
    rows = [validated(i.rows) for i in inputs]
    flags = []
    for inp, r in zip(inputs, rows):
        n_missing = sum(1 for x in r if x["status"] == MISSING)
        ok = inp.complete and n_missing == 0
        flags.append(ok)
        if not ok and not allow_partial:
            raise CheckFailed(f"input {inp.label!r} is incomplete ({n_missing} calls without a decision); "
                              "use --allow-partial to compare anyway")
    roles = dict(inputs[0].roles)
    designs = [fx.build_design(r, list(roles), missing) for r in rows]
    baseline = baseline or inputs[0].baseline or "original"
    _check_named(designs, labels, baseline, "baseline")
    if placebo is not None:
        _check_named(designs, labels, placebo, "placebo")
    else:
        # The first input's placebo (its role, else by name), which every input must have.
        placebo = inputs[0].placebo or next((c for c, r in roles.items() if r == "placebo"), None)
        if placebo is None and DEFAULT_PLACEBO in designs[0].conditions:
            placebo = DEFAULT_PLACEBO
        if placebo is not None:
            _check_named(designs, labels, placebo, "placebo")
    _check_structure(designs, labels)
    d0 = designs[0]
    baseline, placebo, contrasts, fam = resolve_conditions(d0, baseline, placebo, family, roles)
    # The corrected family: the interventions (no placebo, no corrected effect at all).
    fam_corr = [c for c in fam if c != placebo] if placebo is not None else []
    conds = d0.conditions
    b = d0.cond_index(baseline)
    pl = None if placebo is None else d0.cond_index(placebo)
    labelled = bool((~np.isnan(d0.base_label)).any())
    sign = 2 * d0.base_label - 1

    qs = Quantities()
    p_all, n_all = [], []
    for k, d in enumerate(designs):
        remap = [d.cond_index(c) for c in conds]
        s, n = fx.base_counts(d, failure_rule)
        s, n = s[:, remap], n[:, remap]
        p = fx.base_rates(s, n)
        p_all.append(p)
        n_all.append(n)
        for c in conds:
            ci = d0.cond_index(c)
            qs.add(("rate", k, c), p[:, ci], n[:, ci] > 0, RATE)
            if labelled:
                qs.add(("accuracy", k, c), np.where(sign > 0, p[:, ci], 1 - p[:, ci]),
                       (n[:, ci] > 0) & ~np.isnan(d0.base_label), RATE)
    eff: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
    corr: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
    for k in range(len(inputs)):
        p, n = p_all[k], n_all[k]
        for c in contrasts:
            ci = d0.cond_index(c)
            paired = (n[:, ci] > 0) & (n[:, b] > 0)
            eff[(k, c)] = (p[:, ci] - p[:, b], paired)
            qs.add(("delta", k, c), *eff[(k, c)])
            if pl is not None and ci != pl:
                # Δc − Δplacebo on bases with c, baseline and placebo: the baseline cancels.
                corr[(k, c)] = (p[:, ci] - p[:, pl], paired & (n[:, pl] > 0))
                qs.add(("corr", k, c), *corr[(k, c)])
    pairs = list(combinations(range(len(inputs)), 2))
    failed = [bool(ex.failed_rows(d).any()) for d in designs]
    if any(failed):
        _add_failure_quantities(qs, designs, conds, contrasts, b, pl, pairs)
    for j, k in pairs:
        for c in contrasts:
            (ea, ma), (eb, mb) = eff[(j, c)], eff[(k, c)]
            qs.add(("diff", j, k, c), eb - ea, ma & mb)
            if (k, c) in corr:
                (ca, qa), (cb, qb) = corr[(j, c)], corr[(k, c)]
                qs.add(("cdiff", j, k, c), cb - ca, qa & qb)
        for x, y in combinations(contrasts, 2):
            qs.add_combination(("dd", j, k, x, y), {("diff", j, k, x): 1.0, ("diff", j, k, y): -1.0})
        for c in conds:
            # The order of the two guards by block rate under c (the guard-order reversal test).
            qs.add_combination(("rdiff", j, k, c), {("rate", k, c): 1.0, ("rate", j, c): -1.0})
    for k in range(len(inputs)):
        for x, y in combinations(contrasts, 2):
            # The order of two conditions by Δ within one guard (the condition-order reversal test).
            qs.add_combination(("ddelta", k, x, y), {("delta", k, x): 1.0, ("delta", k, y): -1.0})
    for c in contrasts:
        ci = d0.cond_index(c)
        _tau_statistic(qs, c, [p[:, b] for p in p_all], [p[:, ci] for p in p_all],
                       [n[:, b] > 0 for n in n_all], [n[:, ci] > 0 for n in n_all], d0.base_cluster, d0.n_clusters)
    est = qs.run(d0.base_cluster, d0.cluster_domain, n_boot, seed, margin, 1 - alpha)   # intervals at 1 − α

    pair_out = [_pair(est, j, k, labels, contrasts, fam, fam_corr, margin, alpha) for j, k in pairs]
    _holm_across_pairs(pair_out, contrasts, fam_corr)
    families = _decide(pair_out, fam, fam_corr, alpha)
    condition_family = _condition_order(est, pair_out, pairs, contrasts, alpha)
    f1 = {(k, c): _f1(d, failure_rule, d.cond_index(c)) for k, d in enumerate(designs) for c in conds} if labelled else None
    _pair_bounds(est, pair_out, pairs, fam, fam_corr, any(failed), alpha)
    quarantine = [quarantine_summary(r, len(r)) for r in rows]
    excluded = [ex.excluded_record(d, q["count"], len(r), ex.decide_depends(
                    {c: est.get(("failure_share", k, c)) for c in contrasts}, failed[k], margin, alpha))
                for k, (d, q, r) in enumerate(zip(designs, quarantine, rows))]
    for q, e in zip(quarantine, excluded):
        q["publishable"] = e["publishable"]   # one verdict on publishing: the excluded record's
    first = pair_out[0]
    result: CompareResult = {
        "inputs": [{"label": inp.label, "source": inp.source, "complete": ok, "quarantine": q, "excluded": e}
                   for inp, ok, q, e in zip(inputs, flags, quarantine, excluded)],
        "baseline": baseline, "placebo": placebo, "failure_rule": failure_rule,
        "family": fam, "family_minus_placebo": fam_corr, "alpha": alpha, "families": families,
        "margin": margin, "power": dc.power_record(alpha),
        "n_bases": d0.n_bases, "n_interactions": d0.n_clusters,
        "difference": "B minus A (the later input minus the earlier), on bases paired in both",
        "headline": "difference_minus_placebo",
        "pairs": pair_out,
        # The first pair (inputs 1 and 2) at the top level, as `compare RUN_A RUN_B` has always said it.
        "a": first["a"], "b": first["b"],
        "conditions": first["conditions"], "ranking_a": first["ranking_a"], "ranking_b": first["ranking_b"],
        "ranking_changed": first["ranking_changed"], "reversed_pairs": first["reversed_pairs"],
        "ranking_rule": RANKING_RULE, "ranking_family": condition_family,
        "leaderboard": leaderboard(labels, conds, baseline, est, f1),
        "ranking_stability": _stability(est, labels, contrasts, baseline, alpha),
        "missing": missing,
        "complete": all(flags),
        "publishable": all(e["publishable"] for e in excluded),
        "allow_unpublishable": allow_unpublishable,
        "bootstrap": {"n": n_boot, "seed": seed, "paired": "the same resampled interactions for every input"},
        "cannot_decide": [said for q, f in families.items()
                          if (said := cannot_decide_sentence(f, alpha, f["name"],
                                                          "B − A of Δ − placebo" if q == "difference_minus_placebo"
                                                          else "B − A of Δ"))],
        "placebo_checks": _placebo_checks(est, labels, placebo, fam, alpha),
        "inference": inference_record(),
    }
    return result


def _placebo_checks(est: Estimates, labels: Sequence[str], placebo: str | None,
                    fam: Sequence[str], alpha: float) -> list[InputPlaceboCheck]:
    """Each input's placebo Δ, decided as `estimate` decides it (Holm over that input's Δ family):
    a placebo that moved a guard is a failed control for that guard, said first."""
    if placebo is None or placebo not in fam:
        return []
    out: list[InputPlaceboCheck] = []
    family = dc.family_name(fam, "condition")
    for k, label in enumerate(labels):
        d = dict(zip(fam, dc.decide_pvalues([est[("delta", k, c)]["p"] for c in fam], family, alpha)))[placebo]
        q = est[("delta", k, placebo)]
        out.append({"label": label, "condition": placebo, "delta": q["estimate"], "ci": q["ci"],
                    "p_holm": d.p_adjusted, "family": family, "failed": bool(d.differs)})
    return out


def _add_failure_quantities(qs: Quantities, designs: Sequence[fx.Design], conds: Sequence[str],
                            contrasts: Sequence[str], b: int, pl: int | None, pairs: Sequence[tuple[int, int]]) -> None:
    """Into the one bootstrap: each input's share of failed calls per condition minus the
    baseline's, and each pair's B − A at both ends of its range over the failed calls (B's low
    end minus A's high end, and the reverse: estimators/excluded.py)."""
    d0 = designs[0]
    closed, opened, n_cl, share = [], [], [], []
    for d in designs:
        remap = [d.cond_index(c) for c in conds]
        s_c, n_c = (x[:, remap] for x in fx.base_counts(d, ex.CLOSED))
        s_o, n_o = (x[:, remap] for x in fx.base_counts(d, ex.OPEN))
        n_ok = fx.base_counts(d, "drop")[1][:, remap]
        closed.append(fx.base_rates(s_c, n_c))
        opened.append(fx.base_rates(s_o, n_o))
        n_cl.append(n_c)
        share.append(ex.failure_share(n_c, n_ok))
    for k in range(len(designs)):
        for c in contrasts:
            ci = d0.cond_index(c)
            qs.add(("failure_share", k, c), share[k][:, ci] - share[k][:, b], (n_cl[k][:, ci] > 0) & (n_cl[k][:, b] > 0))
    for j, k in pairs:
        for c in contrasts:
            ci = d0.cond_index(c)
            for key, ref in (("bound_diff", b), ("bound_cdiff", pl)):
                if ref is None or ci == ref:
                    continue
                mask = np.logical_and.reduce([n[:, x] > 0 for n in (n_cl[j], n_cl[k]) for x in {ci, b, ref}])
                lo_a, hi_a = opened[j][:, ci] - closed[j][:, ref], closed[j][:, ci] - opened[j][:, ref]
                lo_b, hi_b = opened[k][:, ci] - closed[k][:, ref], closed[k][:, ci] - opened[k][:, ref]
                qs.add((key, j, k, c, "lo"), lo_b - hi_a, mask)
                qs.add((key, j, k, c, "hi"), hi_b - lo_a, mask)


def _pair_bounds(est: Estimates, pair_out: list[Pair], pairs: Sequence[tuple[int, int]],
                 fam: Sequence[str], fam_corr: Sequence[str], failed: bool, alpha: float) -> None:
    """`bounds` on every pair row, in place: B − A's range over the failed calls of both inputs,
    each end decided by Holm over the family its difference is decided in (every pair × the
    family), robust when both ends agree. Without failed calls the range is the difference itself."""
    for quantity, members, key, own in (("difference", fam, "bound_diff", "p_difference"),
                                        ("difference_minus_placebo", fam_corr, "bound_cdiff",
                                         "p_difference_minus_placebo")):
        rows = [((j, k), r) for (j, k), pr in zip(pairs, pair_out) for r in pr["conditions"]]
        for side in ex.ENDS:
            ends = [_bound_end(est, (key, *jk, r["condition"], side) if failed else None, r, quantity, own)
                    for jk, r in rows]
            decided = iter(rb.decide_ends([e for e, (_, r) in zip(ends, rows) if r["condition"] in members], alpha))
            for e, (_, r) in zip(ends, rows):
                # A row outside the family: shown, not decided.
                said = next(decided) if r["condition"] in members else (
                    None if e is None else {**e, "p_holm": None, "verdict": "not tested"})
                r.setdefault("bounds", {}).setdefault("ends", {}).setdefault(quantity, {})[side] = said
    for pr in pair_out:
        for r in pr["conditions"]:
            bd = r["bounds"]
            for quantity in ("difference", "difference_minus_placebo"):
                lo, hi = (bd["ends"][quantity].get(s) for s in ex.ENDS)
                bd[quantity] = None if lo is None or hi is None else [lo["estimate"], hi["estimate"]]
                bd[f"robust_{quantity}"] = rb.robust(lo, hi)
            corrected = r["difference_minus_placebo"] is not None
            bd["robust"] = bd["robust_difference_minus_placebo" if corrected else "robust_difference"]


def _bound_end(est: Estimates, key: tuple[Any, ...] | None, r: Mapping[str, Any], quantity: str,
               own: str) -> End | None:
    """One end of a pair row's range: the bootstrap's estimate at `key`, or (no failed call, `key`
    None) the difference itself."""
    if key is not None:
        q = est.get(key)
        return None if q is None or q["estimate"] is None else {
            "estimate": q["estimate"], "ci": q["ci"], "p": q["p"], "method": q.get("method")}
    ci_key = "ci_difference" if quantity == "difference" else "ci_difference_minus_placebo"
    return None if r[quantity] is None else {"estimate": r[quantity], "ci": r[ci_key], "p": r[own]}


def _pair(est: Estimates, j: int, k: int, labels: Sequence[str], contrasts: Sequence[str],
          fam: Sequence[str], fam_corr: Sequence[str], margin: float, alpha: float) -> Pair:
    rows_out: list[PairRow] = []
    for c in contrasts:
        a, bb, d = est[("delta", j, c)], est[("delta", k, c)], est[("diff", j, k, c)]
        ca, cb, cd = est.get(("corr", j, c)), est.get(("corr", k, c)), est.get(("cdiff", j, k, c))
        g = lambda q, f: None if q is None else q[f]  # noqa: E731
        rows_out.append(cast(PairRow, {
            "condition": c, "in_family": c in fam, "in_family_minus_placebo": c in fam_corr,
            "delta_a": a["estimate"], "ci_a": a["ci"], "n_bases_a": a["n_bases"],
            "delta_b": bb["estimate"], "ci_b": bb["ci"], "n_bases_b": bb["n_bases"],
            "difference": d["estimate"], "ci_difference": d["ci"], "p_difference": d["p"], "p_holm": None,
            "p_holm_across_pairs": None, "p_holm_all_pairs": None,
            "n_bases_difference": d["n_bases"], "n_clusters_difference": d["n_clusters"],
            "equivalence": _eq(d, margin, len(fam) if c in fam else None, alpha),
            "delta_minus_placebo_a": g(ca, "estimate"), "ci_minus_placebo_a": g(ca, "ci"),
            "delta_minus_placebo_b": g(cb, "estimate"), "ci_minus_placebo_b": g(cb, "ci"),
            "difference_minus_placebo": g(cd, "estimate"), "ci_difference_minus_placebo": g(cd, "ci"),
            "p_difference_minus_placebo": g(cd, "p"), "p_holm_minus_placebo": None,
            "p_holm_across_pairs_minus_placebo": None, "p_holm_all_pairs_minus_placebo": None,
            "n_bases_difference_minus_placebo": g(cd, "n_bases"),
            "equivalence_minus_placebo": _eq(cd, margin, len(fam_corr) if c in fam_corr else None, alpha),
        }))
    by = {r["condition"]: r for r in rows_out}
    for c, adj in zip(fam, holm([by[c]["p_difference"] for c in fam])):
        by[c]["p_holm"] = adj
    for c, adj in zip(fam_corr, holm([by[c]["p_difference_minus_placebo"] for c in fam_corr])):
        by[c]["p_holm_minus_placebo"] = adj
    deltas_a = {c: est[("delta", j, c)]["estimate"] for c in contrasts}
    deltas_b = {c: est[("delta", k, c)]["estimate"] for c in contrasts}
    return {"a": labels[j], "b": labels[k], "conditions": rows_out,
            "ranking_a": ranking(deltas_a), "ranking_b": ranking(deltas_b), "reversed_pairs": [],
            "ranking_changed": False}


def _decide(pairs: list[Pair], fam: Sequence[str], fam_corr: Sequence[str], alpha: float) -> dict[str, CompareFamily]:
    """Holm over every pair × the family (Δ) and every pair × the interventions (the headline), as
    `p_holm_all_pairs*`; the verdicts are decided in that family (with two inputs it is the pair's
    own family). Rows outside the families are shown, not tested."""
    several = len(pairs) > 1
    out: dict[str, CompareFamily] = {}
    for quantity, members, diff_key, eq_key, all_key, kind in (
            ("difference", fam, "p_difference", "equivalence", "p_holm_all_pairs", "condition"),
            ("difference_minus_placebo", fam_corr, "p_difference_minus_placebo", "equivalence_minus_placebo",
             "p_holm_all_pairs_minus_placebo", "intervention")):
        rows = [(pr, r) for pr in pairs for r in pr["conditions"] if r["condition"] in members]
        for (_, r), adj in zip(rows, holm([r[diff_key] for _, r in rows])):   # type: ignore[literal-required]
            r[all_key] = adj   # type: ignore[literal-required]
        name = (f"{len(rows)} ({len(pairs)} pairs × {dc.family_name(members, kind)})" if several
                else dc.family_name(members, kind))
        if members:
            dc.decide_family([r[eq_key] for _, r in rows], name, alpha)   # type: ignore[literal-required]
            out[quantity] = {**dc.family_record([f"{pr['b']} − {pr['a']}: {r['condition']}" for pr, r in rows],
                                                name, quantity), "conditions": list(members),
                             **family_decidability([r[eq_key] for _, r in rows], alpha)}   # type: ignore[literal-required]
        for pr in pairs:
            for r in pr["conditions"]:
                if r["condition"] not in members:
                    dc.outside(r[eq_key])   # type: ignore[literal-required]
    return out


def _opposite(q1: Mapping[str, Any], q2: Mapping[str, Any]) -> bool:
    """The two estimates order the pair opposite ways."""
    e1, e2 = q1["estimate"], q2["estimate"]
    return e1 is not None and e2 is not None and e1 * e2 < 0


def _reversal(q1: Mapping[str, Any], q2: Mapping[str, Any]) -> float:
    """Intersection–union p that the order under q1 (x − y) is established one way and under q2
    the other way: the larger two-sided p when the point estimates have opposite signs, else 1."""
    e1, e2 = q1["estimate"], q2["estimate"]
    if e1 is None or e2 is None or q1["p"] is None or q2["p"] is None or e1 * e2 >= 0:
        return 1.0
    return float(max(q1["p"], q2["p"]))


def _condition_order(est: Estimates, pair_out: list[Pair], pairs: Sequence[tuple[int, int]],
                     contrasts: Sequence[str], alpha: float) -> HolmFamily:
    """Per pair of guards, the pairs of conditions whose order by Δ reversed, tested as reversals
    (one Holm family over every pair of guards × every pair of conditions, fixed in advance)."""
    cells = [(pi, x, y) for pi in range(len(pairs)) for x, y in combinations(contrasts, 2)]
    ps = [_reversal(est[("ddelta", pairs[pi][0], x, y)], est[("ddelta", pairs[pi][1], x, y)]) for pi, x, y in cells]
    name = f"{len(cells)} ({len(pairs)} pairs of guards × {len(cells) // max(1, len(pairs))} pairs of conditions)"
    decided = dc.decide_pvalues(ps, name, alpha)
    for pi, pr in enumerate(pair_out):
        j, k = pairs[pi]
        rev: list[Reversal] = []
        changed = False
        for (qi, x, y), p, d in zip(cells, ps, decided):
            # listed when the estimates reversed (a reversal's p can be exactly 1 under sign flips)
            if qi != pi or not _opposite(est[("ddelta", j, x, y)], est[("ddelta", k, x, y)]):
                continue
            dd = est[("dd", j, k, x, y)]
            rev.append({"conditions": [x, y], "difference_of_differences": dd["estimate"], "ci": dd["ci"],
                        "p": dd["p"], "p_order_a": est[("ddelta", j, x, y)]["p"],
                        "p_order_b": est[("ddelta", k, x, y)]["p"], "p_reversal": p, "p_holm": d.p_adjusted})
            changed = changed or bool(d.differs)
        pr["reversed_pairs"] = cast(Any, rev)
        pr["ranking_changed"] = changed
    return {"size": len(cells), "adjustment": "Holm", "alpha": alpha, "name": name}


def _holm_across_pairs(pairs: list[Pair], contrasts: Sequence[str], fam_corr: Sequence[str]) -> None:
    """One Holm family per condition over every pair's difference (and corrected difference)."""
    for c in contrasts:
        rows = [next(r for r in pr["conditions"] if r["condition"] == c) for pr in pairs]
        for r, adj in zip(rows, holm([r["p_difference"] for r in rows])):
            r["p_holm_across_pairs"] = adj
        if c in fam_corr or any(r["difference_minus_placebo"] is not None for r in rows):
            for r, adj in zip(rows, holm([r["p_difference_minus_placebo"] for r in rows])):
                r["p_holm_across_pairs_minus_placebo"] = adj


def _stability(est: Estimates, labels: Sequence[str], contrasts: Sequence[str],
               baseline: str, alpha: float) -> RankingStability:
    under_b = {labels[k]: est[("rate", k, baseline)]["estimate"] for k in range(len(labels))}
    guard_pairs = list(combinations(range(len(labels)), 2))
    cells = [(c, j, k) for c in contrasts for j, k in guard_pairs]
    ps = [_reversal(est[("rdiff", j, k, baseline)], est[("rdiff", j, k, c)]) for c, j, k in cells]
    name = f"{len(cells)} ({len(guard_pairs)} pairs of guards × {len(contrasts)} conditions)"
    decided = dc.decide_pvalues(ps, name, alpha)
    out: dict[str, ConditionStability] = {}
    for c in contrasts:
        under_c = {labels[k]: est[("rate", k, c)]["estimate"] for k in range(len(labels))}
        rows: list[Any] = []
        changed = False
        for (cc, j, k), p, d in zip(cells, ps, decided):
            if cc != c or not _opposite(est[("rdiff", j, k, baseline)], est[("rdiff", j, k, c)]):
                continue
            q = est[("diff", j, k, c)]
            rows.append({"guards": [labels[j], labels[k]], "difference_of_differences": q["estimate"], "ci": q["ci"],
                         "p": q["p"], "p_order_baseline": est[("rdiff", j, k, baseline)]["p"],
                         "p_order_condition": est[("rdiff", j, k, c)]["p"], "p_reversal": p, "p_holm": d.p_adjusted})
            changed = changed or bool(d.differs)
        tau = est[("tau", c)]
        out[c] = {"kendall_tau": tau["estimate"], "kendall_tau_ci": tau["ci"],
                  "order_baseline": ranking(under_b), "order_condition": ranking(under_c),
                  "reversed_pairs": rows, "ranking_changed": changed}
    return {"order_by": "block rate", "rule": GUARD_ORDER, "by_condition": out,
            "family": {"size": len(cells), "adjustment": "Holm", "alpha": alpha, "name": name}}


def compare(rows_a: Iterable[Any], rows_b: Iterable[Any], *, baseline: str = "original",
            family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
            failure_rule: str = "drop", missing: str = "exclude", roles: Mapping[str, str] | None = None,
            complete: tuple[bool, bool] = (True, True), allow_partial: bool = False,
            allow_unpublishable: bool = False, placebo: str | None = None,
            margin: float = DEFAULT_MARGIN, alpha: float = ALPHA) -> CompareResult:
    """Two tables of one design, labelled A and B (see `compare_inputs`)."""
    inputs = [CompareInput("A", rows_a, roles or {}, complete=complete[0]),
              CompareInput("B", rows_b, roles or {}, complete=complete[1])]
    return compare_inputs(inputs, baseline=baseline, placebo=placebo, family=family, n_boot=n_boot, seed=seed,
                          failure_rule=failure_rule, missing=missing, margin=margin, allow_partial=allow_partial,
                          allow_unpublishable=allow_unpublishable, alpha=alpha)
