"""`compare` on two decision tables of one design: a reversal of the conditions' ranking counts
only when it is established as a reversal — the order significant one way in A and the other way
in B (intersection–union), surviving Holm over every pair of conditions (issue 26). A
significant difference of differences alone is not a reversal."""

from __future__ import annotations

import pytest

from guardeval.estimators.compare.compare import compare

pytestmark = pytest.mark.fast


def table(blocks: dict[str, set[int]], conditions: tuple[str, ...] = ("x", "y"), n: int = 20) -> list[dict]:
    """n single-base interactions, one call each; `blocks[c]`: the bases condition c blocks
    (the baseline, original, blocks none)."""
    return [{"base_id": f"b{i:02d}", "interaction_id": f"g{i:02d}", "domain": "D", "condition": c,
             "repetition": 0, "decision": int(i in blocks.get(c, set())), "status": "ok"}
            for i in range(n) for c in ("original", *conditions)]


def test_a_strong_reversal_changes_the_ranking():
    a = table({"x": set(range(10))})            # Δx 0.5, Δy 0
    b = table({"y": set(range(10))})            # Δx 0, Δy 0.5
    out = compare(a, b, n_boot=2000, seed=1)
    assert out["ranking_a"] == ["x", "y"] and out["ranking_b"] == ["y", "x"]
    [pair] = out["reversed_pairs"]
    # per base: ((x − y)_B − (x − y)_A) = −2 for bases 0..9, 0 otherwise -> −1
    assert pair["conditions"] == ["x", "y"] and pair["difference_of_differences"] == pytest.approx(-1.0)
    assert pair["p_reversal"] == max(pair["p_order_a"], pair["p_order_b"]) < 0.01
    assert pair["p_holm"] == pair["p_reversal"] and out["ranking_family"]["size"] == 1
    assert out["ranking_changed"] is True


def test_a_significant_difference_of_differences_is_not_a_reversal():
    # A: Δx 0.50, Δy 0.45 (their order is within the noise); B: Δx 0, Δy 0.50. The difference of
    # differences, −0.55, is large (significant at α; its sign flips count ties at the data's one-call
    # lattice, issue 50, so p 0.021 rather than below 0.01); the order in A is not established, so
    # nothing reversed.
    a = table({"x": set(range(10)), "y": set(range(9))})
    b = table({"y": set(range(10))})
    out = compare(a, b, n_boot=2000, seed=1)
    [pair] = out["reversed_pairs"]
    assert pair["difference_of_differences"] == pytest.approx(-0.55) and pair["p"] < 0.05
    assert pair["p_order_a"] > 0.2 and pair["p_order_b"] < 0.01
    assert pair["p_reversal"] == pair["p_order_a"]
    assert out["ranking_changed"] is False


def test_a_weak_reversal_does_not():
    a = table({"x": {0, 1}, "y": {2}})          # Δx 0.10 > Δy 0.05
    b = table({"x": {3}, "y": {4, 5}})          # Δx 0.05 < Δy 0.10
    out = compare(a, b, n_boot=2000, seed=1)
    [pair] = out["reversed_pairs"]
    # per base: bases 0, 1, 4, 5 −1; bases 2, 3 +1 -> −2/20
    assert pair["difference_of_differences"] == pytest.approx(-0.1)
    assert pair["p"] > 0.2 and pair["p_reversal"] > 0.2
    assert out["ranking_changed"] is False


def test_no_reversal_no_pairs():
    a = table({"x": set(range(10))})
    out = compare(a, a, n_boot=200, seed=1)
    assert out["reversed_pairs"] == [] and out["ranking_changed"] is False


def test_holm_runs_over_every_pair_of_conditions():
    # x > y > z in A, z > y > x in B: three reversed pairs in a family of three, fixed in advance
    a = table({"x": set(range(12)), "y": set(range(6))}, ("x", "y", "z"))
    b = table({"z": set(range(12)), "y": set(range(6))}, ("x", "y", "z"))
    out = compare(a, b, n_boot=2000, seed=3)
    assert out["ranking_a"] == ["x", "y", "z"] and out["ranking_b"] == ["z", "y", "x"]
    pairs = {tuple(p["conditions"]): p for p in out["reversed_pairs"]}
    assert set(pairs) == {("x", "y"), ("x", "z"), ("y", "z")} and out["ranking_family"]["size"] == 3
    ps = sorted(p["p_reversal"] for p in pairs.values())
    adj = sorted(p["p_holm"] for p in pairs.values())
    assert adj[0] == pytest.approx(min(1.0, 3 * ps[0]))
    assert adj[1] == pytest.approx(max(adj[0], min(1.0, 2 * ps[1])))
    assert adj[2] == pytest.approx(max(adj[1], ps[2]))
    # A pair that did not reverse stays in the family (p 1), so the family does not shrink with the data.
    c = table({"x": set(range(12)), "y": set(range(6))}, ("x", "y", "z"))
    d = table({"y": set(range(12)), "x": set(range(6))}, ("x", "y", "z"))
    out = compare(c, d, n_boot=2000, seed=3)
    assert [p["conditions"] for p in out["reversed_pairs"]] == [["x", "y"]] and out["ranking_family"]["size"] == 3
    only = out["reversed_pairs"][0]
    assert only["p_holm"] == pytest.approx(min(1.0, 3 * only["p_reversal"]))
