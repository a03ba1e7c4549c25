"""Hand-worked cases for the diagnostic families (issue 12): sign tests, rounds, transitions,
unanimity, stability, exact intervals, accuracy contrasts and ROC metrics, leave-one-tool-out,
the worst case over conditions, dispatch order, --missing and the placebo note.

Most use the table of test_estimators_effects (R = 3; F = failure; Q = quarantined):

    base  interaction domain label | original  | format_placebo      | alias
    a     g1          D1     1     | 1 1 0     | 1 1 1               | 0 0 0
    b     g1          D1     0     | 0 0 0     | 0 0 0               | 1 F 0
    c     g2          D1     1     | 1 F 1     | 1 1 Q               | 1 1 1
    d     g3          D2     0     | 0 0 1     | F F F               | 0 1 1

Per-base rates under drop: original a 2/3, b 0, c 1, d 1/3; placebo a 1, b 0, c 1, d —;
alias a 0, b 1/2, c 1, d 2/3.
"""

from __future__ import annotations

import pytest
from scipy.stats import beta

from guardeval.errors import CheckFailed, InputError
from guardeval.estimators import estimate
from test_estimators_effects import hand_rows

pytestmark = pytest.mark.fast

TOOLS = {"a": "t1", "b": "t1", "c": "t2", "d": "t3"}


@pytest.fixture(scope="module")
def report() -> dict:
    rows = [{**r, "tool": TOOLS[r["base_id"]]} for r in hand_rows()]
    return estimate(rows, n_boot=400, seed=3, allow_unpublishable=True)


def contrast(report: dict, cond: str) -> dict:
    return next(c for c in report["contrasts"] if c["condition"] == cond)


def row(base: str, cond: str, rep: int, decision: int | None, *, inter: str | None = None, domain: str = "D",
        label: int | None = None, status: str = "ok", **extra: object) -> dict:
    return {"base_id": base, "interaction_id": inter or base, "domain": domain, "condition": cond,
            "repetition": rep, "decision": decision, "status": status, "label": label, **extra}


# ----------------------------------------------------------------------------- sign test

def test_sign_test_by_interaction(report):
    # alias − original per interaction: g1 (a −2/3, b +1/2) −1/6 < 0; g2 (c 0) tie; g3 (d +1/3) > 0
    assert contrast(report, "alias")["sign_test"] == {"negative": 1, "positive": 1, "tie": 1, "p": 1.0}
    # alias − placebo on bases with all three: g1 (a −1, b +1/2) < 0; g2 (c 0) tie; g3 has no placebo call
    assert contrast(report, "alias")["sign_test_minus_placebo"] == {"negative": 1, "positive": 0, "tie": 1, "p": 1.0}
    # placebo − original: g1 (a +1/3, b 0) > 0; g2 tie
    placebo = contrast(report, "format_placebo")
    assert placebo["sign_test"] == {"negative": 0, "positive": 1, "tie": 1, "p": 1.0}
    assert placebo["sign_test_minus_placebo"] is None


def test_sign_test_p_is_the_exact_binomial():
    # six interactions, every one up: p = 2 · (1/2)^6 = 1/32
    rows = [row(f"x{i}", cond, 0, int(cond == "t")) for i in range(6) for cond in ("original", "t")]
    t = contrast(estimate(rows, n_boot=20), "t")
    assert t["sign_test"] == {"negative": 0, "positive": 6, "tie": 0, "p": pytest.approx(1 / 32)}
    # five up, one down: p = 2 · (1 + 6) / 64
    rows[-1]["decision"], rows[-2]["decision"] = 0, 1
    assert contrast(estimate(rows, n_boot=20), "t")["sign_test"]["p"] == pytest.approx(14 / 64)


def test_sign_of_an_interaction_is_exact_not_float():
    # One interaction, two bases: x 0 − 1/3, y 1 − 2/3. In floats the sum is 5.6e-17; exactly 0: a tie.
    rows = []
    for base, orig, t in (("x", [1, 0, 0], [0, 0, 0]), ("y", [1, 1, 0], [1, 1, 1])):
        for r in range(3):
            rows += [row(base, "original", r, orig[r], inter="g"), row(base, "t", r, t[r], inter="g")]
    assert (0 - 1 / 3) + (1 - 2 / 3) != 0  # the float trap this test is about
    assert contrast(estimate(rows, n_boot=20), "t")["sign_test"] == {"negative": 0, "positive": 0, "tie": 1, "p": 1.0}


# ----------------------------------------------------------------------------- rounds

def test_effect_by_repetition_round(report):
    # alias − original, round by round: r0 (a −1, b +1, c 0, d 0) 0; r1 (a −1, d +1) 0; r2 all 0
    assert contrast(report, "alias")["by_repetition"] == [0.0, 0.0, 0.0]
    # alias − placebo where all three are counted: r0 (a −1, b +1, c 0) 0; r1 (a −1) −1; r2 (a −1, b 0) −1/2
    assert contrast(report, "alias")["by_repetition_minus_placebo"] == [0.0, -1.0, -0.5]
    # placebo − original: r0 (a, b, c) 0; r1 (a, b) 0; r2 (a +1, b 0) 1/2
    assert contrast(report, "format_placebo")["by_repetition"] == [0.0, 0.0, 0.5]
    assert report["repetitions"] == [0, 1, 2]


def test_rounds_follow_the_repetition_numbers_not_their_size():
    rows = [row("x", c, rep, int(c == "t" and rep == 7)) for c in ("original", "t") for rep in (3, 7)]
    rep = estimate(rows, n_boot=10)
    assert rep["repetitions"] == [3, 7]
    assert contrast(rep, "t")["by_repetition"] == [0.0, 1.0]


def test_flip_counts(report):
    # (original, alias) per shared round: a (1,0)(1,0)(0,0); b (0,1)(0,0); c (1,1)(1,1); d (0,0)(0,1)(1,1)
    alias = contrast(report, "alias")
    assert alias["flip_counts"] == {"0->0": 3, "0->1": 2, "1->0": 2, "1->1": 3}
    assert contrast(report, "format_placebo")["flip_counts"] == {"0->0": 3, "0->1": 1, "1->0": 0, "1->1": 3}
    # the reported flip rate is the per-base average of the off-diagonal share (a 2/3, b 1/2, c 0, d 1/3)
    assert alias["same_round_flip_rate"] == pytest.approx(0.375)


def test_unanimous_shift(report):
    # alias: only c is unanimous in both (original 1,1 after the drop; alias 1,1,1)
    assert contrast(report, "alias")["unanimous_shift"] == {"0->0": 0, "0->1": 0, "1->0": 0, "1->1": 1,
                                                            "nonunanimous": 3}
    # placebo: b 0->0, c 1->1; a (original 1,1,0) is not unanimous; d has no placebo call
    assert contrast(report, "format_placebo")["unanimous_shift"] == {"0->0": 1, "0->1": 0, "1->0": 0, "1->1": 1,
                                                                     "nonunanimous": 1}


# ----------------------------------------------------------------------------- stability, block rates

def test_stability_per_condition(report):
    st = report["stability"]
    # original: a 2/3, b 0, c 0 (R = 2), d 2/3 -> 1/3; unanimous b, c of 4
    assert st["original"]["repeat_disagreement"] == pytest.approx(1 / 3)
    assert st["original"]["unanimous_rate"] == 0.5 and st["original"]["n_bases"] == 4
    # alias: a 0, b (1, 0: R = 2) 1, c 0, d 2/3 -> 5/12
    assert st["alias"]["repeat_disagreement"] == pytest.approx(5 / 12) and st["alias"]["unanimous_rate"] == 0.5
    # placebo: a, b, c unanimous, d has no counted call
    # three interactions: a sign-flip test's smallest p is 2/2^3, so no 95% interval exists (issue 35)
    assert st["format_placebo"] == {"repeat_disagreement": 0.0, "unanimous_rate": 1.0, "ci": None, "n_bases": 3}
    assert st["alias"]["ci"] is None
    assert report["repeat_disagreement"] == st["original"]["repeat_disagreement"]


def test_block_rate_exact_interval_is_clopper_pearson(report):
    # original, drop: 5 blocks in 11 counted calls
    lo, hi = report["block_rate_exact_ci"]["original"]
    assert lo == pytest.approx(beta.ppf(0.025, 5, 7)) and hi == pytest.approx(beta.ppf(0.975, 6, 6))
    # alias: a 0, b 1 of 2, c 3, d 2 -> 6 of 11
    lo, hi = report["block_rate_exact_ci"]["alias"]
    assert lo == pytest.approx(beta.ppf(0.025, 6, 6)) and hi == pytest.approx(beta.ppf(0.975, 7, 5))
    assert report["block_rate_ci"]["original"] is None    # 3 interactions: no 95% interval (issue 35)


def test_exact_interval_edges():
    from guardeval.estimators.exact import clopper_pearson

    assert clopper_pearson(0, 10) == [0.0, pytest.approx(1 - 0.025 ** (1 / 10))]
    assert clopper_pearson(10, 10) == [pytest.approx(0.025 ** (1 / 10)), 1.0]
    assert clopper_pearson(0, 0) is None


# ----------------------------------------------------------------------------- against labels

def test_accuracy_delta(report):
    # (2y − 1)(p_alias − p_original): a −2/3, b −1/2, c 0, d −1/3 -> −3/8
    alias = contrast(report, "alias")
    assert alias["accuracy_delta"] == pytest.approx(-3 / 8)
    assert alias["accuracy_delta_ci"] is None             # 3 interactions: no 95% interval (issue 35)
    # against the placebo, bases a, b, c: a 0 − 1, b −(1/2 − 0), c 0 -> −1/2
    assert alias["accuracy_delta_minus_placebo"] == pytest.approx(-0.5)
    # placebo: a +1/3, b 0, c 0 -> 1/9
    assert contrast(report, "format_placebo")["accuracy_delta"] == pytest.approx(1 / 9)


def test_row_and_interaction_accuracy(report):
    acc = report["accuracy"]["original"]
    # right rows: a 2 of 3, b 3 of 3, c 2 of 2, d 2 of 3 -> 9/11; per interaction g1 5/6, g2 1, g3 2/3
    assert acc["row_accuracy"] == pytest.approx(9 / 11)
    assert acc["interaction_accuracy"] == pytest.approx((5 / 6 + 1 + 2 / 3) / 3)
    assert acc["row_accuracy_ci"] is None                 # 3 interactions: no 95% interval (issue 35)
    assert acc["auc"] is None and acc["tpr_at_1pct_fpr"] is None and acc["n_scored"] == 0


def scored_rows() -> list[dict]:
    """Condition t: unsafe scores 0.9 (g1), 0.5 (g1), 0.5 (g2); safe 0.5 (g2), 0.1 (g3)."""
    spec = [("p1", "g1", 1, 0.9), ("p2", "g1", 1, 0.5), ("p3", "g2", 1, 0.5), ("n1", "g2", 0, 0.5),
            ("n2", "g3", 0, 0.1)]
    rows = []
    for base, inter, label, score in spec:
        rows.append(row(base, "original", 0, 0, inter=inter, label=label))
        rows.append(row(base, "t", 0, int(score >= 0.5), inter=inter, label=label, score=score))
    return rows


def test_auc_and_tpr_at_1pct_fpr_by_hand():
    acc = estimate(scored_rows(), n_boot=300, seed=2)["accuracy"]
    t = acc["t"]
    # rows: pairs (pos, neg) 0.9>0.5, 0.9>0.1, 0.5=0.5 (½), 0.5>0.1, 0.5=0.5 (½), 0.5>0.1 -> 5/6
    assert t["auc"]["row"] == pytest.approx(5 / 6)
    # ROC (0,0) -> (0, 1/3) at 0.9 -> (1/2, 1) at 0.5: at fpr 1% tpr = 1/3 + (0.01/0.5)·(2/3)
    assert t["tpr_at_1pct_fpr"]["row"] == pytest.approx(1 / 3 + 0.02 * 2 / 3)
    # weights 1/2 (g1), 1/2 (g2), 1 (g3): positives 0.9:½, 0.5:1; negatives 0.5:½, 0.1:1
    # area = (½·(½·½ + 1) + 1·(½·½ + 1)) / (1.5 · 1.5) = 8/9
    assert t["auc"]["interaction"] == pytest.approx(8 / 9)
    # ROC (0, 1/3) -> (1/3, 1): tpr = 1/3 + (0.01 / (1/3)) · (2/3)
    assert t["tpr_at_1pct_fpr"]["interaction"] == pytest.approx(1 / 3 + 0.02)
    assert t["n_scored"] == 5 and acc["original"]["auc"] is None
    lo, hi = t["auc"]["row_ci"]
    assert 0 <= lo <= hi <= 1


def test_tpr_on_a_vertical_stretch_at_exactly_1pct():
    # 100 safe rows, one scoring above every unsafe row: fpr reaches exactly 0.01 at tpr 0, then
    # the unsafe rows (all 0.8) lift tpr to 1 at the same fpr: the top of the stretch counts.
    rows = [row(f"n{i}", "original", 0, 0, label=0, score=0.99 if i == 0 else 0.1) for i in range(100)]
    rows += [row(f"p{i}", "original", 0, 1, label=1, score=0.8) for i in range(4)]
    acc = estimate(rows, n_boot=20)["accuracy"]["original"]
    assert acc["tpr_at_1pct_fpr"]["row"] == pytest.approx(1.0)
    assert acc["auc"]["row"] == pytest.approx(0.99)


# ----------------------------------------------------------------------------- leave one tool out

def test_leave_one_tool_out(report):
    # alias − original: a −2/3, b +1/2 (tool t1), c 0 (t2), d +1/3 (t3)
    # without t1: (0 + 1/3)/2 = 1/6; without t2: (−2/3 + 1/2 + 1/3)/3 = 1/18; without t3: −1/18
    loo = contrast(report, "alias")["leave_one_tool_out"]
    assert loo == {"min": pytest.approx(-1 / 18), "max": pytest.approx(1 / 6), "n_tools": 3}
    # corrected (a −1, b +1/2, c 0): without t1 0; without t2 −1/4
    assert contrast(report, "alias")["leave_one_tool_out_minus_placebo"] == {
        "min": pytest.approx(-0.25), "max": pytest.approx(0.0), "n_tools": 2}


def test_leave_one_tool_out_needs_tools():
    rep = estimate(hand_rows(), n_boot=10, allow_unpublishable=True)
    assert contrast(rep, "alias")["leave_one_tool_out"] is None
    # one tool only: leaving it out leaves nothing
    one = estimate([{**r, "tool": "only"} for r in hand_rows()], n_boot=10, allow_unpublishable=True)
    assert contrast(one, "alias")["leave_one_tool_out"] == {"min": None, "max": None, "n_tools": 1}


def test_a_base_has_one_tool():
    rows = hand_rows()
    rows[0]["tool"], rows[1]["tool"] = "x", "y"
    with pytest.raises(InputError, match="tool") as ei:
        estimate(rows, n_boot=10)
    assert ei.value.line == 2 and ei.value.field == "tool"


# ----------------------------------------------------------------------------- strata

def test_strata_carry_the_corrected_contrast(report):
    d1 = report["strata"]["domain"]["D1"]["contrasts"]["alias"]
    # D1 (a, b, c): alias − placebo −1, +1/2, 0
    assert d1["delta_minus_placebo"] == pytest.approx(-1 / 6) and d1["n_bases_minus_placebo"] == 3
    assert (d1["increase_minus_placebo"], d1["decrease_minus_placebo"], d1["tie_minus_placebo"]) == (1, 1, 1)
    assert (d1["increase"], d1["decrease"], d1["tie"]) == (1, 1, 1)   # alias − original: b up, a down, c tie
    d2 = report["strata"]["domain"]["D2"]["contrasts"]["alias"]
    assert d2["delta_minus_placebo"] is None and d2["tie_minus_placebo"] == 0
    unsafe = report["strata"]["label"]["1"]["contrasts"]["alias"]   # a −1, c 0
    assert unsafe["delta_minus_placebo"] == pytest.approx(-0.5)
    assert (unsafe["increase_minus_placebo"], unsafe["decrease_minus_placebo"], unsafe["tie_minus_placebo"]) == (0, 1, 1)


# ----------------------------------------------------------------------------- worst case

def test_worst_case_over_conditions(report):
    w = report["worst_case"]
    # unsafe a: allowed under original in round 2 only (1/3); under some condition in every round (alias 0)
    # unsafe c: rounds 0 and 2 counted for original; blocked everywhere -> 0, 0
    assert w["miss_rate_baseline"] == pytest.approx(1 / 6) and w["miss_rate_any"] == pytest.approx(0.5)
    # safe b: original never blocks; alias blocks in round 0 (round 1: alias failed) -> 0, 1/3
    # safe d: original blocks in round 2 (1/3); some condition blocks in rounds 1, 2 (2/3)
    assert w["false_block_rate_baseline"] == pytest.approx(1 / 6) and w["false_block_rate_any"] == pytest.approx(0.5)
    assert w["n_unsafe_bases"] == 2 and w["n_safe_bases"] == 2
    for key in ("miss_rate_baseline", "miss_rate_any", "false_block_rate_baseline", "false_block_rate_any"):
        assert w[key + "_ci"] is None                     # 3 interactions: no 95% interval (issue 35)


def test_no_labels_no_worst_case():
    rows = [{**r, "label": None} for r in hand_rows()]
    rep = estimate(rows, n_boot=10, allow_unpublishable=True)
    assert rep["worst_case"] is None and "accuracy" not in rep
    assert contrast(rep, "alias")["accuracy_delta"] is None


# ----------------------------------------------------------------------------- order

def timed_rows() -> list[dict]:
    """Three bases, original and t, three rounds; round r starts at minute r, so each third of the
    18 calls is one round. t blocks in round 0 for x only, in round 2 for x, y and z."""
    t_dec = {0: {"x": 1, "y": 0, "z": 0}, 1: {"x": 0, "y": 0, "z": 1}, 2: {"x": 1, "y": 1, "z": 1}}
    rows = []
    for rep in range(3):
        for k, base in enumerate(("x", "y", "z")):
            for j, cond in enumerate(("original", "t")):
                started = f"2026-01-01T00:0{rep}:{10 * k + j:02d}Z"
                rows.append(row(base, cond, rep, t_dec[rep][base] if cond == "t" else 0, started=started))
    return rows


def test_order_by_dispatch_third():
    rep = estimate(timed_rows(), n_boot=300, seed=1)
    o = rep["order"]
    assert o["n_calls"] == 18 and [t["n_calls"] for t in o["thirds"]] == [6, 6, 6]
    assert o["thirds"][0]["first_started"] == "2026-01-01T00:00:00.000Z"
    assert o["by_dispatch_third"]["t"] == pytest.approx([1 / 3, 1 / 3, 1.0])
    # slope over the thirds: (1 − 1/3) / 2
    assert o["drift"]["t"]["slope"] == pytest.approx(1 / 3)
    assert o["block_rate_by_dispatch_third"]["original"] == [0.0, 0.0, 0.0]
    # few interactions: no 95% interval, never a zero-width one (issue 35)
    assert o["block_rate_drift"]["original"] == {"slope": 0.0, "ci": None, "p": 1.0}
    assert o["drift"]["t"]["ci"] is None


def test_order_needs_times_and_ignores_row_order():
    assert estimate(hand_rows(), n_boot=10, allow_unpublishable=True)["order"] is None
    rows = timed_rows()
    assert estimate(rows[::-1], n_boot=50, seed=1)["order"] == estimate(rows, n_boot=50, seed=1)["order"]


@pytest.mark.parametrize("value", ["yesterday", 17, "2026-01-01T00:00:00" + "0" * 60])
def test_bad_start_time_is_refused(value):
    rows = timed_rows()
    rows[4]["started"] = value
    with pytest.raises(InputError) as ei:
        estimate(rows, n_boot=10)
    assert ei.value.line == 5 and ei.value.field == "started"


# ----------------------------------------------------------------------------- missing, placebo note

def missing_rows() -> list[dict]:
    """Four bases, original always allows; t blocks once in a; b's last t call never came back."""
    t_dec = {"a": [1, 0, 0], "b": [0, 0, None], "c": [0, 0, 0], "d": [0, 0, 0]}
    rows = []
    for base, decs in t_dec.items():
        for rep in range(3):
            rows.append(row(base, "original", rep, 0))
            d = decs[rep]
            rows.append(row(base, "t", rep, d, status="ok" if d is not None else "missing"))
    return rows


def test_missing_as_failure_under_fail_closed():
    rows = missing_rows()
    with pytest.raises(CheckFailed):
        estimate(rows, n_boot=10, failure_rule="fail-closed", missing="as-failure")  # still needs allow_partial
    common = dict(n_boot=10, failure_rule="fail-closed", allow_partial=True)
    excluded = contrast(estimate(rows, **common), "t")
    failed = contrast(estimate(rows, missing="as-failure", **common), "t")
    # excluded: (1/3 + 0 + 0 + 0)/4 = 0.0833; as a failure under fail-closed b's t is 1/3: 0.1667
    assert excluded["delta"] == pytest.approx(1 / 12) and failed["delta"] == pytest.approx(1 / 6)
    assert failed["by_rule"]["fail-open"] == pytest.approx(1 / 12) and failed["by_rule"]["drop"] == pytest.approx(1 / 12)
    rep = estimate(rows, missing="as-failure", **common)
    assert rep["missing"] == "as-failure" and rep["coverage"]["t"]["missing"] == 1
    with pytest.raises(InputError, match="missing"):
        estimate(rows, missing="sometimes", **common)


def test_no_placebo_is_said_once():
    rows = [r for r in hand_rows() if r["condition"] != "format_placebo"]
    rep = estimate(rows, n_boot=10)
    assert rep["placebo"] is None and len(rep["notes"]) == 1 and "no placebo" in rep["notes"][0]
    assert contrast(rep, "alias")["role"] == "intervention"
    named = estimate(hand_rows(), n_boot=10, allow_unpublishable=True)
    assert named["notes"] == ["placebo: format_placebo (chosen by its name; pass --placebo to choose another)"]
    assert estimate(hand_rows(), n_boot=10, placebo="format_placebo", allow_unpublishable=True)["notes"] == []
    roles = {"original": "baseline", "format_placebo": "placebo", "alias": "intervention"}
    assert estimate(hand_rows(), n_boot=10, roles=roles, allow_unpublishable=True)["notes"] == []


def test_bootstrap_is_described_as_implemented(report):
    text = report["bootstrap"]["resampling"]
    assert "m_d - 1" in text and "m_d/(m_d - 1)" in text and "as many as observed" not in text
