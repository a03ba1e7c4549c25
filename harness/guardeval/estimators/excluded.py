"""Every call counts (docs/estimators.md, Failed calls; issue 45): the calls the estimates leave out,
in one record, and what the failed ones could have changed.

* `excluded`: failed and quarantined calls together against one limit (the seeds' 2% rule: past it
  a report is not publishable), by condition, and whether failures depend on the condition.
* `bounds` on every contrast: Δ and Δ − placebo with each failed call set to block or to allow,
  whichever moves the contrast most, each end estimated in the one bootstrap (`Quantities.run`, the
  procedure behind the headline: no second copy of it), then decided (`verdicts/robust.py`).

A base's value under "every failed call blocks" is its fail-closed rate, under "every failed call
allows" its fail-open rate, so the ends are differences of the frame's fail-closed and fail-open
columns: the upper end of Δc is p_closed(i,c) − p_open(i,baseline), the lower p_open(i,c) −
p_closed(i,baseline); Δ − placebo likewise with the placebo in place of the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from guardeval.estimators import effects as fx
from guardeval.estimators.bootstrap import Estimate
from guardeval.estimators.frame import Frame
from guardeval.estimators.quantities import Estimates, Quantities
from guardeval.estimators.quarantine import LIMIT
from guardeval.estimators.types import Contrast, Depends, DependsMember, End, EndPair, Excluded, Family, Interval
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts import robust as rb
from guardeval.estimators.verdicts.equivalence import equivalence

CLOSED, OPEN = "fail-closed", "fail-open"
ENDS: tuple[Literal["lo"], Literal["hi"]] = ("lo", "hi")



def failed_rows(d: fx.Design) -> np.ndarray:
    """Rows counted as failed calls: a failure status (and, with --missing as-failure, a missing call)."""
    fail = d.row_kind == fx.KIND_FAIL
    return fail | (d.row_kind == fx.KIND_MISSING) if d.missing_as_failure else fail


def has_failures(f: Frame) -> bool:
    return bool(failed_rows(f.design).any())


def failure_share(n_all: np.ndarray, n_ok: np.ndarray) -> np.ndarray:
    """Per base × condition: the share of its counted calls (`n_all`: ok or failed, the fail-closed
    counts) that failed (`n_ok`: the drop rule's counts); nan where none."""
    return fx.base_rates(n_all - n_ok, n_all)


def _ends(f: Frame, c: int, ref: int) -> tuple[np.ndarray, np.ndarray]:
    closed, opened = f.rates[CLOSED], f.rates[OPEN]
    return opened[:, c] - closed[:, ref], closed[:, c] - opened[:, ref]


def add_bounds(qs: Quantities, f: Frame) -> None:
    """The ends of every contrast's range, into the one bootstrap (only when a call failed: else
    the range is the headline's point and interval)."""
    if not has_failures(f):
        return
    for c in f.contrasts:
        ci = f.idx(c)
        lo, hi = _ends(f, ci, f.b)
        mask = f.paired(ci, CLOSED)
        qs.add(("bound", "delta", "lo", c), lo, mask)
        qs.add(("bound", "delta", "hi", c), hi, mask)
        corr = f.corrected(ci, CLOSED)
        pl = f.pl_for(ci)   # the contrast's own placebo (its family's, with condition families)
        if corr is not None and pl is not None:
            lo, hi = _ends(f, ci, pl)
            qs.add(("bound", "corrected", "lo", c), lo, corr)
            qs.add(("bound", "corrected", "hi", c), hi, corr)


def add_failure_rates(qs: Quantities, f: Frame) -> None:
    """Each condition's share of failed calls minus the baseline's, paired by base."""
    if not has_failures(f):
        return
    share = failure_share(f.counts[CLOSED][1], f.counts["drop"][1])
    for c in f.contrasts:
        ci = f.idx(c)
        qs.add(("failure_share", c), share[:, ci] - share[:, f.b], f.paired(ci, CLOSED))


def _end(q: Mapping[str, Any] | None) -> End | None:
    if q is None or q.get("estimate") is None:
        return None
    return {"estimate": q["estimate"], "ci": q["ci"], "p": q["p"], "method": q.get("method")}


def _own(x: Contrast, quantity: str) -> End | None:
    """The headline's own record as both ends of its range (no call failed)."""
    if quantity == "delta":
        est, ci, p, eq = x["delta"], x["ci"], x["p"], x["equivalence"]
    else:
        est, ci, p, eq = x["delta_minus_placebo"], x["ci_minus_placebo"], x["p_minus_placebo"], \
            x["equivalence_minus_placebo"]
    if est is None:
        return None
    return {"estimate": est, "ci": ci, "p": p, "method": None if eq is None else eq.get("method")}


def decided_groups(families: Mapping[str, Family]) -> list[tuple[list[str], list[str]]]:
    """(Δ family, Δ − placebo family) pairs, read from the family records the headlines were
    decided in ('delta' and 'delta_minus_placebo', or 'delta:<family>' and
    'delta_minus_placebo:<family>' with condition families), so the ends are decided in the same
    families."""
    groups: dict[str, dict[str, list[str]]] = {}
    for key, rec in families.items():
        quantity, _, family = key.partition(":")
        groups.setdefault(family, {})[quantity] = list(rec["members"])
    return [(g.get("delta", []), g.get("delta_minus_placebo", [])) for g in groups.values()]


def bounds(f: Frame, est: Estimates, contrasts: Sequence[Contrast],
           groups: Sequence[tuple[Sequence[str], Sequence[str]]], alpha: float) -> None:
    """`bounds` on every contrast entry, in place: {delta: [lo, hi], corrected: [lo, hi] | None,
    robust, robust_delta, robust_corrected, ends: {delta: {lo, hi}, corrected: {lo, hi}}}, each end
    decided in the family its headline is decided in (a member outside it: not tested). `groups`:
    one (Δ family, Δ − placebo family) pair per condition family (one pair without families)."""
    failed = has_failures(f)
    by_name = {x["condition"]: x for x in contrasts}
    ends: dict[str, dict[str, EndPair]] = {"delta": {}, "corrected": {}}
    for fam, corr_fam in groups:
        for quantity, members in (("delta", fam), ("corrected", corr_fam)):
            for side in ENDS:
                raw = [_end(est.get(("bound", quantity, side, c))) if failed
                       else _own(by_name[c], quantity) for c in members]
                for c, e in zip(members, rb.decide_ends(raw, alpha)):
                    ends[quantity].setdefault(c, {"lo": None, "hi": None})[side] = e
    for x in contrasts:
        c = x["condition"]
        pairs = {q: ends[q][c] if c in ends[q] else _untested(f, est, x, q, failed) for q in ("delta", "corrected")}
        d, corr = pairs["delta"], pairs["corrected"]
        robust_delta, robust_corr = rb.robust(d["lo"], d["hi"]), rb.robust(corr["lo"], corr["hi"])
        x["bounds"] = {"delta": _range(d), "robust_delta": robust_delta, "ends": pairs,
                       "corrected": _range(corr), "robust_corrected": robust_corr,
                       "robust": robust_corr if x["headline"] == "delta_minus_placebo" else robust_delta}


def _untested(f: Frame, est: Estimates, x: Contrast, quantity: str, failed: bool) -> EndPair:
    """The ends of a member outside its family: shown, not decided."""
    pair: EndPair = {"lo": None, "hi": None}
    for s in ENDS:
        e = _end(est.get(("bound", quantity, s, x["condition"]))) if failed else _own(x, quantity)
        pair[s] = None if e is None else {**e, "p_holm": None, "verdict": "not tested"}
    return pair


def _range(pair: EndPair) -> Interval | None:
    lo, hi = pair["lo"], pair["hi"]
    return None if lo is None or hi is None else [lo["estimate"], hi["estimate"]]


def depends_on_condition(f: Frame, est: Estimates, margin: float, alpha: float) -> Depends:
    """Do failed calls depend on the condition? See `decide_depends`."""
    return decide_depends({c: est.get(("failure_share", c)) for c in f.contrasts}, has_failures(f), margin, alpha)


def decide_depends(estimates: Mapping[str, Estimate | None], failed: bool, margin: float,
                   alpha: float) -> Depends:
    """One decision per non-baseline condition (its share of failed calls minus the baseline's,
    paired by base, as `Quantities.run` estimated it), Holm over them in a family of its own."""
    conds = list(estimates)
    name = dc.family_name(conds, "failure-rate difference")
    quantity = "share of failed calls minus the baseline's, paired by base"
    members: dict[str, DependsMember] = {}
    if not failed:
        return {"quantity": quantity, "family": name, "alpha": alpha, "rule": rb.DEPENDS_RULE, "members": members,
                "differs": False, "verdict": "no failed calls"}
    eqs = [equivalence(estimates[c], margin, len(conds), alpha) for c in conds]
    dc.decide_family(eqs, name, alpha)
    for c, eq in zip(conds, eqs):
        q = estimates[c]
        members[c] = {"difference": None if q is None else q["estimate"], "ci": None if q is None else q["ci"],
                      "p": None if q is None else q["p"], "p_holm": None if eq is None else eq["p_adjusted"],
                      "method": None if q is None else q["method"], "differs": bool(eq and eq["differs"]),
                      "equivalence": eq}
    differs = any(m["differs"] for m in members.values())
    return {"quantity": quantity, "family": name, "alpha": alpha, "rule": rb.DEPENDS_RULE, "members": members,
            "differs": differs, "verdict": "differs" if differs else "no evidence it differs"}


def by_condition(d: fx.Design) -> dict[str, dict[str, int]]:
    fail = failed_rows(d)
    return {c: {"failed": int((fail & (d.row_cond == ci)).sum()), "calls": int((d.row_cond == ci).sum())}
            for ci, c in enumerate(d.conditions)}


def excluded_record(d: fx.Design, quarantined: int, n_scheduled: int, depends: Depends,
                    limit: float = LIMIT) -> Excluded:
    """{failed, quarantined, share, limit, publishable, by_condition, depends_on_condition}."""
    failed = int(failed_rows(d).sum())
    share = (failed + quarantined) / n_scheduled if n_scheduled else 0.0
    return {"failed": failed, "quarantined": quarantined, "share": share, "limit": limit,
            "publishable": share <= limit, "by_condition": by_condition(d), "depends_on_condition": depends.copy()}


def publishable(report: Mapping[str, Any]) -> bool:
    """The one verdict on publishing: the `excluded` record's (failed and quarantined calls against
    one limit); in a report.json from before it, its quarantine's."""
    rec = report.get("excluded")
    return bool((rec if isinstance(rec, Mapping) else report["quarantine"])["publishable"])
