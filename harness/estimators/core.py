"""`estimate(rows, ...)`: the whole estimator stage on one decision table (docs/design.md §10)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from harness.errors import CheckFailed, InputError
from harness.estimators import accuracy as acc
from harness.estimators import effects as fx
from harness.estimators.bootstrap import bootstrap_p, bootstrap_ratios, cluster_sums, percentile_ci
from harness.estimators.holm import holm
from harness.estimators.quarantine import quarantine_summary
from harness.estimators.table import FAILURE_STATUSES, MISSING, ValidatedRows, validate_rows

DEFAULT_PLACEBO = "format_placebo"
P_VALUE_RULE = ("two-sided percentile-bootstrap p = min(1, 2*min((1+#{d*<=0})/(B+1), (1+#{d*>=0})/(B+1))) "
                "over the B defined replicates")
FLIP_LABEL = "same-round unsigned flip rate (one-draw disagreement with the baseline; not an effect)"


def validated(rows: Iterable[Any], *, path: object = None, lines: Iterable[int] | None = None) -> ValidatedRows:
    return rows if isinstance(rows, ValidatedRows) else validate_rows(rows, path=path, lines=lines)


def resolve_conditions(design: fx.Design, baseline: str, placebo: str | None, family: Sequence[str] | None,
                       roles: Mapping[str, str] | None) -> tuple[str, str | None, list[str], list[str]]:
    """(baseline, placebo, contrasts, family) checked against the conditions in the table."""
    conds = design.conditions
    if baseline not in conds:
        raise InputError(f"baseline condition {baseline!r} has no rows (conditions: {', '.join(conds)})",
                         field="baseline")
    if placebo is not None:
        if placebo not in conds:
            raise InputError(f"placebo condition {placebo!r} has no rows", field="placebo")
    else:
        by_role = [c for c, r in (roles or {}).items() if r == "placebo" and c in conds]
        placebo = by_role[0] if by_role else (DEFAULT_PLACEBO if DEFAULT_PLACEBO in conds else None)
    if placebo == baseline:
        raise InputError("the placebo cannot be the baseline", field="placebo")
    contrasts = [c for c in conds if c != baseline]
    if family is None:
        fam = list(contrasts)
    else:
        fam = list(dict.fromkeys(family))
        for c in fam:
            if c not in contrasts:
                raise InputError(f"family member {c!r} is not a non-baseline condition of this table "
                                 f"({', '.join(contrasts)})", field="family")
        if not fam:
            raise InputError("the family is empty", field="family")
    return baseline, placebo, contrasts, fam


class Quantities:
    """Columns of base-level (numerator, denominator) pairs, bootstrapped together."""

    def __init__(self) -> None:
        self.keys: list[tuple[Any, ...]] = []
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []

    def add(self, key: tuple[Any, ...], values: np.ndarray, mask: np.ndarray) -> None:
        self.keys.append(key)
        self.num.append(np.where(mask, values, 0.0))
        self.den.append(mask.astype(np.float64))

    def run(self, design: fx.Design, n_boot: int, seed: int) -> dict[tuple[Any, ...], dict[str, Any]]:
        if not self.keys:  # a table with the baseline only: nothing to contrast
            return {}
        num = np.column_stack(self.num)
        den = np.column_stack(self.den)
        num_g = cluster_sums(num, design.base_cluster, design.n_clusters)
        den_g = cluster_sums(den, design.base_cluster, design.n_clusters)
        reps = bootstrap_ratios(num_g, den_g, design.cluster_domain, n_boot, seed)
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for j, key in enumerate(self.keys):
            total = den[:, j].sum()
            point = float(num[:, j].sum() / total) if total > 0 else None
            used = den[:, j] > 0
            out[key] = {
                "estimate": point,
                "ci": percentile_ci(reps[:, j]) if point is not None else None,
                "p": bootstrap_p(reps[:, j]) if point is not None else None,
                "n_bases": int(used.sum()),
                "n_clusters": int(len(np.unique(design.base_cluster[used]))),
                "n_undefined_replicates": int(np.isnan(reps[:, j]).sum()) if point is not None else None,
            }
        return out


def _coverage(design: fx.Design) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for ci, c in enumerate(design.conditions):
        sel = design.row_cond == ci
        kind = design.row_kind[sel]
        status = design.row_status[sel]
        failures = {s: int(((status == s) & (kind == fx.KIND_FAIL)).sum()) for s in FAILURE_STATUSES}
        out[c] = {
            "expected": int(sel.sum()),
            "received": int((kind != fx.KIND_MISSING).sum()),
            "valid": int((kind == fx.KIND_OK).sum()),
            "failed": int((kind == fx.KIND_FAIL).sum()),
            "missing": int((kind == fx.KIND_MISSING).sum()),
            "quarantined": int((kind == fx.KIND_QUARANTINED).sum()),
            "failures_by_status": failures,
        }
    return out


def _accuracy(design: fx.Design, rule: str) -> dict[str, dict[str, Any]] | None:
    row_label = design.base_label[design.row_base]
    if np.isnan(row_label).all():
        return None
    v, counted = fx.row_values(design, rule)
    row_inter = np.asarray(design.cluster_ids, dtype=object)[design.base_cluster[design.row_base]]
    out = {}
    for ci, c in enumerate(design.conditions):
        sel = counted & (design.row_cond == ci) & ~np.isnan(row_label)
        out[c] = acc.evaluation_units(row_label[sel].astype(np.int64), v[sel].astype(np.int64), row_inter[sel])
    return out


def _value(q: dict[str, Any] | None) -> float | None:
    return None if q is None else q["estimate"]


def estimate(rows: Iterable[Any], *, baseline: str = "original", placebo: str | None = None,
             family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
             failure_rule: str = "drop", roles: Mapping[str, str] | None = None,
             n_scheduled: int | None = None, complete: bool = True, allow_partial: bool = False,
             allow_unpublishable: bool = False, source: object = None) -> dict[str, Any]:
    """The estimate report as a JSON-ready dict.

    Raises InputError for a bad table or option, CheckFailed for an incomplete run unless
    `allow_partial`. An unpublishable report (quarantine above 2%) is returned, marked; the
    caller decides the exit status (see `exit_status`)."""
    rows = validated(rows, path=source)
    fx.check_rule(failure_rule)
    if n_boot < 1:
        raise InputError("the number of bootstrap replicates must be >= 1", field="bootstrap")
    n_missing = sum(1 for r in rows if r["status"] == MISSING)
    n_sched = len(rows) if n_scheduled is None else int(n_scheduled)
    is_complete = bool(complete) and n_missing == 0 and n_sched <= len(rows)
    if not is_complete and not allow_partial:
        raise CheckFailed(f"incomplete run: {n_missing + max(0, n_sched - len(rows))} of {n_sched} scheduled "
                          "calls have no decision (use --allow-partial to estimate anyway)")
    design = fx.build_design(rows, condition_order=list(roles or ()))
    baseline, placebo, contrasts, fam = resolve_conditions(design, baseline, placebo, family, roles)
    b = design.cond_index(baseline)
    pl = design.cond_index(placebo) if placebo is not None else None
    base_domain = design.cluster_domain[design.base_cluster]

    counts = {rule: fx.base_counts(design, rule) for rule in fx.RULES}
    rates = {rule: fx.base_rates(*counts[rule]) for rule in fx.RULES}
    has = {rule: counts[rule][1] > 0 for rule in fx.RULES}

    qs = Quantities()
    for rule in fx.RULES:
        p, h = rates[rule], has[rule]
        for c in contrasts:
            ci = design.cond_index(c)
            paired = h[:, ci] & h[:, b]
            qs.add(("delta", rule, c), p[:, ci] - p[:, b], paired)
            if pl is not None and ci != pl:
                # Δc − Δplacebo on bases present for c, baseline and placebo: the baseline
                # cancels, so it is the base-equal mean of p(i,c) − p(i,placebo) there.
                qs.add(("corrected", rule, c), p[:, ci] - p[:, pl], paired & h[:, pl])
    p, h = rates[failure_rule], has[failure_rule]
    for c in contrasts:
        ci = design.cond_index(c)
        paired = h[:, ci] & h[:, b]
        for di in range(len(design.domains)):
            qs.add(("domain", di, c), p[:, ci] - p[:, b], paired & (base_domain == di))
        for lab in (0, 1):
            qs.add(("label", lab, c), p[:, ci] - p[:, b], paired & (design.base_label == lab))
    est = qs.run(design, n_boot, seed)

    s_h, n_h = counts[failure_rule]
    contrast_out: list[dict[str, Any]] = []
    for c in contrasts:
        ci = design.cond_index(c)
        head = est[("delta", failure_rule, c)]
        corr = est.get(("corrected", failure_rule, c))
        paired = h[:, ci] & h[:, b]
        flip, _ = fx.same_round_flip_rate(design, failure_rule, ci, b)
        contrast_out.append({
            "condition": c,
            "role": (roles or {}).get(c, "placebo" if c == placebo else "intervention"),
            "in_family": c in fam,
            "delta": head["estimate"],
            "ci": head["ci"],
            "p": head["p"],
            "p_holm": None,
            "delta_minus_placebo": _value(corr),
            "ci_minus_placebo": None if corr is None else corr["ci"],
            "p_minus_placebo": None if corr is None else corr["p"],
            "n_bases_minus_placebo": None if corr is None else corr["n_bases"],
            **fx.direction_counts(s_h, n_h, ci, b, paired),
            "n_bases": head["n_bases"],
            "n_clusters": head["n_clusters"],
            "by_rule": {rule: est[("delta", rule, c)]["estimate"] for rule in fx.RULES},
            "by_rule_ci": {rule: est[("delta", rule, c)]["ci"] for rule in fx.RULES},
            "by_rule_minus_placebo": {rule: _value(est.get(("corrected", rule, c))) for rule in fx.RULES},
            "block_rate": fx.block_rate(p, ci),
            "same_round_flip_rate": flip,
            "n_undefined_replicates": head["n_undefined_replicates"],
        })
    fam_p = [next(x["p"] for x in contrast_out if x["condition"] == c) for c in fam]
    for c, adj in zip(fam, holm(fam_p)):
        next(x for x in contrast_out if x["condition"] == c)["p_holm"] = adj

    rd, rd_n = fx.repeat_disagreement(s_h, n_h, b)
    quarantine = quarantine_summary(rows, n_sched)
    strata: dict[str, dict[str, Any]] = {"domain": {}, "label": {}}
    for di, dom in enumerate(design.domains):
        strata["domain"][dom] = _stratum(design, p, base_domain == di, contrasts, est, ("domain", di))
    for lab in (0, 1):
        strata["label"][str(lab)] = _stratum(design, p, design.base_label == lab, contrasts, est, ("label", lab))
    components = {c: fx.component_rates(design, ci) for ci, c in enumerate(design.conditions)}
    report: dict[str, Any] = {
        "n_bases": design.n_bases,
        "n_calls": n_sched,
        "n_interactions": design.n_clusters,
        "n_domains": len(design.domains),
        "baseline": baseline,
        "placebo": placebo,
        "failure_rule": failure_rule,
        "failure_rules": list(fx.RULES),
        "family": fam,
        "complete": is_complete,
        "publishable": quarantine["publishable"],
        "allow_partial": allow_partial,
        "allow_unpublishable": allow_unpublishable,
        "block_rate": {c: fx.block_rate(p, ci) for ci, c in enumerate(design.conditions)},
        "block_rate_by_rule": {rule: {c: fx.block_rate(rates[rule], ci) for ci, c in enumerate(design.conditions)}
                               for rule in fx.RULES},
        "repeat_disagreement": rd,
        "repeat_disagreement_n_bases": rd_n,
        "flip_rate": {"label": FLIP_LABEL,
                      "by_condition": {x["condition"]: x["same_round_flip_rate"] for x in contrast_out}},
        "coverage": _coverage(design),
        "quarantine": quarantine,
        "contrasts": contrast_out,
        "strata": strata,
        "components": {c: v for c, v in components.items() if v},
        "bootstrap": {"n": n_boot, "seed": seed, "rng": "numpy.random.default_rng(seed)",
                      "resampling": "interactions with replacement within each domain, as many as observed",
                      "interval": "percentile 95%", "p_value": P_VALUE_RULE},
    }
    accuracy = _accuracy(design, failure_rule)
    if accuracy is not None:
        report["accuracy"] = accuracy
    return report


def _stratum(design: fx.Design, p: np.ndarray, members: np.ndarray, contrasts: list[str],
             est: dict[tuple[Any, ...], dict[str, Any]], key: tuple[Any, ...]) -> dict[str, Any]:
    block = {}
    for ci, c in enumerate(design.conditions):
        col = p[members, ci]
        col = col[~np.isnan(col)]
        block[c] = float(col.mean()) if len(col) else None
    return {
        "n_bases": int(members.sum()),
        "block_rate": block,
        "contrasts": {c: {"delta": est[(*key, c)]["estimate"], "ci": est[(*key, c)]["ci"],
                          "n_bases": est[(*key, c)]["n_bases"]} for c in contrasts},
    }


def exit_status(report: Mapping[str, Any]) -> int:
    """0 ok; 1 when the report is unpublishable and that was not allowed (an incomplete run
    without --allow-partial never gets here: `estimate` refuses it)."""
    if not report["quarantine"]["publishable"] and not report.get("allow_unpublishable"):
        return 1
    return 0
