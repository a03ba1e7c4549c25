"""One rule for every printed decision (issue 26): a verdict, a star, a bold row, a "yes" and a
sentence are the Holm-adjusted decision within a family named in the output; intervals beside
them are unadjusted and labelled so; the headline has its own Holm; bad options are exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from guardeval.estimators import estimate
from guardeval.estimators import synthetic as sy
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.compare_text import text as compare_text
from guardeval.estimators.report.report import human_text, markdown
from guardeval.estimators.verdicts.decisions import decide_family, significant
from guardeval.estimators.verdicts.equivalence import equivalence
from guardeval.estimators.verdicts.holm import holm
from guardeval.estimators.verdicts.record import headline_significant as starred

from conftest import run_cli

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(2)
    pop = sy.population(sy.design(160, 240), rng)
    other = {**sy.EFFECTS, "provenance_marker": 0.30}
    return sy.guards(pop, [sy.EFFECTS, other, sy.EFFECTS], rng)


@pytest.fixture(scope="module")
def report(tables):
    return estimate(tables[0], roles=sy.ROLES, n_boot=2000, seed=1)


def test_headline_has_its_own_holm_and_the_star_follows_it(report):
    corr = [c for c in report["contrasts"] if c["condition"] != sy.PLACEBO]
    ps = [c["p_minus_placebo"] for c in corr]
    assert [c["p_holm_minus_placebo"] for c in corr] == pytest.approx(holm(ps))
    assert report["families"]["delta_minus_placebo"]["members"] == [c["condition"] for c in corr]
    assert report["families"]["delta"]["size"] == 4
    for c in report["contrasts"]:
        eq, eqc = c["equivalence"], c["equivalence_minus_placebo"]
        assert eq["p_adjusted"] == c["p_holm"] and eq["differs"] == (c["p_holm"] < 0.05)
        if c["condition"] == sy.PLACEBO:
            # the placebo's own Δ is a check of the placebo, not a headline: never starred
            assert eqc is None and c["headline"] == "placebo" and starred(c) is False
        else:
            assert eqc["p_adjusted"] == c["p_holm_minus_placebo"] and eqc["family"] == "3 interventions"
            assert c["headline"] == "delta_minus_placebo" and starred(c) == eqc["differs"]
        # a verdict never contradicts its (unadjusted) interval
        for rec, ci in ((eq, c["ci"]), (eqc, c["ci_minus_placebo"])):
            if rec is not None and rec["differs"]:
                assert ci[0] > 0 or ci[1] < 0
            if rec is not None and rec["equivalent"]:
                assert -rec["margin"] < rec["ci90"][0] and rec["ci90"][1] < rec["margin"]


def test_every_output_says_the_same_decision(report):
    md, text = markdown(report), human_text(report, width=200)
    assert "## In words" in md and "In words:" in text
    for c in report["contrasts"]:
        eq = c["equivalence_minus_placebo"] or c["equivalence"]
        word = "significant after Holm" if eq["differs"] else "not significant after Holm"
        line = next(x for x in md.splitlines() if x.startswith(f"- {c['condition']} "))
        assert word in line and f"over {eq['family']}" in line
        value = c["delta"] if c["equivalence_minus_placebo"] is None else c["delta_minus_placebo"]
        assert ("raises" in line) == (value > 5e-4) and ("lowers" in line) == (value < -5e-4)
        row = next(x for x in text.splitlines() if x.startswith(c["condition"]))
        assert (" *" in row) == (eq["differs"] and c["condition"] != sy.PLACEBO)
    assert "Decisions: Holm at α 0.05 within each family" in md and "Intervals are unadjusted 95%" in md
    assert "Δ [95% CI, unadjusted]" in md


def test_outside_the_family_is_not_tested(tables):
    rep = estimate(tables[0], roles=sy.ROLES, n_boot=500, family=["tool_alias", "threat_names"])
    by = {c["condition"]: c for c in rep["contrasts"]}
    for name in ("format_placebo", "provenance_marker"):
        assert by[name]["equivalence"]["verdict"] == "not tested (outside the family)"
        assert by[name]["equivalence"]["differs"] is None and not starred(by[name])
        assert by[name]["p_holm"] is None and by[name]["p_holm_minus_placebo"] is None
    assert rep["families"]["delta"]["members"] == ["tool_alias", "threat_names"]
    assert rep["families"]["delta_minus_placebo"]["members"] == ["tool_alias", "threat_names"]


def test_decide_family_counts_undefined_members_and_recomputes_the_holm_mde():
    q = {"estimate": 0.1, "ci": [0.02, 0.18], "ci90": [0.03, 0.17], "p": 0.01, "se": 0.04, "df": 20.0, "p_tost": 0.9}
    recs = [equivalence(q, 0.05, None), None, equivalence({**q, "p": 0.03}, 0.05, None)]
    decide_family(recs, "3 things")
    assert recs[0]["p_adjusted"] == pytest.approx(0.03) and recs[0]["holm_m"] == 3
    assert recs[2]["p_adjusted"] == pytest.approx(0.06) and not recs[2]["differs"]
    assert recs[0]["verdict"] == "differs from 0" and recs[2]["verdict"] == "inconclusive"
    assert recs[0]["mde_holm"] > recs[0]["mde"] and recs[0]["underpowered"] is True


def test_three_guards_decide_over_every_pair_and_say_who_is_more_sensitive(tables):
    out = compare_inputs([CompareInput(x, t, sy.ROLES) for x, t in zip(("shortcut", "marker", "again"), tables)],
                         n_boot=2000, seed=1)
    assert out["families"]["difference_minus_placebo"]["size"] == 9      # 3 pairs × 3 interventions
    assert out["families"]["difference_minus_placebo"]["name"] == "9 (3 pairs × 3 interventions)"
    rows = [r for p in out["pairs"] for r in p["conditions"] if r["condition"] != sy.PLACEBO]
    assert [r["p_holm_all_pairs_minus_placebo"] for r in rows] == pytest.approx(
        holm([r["p_difference_minus_placebo"] for r in rows]))
    for r in rows:
        assert r["equivalence_minus_placebo"]["p_adjusted"] == r["p_holm_all_pairs_minus_placebo"]
    # The marker guard's corrected marker effect is +0.28 against +0.08 (240 bases): found, and said in words.
    marker = next(r for r in out["pairs"][0]["conditions"] if r["condition"] == "provenance_marker")
    assert significant(marker["equivalence_minus_placebo"])
    said = compare_text(out)
    assert "provenance_marker (Δ − placebo): marker" in said and "marker is the more sensitive" in said
    assert "Holm over 9 (3 pairs × 3 interventions)" in said
    assert out["ranking_stability"]["family"]["size"] == 3 * 4 and out["ranking_family"]["size"] == 3 * 6
    assert "rank by rate (1 = highest)" in said and "rank by |effect| (1 = least moved)" in said
    from guardeval.view.compare import html
    from guardeval.view.compare import markdown as compare_md

    page, md = html(out), compare_md(out)
    assert "<h2>In words</h2>" in page and "## In words" in md and "marker is the more sensitive" in page
    # the page's title is one short line (the inputs are listed under it)
    assert "<title>guardeval compare · shortcut vs marker vs again</title>" in page


@pytest.mark.parametrize("flag, value, field", [("--alpha", "0.5", "alpha"), ("--alpha", "0", "alpha"),
                                                ("--alpha", "nan", "alpha"), ("--margin", "1", "margin"),
                                                ("--family", "tool_alias,nope", "family")])
@pytest.mark.slow
def test_bad_decision_options_are_exit_2_and_write_nothing(tables, tmp_path, flag, value, field):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in tables[0]))
    out = tmp_path / "out"
    r = run_cli("estimate", "--table", str(path), "--bootstrap", "50", "--out", str(out), flag, value)
    assert r.code == 2 and f"'{field}'" in r.err and "Traceback" not in r.err
    assert not out.exists()
    r = run_cli("compare", "--table", str(path), "--table", str(path), "--bootstrap", "50", "--out", str(out),
                flag, value)
    assert r.code == 2 and f"'{field}'" in r.err and not out.exists()


def test_a_strong_effect_is_not_capped_by_the_replicates_resolution():
    """With every replicate on one side of 0 the percentile p is only known to be below 2/(B+1);
    t-calibrated for few interactions that floor alone would be ~0.01, too large to survive Holm
    over a few members. The replicates' normal tail takes over there, never above the floor's p,
    and only where the printed interval excludes 0 by a clear margin."""
    from scipy.stats import t

    from guardeval.estimators.bootstrap import bootstrap_p, calibrated_p, percentile_p

    rng = np.random.default_rng(0)
    s = rng.normal(0.8, 0.1, 2000)                         # 8 SEs from 0, no replicate below it
    floor = calibrated_p(percentile_p(s), 8.0)
    p = bootstrap_p(s, 8.0, point=0.8)
    assert floor > 0.005 and p == pytest.approx(2 * t.sf(0.8 / s.std(ddof=1), 8.0)) and p < 1e-4
    near = rng.normal(0.2, 0.1, 2000)                      # 2 SEs: the replicates resolve it; p inverts the interval
    # (issue 35), within a replicate's share of the counting p it replaced
    p_near = bootstrap_p(near, 8.0, point=0.2)
    assert p_near == pytest.approx(calibrated_p(percentile_p(near), 8.0), abs=0.003)


def test_alpha_sets_the_level_of_every_printed_interval(tables):
    rep = estimate(tables[0], roles=sy.ROLES, n_boot=1000, seed=1, alpha=0.10)
    for c in rep["contrasts"]:
        for rec, ci in ((c["equivalence"], c["ci"]), (c["equivalence_minus_placebo"], c["ci_minus_placebo"])):
            if rec is None:
                continue
            # p < α exactly when the (1 − α) interval excludes 0
            assert (rec["p"] < 0.10) == (ci[0] > 0 or ci[1] < 0)
            if rec["differs"]:
                assert ci[0] > 0 or ci[1] < 0
    md, text = markdown(rep), human_text(rep, width=200)
    assert "Δ [90% CI, unadjusted]" in md and "unadjusted 90% CI" in md and "95%" not in text.split("Decisions")[0]
    wide = estimate(tables[0], roles=sy.ROLES, n_boot=1000, seed=1)
    c90 = next(c for c in rep["contrasts"] if c["condition"] == "tool_alias")["ci"]
    c95 = next(c for c in wide["contrasts"] if c["condition"] == "tool_alias")["ci"]
    assert c95[0] < c90[0] < c90[1] < c95[1]
