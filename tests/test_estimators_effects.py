"""Hand-computed small cases for every estimator quantity (docs/design.md §10).

The table (R = 3 repetitions; F = a failure; Q = quarantined):

    base  interaction domain label | original  | format_placebo      | alias
    a     g1          D1     1     | 1 1 0     | 1 1 1               | 0 0 0
    b     g1          D1     0     | 0 0 0     | 0 0 0               | 1 F 0
    c     g2          D1     1     | 1 F 1     | 1 1 Q               | 1 1 1
    d     g3          D2     0     | 0 0 1     | F F F               | 0 1 1

Per-base rates p(i,c) under drop / fail-closed / fail-open, worked by hand below.
"""

from __future__ import annotations

import numpy as np
import pytest

from guardeval.errors import CheckFailed, InputError
from guardeval.estimators import effects as fx
from guardeval.estimators import estimate, exit_status
from guardeval.estimators.table import validate_rows

pytestmark = pytest.mark.fast

F = "F"
Q = "Q"
GRID = {
    ("a", "g1", "D1", 1): {"original": [1, 1, 0], "format_placebo": [1, 1, 1], "alias": [0, 0, 0]},
    ("b", "g1", "D1", 0): {"original": [0, 0, 0], "format_placebo": [0, 0, 0], "alias": [1, F, 0]},
    ("c", "g2", "D1", 1): {"original": [1, F, 1], "format_placebo": [1, 1, Q], "alias": [1, 1, 1]},
    ("d", "g3", "D2", 0): {"original": [0, 0, 1], "format_placebo": [F, F, F], "alias": [0, 1, 1]},
}
FAIL_STATUS = {"original": "exhausted", "format_placebo": "provider_error", "alias": "unparseable"}


def hand_rows(with_quarantine: bool = True) -> list[dict]:
    rows = []
    for (base, inter, dom, label), conds in GRID.items():
        for cond, decisions in conds.items():
            for rep, d in enumerate(decisions):
                row = {"base_id": base, "interaction_id": inter, "domain": dom, "condition": cond,
                       "repetition": rep, "label": label, "decision": d, "status": "ok",
                       "quarantine_reason": None}
                if d == F:
                    row.update(decision=None, status=FAIL_STATUS[cond])
                elif d == Q:
                    if not with_quarantine:
                        continue
                    row.update(decision=1, quarantine_reason="provider_drift")
                rows.append(row)
    return rows


@pytest.fixture(scope="module")
def report() -> dict:
    return estimate(hand_rows(), n_boot=400, seed=3, allow_unpublishable=True)


def contrast(report: dict, cond: str) -> dict:
    return next(c for c in report["contrasts"] if c["condition"] == cond)


def test_primary_effect_under_each_failure_rule(report):
    alias = contrast(report, "alias")
    # drop: a 0−2/3, b 1/2−0, c 1−1, d 2/3−1/3 -> (−2/3 + 1/2 + 0 + 1/3)/4 = 1/24
    assert alias["delta"] == pytest.approx(1 / 24)
    assert alias["by_rule"]["drop"] == pytest.approx(1 / 24)
    # fail-closed: b alias 2/3, c original 1 -> (−2/3 + 2/3 + 0 + 1/3)/4 = 1/12
    assert alias["by_rule"]["fail-closed"] == pytest.approx(1 / 12)
    # fail-open: b alias 1/3, c original 2/3 -> (−2/3 + 1/3 + 1/3 + 1/3)/4 = 1/12
    assert alias["by_rule"]["fail-open"] == pytest.approx(1 / 12)
    assert alias["n_bases"] == 4 and alias["n_clusters"] == 3
    placebo = contrast(report, "format_placebo")
    # drop: d has no counted placebo call -> bases a, b, c: (1/3 + 0 + 0)/3 = 1/9
    assert placebo["delta"] == pytest.approx(1 / 9)
    assert placebo["n_bases"] == 3 and placebo["n_clusters"] == 2
    # fail-closed: d placebo 3/3 -> (1/3 + 0 + 0 + 2/3)/4 = 1/4; fail-open: d 0 -> (1/3+0+1/3−1/3)/4 = 1/12
    assert placebo["by_rule"]["fail-closed"] == pytest.approx(1 / 4)
    assert placebo["by_rule"]["fail-open"] == pytest.approx(1 / 12)


def test_placebo_correction_uses_bases_present_in_all_three(report):
    alias = contrast(report, "alias")
    # drop, bases a, b, c: (p_alias − p_placebo) = −1, 1/2, 0 -> −1/6
    # (= Δalias on a,b,c (−1/6/3·3 = −1/18) − Δplacebo 1/9 = −1/6)
    assert alias["delta_minus_placebo"] == pytest.approx(-1 / 6)
    assert alias["n_bases_minus_placebo"] == 3
    # fail-closed, all four: −1, 2/3, 0, −1/3 -> −1/6 ; fail-open: −1, 1/3, 0, 2/3 -> 0
    assert alias["by_rule_minus_placebo"]["fail-closed"] == pytest.approx(-1 / 6)
    assert alias["by_rule_minus_placebo"]["fail-open"] == pytest.approx(0.0, abs=1e-12)
    assert contrast(report, "format_placebo")["delta_minus_placebo"] is None


def test_direction_counts(report):
    alias = contrast(report, "alias")
    assert (alias["increase"], alias["decrease"], alias["tie"]) == (2, 1, 1)  # b, d up; a down; c tie
    placebo = contrast(report, "format_placebo")
    assert (placebo["increase"], placebo["decrease"], placebo["tie"]) == (1, 0, 2)


def test_repeat_disagreement_and_flip_rate(report):
    # k(R−k)/C(R,2): a 2·1/3, b 0, c (R=2 after drop) 0, d 1·2/3 -> mean 1/3
    assert report["repeat_disagreement"] == pytest.approx(1 / 3)
    assert report["repeat_disagreement_n_bases"] == 4
    # same-round flips alias vs original: a 2/3, b (rounds 0, 2) 1/2, c 0, d 1/3 -> 0.375
    assert report["flip_rate"]["by_condition"]["alias"] == pytest.approx(0.375)
    assert "not an effect" in report["flip_rate"]["label"]


def test_block_rates_are_base_equal(report):
    assert report["block_rate"]["original"] == pytest.approx(0.5)          # (2/3+0+1+1/3)/4
    assert report["block_rate"]["format_placebo"] == pytest.approx(2 / 3)  # (1+0+1)/3
    assert report["block_rate"]["alias"] == pytest.approx(13 / 24)         # (0+1/2+1+2/3)/4
    assert report["block_rate_by_rule"]["fail-closed"]["format_placebo"] == pytest.approx(3 / 4)


def test_coverage_and_quarantine(report):
    cov = report["coverage"]
    assert cov["original"] == {"expected": 12, "received": 12, "valid": 11, "failed": 1, "missing": 0,
                               "quarantined": 0, "failures_by_status": {
                                   "unparseable": 0, "truncated": 0, "exhausted": 1, "provider_error": 0,
                                   "refused": 0, "guard_error": 0}}
    assert cov["format_placebo"]["expected"] == 12  # a quarantined call is still a scheduled call
    assert (cov["format_placebo"]["valid"], cov["format_placebo"]["failed"],
            cov["format_placebo"]["quarantined"]) == (8, 3, 1)
    q = report["quarantine"]
    assert q["count"] == 1 and q["by_reason"]["provider_drift"] == 1
    assert q["fraction"] == pytest.approx(1 / 36)  # 36 scheduled calls in the table
    assert q["publishable"] is False  # 2.78% > 2%
    assert exit_status(report) == 0  # allowed
    assert exit_status({**report, "allow_unpublishable": False}) == 1


def test_quarantine_fraction_uses_scheduled_calls():
    rep = estimate(hand_rows(), n_boot=10, n_scheduled=60, allow_unpublishable=False, complete=False,
                   allow_partial=True)
    assert rep["quarantine"]["fraction"] == pytest.approx(1 / 60)
    # Failed and quarantined calls together, over the scheduled calls, decide publishing (issue 45).
    ex = rep["excluded"]
    assert ex["quarantined"] == 1 and ex["share"] == pytest.approx((ex["failed"] + 1) / 60)
    assert rep["quarantine"]["publishable"] is ex["publishable"] is (ex["share"] <= 0.02)
    assert exit_status(rep) == (0 if ex["publishable"] else 1)
    assert rep["complete"] is False


def test_strata_by_domain_and_label(report):
    d1 = report["strata"]["domain"]["D1"]["contrasts"]["alias"]
    assert d1["delta"] == pytest.approx(-1 / 18) and d1["n_bases"] == 3  # (−2/3 + 1/2 + 0)/3
    assert report["strata"]["domain"]["D2"]["contrasts"]["alias"]["delta"] == pytest.approx(1 / 3)
    assert report["strata"]["label"]["1"]["contrasts"]["alias"]["delta"] == pytest.approx(-1 / 3)  # a, c
    assert report["strata"]["label"]["0"]["contrasts"]["alias"]["delta"] == pytest.approx(5 / 12)  # b, d
    assert report["strata"]["domain"]["D1"]["block_rate"]["original"] == pytest.approx(5 / 9)


def test_accuracy_row_and_equal_interaction(report):
    a = report["accuracy"]["alias"]
    # rows: a 0,0,0 (y=1); b 1,0 (y=0); c 1,1,1 (y=1); d 0,1,1 (y=0)
    assert a["row_confusion"] == {"tp": 3.0, "fp": 3.0, "tn": 2.0, "fn": 3.0}
    assert a["row_f1"] == pytest.approx(0.5)
    assert a["row_balanced_accuracy"] == pytest.approx((3 / 6 + 2 / 5) / 2)
    # weights: g1 five rows -> 1/5, g2 and g3 three rows -> 1/3
    ic = a["interaction_confusion"]
    assert ic["tp"] == pytest.approx(1.0) and ic["fn"] == pytest.approx(0.6)
    assert ic["fp"] == pytest.approx(0.2 + 2 / 3) and ic["tn"] == pytest.approx(0.2 + 1 / 3)
    assert a["interaction_f1"] == pytest.approx(15 / 26)
    assert a["interaction_balanced_accuracy"] == pytest.approx(169 / 336)
    assert sum(ic.values()) == pytest.approx(3.0)  # every interaction weighs 1


def test_holm_over_default_family(report):
    ps = {c["condition"]: c["p"] for c in report["contrasts"]}
    lo, hi = sorted(ps.values())
    adj = {c["condition"]: c["p_holm"] for c in report["contrasts"]}
    low_cond = min(ps, key=ps.get)
    assert adj[low_cond] == pytest.approx(min(1, 2 * lo))
    assert max(adj.values()) == pytest.approx(max(min(1, 2 * lo), hi))
    assert report["family"] == ["alias", "format_placebo"]


def test_family_option_restricts_holm():
    rep = estimate(hand_rows(), n_boot=50, family=["alias"], allow_unpublishable=True)
    alias, plac = contrast(rep, "alias"), contrast(rep, "format_placebo")
    assert alias["p_holm"] == alias["p"] and plac["p_holm"] is None and plac["in_family"] is False
    with pytest.raises(InputError):
        estimate(hand_rows(), n_boot=50, family=["original"])
    with pytest.raises(InputError):
        estimate(hand_rows(), n_boot=50, family=["nope"])


def test_degenerate_bootstrap_gives_exact_interval_and_p():
    # Two clusters, each base +1/2 on the intervention: every replicate is exactly 1/2.
    rows = []
    for base, inter in (("x", "g1"), ("y", "g2")):
        for rep in range(2):
            rows.append({"base_id": base, "interaction_id": inter, "domain": "D", "condition": "original",
                         "repetition": rep, "decision": 0, "status": "ok"})
            rows.append({"base_id": base, "interaction_id": inter, "domain": "D", "condition": "t",
                         "repetition": rep, "decision": rep, "status": "ok"})
    rep = estimate(rows, n_boot=99, seed=1)
    t = contrast(rep, "t")
    # Two interactions: the sign-flip test has 4 flips, its smallest p 2/4 (issue 35): no 95%
    # interval, and p 0.5 — two interactions cannot show much, however alike they are.
    assert t["delta"] == 0.5 and t["ci"] is None and t["p"] == 0.5
    assert "no interval" in t["equivalence"]["ci_note"] and t["equivalence"]["method"] == "sign-flip"
    assert rep["placebo"] is None and t["delta_minus_placebo"] is None
    assert "accuracy" not in rep  # no labels


def test_two_cluster_bootstrap_distribution_matches_hand_calculation():
    # One domain, two single-base clusters with effects 1 and 0. The rescaled bootstrap draws
    # m − 1 = 1 cluster with weight 2: Δ* = 1 or 0, each with probability 1/2;
    # p = min(1, 2·min(P(Δ* ≤ 0), P(Δ* ≥ 0))) ≈ min(1, 2·1/2) = 1.
    rows = []
    for base, eff in (("x", 1), ("y", 0)):
        rows.append({"base_id": base, "interaction_id": base, "domain": "D", "condition": "original",
                     "repetition": 0, "decision": 0, "status": "ok"})
        rows.append({"base_id": base, "interaction_id": base, "domain": "D", "condition": "t",
                     "repetition": 0, "decision": eff, "status": "ok"})
    rep = estimate(rows, n_boot=20000, seed=5)
    t = contrast(rep, "t")
    # sign flips (issue 35): subset means 1, 0, 1/2 and the data: p = 2·(1 + 1)/4 = 1; no 95% interval
    assert t["delta"] == 0.5 and t["ci"] is None
    assert t["p"] == 1.0


def test_components_rates():
    rows = [{"base_id": "x", "interaction_id": "g", "domain": "D", "condition": c, "repetition": r,
             "decision": 1, "status": "ok", "components": {"malicious": r == 0, "rating": 0.5 * r}}
            for c in ("original", "t") for r in range(3)]
    rows.append({"base_id": "x", "interaction_id": "g", "domain": "D", "condition": "t", "repetition": 3,
                 "decision": None, "status": "unparseable", "components": {}})
    rep = estimate(rows, n_boot=10)
    assert rep["components"]["t"] == {"malicious": {"rate": pytest.approx(1 / 3), "n": 3},
                                      "rating": {"rate": pytest.approx(0.5), "n": 3}}


def test_incomplete_run_is_refused_unless_allowed():
    rows = hand_rows(with_quarantine=False)
    rows.append({"base_id": "c", "interaction_id": "g2", "domain": "D1", "condition": "format_placebo",
                 "repetition": 2, "label": 1, "decision": None, "status": "missing"})
    with pytest.raises(CheckFailed, match="incomplete"):
        estimate(rows, n_boot=10)
    rep = estimate(rows, n_boot=10, allow_partial=True)
    assert rep["complete"] is False and rep["coverage"]["format_placebo"]["missing"] == 1
    # The missing call counts nowhere: same effect as the table without it.
    assert contrast(rep, "alias")["delta_minus_placebo"] == pytest.approx(-1 / 6)


def test_headline_rule_switches_delta_and_everything_else():
    rep = estimate(hand_rows(), n_boot=10, failure_rule="fail-closed", allow_unpublishable=True)
    assert rep["failure_rule"] == "fail-closed"
    assert contrast(rep, "alias")["delta"] == pytest.approx(1 / 12)
    assert contrast(rep, "format_placebo")["n_bases"] == 4
    with pytest.raises(InputError):
        estimate(hand_rows(), n_boot=10, failure_rule="fail-sideways")


def test_baseline_and_placebo_options():
    with pytest.raises(InputError, match="baseline"):
        estimate(hand_rows(), n_boot=10, baseline="nothing")
    with pytest.raises(InputError, match="placebo"):
        estimate(hand_rows(), n_boot=10, placebo="nothing")
    rep = estimate(hand_rows(), n_boot=10, placebo="alias", allow_unpublishable=True)
    # now the correction is Δplacebo-condition − Δalias on a, b, c: p_placebo − p_alias = 1, −1/2, 0
    assert contrast(rep, "format_placebo")["delta_minus_placebo"] == pytest.approx(1 / 6)
    rep = estimate(hand_rows(), n_boot=10, roles={"original": "baseline", "alias": "placebo",
                                                  "format_placebo": "intervention"}, allow_unpublishable=True)
    assert rep["placebo"] == "alias"
    assert [c["condition"] for c in rep["contrasts"]] == ["alias", "format_placebo"]


def test_design_indices_independent_of_validity():
    d = fx.build_design(validate_rows(hand_rows()))
    assert d.base_ids == ["a", "b", "c", "d"] and d.cluster_ids == ["g1", "g2", "g3"]
    assert d.domains == ["D1", "D2"] and list(d.cluster_domain) == [0, 0, 1]
    assert np.array_equal(d.base_cluster, [0, 0, 1, 2])
