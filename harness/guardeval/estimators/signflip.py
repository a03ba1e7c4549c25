"""Sign-flip randomization inference for small designs (issue 35; docs/estimators.md, Uncertainty).

With few interactions a cluster bootstrap has almost nothing to resample: its intervals undercover
and its p has a floor. For a base-equal mean θ = Σ_g num_g / Σ_g den_g over interactions g, the
test of H0: θ = θ0 flips the sign of each interaction's centred sum e_g = num_g − θ0·den_g. Under
H0 with each e_g symmetric about 0 (independent interactions), every flip is as likely as the
data, so the test is exact: its smallest two-sided p is 2/2^G. Exact for the *mean* θ when effects
vary from base to base, too (issue 50): it needs each e_g symmetric, not the bases' effects equal.
Studentizing would change nothing here: Σ e_g² is the same under every flip, so the t statistic
is a monotone function of Σ e_g and orders the flips as Σ e_g does.

Flipping the interactions of a set F moves Σ e_g below its observed value exactly when θ0 lies
below the mean over F alone, r_F = Σ_F num / Σ_F den (the sum changes by −2·Σ_F e_g). So the
one-sided p of θ0 counts the subset means on one side of it (Hartigan's typical values), and the
interval {θ0 : p(θ0) ≥ α} is read off the sorted subset means: p and interval are one procedure,
and "the interval excludes 0" is "p < α" by construction. Every subset is enumerated up to
`ENUMERATE_MAX` interactions; beyond that, `n_random` random subsets (each interaction in or out
with probability ½) give the Monte-Carlo version, the unflipped data counted once.

Ties (issue 50). Rates of a few repetitions lie on a lattice (thirds with 3), so many
interactions' sums are exactly 0 and the interval's end is often exactly a lattice point. A
population mean just off it (a placebo whose mean effect is 0.002 or 0.02) then has centred sums
with an atom just below 0 — not symmetric — and the flips alone missed it (0.923–0.941 at 6
interactions). So a subset mean within half its own lattice step of θ0 (`half_step`, half the
smallest gap between two per-base values, over the subset's bases) counts on both sides: the
interval's ends are order statistics of the subset means moved down and up by it.
"""

from __future__ import annotations

import math

import numpy as np

from guardeval.estimators.bootstrap import Inference

# Every flip is enumerated up to this many interactions (2^12 = 4,096); above, random flips: at
# 13 interactions 2/2^G is already far below any Holm threshold, so exactness buys nothing there.
ENUMERATE_MAX = 12
# A quantity with fewer than this many effective degrees of freedom (bootstrap.effective_df: Kish's
# effective number of the interactions it uses, minus their domains) is decided by sign flips; from
# it up, by the t-calibrated bootstrap (measured: BENCHMARKS.md §6, issues 35 and 50: the bootstrap
# under-covered with one interaction holding a third of the bases even at 44 interactions).
SIGNFLIP_BELOW_DF = 28
METHOD = "sign-flip"
RULE = ("sign-flip randomization test over interactions (each interaction's centred sum flipped; every one of "
        "the 2^G flips when G <= 12, else --bootstrap random flips), p = 2*min(#{subset means <= θ0}, #{subset means >= θ0}) / "
        "#flips with the unflipped data counted and a subset mean within half its lattice step of θ0 (half the smallest "
        "gap between two per-base values, over the subset's bases) counted on both sides; interval = the values θ0 it "
        "does not reject (test inversion: order statistics of the subset means moved down and up by that step); "
        "smallest attainable p 2/2^G")


def subsets(g: int, n_random: int, seed: int) -> tuple[np.ndarray, int, bool]:
    """(K × g) 0/1 matrix of the flipped sets, the number of flips it stands for (the empty set,
    the data unflipped, included) and whether it is every subset."""
    if g <= ENUMERATE_MAX:
        codes = np.arange(1, 1 << g, dtype=np.int64)
        s = ((codes[:, None] >> np.arange(g, dtype=np.int64)[None, :]) & 1).astype(np.float64)
        return s, 1 << g, True
    rng = np.random.default_rng(seed)
    return (rng.random((n_random, g)) < 0.5).astype(np.float64), n_random + 1, False


def subset_means(s: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """(K × Q) subset ratios Σ_F num / Σ_F den; nan where F holds no base of the quantity."""
    a, b = s @ num, s @ den
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / b, np.nan)


def smallest_p(g: int, n_total: int | None = None) -> float:
    """The smallest two-sided p a sign-flip test over `g` interactions can give."""
    return min(1.0, 2.0 / (n_total if n_total is not None else 2.0 ** g))


def interactions_needed(alpha: float) -> int:
    """The fewest interactions whose smallest sign-flip p, 2/2^G, lies below `alpha`."""
    return max(1, math.floor(math.log2(2.0 / alpha)) + 1)


class _Counts:
    """The one-sided p-values of every θ0, from the sorted defined subset values; a subset value
    within its own `tie` of θ0 counts on both sides (`half_step`)."""

    def __init__(self, values: np.ndarray, n_total: int, tie: np.ndarray | float = 0.0) -> None:
        ok = np.isfinite(values)
        t = np.broadcast_to(np.asarray(tie, dtype=np.float64), values.shape)[ok]
        self.v = np.sort(values[ok])
        # each subset value as low and as high as the data's resolution allows
        self.lo = np.sort(values[ok] - t)
        self.hi = np.sort(values[ok] + t)
        self.n_total = n_total
        # The unflipped data and every flip that leaves the quantity without a base count on both sides.
        self.n_both = n_total - len(self.v)

    def p_greater(self, t: float) -> float:
        """p of H0: θ ≤ t against θ > t (small when the data lie well above t)."""
        return (self.n_both + int(np.searchsorted(self.lo, t, side="right"))) / self.n_total

    def p_less(self, t: float) -> float:
        return (self.n_both + len(self.hi) - int(np.searchsorted(self.hi, t, side="left"))) / self.n_total

    def _k(self, a: float) -> int:
        """The fewest subset values on one side of θ0 for that one-sided p to reach `a`
        (computed as p_greater computes p, so the interval and p agree in floating point)."""
        k = max(0, math.ceil(a * self.n_total) - self.n_both)
        while k > 0 and (self.n_both + k - 1) / self.n_total >= a:
            k -= 1
        while (self.n_both + k) / self.n_total < a:
            k += 1
        return k

    def interval(self, a: float) -> list[float] | None:
        """{θ0 : p_greater(θ0) ≥ a and p_less(θ0) ≥ a}; None when it is unbounded (no flip count
        can reach below a)."""
        k = self._k(a)
        if k == 0 or k > len(self.v):
            return None
        return [float(self.lo[k - 1]), float(self.hi[len(self.hi) - k])]


def _no_variation_interval(c: float, g: int, a2: float, bounds: tuple[float, float]) -> list[float]:
    """Every interaction gave the same value c: a share π of the population's interactions may
    still differ, each within `bounds`; with none of G differing, π ≤ 1 − a2^{1/G} at confidence
    1 − a2 (the exact binomial bound), so θ lies within c − π(c − L) .. c + π(U − c)."""
    lo_b, hi_b = bounds
    u = 1.0 - a2 ** (1.0 / g)
    return [c - u * (c - lo_b), c + u * (hi_b - c)]


def _no_variation_p(c: float, g: int, t: float, bounds: tuple[float, float], side: str) -> float:
    """The smallest level whose no-variation interval excludes t on one side (`side` "above":
    t below the interval; "below": t above it): the inverse of `_no_variation_interval`."""
    lo_b, hi_b = bounds
    if side == "above":
        if c <= t or c - lo_b <= 0:
            return 1.0
        x = (c - t) / (c - lo_b)
    else:
        if c >= t or hi_b - c <= 0:
            return 1.0
        x = (t - c) / (hi_b - c)
    return float(min(1.0, (1.0 - min(1.0, x)) ** g))


def half_step(values: np.ndarray) -> float:
    """Half the smallest gap between two distinct per-base values (0 when they are all equal): a
    mean over n bases lies on a lattice of step 2·half_step/n. Rates of a few repetitions make
    one (thirds with 3), so a population mean just off a lattice point (a placebo whose mean effect
    is 0.002 or 0.02) meets centred sums with an atom just below 0, which is not symmetric, and
    the flips alone undercover (issue 50)."""
    u = np.unique(values[np.isfinite(values)])
    if len(u) < 2:
        return 0.0
    return float(np.diff(u).min()) / 2.0


def summarise(values: np.ndarray, n_total: int, point: float, g: int, se: float, level: float,
              margin: float | None, bounds: tuple[float, float], tie: np.ndarray | float = 0.0) -> Inference:
    """ci (at `level`), ci90 (at 2·level − 1), p, p_tost, se, df, p_min of one quantity from its
    subset values. `tie`, per subset value (half its lattice step: `half_step` over the subset's
    bases): a subset value within it of θ0 counts on both sides — the subset cannot place the
    mean more finely — so the interval's ends are order statistics of the values moved down and
    up by their ties, and p is the same test at 0. Where every subset gives the same
    value (no variation between interactions) the flips alone would give a zero-width interval:
    the exact binomial bound on the share of interactions that could differ (`_no_variation_interval`) gives the interval, and p is the
    larger of the two procedures' p, so the interval and p still agree."""
    alpha = 1.0 - level
    cnt = _Counts(values, n_total, tie)
    p_flip = min(1.0, 2 * min(cnt.p_greater(0.0), cnt.p_less(0.0)))
    ci = cnt.interval(alpha / 2)
    ci90 = cnt.interval(alpha)
    tost = None if margin is None else max(cnt.p_greater(-margin), cnt.p_less(margin))
    flat = len(cnt.v) > 0 and float(cnt.v[-1] - cnt.v[0]) <= 1e-12 * max(1.0, abs(float(cnt.v[0])))
    out: Inference = {"ci": ci, "ci90": ci90, "p": float(p_flip), "se": se, "p_tost": None if tost is None else float(tost),
           "df": float(max(1, g - 1)), "p_min": smallest_p(g), "method": METHOD, "ci_note": None,
           "n_flips": n_total, "n_interactions": g}
    if flat:
        no_variation(out, point, g, alpha, margin, bounds)
    if out["ci"] is None:
        out["ci_note"] = (f"no interval: with {g} interactions the smallest p the sign flips can give is "
                          f"{smallest_p(g, n_total):.3g}, not below α {alpha:.3g}")
    return out


def is_flat(ci: list[float] | None) -> bool:
    """A zero-width interval: every resample or flip gave the same value."""
    return ci is not None and ci[1] - ci[0] <= 1e-12 * max(1.0, abs(ci[0]))


def no_variation(out: Inference, point: float, g: int, alpha: float, margin: float | None,
                 bounds: tuple[float, float]) -> None:
    """In place, for a quantity whose G interactions all gave the same value: the printed
    intervals become the exact binomial bound (`_no_variation_interval`) instead of a point, and
    p (and the TOST p) the larger of the procedure's own and the bound's, so that the interval
    and p still agree (the procedure's own p is below the level wherever it printed an interval)."""
    out["ci_note"] = f"no variation observed in {g} interactions: the interval is the exact binomial bound"
    if out["ci"] is not None:
        out["ci"] = _no_variation_interval(point, g, alpha, bounds)
        p_b = min(_no_variation_p(point, g, 0.0, bounds, "above"), _no_variation_p(point, g, 0.0, bounds, "below"))
        out["p"] = float(max(out["p"] or 0.0, p_b))   # set (a float) wherever the interval is
    if out["ci90"] is not None:
        out["ci90"] = _no_variation_interval(point, g, 2 * alpha, bounds)
        if (p_tost := out["p_tost"]) is not None and margin is not None:
            # each side of the 90% bound is a one-sided test at α: the level 2α' whose bound sits at ∓margin
            sides = [_no_variation_p(point, g, -margin, bounds, "above"),
                     _no_variation_p(point, g, margin, bounds, "below")]
            out["p_tost"] = float(max(p_tost, max(1.0 if q >= 1.0 else 0.5 * q for q in sides)))


def ratio_se(num: np.ndarray, den: np.ndarray, point: float) -> float:
    """Cluster-robust (CV1) standard error of Σ num / Σ den over the G interactions given: the
    spread of the flips, scaled by G/(G − 1); used for the MDE, not for the test."""
    g = len(num)
    d = float(den.sum())
    if g < 2 or d <= 0:
        return 0.0
    e = num - point * den
    return float(math.sqrt(g / (g - 1) * float((e ** 2).sum())) / d)
