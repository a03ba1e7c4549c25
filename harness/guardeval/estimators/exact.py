"""Exact tests (docs/estimators.md): the per-interaction sign test and Clopper–Pearson intervals,
both from scipy.stats.

The sign of an interaction's mean paired change is decided in integers, never by comparing a
float sum with 0: with L the least common multiple of the call counts N involved, every base's
p(i,c) − p(i,r) = S_c/N_c − S_r/N_r is an integer over L, so their sum over the interaction is
exact (a sum of thirds that should cancel does cancel).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import binomtest

from guardeval.estimators.types import SignTest

LEVEL = 0.95


def cluster_signs(s: np.ndarray, n: np.ndarray, c: int, ref: int, mask: np.ndarray,
                  base_cluster: np.ndarray, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """(sign, present) per interaction of Σ_{i ∈ g, mask} [S(i,c)/N(i,c) − S(i,ref)/N(i,ref)]
    (a sign of the sum is the sign of the mean). `mask` must select bases with N > 0 on both sides."""
    sc, nc = s[mask, c].astype(np.int64), n[mask, c].astype(np.int64)
    sr, nr = s[mask, ref].astype(np.int64), n[mask, ref].astype(np.int64)
    clusters = base_cluster[mask]
    present = np.bincount(clusters, minlength=n_clusters) > 0
    if not len(clusters):
        return np.zeros(n_clusters, dtype=np.int64), present
    lcm = math.lcm(*(int(v) for v in np.unique(np.concatenate([nc, nr]))))
    # |numerator| <= L per base: int64 holds the sums unless L · bases is astronomically large.
    exact_int64 = lcm * len(clusters) < 2 ** 62
    dtype: Any = np.int64 if exact_int64 else object
    numer = (sc.astype(dtype) * (lcm // nc).astype(dtype)) - (sr.astype(dtype) * (lcm // nr).astype(dtype))
    sums = np.zeros(n_clusters, dtype=dtype)
    np.add.at(sums, clusters, numer)
    return np.sign(sums).astype(np.int64), present


def sign_test(signs: np.ndarray, present: np.ndarray) -> SignTest:
    """{negative, positive, tie, p}: p is the exact two-sided binomial test (p = 1/2) on the
    interactions that are not tied; with none untied, p = 1 (no evidence either way)."""
    pos = int(((signs > 0) & present).sum())
    neg = int(((signs < 0) & present).sum())
    tie = int(((signs == 0) & present).sum())
    p = float(binomtest(pos, pos + neg, 0.5, alternative="two-sided").pvalue) if pos + neg else 1.0
    return {"negative": neg, "positive": pos, "tie": tie, "p": p}


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> list[float] | None:
    """The exact (Clopper–Pearson) interval for k successes in n independent trials."""
    if n <= 0:
        return None
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return [float(ci.low), float(ci.high)]
