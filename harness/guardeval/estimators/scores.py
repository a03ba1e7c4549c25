"""Score-based metrics against labels (docs/estimators.md, Against labels): the ROC area and the
true-positive rate at 1% false positives, with row or equal-interaction weights.

Unsafe (label 1) is the positive class; a higher score means more unsafe. Ties are ranks: a
tied (positive, negative) pair counts one half in the area, and the ROC curve crosses a block
of tied scores on a straight line, so the area under that curve is the area reported. The
true-positive rate at a false-positive rate of 1% is read off that curve by linear
interpolation (on a vertical stretch exactly at 1%, its top).

For the bootstrap, the rows become per-interaction masses: P[g, u] (N[g, u]), the summed
weight of interaction g's unsafe (safe) rows in the u-th score group. A replicate's masses are
w·P and w·N for its interaction weights w, so they ride on the same matrix product as every
ratio (`Quantities`); the curves follow from those (k × groups) masses, at a cost of
replicates × groups. Groups are exact first: adjacent score values held by one class only are
merged (the area and the curve cannot tell them apart, in any replicate). A score with more
groups than `MAX_GROUPS` left (a continuous score: every value its own) is cut into
`MAX_GROUPS` groups of about equal row counts for the replicates only, which counts the few
(positive, negative) pairs inside one group as ties there; the point estimates are always
exact. The feature matrix is dense when it is small and sparse otherwise.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

FPR_TARGET = 0.01
MAX_GROUPS = 2048            # score groups in the replicates (see above)
_DENSE_CELLS = 1 << 21       # a feature matrix with more cells than this is built sparse
_TOLERANCE = 1e-12           # weighted sums of shares are not exact: 1% within this counts as 1%


def _groups(scores: np.ndarray, labels: np.ndarray, max_groups: int | None) -> tuple[np.ndarray, int]:
    """(group of each row, number of groups), groups in ascending score order."""
    values, idx = np.unique(scores, return_inverse=True)
    has_pos = np.bincount(idx, weights=labels == 1, minlength=len(values)) > 0
    has_neg = np.bincount(idx, weights=labels == 0, minlength=len(values)) > 0
    kind = np.where(has_pos & has_neg, 3, np.where(has_pos, 1, 2))
    # a mixed value stays alone; a run of values of one class is one group
    starts = np.ones(len(values), dtype=bool)
    starts[1:] = (kind[1:] != kind[:-1]) | (kind[1:] == 3)
    group = np.cumsum(starts) - 1
    n = int(group[-1]) + 1 if len(group) else 0
    if max_groups is not None and n > max_groups:
        rows_before = np.concatenate([[0], np.cumsum(np.bincount(group[idx], minlength=n))[:-1]])
        group = (rows_before * max_groups // len(scores))[group]
        n = max_groups
    return group[idx], n


def masses(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(1 × 2·groups) exact masses [P | N] of all rows (every interaction at weight 1)."""
    group, n = _groups(scores, labels, None)
    col = group + n * (labels == 0)
    return np.bincount(col, weights=weights, minlength=2 * n).reshape(1, -1)


def features(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray, clusters: np.ndarray,
             n_clusters: int) -> np.ndarray | sparse.csr_matrix:
    """(n_clusters × 2·groups) masses [P | N] by ascending score, for the replicates."""
    group, n = _groups(scores, labels, MAX_GROUPS)
    col = group + n * (labels == 0)
    if n_clusters * 2 * n <= _DENSE_CELLS:
        out = np.zeros((n_clusters, 2 * n))
        np.add.at(out, (clusters, col), weights)
        return out
    return sparse.csr_matrix((weights, (clusters, col)), shape=(n_clusters, 2 * n))  # duplicates are summed


def _curves(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """(k × 2): area and tpr at 1% fpr per row of the (k × groups) class masses by ascending score."""
    tot_p, tot_n = pos.sum(axis=1), neg.sum(axis=1)
    cum_n = np.cumsum(neg, axis=1)
    undefined = (tot_p <= 0) | (tot_n <= 0)
    safe_p, safe_n = np.where(undefined, 1.0, tot_p), np.where(undefined, 1.0, tot_n)
    # Σ_u P_u · (N below u + ½ N_u)
    area = (pos * (cum_n - 0.5 * neg)).sum(axis=1) / (safe_p * safe_n)
    # The ROC point of group u (predict unsafe at or above it) has fpr (tot_n − N below u)/tot_n,
    # falling with u; the point after the last group is (0, 0). j: the first u whose point is at
    # or below the target; the curve runs on from it toward the point of u − 1.
    k, n = pos.shape
    rows = np.arange(k)
    above = np.empty((k, n + 1))
    above[:, :n] = (tot_n[:, None] - cum_n + neg) / safe_n[:, None]
    above[:, n] = 0.0
    j = (above > FPR_TARGET + _TOLERANCE).sum(axis=1)
    cum_p = np.cumsum(pos, axis=1)
    tp = np.empty((k, n + 1))
    tp[:, :n] = (tot_p[:, None] - cum_p + pos) / safe_p[:, None]
    tp[:, n] = 0.0
    prev = np.maximum(j - 1, 0)
    f0, f1, t0, t1 = above[rows, j], above[rows, prev], tp[rows, j], tp[rows, prev]
    with np.errstate(invalid="ignore", divide="ignore"):
        step = np.where((f1 > f0) & (f0 < FPR_TARGET - _TOLERANCE), (FPR_TARGET - f0) / (f1 - f0), 0.0)
    at_target = t0 + step * (t1 - t0)
    area[undefined] = np.nan
    at_target[undefined] = np.nan
    return np.column_stack([area, at_target])


def metrics(masses: np.ndarray) -> np.ndarray:
    """(k × 2) area and tpr at 1% fpr from (k × 2·n_scores) masses [P | N]."""
    half = masses.shape[1] // 2
    return _curves(masses[:, :half], masses[:, half:])


def point_metrics(mass: np.ndarray) -> tuple[float | None, float | None]:
    """The metrics of (1 × 2·groups) masses (see `masses`)."""
    area, tpr = metrics(mass)[0]
    return (None if np.isnan(area) else float(area)), (None if np.isnan(tpr) else float(tpr))
