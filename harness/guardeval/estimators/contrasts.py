"""Contrasts against the baseline and their diagnostics, strata, block rates and stability
(docs/estimators.md): what each adds to the bootstrap (`add_*`) and its part of the report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from guardeval.estimators import effects as fx
from guardeval.estimators import rounds as rd
from guardeval.estimators import stability as st
from guardeval.estimators.bootstrap import Estimate
from guardeval.estimators.exact import clopper_pearson, cluster_signs, sign_test
from guardeval.estimators.frame import Frame
from guardeval.estimators.quantities import RATE, Estimates, Quantities
from guardeval.estimators.types import Contrast, SignTest, Stability, Stratum, StratumContrast
from guardeval.estimators.verdicts.equivalence import equivalence


def _value(q: Estimate | None, field: Literal["estimate", "ci", "p", "n_bases"] = "estimate") -> Any:
    return None if q is None else q[field]


def add_contrasts(qs: Quantities, f: Frame) -> None:
    for rule in fx.RULES:
        p = f.rates[rule]
        for c in f.contrasts:
            ci = f.idx(c)
            qs.add(("delta", rule, c), p[:, ci] - p[:, f.b], f.paired(ci, rule))
            corr, pl = f.corrected(ci, rule), f.pl_for(ci)
            if corr is not None and pl is not None:
                # Δc − Δplacebo on bases present for c, baseline and placebo: the baseline
                # cancels, so it is the base-equal mean of p(i,c) − p(i,placebo) there.
                qs.add(("corrected", rule, c), p[:, ci] - p[:, pl], corr)


def _sign_test(f: Frame, c: int, ref: int, mask: np.ndarray) -> SignTest:
    d = f.design
    signs, present = cluster_signs(f.s, f.n, c, ref, mask, d.base_cluster, d.n_clusters)
    return sign_test(signs, present)


def _directions(f: Frame, c: int, ref: int, mask: np.ndarray) -> tuple[int, int, int]:
    """(increase, decrease, tie): the bases whose rate rose, fell, stayed."""
    d = fx.direction_counts(f.s, f.n, c, ref, mask)
    return d["increase"], d["decrease"], d["tie"]


def _directions_or_none(f: Frame, c: int, ref: int, mask: np.ndarray | None
                        ) -> tuple[int, int, int] | tuple[None, None, None]:
    """As `_directions`; all None where the mask is (no placebo correction)."""
    return (None, None, None) if mask is None else _directions(f, c, ref, mask)


def contrast_entries(f: Frame, est: Estimates, family: list[str], roles: Mapping[str, str],
                     margin: float, alpha: float) -> list[Contrast]:
    d, rule, p = f.design, f.rule, f.p
    out: list[Contrast] = []
    # The corrected effects' family: the interventions of the family (not the placebo).
    corr_family = [c for c in family if c != f.placebo
                   and not (f.placebo_of is not None and roles.get(c) == "placebo")]
    for c in f.contrasts:
        ci = f.idx(c)
        pl = f.pl_for(ci)
        is_placebo = c == f.placebo or (f.placebo_of is not None and roles.get(c) == "placebo")
        head = est[("delta", rule, c)]
        corr = est.get(("corrected", rule, c))
        paired, corr_mask = f.paired(ci), f.corrected(ci)
        flip, _ = rd.flip_rate(f.rounds, ci, f.b, d.n_bases)
        acc = est.get(("accuracy_delta", c))
        acc_corr = est.get(("accuracy_delta_corr", c))
        up, down, tie = _directions(f, ci, f.b, paired)
        up_pl, down_pl, tie_pl = _directions_or_none(f, ci, pl if pl is not None else f.b, corr_mask)
        # One literal of the declared shape (types.Contrast), checked by mypy key by key.
        entry: Contrast = {
            "condition": c,
            "role": roles.get(c, "placebo" if c == f.placebo else "intervention"),
            "in_family": c in family,
            "delta": head["estimate"],
            "ci": head["ci"],
            "p": head["p"],
            "p_holm": None,
            "delta_minus_placebo": _value(corr),
            "ci_minus_placebo": _value(corr, "ci"),
            "p_minus_placebo": _value(corr, "p"),
            "p_holm_minus_placebo": None,
            "n_bases_minus_placebo": _value(corr, "n_bases"),
            # What the row's star decides: the corrected effect of an intervention; Δ when the
            # table has no placebo; nothing for the placebo itself (its Δ is a check of the
            # placebo, decided in the Δ family and shown in its sentence, not a headline).
            "headline": "placebo" if is_placebo else "delta" if pl is None else "delta_minus_placebo",
            "equivalence": equivalence(head, margin, len(family) if c in family else None, alpha),
            "equivalence_minus_placebo": equivalence(corr, margin, len(corr_family) if c in corr_family else None,
                                                     alpha),
            "increase": up, "decrease": down, "tie": tie,
            "increase_minus_placebo": up_pl, "decrease_minus_placebo": down_pl, "tie_minus_placebo": tie_pl,
            "n_bases": head["n_bases"],
            "n_clusters": head["n_clusters"],
            "by_rule": {r: est[("delta", r, c)]["estimate"] for r in fx.RULES},
            "by_rule_ci": {r: est[("delta", r, c)]["ci"] for r in fx.RULES},
            "by_rule_minus_placebo": {r: _value(est.get(("corrected", r, c))) for r in fx.RULES},
            "block_rate": fx.block_rate(p, ci),
            "same_round_flip_rate": flip,
            "n_undefined_replicates": head["n_undefined_replicates"],
            "sign_test": _sign_test(f, ci, f.b, paired),
            "sign_test_minus_placebo": None if corr_mask is None or pl is None else _sign_test(f, ci, pl, corr_mask),
            "by_repetition": rd.by_round(f.rounds, ci, f.b),
            "by_repetition_minus_placebo": (None if corr_mask is None or pl is None
                                            else rd.by_round(f.rounds, ci, pl, also=f.b)),
            "flip_counts": rd.transitions(f.rounds, ci, f.b),
            "unanimous_shift": st.unanimous_shift(f.s, f.n, ci, f.b),
            "accuracy_delta": _value(acc),
            "accuracy_delta_ci": _value(acc, "ci"),
            "accuracy_delta_minus_placebo": _value(acc_corr),
            "accuracy_delta_ci_minus_placebo": _value(acc_corr, "ci"),
            "leave_one_tool_out": fx.leave_one_out_range(p[:, ci] - p[:, f.b], paired, d.base_tool, len(d.tools)),
            "leave_one_tool_out_minus_placebo": None if corr_mask is None or pl is None else fx.leave_one_out_range(
                p[:, ci] - p[:, pl], corr_mask, d.base_tool, len(d.tools)),
        }
        out.append(entry)
    return out


# ----------------------------------------------------------------------------- strata

def _strata_members(f: Frame) -> dict[tuple[str, str], np.ndarray]:
    members = {("domain", dom): f.base_domain == di for di, dom in enumerate(f.design.domains)}
    members.update({("label", str(lab)): f.design.base_label == lab for lab in (0, 1)})
    return members


def add_strata(qs: Quantities, f: Frame) -> None:
    p = f.p
    for (kind, name), sel in _strata_members(f).items():
        for c in f.contrasts:
            ci = f.idx(c)
            qs.add((kind, name, c), p[:, ci] - p[:, f.b], f.paired(ci) & sel)
            corr, pl = f.corrected(ci), f.pl_for(ci)
            if corr is not None and pl is not None:
                qs.add((kind + "_corr", name, c), p[:, ci] - p[:, pl], corr & sel)


def strata(f: Frame, est: Estimates) -> dict[str, dict[str, Stratum]]:
    out: dict[str, dict[str, Stratum]] = {"domain": {}, "label": {}}
    for (kind, name), sel in _strata_members(f).items():
        block = {}
        for ci, c in enumerate(f.design.conditions):
            col = f.p[sel, ci]
            col = col[~np.isnan(col)]
            block[c] = float(col.mean()) if len(col) else None
        contrasts: dict[str, StratumContrast] = {}
        for c in f.contrasts:
            ci = f.idx(c)
            plain, corr = est[(kind, name, c)], est.get((kind + "_corr", name, c))
            corr_mask = f.corrected(ci)
            up, down, tie = _directions(f, ci, f.b, f.paired(ci) & sel)
            up_pl, down_pl, tie_pl = _directions_or_none(f, ci, pl if (pl := f.pl_for(ci)) is not None else f.b,
                                                         None if corr_mask is None else corr_mask & sel)
            contrasts[c] = {
                "delta": plain["estimate"], "ci": plain["ci"], "n_bases": plain["n_bases"],
                "increase": up, "decrease": down, "tie": tie,
                "delta_minus_placebo": _value(corr), "ci_minus_placebo": _value(corr, "ci"),
                "n_bases_minus_placebo": _value(corr, "n_bases"),
                "increase_minus_placebo": up_pl, "decrease_minus_placebo": down_pl, "tie_minus_placebo": tie_pl,
            }
        out[kind][name] = {"n_bases": int(sel.sum()), "block_rate": block, "contrasts": contrasts}
    return out


# ----------------------------------------------------------------------------- block rates, stability

def add_block_rates(qs: Quantities, f: Frame) -> None:
    for ci, c in enumerate(f.design.conditions):
        qs.add(("block_rate", c), f.p[:, ci], f.has(ci), RATE)


def block_rate_intervals(f: Frame, est: Estimates, level: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cluster-bootstrap, Clopper–Pearson over calls) intervals at `level` per condition."""
    boot = {c: est[("block_rate", c)]["ci"] for c in f.design.conditions}
    exact = {c: clopper_pearson(int(f.s[:, ci].sum()), int(f.n[:, ci].sum()), level)
             for ci, c in enumerate(f.design.conditions)}
    return boot, exact


def add_stability(qs: Quantities, f: Frame) -> None:
    for ci, c in enumerate(f.design.conditions):
        qs.add(("stability", c), *st.disagreement(f.s, f.n, ci), RATE)


def stability(f: Frame, est: Estimates) -> dict[str, Stability]:
    out: dict[str, Stability] = {}
    for ci, c in enumerate(f.design.conditions):
        q = est[("stability", c)]
        _, use = st.disagreement(f.s, f.n, ci)
        out[c] = {"repeat_disagreement": q["estimate"],
                  "unanimous_rate": float(st.unanimous(f.s, f.n, ci)[use].mean()) if use.any() else None,
                  "ci": q["ci"], "n_bases": int(use.sum())}
    return out
