"""Power from a standard error (docs/estimators.md): the minimum detectable effect.

Shared by the effects table (is a null informative?) and `guardeval plan` (how large a design
must be), so both quote the same number for the same standard error.
"""

from __future__ import annotations

import math

from scipy.stats import norm, t

ALPHA = 0.05
POWER = 0.80


def mde(se: float, alpha: float = ALPHA, power: float = POWER, df: float | None = None) -> float:
    """The smallest true effect a two-sided level-`alpha` test detects with probability `power`:
    (z_{1-alpha/2} + z_{power}) * se, or with Student's t quantiles for `df` degrees of freedom,
    (t_{df,1-alpha/2} + t_{df,power}) * se, the test `estimate` runs (its intervals and p are
    t-calibrated for the interactions an effect uses). NaN when `se` is not a finite,
    non-negative number."""
    if not (math.isfinite(se) and se >= 0) or not (0 < alpha < 1) or not (0 < power < 1):
        return math.nan
    if df is not None and math.isfinite(df):
        d = max(float(df), 1.0)
        return float((t.ppf(1 - alpha / 2, d) + t.ppf(power, d)) * se)
    return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se)
