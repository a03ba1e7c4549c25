"""Stratified interaction-cluster bootstrap, vectorised (docs/design.md §10).

Every estimate here is a ratio of base-level sums, Σ_i num_i / Σ_i den_i (a base-equal mean
over the bases a contrast uses). A replicate resamples interactions with replacement inside
each domain (see `draw_counts` for the rescaling); interaction g with weight w_g contributes
w_g times its sums. So a replicate is W·num_g / W·den_g with W a (replicates × clusters)
weight matrix: one matrix product per chunk of replicates, no Python loop over replicates.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import NotRequired, TypedDict

import numpy as np

# Replicates per chunk are chosen so the count matrix stays near this many cells (32 MiB as
# float64): bounded memory at 20,000 clusters, a single chunk for small cohorts.
CHUNK_CELLS = 1 << 22
LEVEL = 0.95


class Summary(TypedDict):
    """One quantity's replicates summarised (`summarise`): intervals [lo, hi], None where undefined."""

    ci: list[float] | None
    ci90: list[float] | None
    p: float | None
    se: float | None
    p_tost: float | None
    df: float | None


class Inference(Summary):
    """A summary with the procedure behind it (bootstrap or sign-flip: `Quantities.run`)."""

    p_min: float | None
    method: str | None
    ci_note: str | None
    n_flips: NotRequired[int]     # sign-flip only: how many flips
    n_interactions: int | None


class Estimate(Inference):
    """One named estimate of `Quantities.run`: the point, its inference, and what it used."""

    estimate: float | None
    n_undefined_replicates: int | None
    n_bases: NotRequired[int]       # a base-level quantity's bases
    n_clusters: NotRequired[int]


def cluster_sums(values: np.ndarray, base_cluster: np.ndarray, n_clusters: int) -> np.ndarray:
    """(n_bases × Q) base values -> (n_clusters × Q) per-cluster sums."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    out = np.zeros((n_clusters, values.shape[1]))
    np.add.at(out, base_cluster, values)
    return out


def draw_counts(rng: np.random.Generator, cluster_domain: np.ndarray, n_domains: int,
                k: int) -> np.ndarray:
    """(k × n_clusters) weights: per replicate and domain, m_d − 1 draws with replacement among
    the domain's m_d clusters, each count scaled by m_d / (m_d − 1) (Rao & Wu's rescaled
    bootstrap). Drawing m_d of m_d would shrink the variance by (m_d − 1) / m_d, which makes
    intervals too narrow when a domain has few interactions; the rescaled draw keeps every
    cluster's expected weight at 1 and the variance unbiased. A domain with a single cluster
    contributes it with weight 1 in every replicate (it carries no between-cluster variance)."""
    g = len(cluster_domain)
    w = np.zeros((k, g))
    for dom in range(n_domains):
        members = np.nonzero(cluster_domain == dom)[0]
        m = len(members)
        if m == 0:
            continue
        if m == 1:
            w[:, members] = 1.0
            continue
        n = m - 1
        picks = rng.integers(0, m, size=(k, n))
        picks += (np.arange(k) * m)[:, None]
        w[:, members] = np.bincount(picks.ravel(), minlength=k * m).reshape(k, m) * (m / n)
    return w


def iter_counts(cluster_domain: np.ndarray, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Count matrices for replicates 1..n_boot in chunks; deterministic for a seed and a
    cluster structure, so two runs of one schedule see the same resampled clusters."""
    rng = np.random.default_rng(seed)
    n_domains = int(cluster_domain.max()) + 1 if len(cluster_domain) else 0
    per = max(1, CHUNK_CELLS // max(1, len(cluster_domain)))
    done = 0
    while done < n_boot:
        k = min(per, n_boot - done)
        yield draw_counts(rng, cluster_domain, n_domains, k)
        done += k


def bootstrap_ratios(num_g: np.ndarray, den_g: np.ndarray, cluster_domain: np.ndarray,
                     n_boot: int, seed: int) -> np.ndarray:
    """(n_boot × Q) replicate ratios W·num / W·den; nan where a replicate drew no base."""
    num_g = np.asarray(num_g, dtype=np.float64)
    den_g = np.asarray(den_g, dtype=np.float64)
    q = num_g.shape[1]
    both = np.hstack([num_g, den_g])
    out = np.empty((n_boot, q))
    row = 0
    for w in iter_counts(cluster_domain, n_boot, seed):
        prod = w @ both
        with np.errstate(invalid="ignore", divide="ignore"):
            out[row:row + len(w)] = np.where(prod[:, q:] > 0, prod[:, :q] / prod[:, q:], np.nan)
        row += len(w)
    return out


# ---------------------------------------------------------------------------- intervals and p-values
#
# The percentile interval of a cluster bootstrap is too narrow with few interactions: its
# quantiles are those of a normal-like spread of replicates, while the estimate's own error,
# with a variance estimated from m clusters, is closer to Student's t with m − (domains)
# degrees of freedom (measured: 92.5% coverage at 16 interactions, BENCHMARKS.md §
# Calibration). So the 95% interval takes the replicates' quantiles at the level whose normal
# quantile is t's: α' = 2·(1 − Φ(t_{df, 1 − α/2})), and the p-value is the same map applied to
# the percentile p. Both converge to the plain percentile ones as df grows; p < α exactly when
# the interval at level 1 − α excludes 0 (up to interpolation between replicates).

@functools.lru_cache(maxsize=4096)
def calibrated_level(level: float, df: float | None) -> float:
    """The percentile level whose normal quantile equals t_{df}'s at `level` (two-sided);
    `level` itself without df (or with df = inf)."""
    if df is None or not math.isfinite(df):
        return level
    from scipy.stats import norm, t

    return float(1 - 2 * norm.sf(t.ppf((1 + level) / 2, max(df, 1.0))))


def calibrated_p(p_percentile: float, df: float | None, sides: int = 2) -> float:
    """The percentile p mapped to the t-calibrated one: the smallest level whose calibrated
    interval excludes 0 (`sides` 1: a one-sided p, as TOST's)."""
    if df is None or not math.isfinite(df) or p_percentile >= 1.0:
        return min(1.0, p_percentile)
    from scipy.stats import norm, t

    z = norm.isf(p_percentile / sides)
    return float(min(1.0, sides * t.sf(z, max(df, 1.0))))


def percentile_ci(samples: np.ndarray, level: float = LEVEL, df: float | None = None) -> list[float] | None:
    """Percentile interval over the defined replicates (numpy's default linear interpolation),
    at the t-calibrated level for `df` degrees of freedom."""
    s = samples[np.isfinite(samples)]
    if len(s) == 0:
        return None
    lv = calibrated_level(level, df)
    lo, hi = np.quantile(s, [(1 - lv) / 2, (1 + lv) / 2])
    return [float(lo), float(hi)]


def cluster_df(used: np.ndarray, cluster_domain: np.ndarray) -> float:
    """Degrees of freedom of a stratified cluster mean: the interactions a quantity uses minus
    their domains (at least 1)."""
    return float(max(1, int(used.sum()) - len(np.unique(cluster_domain[used]))))


def effective_df(weights: np.ndarray, cluster_domain: np.ndarray) -> float:
    """Effective degrees of freedom of a stratified cluster mean (issue 50): Kish's effective
    number of interactions, (Σ n_g)² / Σ n_g² with n_g the bases (or calls) the quantity uses in
    interaction g, minus their domains (at least 1). It is the Satterthwaite degrees of freedom of
    the cluster-robust variance when every base adds the same variance, and `cluster_df` when every
    interaction holds as many bases as every other; one interaction holding a third of the bases
    leaves about 3 effective interactions however many others there are."""
    used = weights > 0
    n = np.asarray(weights, dtype=np.float64)[used]
    if not len(n):
        return 1.0
    return float(max(1.0, n.sum() ** 2 / float((n ** 2).sum()) - len(np.unique(cluster_domain[used]))))


def _position_below(s: np.ndarray, t: float) -> float:
    """sup{q : Q(q) ≤ t} for Q the replicates' quantile function (numpy's linear interpolation
    over the sorted replicates `s`): the interval's lower end Q(a/2) lies above t exactly when
    a/2 exceeds it. 0 when every replicate lies above t."""
    b = len(s)
    j = int(np.searchsorted(s, t, side="right"))        # replicates ≤ t
    if j == 0:
        return 0.0
    if j == b:
        return 1.0
    h = (j - 1) + (t - s[j - 1]) / (s[j] - s[j - 1])
    return float(h / (b - 1))


def _position_above(s: np.ndarray, t: float) -> float:
    """1 − inf{q : Q(q) ≥ t}: the upper end Q(1 − a/2) lies below t exactly when a/2 exceeds it."""
    b = len(s)
    j = int(np.searchsorted(s, t, side="left"))         # replicates < t
    if j == b:
        return 0.0
    if j == 0:
        return 1.0
    h = (j - 1) + (t - s[j - 1]) / (s[j] - s[j - 1])
    return float(1.0 - h / (b - 1))


def _tail(s: np.ndarray, point: float | None, threshold: float, above: bool, df: float | None, se: float,
          level: float) -> float:
    """One-sided p that the quantity lies beyond `threshold` on the far side from the estimate
    (`above`: H0 says it is ≥ threshold), by inverting the interval: the level at which the
    printed interval's end (the t-calibrated percentile interval at two-sided `level` of sorted
    replicates `s`) reaches the threshold, so p < (1 − level)/2 exactly when that end lies beyond
    it. Beyond the replicates' resolution (less than one replicate's share past the threshold)
    the p is raised to the smaller of that resolution and the replicates' normal tail
    T_df((estimate − threshold)/SE), so a strong effect is neither 0 nor capped at 1/(B + 1)
    before Holm's multiplication; a lift that would cross the level is not made."""
    b = len(s)
    q = _position_above(s, threshold) if above else _position_below(s, threshold)
    p_inv = calibrated_p(q, df, sides=1)
    floor = calibrated_p(1.0 / (b + 1), df, sides=1)
    a = (1 - level) / 2
    if point is not None and se > 0 and df is not None and math.isfinite(df):
        from scipy.stats import t

        z = (threshold - point) / se if above else (point - threshold) / se
        floor = min(floor, float(t.sf(z, max(df, 1.0))))
    lifted = max(p_inv, floor)
    return lifted if (lifted < a) == (p_inv < a) else p_inv


def percentile_p(samples: np.ndarray) -> float | None:
    """Two-sided percentile p: min(1, 2·min((1 + #{Δ* ≤ 0}) / (B + 1), (1 + #{Δ* ≥ 0}) / (B + 1))),
    B the number of defined replicates. It inverts the percentile interval (the smallest
    two-sided level whose interval excludes 0); the +1 keeps p > 0 with finite B."""
    s = samples[np.isfinite(samples)]
    b = len(s)
    if b == 0:
        return None
    below = (1 + int((s <= 0).sum())) / (b + 1)
    above = (1 + int((s >= 0).sum())) / (b + 1)
    return float(min(1.0, 2 * min(below, above)))


def _two_sided(s: np.ndarray, point: float | None, df: float | None, se: float, level: float) -> float:
    """2·min of the two one-sided p-values at 0: below 1 − level exactly when the interval at
    `level` excludes 0 (`_tail`). `s` sorted."""
    return float(min(1.0, 2 * min(_tail(s, point, 0.0, True, df, se, level),
                                  _tail(s, point, 0.0, False, df, se, level))))


def bootstrap_p(samples: np.ndarray, df: float | None = None, point: float | None = None,
                level: float = LEVEL) -> float | None:
    """The two-sided p-value `estimate` reports: the percentile p, t-calibrated for `df`, and
    (with the point estimate) the normal tail where the replicates cannot resolve it (`_tail`)."""
    s = samples[np.isfinite(samples)]
    if len(s) == 0:
        return None
    se = float(s.std(ddof=1)) if len(s) > 1 else 0.0
    return _two_sided(np.sort(s), point, df, se, level)


def bootstrap_se(samples: np.ndarray) -> float | None:
    """Standard deviation of the defined replicates (ddof 1; 0 with a single replicate)."""
    s = samples[np.isfinite(samples)]
    if len(s) == 0:
        return None
    return float(s.std(ddof=1)) if len(s) > 1 else 0.0


def tost_p(samples: np.ndarray, margin: float, df: float | None = None, point: float | None = None,
           level: float = LEVEL) -> float | None:
    """Equivalence p against (−margin, margin), two one-sided tests with the +1 rule:
    max((1 + #{Δ* ≤ −margin}) / (B + 1), (1 + #{Δ* ≥ margin}) / (B + 1)), each side
    t-calibrated (`_tail`). Below α exactly when the (1 − 2α) calibrated interval lies inside the
    margins (up to interpolation)."""
    s = samples[np.isfinite(samples)]
    if len(s) == 0:
        return None
    se = float(s.std(ddof=1)) if len(s) > 1 else 0.0
    s = np.sort(s)
    # the (1 − 2α) interval: its ends are the ones the one-sided tests at α read
    tost_level = _tost_level(level)
    return float(max(_tail(s, point, -margin, False, df, se, tost_level),
                     _tail(s, point, margin, True, df, se, tost_level)))


def _tost_level(level: float) -> float:
    """The (1 − 2α) level of the equivalence tests' interval (0.90 at 0.95, without float residue)."""
    return max(0.0, round(2 * level - 1, 12))


def summarise(samples: np.ndarray, margin: float | None = None, df: float | None = None,
              point: float | None = None, level: float = LEVEL) -> Summary:
    """ci (at `level`), ci90 (at 2·level − 1, the equivalence tests' interval), p, se, df and,
    with `margin`, p_tost of one quantity's replicates (`point`: its estimate): the functions
    above, with one pass to drop undefined replicates and one quantile call."""
    s = samples[np.isfinite(samples)]
    b = len(s)
    if b == 0:
        return {"ci": None, "ci90": None, "p": None, "se": None, "p_tost": None, "df": df}
    l_ci, l_eq = calibrated_level(level, df), calibrated_level(_tost_level(level), df)
    lo, hi, lo90, hi90 = np.quantile(s, [(1 - l_ci) / 2, (1 + l_ci) / 2, (1 - l_eq) / 2, (1 + l_eq) / 2])
    se = float(s.std(ddof=1)) if b > 1 else 0.0
    return {"ci": [float(lo), float(hi)], "ci90": [float(lo90), float(hi90)],
            "p": _two_sided(np.sort(s), point, df, se, level), "se": se,
            "p_tost": None if margin is None else tost_p(s, margin, df, point, level), "df": df}
