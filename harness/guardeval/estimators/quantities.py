"""Named estimates bootstrapped together on one set of replicates (docs/estimators.md, Uncertainty).

Most estimates are ratios of sums, Σ num / Σ den: base-level columns (a base-equal mean over
the bases a mask selects) or cluster-level sums (row-level rates). A few are other functions
of per-interaction sums (the ROC metrics of score masses): each declares its (interactions ×
m) feature matrix and a function of the replicate's weighted sums. Linear combinations of
estimates (a slope, a difference of differences) are computed replicate by replicate. Every
quantity sees the same resampled interactions, drawn once per chunk of replicates, and every
dense column rides on one matrix product per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from guardeval.estimators import signflip as sf
from guardeval.estimators.bootstrap import (
    CHUNK_CELLS,
    LEVEL,
    Estimate,
    Inference,
    cluster_df,
    cluster_sums,
    effective_df,
    iter_counts,
    summarise,
)

Key = tuple[Hashable, ...]
Bounds = tuple[float, float]
Estimates = Mapping[Key, Estimate]   # `Quantities.run`'s output, as its readers take it
DIFFERENCE: Bounds = (-1.0, 1.0)   # a base's paired difference of two rates (the default: valid for a rate too)
RATE: Bounds = (0.0, 1.0)
BOOTSTRAP = "bootstrap"
DENSE_FEATURE_CELLS = 1 << 23   # 64 MiB of float64 feature columns in the dense product
# fn(weighted feature sums (k × m)) -> (k × len(keys)) replicate values; nan where undefined.
StatisticFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class _Statistic:
    keys: list[Key]
    points: list[float | None]
    features: np.ndarray | sparse.csr_matrix   # (n_clusters × m)
    fn: StatisticFn


class Quantities:
    """Collects quantities, then `run` bootstraps them all at once."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.bounds: dict[Key, Bounds] = {}
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []
        self._cluster_keys: list[Key] = []
        self._cluster_num: list[np.ndarray] = []
        self._cluster_den: list[np.ndarray] = []
        self._stats: list[_Statistic] = []
        self._combos: list[tuple[Key, dict[Key, float]]] = []

    def add(self, key: Key, values: np.ndarray, mask: np.ndarray, bounds: Bounds = DIFFERENCE) -> None:
        """Base-equal mean of `values` over the bases in `mask`; `bounds`: the range a base's
        value can take (the no-variation bound of a small design needs it)."""
        self.keys.append(key)
        self.bounds[key] = bounds
        self.num.append(np.where(mask, values, 0.0))
        self.den.append(mask.astype(np.float64))

    def add_cluster_sums(self, key: Key, num_g: np.ndarray, den_g: np.ndarray, bounds: Bounds = DIFFERENCE) -> None:
        """Σ_g num_g / Σ_g den_g from per-interaction sums (e.g. a row-level rate)."""
        self._cluster_keys.append(key)
        self.bounds[key] = bounds
        self._cluster_num.append(np.asarray(num_g, dtype=np.float64))
        self._cluster_den.append(np.asarray(den_g, dtype=np.float64))

    def add_statistic(self, keys: Sequence[Key], points: Sequence[float | None],
                      features: np.ndarray | sparse.csr_matrix, fn: StatisticFn) -> None:
        """Estimates that are functions of per-interaction sums: their point values, the
        (n_clusters × m) sums, and fn(w · features) -> (k × len(keys)) for replicate weights w."""
        self._stats.append(_Statistic(list(keys), list(points), features, fn))

    def add_combination(self, key: Key, terms: Mapping[Key, float]) -> None:
        """Σ coef · estimate over `terms` (keys added before `run`), replicate by replicate."""
        self._combos.append((key, dict(terms)))

    def run(self, base_cluster: np.ndarray, cluster_domain: np.ndarray, n_boot: int,
            seed: int, margin: float | None = None, level: float = LEVEL) -> dict[Key, Estimate]:
        """Every estimate with its intervals at `level` (1 − α: 95% by default) and 2·level − 1
        (the equivalence tests'), and its bootstrap p (t-calibrated for the interactions it
        uses: bootstrap.calibrated_level), standard error, degrees of freedom and, with
        `margin`, the equivalence (TOST) p against ±margin."""
        n_clusters = len(cluster_domain)
        ratio_keys = self.keys + self._cluster_keys
        stat_keys = [k for s in self._stats for k in s.keys]
        if not ratio_keys and not stat_keys:
            return {}
        num_b = np.column_stack(self.num) if self.num else np.zeros((len(base_cluster), 0))
        den_b = np.column_stack(self.den) if self.den else np.zeros((len(base_cluster), 0))
        num_g = np.hstack([cluster_sums(num_b, base_cluster, n_clusters),
                           np.column_stack(self._cluster_num) if self._cluster_num else np.zeros((n_clusters, 0))])
        den_g = np.hstack([cluster_sums(den_b, base_cluster, n_clusters),
                           np.column_stack(self._cluster_den) if self._cluster_den else np.zeros((n_clusters, 0))])
        q = len(ratio_keys)
        # Statistics' feature columns ride on the one dense product while they are few; past
        # a budget of cells (many distinct scores), they are multiplied as sparse matrices.
        budget = DENSE_FEATURE_CELLS
        for st in self._stats:
            if not sparse.issparse(st.features):
                budget -= st.features.size
                if budget < 0:
                    st.features = sparse.csr_matrix(st.features)
        dense = [st for st in self._stats if not sparse.issparse(st.features)]
        both = np.hstack([num_g, den_g, *(st.features for st in dense)])
        reps = np.empty((n_boot, q + len(stat_keys)))
        row = 0
        for w in iter_counts(cluster_domain, n_boot, seed):
            k = len(w)
            prod = w @ both
            with np.errstate(invalid="ignore", divide="ignore"):
                reps[row:row + k, :q] = np.where(prod[:, q:2 * q] > 0, prod[:, :q] / prod[:, q:2 * q], np.nan)
            at, col = 2 * q, q
            for st in self._stats:
                if sparse.issparse(st.features):
                    sums = np.asarray(w @ st.features)
                else:
                    sums = prod[:, at:at + st.features.shape[1]]
                    at += st.features.shape[1]
                reps[row:row + k, col:col + len(st.keys)] = st.fn(sums)
                col += len(st.keys)
            row += k
        # A base-level point value is summed over the bases, column by column (numpy's pairwise
        # sum), so it does not depend on how bases group into interactions.
        totals_num = np.array([num_b[:, j].sum() for j in range(len(self.keys))]
                              + list(num_g[:, len(self.keys):].sum(axis=0)))
        totals_den = np.array([den_b[:, j].sum() for j in range(len(self.keys))]
                              + list(den_g[:, len(self.keys):].sum(axis=0)))
        points: dict[Key, float | None] = {}
        columns: dict[Key, np.ndarray] = {}
        # The interactions each estimate draws on: its degrees of freedom (bootstrap.cluster_df).
        used_by: dict[Key, np.ndarray] = {}
        everything = np.ones(n_clusters, dtype=bool)
        for j, key in enumerate(ratio_keys):
            points[key] = float(totals_num[j] / totals_den[j]) if totals_den[j] > 0 else None
            columns[key] = reps[:, j]
            used_by[key] = den_g[:, j] > 0
        col = q
        for st in self._stats:
            for key, point in zip(st.keys, st.points):
                points[key] = point
                columns[key] = reps[:, col]
                used_by[key] = everything
                col += 1
        for key, terms in self._combos:
            parts = [points[k] for k in terms]
            points[key] = (None if any(v is None for v in parts)
                           else float(sum(coef * float(v or 0.0) for coef, v in zip(terms.values(), parts))))
            columns[key] = sum((coef * columns[k] for k, coef in terms.items()), np.zeros(n_boot))
            used_by[key] = np.logical_or.reduce([used_by[k] for k in terms])
        # Small or unbalanced designs: a quantity with few effective degrees of freedom (its
        # interactions weighted by the bases it uses there: bootstrap.effective_df) is decided by
        # sign flips over its interactions (signflip.py), its interval the test's inversion; the
        # bootstrap otherwise (measured: BENCHMARKS.md §6, issues 35 and 50).
        ratio_cols = {key: j for j, key in enumerate(ratio_keys)}
        weights = {key: den_g[:, j] for key, j in ratio_cols.items()}
        small = {key for key in ratio_keys
                 if points[key] is not None and effective_df(weights[key], cluster_domain) < sf.SIGNFLIP_BELOW_DF}
        for key, terms in self._combos:
            if points[key] is not None and all(k in ratio_cols for k in terms) \
                    and effective_df(np.max([weights[k] for k in terms], axis=0), cluster_domain) < sf.SIGNFLIP_BELOW_DF:
                small.add(key)
        # half the per-base lattice step of each base-level quantity (signflip.half_step); 0 for row-level sums
        ties = {key: sf.half_step(num_b[den_b[:, j] > 0, j]) for j, key in enumerate(self.keys)}
        flips = _signflip(small, ratio_cols, dict(self._combos), points, used_by, num_g, den_g, self.bounds,
                          n_boot, seed, margin, level, ties)
        out: dict[Key, Estimate] = {}
        for key, point in points.items():
            samples = columns[key]
            defined = point is not None
            summary: Inference
            if key in flips:
                summary = flips[key]
            elif defined:
                used = used_by[key]
                summary = {**summarise(samples, margin, cluster_df(used, cluster_domain), point, level),
                           "p_min": 0.0, "method": BOOTSTRAP, "ci_note": None, "n_interactions": int(used.sum())}
                if sf.is_flat(summary["ci"]):
                    sf.no_variation(summary, float(point or 0.0), int(used.sum()), 1 - level, margin,
                                    _bounds(key, self.bounds, dict(self._combos)))
            else:
                summary = {"ci": None, "ci90": None, "p": None, "se": None, "p_tost": None, "df": None, "p_min": None,
                           "method": None, "ci_note": None, "n_interactions": None}
            out[key] = {
                "estimate": point,
                **summary,
                "n_undefined_replicates": (None if not defined else 0 if key in flips
                                           else int(np.isnan(samples).sum())),
            }
        for j, key in enumerate(self.keys):
            used = den_b[:, j] > 0
            out[key]["n_bases"] = int(used.sum())
            out[key]["n_clusters"] = int(len(np.unique(base_cluster[used])))
        for j, key in enumerate(self._cluster_keys):
            out[key]["n_clusters"] = int((den_g[:, len(self.keys) + j] > 0).sum())
        return out


def _bounds(key: Key, bounds: Mapping[Key, Bounds], combos: Mapping[Key, Mapping[Key, float]]) -> Bounds:
    """A quantity's range: its own, or for a combination Σ coef·term the range of that sum."""
    if key not in combos:
        return bounds.get(key, DIFFERENCE)
    lo = hi = 0.0
    for k, coef in combos[key].items():
        a, b = _bounds(k, bounds, combos)
        lo += coef * (a if coef > 0 else b)
        hi += coef * (b if coef > 0 else a)
    return lo, hi


def _signflip(small: set[Key], cols: Mapping[Key, int], combos: Mapping[Key, Mapping[Key, float]],
              points: Mapping[Key, float | None], used_by: Mapping[Key, np.ndarray], num_g: np.ndarray,
              den_g: np.ndarray, bounds: Mapping[Key, Bounds], n_boot: int, seed: int, margin: float | None,
              level: float, ties: Mapping[Key, float]) -> dict[Key, Inference]:
    """Sign-flip summaries of the small-design quantities, one set of flips per set of
    interactions used. A combination's subset value is its terms' subset means combined (exact
    when the terms share their bases, a first-order version otherwise)."""
    groups: dict[bytes, list[Key]] = {}
    for key in small:
        groups.setdefault(np.packbits(used_by[key]).tobytes() + bytes([len(used_by[key]) % 8]), []).append(key)
    out: dict[Key, Inference] = {}
    for members in groups.values():
        used = np.nonzero(used_by[members[0]])[0]
        g = len(used)
        s, n_total, _ = sf.subsets(g, n_boot, seed)
        # bounded memory: about CHUNK_CELLS subset values at a time
        per = max(1, CHUNK_CELLS // max(1, len(s)))
        for start in range(0, len(members), per):
            keys = members[start:start + per]
            need = sorted({cols[k] for k in keys if k in cols}
                          | {cols[t] for k in keys if k in combos for t in combos[k]})
            at = {j: i for i, j in enumerate(need)}
            nu, de = num_g[used][:, need], den_g[used][:, need]
            vals = sf.subset_means(s, nu, de)
            # a subset value's lattice step is the per-base one over its bases (0 where it has none: no value)
            bases = s @ de
            per_base = np.divide(1.0, bases, out=np.zeros_like(bases), where=bases > 0)
            for key in keys:
                point = float(points[key])  # type: ignore[arg-type]
                if key in combos:
                    v = sum((coef * vals[:, at[cols[t]]] for t, coef in combos[key].items()), np.zeros(len(s)))
                    e = sum((coef * (nu[:, at[cols[t]]] - float(points[t] or 0.0) * de[:, at[cols[t]]])
                             / max(float(de[:, at[cols[t]]].sum()), 1e-300) for t, coef in combos[key].items()),
                            np.zeros(g))
                    se = float(np.sqrt(g / (g - 1) * float((e ** 2).sum()))) if g > 1 else 0.0
                else:
                    j = at[cols[key]]
                    v = vals[:, j]
                    se = sf.ratio_se(nu[:, j], de[:, j], point)
                tie = (sum((abs(coef) * ties.get(t, 0.0) * per_base[:, at[cols[t]]] for t, coef in combos[key].items()),
                           np.zeros(len(s))) if key in combos else ties.get(key, 0.0) * per_base[:, at[cols[key]]])
                out[key] = sf.summarise(v, n_total, point, g, se, level, margin, _bounds(key, bounds, combos), tie)
    return out
