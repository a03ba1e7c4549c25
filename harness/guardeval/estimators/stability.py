"""How stable a guard is across repetitions of one input (docs/estimators.md, Stability).

For base i and condition c with R = N(i,c) ≥ 2 counted repetitions of which k block:
disagreement k(R−k)/C(R,2) (the share of disagreeing pairs of repetitions) and unanimity
(k = 0 or k = R). Bases with fewer than two counted repetitions say nothing about stability and
are left out of both.
"""

from __future__ import annotations

import numpy as np

from guardeval.estimators.rounds import TRANSITIONS


def disagreement(s: np.ndarray, n: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """(per-base disagreement, bases with R ≥ 2) for condition c."""
    k, r = s[:, c], n[:, c]
    use = r >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        per_base = np.where(use, k * (r - k) / (r * (r - 1) / 2.0), 0.0)
    return per_base, use


def unanimous(s: np.ndarray, n: np.ndarray, c: int) -> np.ndarray:
    """Bases whose R ≥ 2 counted repetitions all agree."""
    return (n[:, c] >= 2) & ((s[:, c] == 0) | (s[:, c] == n[:, c]))


def unanimous_shift(s: np.ndarray, n: np.ndarray, c: int, ref: int) -> dict[str, int]:
    """Bases counted in both conditions: those unanimous in both, by (reference value ->
    condition value); `nonunanimous` the rest (including bases with one counted repetition)."""
    paired = (n[:, c] > 0) & (n[:, ref] > 0)
    both = unanimous(s, n, c) & unanimous(s, n, ref)
    code = (2 * (s[both, ref] > 0) + (s[both, c] > 0)).astype(np.int64)
    counts = np.bincount(code, minlength=4)
    out = {name: int(counts[i]) for i, name in enumerate(TRANSITIONS)}
    out["nonunanimous"] = int((paired & ~both).sum())
    return out
