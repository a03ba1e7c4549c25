"""Orders and their reversals (docs/estimators.md, compare): conditions ordered by effect within
a pair of runs, guards ordered by block rate under the baseline and under each condition
(seed 004 §VI d: do rankings reverse under representation changes?), and Kendall's τ_b between
two orders, vectorised over bootstrap replicates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

# Replicate ratios carry float residue: values closer than this tie, as they do exactly in
# the point estimate.
TIE = 1e-12


def ranking(values: Mapping[str, float | None]) -> list[str]:
    """Names by value, largest first (undefined last, ties by name)."""
    return sorted(values, key=lambda c: (values[c] is None, -(values[c] or 0.0), c))


def reversed_pairs(a: Mapping[str, float | None], b: Mapping[str, float | None],
                   names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Pairs (x, y), x before y in `names` (default: sorted), whose strict order is opposite
    under a and under b."""
    out = []
    for x, y in combinations(list(names) if names is not None else sorted(a), 2):
        ax, ay, bx, by = a[x], a[y], b[x], b[y]
        if ax is None or ay is None or bx is None or by is None:
            continue
        if (ax - ay) * (bx - by) < 0:
            out.append((x, y))
    return out


def _signs(x: np.ndarray) -> np.ndarray:
    """(k × n) values -> (k × n(n−1)/2) signs of x_i − x_j for i < j (|d| < TIE counts as 0)."""
    i, j = np.triu_indices(x.shape[1], 1)
    d = x[:, i] - x[:, j]
    return np.where(np.abs(d) < TIE, 0.0, np.sign(d))


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ_b between the rows of x and y (k × n each): Σ sign·sign over the pairs,
    divided by √(untied pairs in x · untied pairs in y). nan where a row is all ties or has an
    undefined value."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    sx, sy = _signs(x), _signs(y)
    s = (sx * sy).sum(axis=1)
    denom = np.sqrt((sx != 0).sum(axis=1) * (sy != 0).sum(axis=1))
    bad = ~(np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1)) | (denom == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bad, np.nan, s / np.where(denom == 0, 1.0, denom))
