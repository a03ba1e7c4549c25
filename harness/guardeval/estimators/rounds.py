"""Same-round views (docs/estimators.md): one cell per (base, repetition round) holding each
condition's counted value d(i,c,r), for estimates that pair calls of one round: the effect per
round, transition counts, the same-round flip rate and the worst case over conditions.

Rounds are the distinct repetition numbers, in ascending order; only (base, round) cells with a
counted call exist, so memory follows the table (cells × conditions), not the largest
repetition number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guardeval.estimators.effects import Design, row_values

TRANSITIONS = ("0->0", "0->1", "1->0", "1->1")


@dataclass
class RoundCells:
    rounds: list[int]        # the repetition number of each round index
    cell_base: np.ndarray    # (n_cells,) base index
    cell_round: np.ndarray   # (n_cells,) round index
    value: np.ndarray        # (n_cells × n_conditions): 1.0 / 0.0, nan where not counted

    def has(self, *conds: int) -> np.ndarray:
        out = np.ones(len(self.cell_base), dtype=bool)
        for c in conds:
            out &= ~np.isnan(self.value[:, c])
        return out


def round_cells(d: Design, rule: str) -> RoundCells:
    v, counted = row_values(d, rule)
    rounds, rep_idx = np.unique(d.row_rep, return_inverse=True)
    n_rounds = max(1, len(rounds))
    key = d.row_base[counted] * n_rounds + rep_idx[counted]
    cells, inverse = np.unique(key, return_inverse=True)
    value = np.full((len(cells), len(d.conditions)), np.nan)
    value[inverse, d.row_cond[counted]] = v[counted]   # one call per (base, condition, round)
    return RoundCells([int(r) for r in rounds], cells // n_rounds, cells % n_rounds, value)


def _mean(num: np.ndarray, den: np.ndarray) -> list[float | None]:
    return [float(a / b) if b > 0 else None for a, b in zip(num, den)]


def by_round(rc: RoundCells, c: int, ref: int, also: int | None = None) -> list[float | None]:
    """Per round: mean over bases counted in that round for c and ref (and `also`, when given)
    of d(i,c,r) − d(i,ref,r); None for a round with no such base."""
    both = rc.has(c, ref) if also is None else rc.has(c, ref, also)
    diff = rc.value[both, c] - rc.value[both, ref]
    n = len(rc.rounds)
    return _mean(np.bincount(rc.cell_round[both], weights=diff, minlength=n),
                 np.bincount(rc.cell_round[both], minlength=n).astype(np.float64))


def transitions(rc: RoundCells, c: int, ref: int) -> dict[str, int]:
    """Counts of (d(i,ref,r), d(i,c,r)) over (base, round) cells counted for both."""
    both = rc.has(c, ref)
    code = (2 * rc.value[both, ref] + rc.value[both, c]).astype(np.int64)
    counts = np.bincount(code, minlength=4)
    return {name: int(counts[i]) for i, name in enumerate(TRANSITIONS)}


def per_base_mean(rc: RoundCells, cell_values: np.ndarray, cells: np.ndarray,
                  n_bases: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean over each base's selected cells, base has at least one selected cell)."""
    num = np.bincount(rc.cell_base[cells], weights=cell_values, minlength=n_bases)
    den = np.bincount(rc.cell_base[cells], minlength=n_bases)
    has = den > 0
    return np.where(has, num / np.maximum(den, 1), 0.0), has


def flip_rate(rc: RoundCells, c: int, ref: int, n_bases: int) -> tuple[float | None, int]:
    """Per base, the share of shared rounds with d(i,c,r) != d(i,ref,r); averaged over bases that
    share a round. A one-draw disagreement rate, not an effect."""
    both = rc.has(c, ref)
    per_base, has = per_base_mean(rc, np.abs(rc.value[both, c] - rc.value[both, ref]), both, n_bases)
    return (float(per_base[has].mean()) if has.any() else None), int(has.sum())


def any_condition(rc: RoundCells, ref: int, n_bases: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per base, over its rounds with the reference counted: the share of rounds it was allowed
    (blocked) under the reference, and under at least one condition counted in that round."""
    cells = rc.has(ref)
    vals = rc.value[cells]
    ref_v = vals[:, ref]
    out = {
        "allowed_ref": per_base_mean(rc, 1.0 - ref_v, cells, n_bases),
        "allowed_any": per_base_mean(rc, (np.nanmin(vals, axis=1) == 0).astype(np.float64), cells, n_bases),
        "blocked_ref": per_base_mean(rc, ref_v, cells, n_bases),
        "blocked_any": per_base_mean(rc, (np.nanmax(vals, axis=1) == 1).astype(np.float64), cells, n_bases),
    }
    return out
