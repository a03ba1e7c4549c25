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
from typing import Any

import numpy as np
from scipy import sparse

from guardeval.estimators.bootstrap import LEVEL, cluster_df, cluster_sums, iter_counts, summarise

Key = tuple[Hashable, ...]
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
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []
        self._cluster_keys: list[Key] = []
        self._cluster_num: list[np.ndarray] = []
        self._cluster_den: list[np.ndarray] = []
        self._stats: list[_Statistic] = []
        self._combos: list[tuple[Key, dict[Key, float]]] = []

    def add(self, key: Key, values: np.ndarray, mask: np.ndarray) -> None:
        """Base-equal mean of `values` over the bases in `mask`."""
        self.keys.append(key)
        self.num.append(np.where(mask, values, 0.0))
        self.den.append(mask.astype(np.float64))

    def add_cluster_sums(self, key: Key, num_g: np.ndarray, den_g: np.ndarray) -> None:
        """Σ_g num_g / Σ_g den_g from per-interaction sums (e.g. a row-level rate)."""
        self._cluster_keys.append(key)
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
            seed: int, margin: float | None = None, level: float = LEVEL) -> dict[Key, dict[str, Any]]:
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
        out: dict[Key, dict[str, Any]] = {}
        for key, point in points.items():
            samples = columns[key]
            defined = point is not None
            summary = (summarise(samples, margin, cluster_df(used_by[key], cluster_domain), point, level) if defined
                       else dict.fromkeys(("ci", "ci90", "p", "se", "p_tost", "df")))
            out[key] = {
                "estimate": point,
                **summary,
                "n_undefined_replicates": int(np.isnan(samples).sum()) if defined else None,
            }
        for j, key in enumerate(self.keys):
            used = den_b[:, j] > 0
            out[key]["n_bases"] = int(used.sum())
            out[key]["n_clusters"] = int(len(np.unique(base_cluster[used])))
        for j, key in enumerate(self._cluster_keys):
            out[key]["n_clusters"] = int((den_g[:, len(self.keys) + j] > 0).sum())
        return out
