"""Small designs (issue 35): one procedure per quantity (the interval excludes 0 exactly when
p < α), a sign-flip test that holds from a handful of interactions, no zero-width intervals, the
design saying when it cannot decide, a failed placebo said first, ties as ties, and
`compare --fail-on differs`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardeval.estimators import estimate
from guardeval.estimators import signflip as sf
from guardeval.estimators import synthetic as sy
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.compare_text import text as compare_text
from guardeval.estimators.compare.compare_text import words as compare_words
from guardeval.estimators.planning.plan import plan_rows
from guardeval.estimators.report.presentation import presentation
from guardeval.estimators.report.report import headline_sentences, human_text, markdown
from guardeval.study.answer import answer, condition_answer, pair_decision
from guardeval.view.compare import markdown as compare_markdown
from guardeval.view.tables import in_words

from conftest import run_cli

pytestmark = pytest.mark.fast

ALPHA = 0.05


def _brute_p(num: np.ndarray, den: np.ndarray, theta: float) -> float:
    """The sign-flip p from its definition: every flip s of the centred sums e_g = num_g − θ·den_g,
    p = 2·min(#{Σ s·e ≥ Σ e}, #{Σ s·e ≤ Σ e}) / 2^G."""
    e = num - theta * den
    t = e.sum()
    flips = np.array(list(itertools.product((1.0, -1.0), repeat=len(e))))
    ts = flips @ e
    up, lo = int((ts >= t - 1e-12).sum()), int((ts <= t + 1e-12).sum())
    return min(1.0, 2 * min(up, lo) / len(flips))


def test_subset_means_are_the_sign_flip_test_and_its_inversion():
    rng = np.random.default_rng(4)
    den = rng.integers(1, 5, 7).astype(float)             # unbalanced interactions
    num = den * rng.uniform(-0.2, 0.6, 7)
    point = float(num.sum() / den.sum())
    s, n_total, exact = sf.subsets(7, 100, 0)
    assert exact and n_total == 128
    out = sf.summarise(sf.subset_means(s, num[:, None], den[:, None])[:, 0], n_total, point, 7,
                       sf.ratio_se(num, den, point), 1 - ALPHA, 0.1, (-1.0, 1.0))
    assert out["p"] == pytest.approx(_brute_p(num, den, 0.0))
    lo, hi = out["ci"]
    # the interval is exactly the values the test does not reject at α
    for theta in np.linspace(lo - 0.3, hi + 0.3, 241):
        inside = lo <= theta <= hi
        assert (_brute_p(num, den, float(theta)) >= ALPHA) == inside, theta
    assert out["p_min"] == pytest.approx(2 / 128) and out["method"] == "sign-flip"


def test_a_value_within_the_datas_resolution_is_tested_as_a_tie():
    """Issue 50: with rates on a lattice (thirds), many interactions' sums are exactly 0 and the
    flips' interval can end exactly at 0 while the population mean sits just off it (0.002 or
    0.02). A subset value within half its own lattice step of θ0 (`half_step` over the subset's
    bases) counts on both sides: the interval's ends are the values moved down and up by it, p
    the same test, and both agree."""
    den = np.array([2.0, 1.0, 1.0, 2.0, 1.0, 2.0])
    num = np.array([0.0, 0.0, -1 / 3, 0.0, 0.0, -2 / 3])   # every sum ≤ 0: the flips' upper end is 0
    per_base = np.array([0, 0, 0, -1 / 3, 0, 0, 0, 0, -1 / 3, -1 / 3])
    half = sf.half_step(per_base)
    assert half == pytest.approx(1 / 6)
    point = float(num.sum() / den.sum())
    s, n_total, _ = sf.subsets(6, 100, 0)
    vals = sf.subset_means(s, num[:, None], den[:, None])[:, 0]
    ties = half / (s @ den)
    se = sf.ratio_se(num, den, point)
    plain = sf.summarise(vals, n_total, point, 6, se, 0.8, None, (-1.0, 1.0))
    tied = sf.summarise(vals, n_total, point, 6, se, 0.8, None, (-1.0, 1.0), ties)
    assert plain["ci"][1] == 0.0 and not plain["ci"][0] <= 0.02 <= plain["ci"][1]
    assert tied["ci"][0] <= 0.02 <= tied["ci"][1] and tied["ci"][0] < plain["ci"][0]
    # the interval is exactly the θ0 whose tie-robust p (each subset mean moved by its own tie) is ≥ 1 − level
    for theta in np.linspace(tied["ci"][0] - 0.2, tied["ci"][1] + 0.2, 161):
        up = _brute_one_sided(num, den, float(theta), half, "greater")
        lo = _brute_one_sided(num, den, float(theta), half, "less")
        inside = tied["ci"][0] <= theta <= tied["ci"][1]
        assert (min(up, lo) >= 0.1) == inside, theta
    assert tied["p"] >= plain["p"]
    assert sf.half_step(np.array([0.25, 0.25])) == 0.0


def _brute_one_sided(num: np.ndarray, den: np.ndarray, theta: float, half: float, side: str) -> float:
    """A one-sided flip p from its definition, the data unflipped counted: "greater" (H0 θ ≤ θ0)
    counts the flips whose subset mean, less half its lattice step (half / its bases), is ≤ θ0;
    "less" those whose mean plus it is ≥ θ0; over all 2^G."""
    g = len(num)
    n_all = 1 << g
    count = 1
    for code in range(1, n_all):
        f = np.array([(code >> i) & 1 for i in range(g)], dtype=bool)
        r, tie = num[f].sum() / den[f].sum(), half / den[f].sum()
        count += bool(r - tie <= theta) if side == "greater" else bool(r + tie >= theta)
    return count / n_all


def _table(design: sy.Design, effects: dict[str, float], seed: int,
           fail_rate: float = sy.Model().fail_rate) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return sy.rows(sy.population(design, rng, sy.Model(fail_rate=fail_rate)), effects, rng)


def test_interval_and_p_agree_on_every_row_of_a_small_design():
    rows, methods = [], set()
    for seed in range(6):
        rep = estimate(_table(sy.design(6, 8), sy.EFFECTS, seed), roles=sy.ROLES, n_boot=300, seed=seed)
        for c in rep["contrasts"]:
            for ci, p in ((c["ci"], c["p"]), (c["ci_minus_placebo"], c["p_minus_placebo"])):
                if p is not None:
                    rows.append((c["condition"], ci, p))
            methods.add(c["equivalence"].get("method"))
    disagree = [r for r in rows if (r[1] is not None and (r[1][0] > 0 or r[1][1] < 0)) != (r[2] < ALPHA)]
    assert disagree == [] and len(rows) == 6 * 7
    assert all(ci is None or ci[1] > ci[0] for _, ci, _ in rows)      # never a zero-width interval
    assert methods == {"sign-flip"}


def test_unbalanced_design_with_single_interaction_domains_covers():
    """One large interaction, two domains holding one interaction: 40 data sets, the 95%
    intervals of Δ − placebo cover the truth at least 90% of the time (the benchmark: ≥ 0.95)."""
    d = sy.Design(((6, 1), (1,), (1,), (1, 1)))
    truth = sy.truth(sy.EFFECTS, d)
    hits = []
    rng = np.random.default_rng(8)
    for s in range(40):
        rows = sy.rows(sy.population(d, rng), sy.EFFECTS, rng)
        rep = estimate(rows, roles=sy.ROLES, n_boot=200, seed=s)
        for c in rep["contrasts"]:
            if c["condition"] in truth.corrected:
                ci = c["ci_minus_placebo"]
                hits.append(ci is None or ci[0] <= truth.corrected[c["condition"]] <= ci[1])
    assert np.mean(hits) >= 0.90, np.mean(hits)


def test_one_dominant_interaction_is_decided_by_sign_flips_at_any_size():
    """Issue 50: 44 interactions in 4 domains (40 df) with one of them holding 29 of 73 bases has
    about 2 effective interactions beyond its domains; the bootstrap covered 0.932–0.947 there under
    heterogeneous effects, the sign flips 0.944–0.955. The switch reads the effective df
    ((Σ n_g)² / Σ n_g² − domains), so such a design gets the sign flips; a balanced one of the same
    size keeps the bootstrap."""
    one_large = sy.Design(((29,) + (1,) * 19, (1,), (2, 1, 1), (1,) * 20))
    balanced = sy.design(44, 66)
    assert one_large.n_interactions == balanced.n_interactions == 44
    for design, method in ((one_large, "sign-flip"), (balanced, "bootstrap")):
        rep = estimate(_table(design, sy.EFFECTS, 2), roles=sy.ROLES, n_boot=300, seed=0)
        methods = {c[k]["method"] for c in rep["contrasts"] for k in ("equivalence", "equivalence_minus_placebo")
                   if c[k] is not None}
        assert methods == {method}, (design.sizes, methods)


def test_effective_df_is_kishs_count_less_the_domains():
    from guardeval.estimators.bootstrap import cluster_df, effective_df

    dom = np.array([0, 0, 1, 1, 1, 2])
    even = np.array([2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert effective_df(even, dom) == pytest.approx(cluster_df(even > 0, dom)) == pytest.approx(3.0)
    skew = np.array([4.0, 1.0, 1.0, 2.0, 2.0, 0.0])      # the last interaction unused: 2 domains
    assert effective_df(skew, dom) == pytest.approx(10.0 ** 2 / 26.0 - 2)
    assert effective_df(np.array([10.0, 1.0, 1.0, 1.0, 1.0, 0.0]), dom) == 1.0     # at least 1
    assert effective_df(np.zeros(6), dom) == 1.0


def test_the_heterogeneous_generator_has_the_truth_it_claims():
    """synthetic.LogitModel's quadrature truth against a population of 400,000 bases; its null
    (exchangeable conditions) has every Δ exactly 0; its placebo's mean logit effect is 0."""
    model = sy.LogitModel()
    d = sy.design(4000, 400_000)
    rng = np.random.default_rng(1)
    pop = sy.population(d, rng, model)
    p = pop.probabilities(sy.HET_EFFECTS)
    t = sy.truth(sy.HET_EFFECTS, d, model)
    for j, c in enumerate(sy.CONDITIONS[1:], 1):
        assert float((p[:, j] - p[:, 0]).mean()) == pytest.approx(t.delta[c], abs=3e-3), c
    assert abs(t.delta[sy.PLACEBO]) < 0.01 and t.delta["threat_names"] > 0.1
    null = sy.truth(sy.NULL, d, sy.HET_NULL_MODEL)
    assert all(v == pytest.approx(0.0, abs=1e-15) for v in null.delta.values())


def _flat_rows(n_inter: int, placebo_moves: bool) -> list[dict[str, Any]]:
    """Deterministic answers: every base allowed under the baseline and marker_rewrite; the
    placebo blocks every base when `placebo_moves`."""
    rows = []
    for g in range(n_inter):
        for b in range(2):
            for c in ("original", "format_placebo", "marker_rewrite"):
                dec = int(placebo_moves and c == "format_placebo")
                rows.append({"base_id": f"b{g}_{b}", "interaction_id": f"g{g}", "domain": f"d{g % 2}",
                             "condition": c, "repetition": 0, "decision": dec, "status": "ok"})
    return rows


def test_no_variation_gives_the_binomial_bound_not_a_point():
    rep = estimate(_flat_rows(8, placebo_moves=False), n_boot=200, seed=0)
    m = next(c for c in rep["contrasts"] if c["condition"] == "marker_rewrite")
    assert m["delta"] == 0 and m["p"] == 1.0
    lo, hi = m["ci"]
    u = 1 - ALPHA ** (1 / 8)                               # the share of interactions that could differ
    assert lo == pytest.approx(-u) and hi == pytest.approx(u)
    assert "no variation observed in 8 interactions" in m["equivalence"]["ci_note"]
    lo_b, hi_b = rep["block_rate_ci"]["original"]           # a rate of 0: [0, bound], never [0, 0]
    assert lo_b == 0 and hi_b == pytest.approx(u)


def test_a_design_that_cannot_decide_says_so_first_everywhere():
    # No failed call: failed calls would be said before it (issue 45).
    rep = estimate(_table(sy.design(6, 8), sy.EFFECTS, 1, fail_rate=0.0), roles=sy.ROLES, n_boot=200, seed=0)
    said = rep["cannot_decide"]
    assert any(s.startswith("With 6 interactions this design cannot reach a decision at α 0.05 over 3 interventions")
               and "collect at least 7 interactions" in s.lower() for s in said), said
    fam = rep["families"]["delta_minus_placebo"]
    assert fam["decidable"] is False and fam["interactions_needed"] == 7
    assert headline_sentences(rep)[0] == said[0]
    md = markdown(rep)
    assert md.index(said[0]) < md.index("## Effects")
    page = in_words(presentation(rep))   # report.html
    assert page.index("cannot reach a decision") < page.index("provenance_marker")
    assert human_text(rep, width=160).index("cannot reach a decision") < human_text(rep, width=160).index("p_Holm")
    for c in rep["contrasts"]:
        assert not c["equivalence_minus_placebo"] or c["equivalence_minus_placebo"]["differs"] is not True
    plan = plan_rows(_table(sy.design(6, 8), sy.EFFECTS, 1), roles=sy.ROLES)
    assert plan["cannot_decide"] and plan["cannot_decide"][0].startswith(
        "with 6 interactions the pilot's design cannot reach a decision at α 0.05 over 3 interventions")
    assert "collect at least 7 interactions" in plan["cannot_decide"][0]
    # a design that can decide says nothing of the kind
    assert estimate(_table(sy.design(16), sy.EFFECTS, 1), roles=sy.ROLES, n_boot=200, seed=0)["cannot_decide"] == []


def test_a_failed_placebo_is_said_first_and_no_null_intervention_lowers_the_rate():
    rep = estimate(_flat_rows(10, placebo_moves=True), n_boot=200, seed=0)
    assert rep["placebo_check"]["failed"] is True
    words = headline_sentences(rep)
    assert words[0].startswith("The placebo format_placebo failed as a control")
    m = next(w for w in words if w.startswith("marker_rewrite"))
    assert "lowers" not in m and "raises" not in m, m
    assert "the placebo's own effect, not marker_rewrite's" in m
    assert markdown(rep).index("failed as a control") < markdown(rep).index("## Effects")
    # compare says it first too, per input
    res = compare_inputs([CompareInput("a", _flat_rows(10, True)), CompareInput("b", _flat_rows(10, True))],
                         n_boot=200, seed=0)
    assert compare_text(res).startswith("The placebo format_placebo failed as a control for a")
    assert compare_markdown(res).split("\n")[2].startswith("> The placebo format_placebo failed as a control for a")
    # ... and each corrected difference is read beside the B − A of Δ, which does not lean on it
    said = [w for w in compare_words(res) if w.startswith("marker_rewrite")]
    assert said and all("The placebo failed as a control for a and b, so read beside it the B − A of Δ" in w
                        for w in said), said
    clean = compare_inputs([CompareInput("a", _flat_rows(10, False)), CompareInput("b", _flat_rows(10, False))],
                           n_boot=200, seed=0)
    assert not any("failed as a control" in w for w in compare_words(clean))


def test_equal_effects_are_a_tie_not_most_and_least():
    rows = _table(sy.design(16), sy.EFFECTS, 3)
    res = compare_inputs([CompareInput("python-example", rows, sy.ROLES), CompareInput("my-guard", rows, sy.ROLES)],
                         n_boot=200, seed=0)
    ans = condition_answer(res, "tool_alias")
    assert ans["tied"] is True
    assert "most sensitive" not in ans["text"] and "the least" not in ans["text"]
    assert "equally sensitive" in ans["text"] and "shared rank" in ans["text"]
    ranks = [e["rank"]["effect"] for e in res["leaderboard"]["tool_alias"]]
    assert ranks == [1, 1]



def test_the_studys_answer_states_the_compares_decision_at_its_alpha():
    """Issue 38 §3: the answer reads the decision record (decided at the compare's α, 0.01 here),
    never `p_adj < 0.05`: a Holm-adjusted p of 0.03 does not hold at 0.01, and every α the
    answer prints is the one its comparison ran at."""
    rng = np.random.default_rng(11)
    pop = sy.population(sy.design(24, 48), rng)
    tables = {"a": sy.rows(pop, sy.EFFECTS, rng), "b": sy.rows(pop, {**sy.EFFECTS, "tool_alias": 0.02}, rng)}
    res = compare_inputs([CompareInput(k, t, sy.ROLES) for k, t in tables.items()], n_boot=400, seed=0, alpha=0.01)
    row = next(r for r in res["pairs"][0]["conditions"] if r["condition"] == "tool_alias")
    record = row["equivalence_minus_placebo"]
    assert record["alpha"] == 0.01 and 0.01 <= record["p_adjusted"] < 0.05 and record["differs"] is False
    ans = condition_answer(res, "tool_alias")
    assert (ans["holds"], ans["p_adjusted"], ans["family"]) == (False, record["p_adjusted"], record["family"])
    assert "The difference is not shown after the stated correction (p_adj 0.0299, 3 interventions)." in ans["text"]
    reports = {k: estimate(t, roles=sy.ROLES, n_boot=400, seed=0, alpha=0.01) for k, t in tables.items()}
    whole = answer(res, reports)
    assert "below 0.01 within its stated family" in whole["rule"]
    assert all(g["text"].endswith("α 0.01).") for g in whole["guards"]), [g["text"] for g in whole["guards"]]
    # A hand-made row: the record says it does not differ at 0.01, whatever its p against 0.05.
    hand = {"difference_minus_placebo": 0.1, "p_holm_minus_placebo": 0.03,
            "equivalence_minus_placebo": {"differs": False, "p_adjusted": 0.03, "alpha": 0.01, "family": "3 interventions"}}
    d, _ = pair_decision(hand, 0.05)
    assert (d.differs, d.alpha, d.p_adjusted) == (False, 0.01, 0.03)
    # A row without a decided record falls back to its Holm p below the α it was run at.
    bare = {**hand, "equivalence_minus_placebo": None}
    assert pair_decision(bare, 0.01)[0].differs is False and pair_decision(bare, 0.05)[0].differs is True


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("differ", [True, False])
def test_compare_fail_on_differs_exits_3_or_0(tmp_path, differ):
    d = sy.design(24, 48)
    rng = np.random.default_rng(2)
    # No failed calls: past the 2% limit the gate cannot vouch and exits 4 (tests/test_failed_calls.py).
    pop = sy.population(d, rng, sy.Model(fail_rate=0.0))
    other = {**sy.EFFECTS, "tool_alias": 0.25} if differ else sy.EFFECTS
    a = _write(tmp_path / "a.jsonl", sy.rows(pop, sy.EFFECTS, rng))
    b = _write(tmp_path / "b.jsonl", sy.rows(pop, other, rng))
    res = run_cli("compare", "--table", str(a), "--table", str(b), "--placebo", "format_placebo",
                  "--bootstrap", "400", "--fail-on", "differs", "--json")
    out = json.loads(res.out)
    gate = out["gate"]
    if differ:
        assert res.code == 3, res.err
        assert [t["condition"] for t in gate["tripped"]] == ["tool_alias"]
        assert "--fail-on differs: 1 B − A of Δ − placebo differ after Holm" in res.err
    else:
        assert res.code == 0, res.err
        assert gate["tripped"] == [] and gate["exit"] == 0
    # the gate reads the verdicts the text prints
    rows = out["pairs"][0]["conditions"]
    assert {r["condition"] for r in rows if r["equivalence_minus_placebo"]
            and r["equivalence_minus_placebo"]["differs"]} == {t["condition"] for t in gate["tripped"]}


def test_compare_fail_on_rejects_an_unknown_value(tmp_path):
    a = _write(tmp_path / "a.jsonl", _flat_rows(4, False))
    res = run_cli("compare", "--table", str(a), "--table", str(a), "--fail-on", "anything")
    assert res.code == 2 and "Traceback" not in res.err
    assert "invalid choice: 'anything'" in res.err and "differs" in res.err
