"""The vectorised stratified cluster bootstrap, the p-value and the Holm adjustment."""

from __future__ import annotations

import numpy as np
import pytest

from guardeval.estimators import bootstrap as bs
from guardeval.estimators.verdicts.holm import holm

pytestmark = pytest.mark.fast


def test_rescaled_weights_keep_each_domain_size():
    cluster_domain = np.array([0, 0, 0, 1, 1, 2])
    w = bs.draw_counts(np.random.default_rng(0), cluster_domain, 3, 500)
    assert w.shape == (500, 6)
    # m − 1 draws, each weighing m / (m − 1): a domain's weights add up to its size m
    assert np.allclose(w[:, :3].sum(axis=1), 3) and set(np.unique(w[:, :3])) <= {0.0, 1.5, 3.0}
    assert np.allclose(w[:, 3:5].sum(axis=1), 2) and set(np.unique(w[:, 3:5])) <= {0.0, 2.0}
    assert np.all(w[:, 5] == 1)  # a one-cluster domain is always there, weight 1
    # uniform over a domain's clusters: each has mean weight 1
    assert w[:, :3].mean(axis=0) == pytest.approx([1, 1, 1], abs=0.15)


def test_rescaled_bootstrap_variance_of_a_mean_is_unbiased():
    # One domain of m clusters, one base each: the bootstrap variance of the mean should match
    # the usual unbiased s²/m, not the (m − 1)/m-shrunk plug-in of a plain m-of-m draw.
    rng = np.random.default_rng(3)
    m = 6
    x = rng.normal(size=m)
    ratios = bs.bootstrap_ratios(x[:, None], np.ones((m, 1)), np.zeros(m, dtype=int), 200_000, seed=5)[:, 0]
    assert ratios.var() == pytest.approx(x.var(ddof=1) / m, rel=0.03)


def test_chunks_are_deterministic_and_cover_n_boot(monkeypatch):
    cd = np.array([0, 0, 1, 1, 1])
    monkeypatch.setattr(bs, "CHUNK_CELLS", 12)  # force several chunks of 2 replicates
    chunks = list(bs.iter_counts(cd, 7, seed=9))
    assert [len(c) for c in chunks] == [2, 2, 2, 1]
    again = np.vstack(list(bs.iter_counts(cd, 7, seed=9)))
    assert np.array_equal(np.vstack(chunks), again)


def test_matrix_form_equals_explicit_resampling_of_bases():
    """W·num / W·den equals recomputing the base-equal mean over the resampled bases, each
    base counted as many times as its interaction was drawn."""
    rng = np.random.default_rng(1)
    base_cluster = np.array([0, 0, 1, 2, 2, 2, 3, 4])
    cluster_domain = np.array([0, 0, 0, 1, 1])
    diff = rng.normal(size=8)
    present = np.array([1, 1, 0, 1, 1, 1, 1, 0], dtype=bool)
    num_g = bs.cluster_sums(np.where(present, diff, 0.0), base_cluster, 5)
    den_g = bs.cluster_sums(present.astype(float), base_cluster, 5)
    fast = bs.bootstrap_ratios(num_g, den_g, cluster_domain, 50, seed=4)[:, 0]
    weights = np.vstack(list(bs.iter_counts(cluster_domain, 50, seed=4)))
    for r in range(50):
        # every present base counts with its interaction's weight
        num = sum(weights[r][base_cluster[i]] * diff[i] for i in range(8) if present[i])
        den = sum(weights[r][base_cluster[i]] for i in range(8) if present[i])
        expected = num / den if den > 0 else np.nan
        assert fast[r] == pytest.approx(expected, nan_ok=True)


def test_undefined_replicates_are_nan_and_ignored():
    # Only cluster 0 of a two-cluster domain has a paired base; one draw of two: half the
    # replicates draw none.
    ratios = bs.bootstrap_ratios(np.array([[1.0], [0.0]]), np.array([[1.0], [0.0]]), np.array([0, 0]), 4000, 2)
    share = np.isnan(ratios[:, 0]).mean()
    assert share == pytest.approx(0.5, abs=0.03)
    assert bs.percentile_ci(ratios[:, 0]) == [1.0, 1.0]


def test_percentile_interval_and_p_value_by_hand():
    s = np.arange(1, 101, dtype=float) - 10.5  # −9.5 .. 89.5; 10 values below 0
    assert bs.percentile_ci(s) == pytest.approx([np.quantile(s, 0.025), np.quantile(s, 0.975)])
    # p inverts that interval (issue 35): the interpolated quantile crosses 0 at position
    # 9 + 0.5 = 9.5 of 99, so p = 2·9.5/99, and the 95% interval excludes 0 exactly when p < 0.05
    assert bs.bootstrap_p(s) == pytest.approx(19 / 99)
    assert bs.bootstrap_p(np.zeros(9)) == 1.0  # no evidence either way
    # every replicate on one side: beyond what 9 replicates resolve; the interval [0.3, 0.3]
    # excludes 0, so p stays the inversion's (0) rather than a floor above α that would contradict it
    assert bs.bootstrap_p(np.full(9, 0.3)) == 0.0
    for shift in np.linspace(-20, 20, 81):       # agreement by construction, at every position
        t = s - shift
        lo, hi = bs.percentile_ci(t)
        assert (bs.bootstrap_p(t) < 0.05) == (lo > 0 or hi < 0), shift
    assert bs.bootstrap_p(np.array([np.nan])) is None and bs.percentile_ci(np.array([np.nan])) is None


def test_holm_by_hand():
    # sorted 0.01·4 = 0.04, 0.03·3 = 0.09, 0.04·2 = 0.08 -> 0.09 (monotone), 0.20·1 = 0.20
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    # an undefined p still counts in m: 0.01·3, 0.02·2
    out = holm([0.01, None, 0.02])
    assert out[1] is None and out[0] == pytest.approx(0.03) and out[2] == pytest.approx(0.04)
    assert holm([]) == []
