"""One quantity's decision record (docs/estimators.md, Decisions): its two-sided test and its
equivalence test against ±margin (two one-sided tests, read off the 90% interval of the same
replicates), the minimum detectable effect at 80% power, and — once its family is decided
(`guardeval.estimators.verdicts.decisions.decide_family`) — the Holm-adjusted p-values and the verdict a
reader can quote."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

from guardeval.errors import InputError
from guardeval.estimators.verdicts.power import ALPHA, POWER, mde

DEFAULT_MARGIN = 0.05


class Equivalence(TypedDict):
    margin: float
    alpha: float
    ci90: list[float] | None
    p: float | None                 # the two-sided bootstrap p (unadjusted)
    p_tost: float | None            # the equivalence p against ±margin (unadjusted)
    se: float | None
    df: float | None                # degrees of freedom of its t-calibration
    mde: float | None
    mde_holm: float | None
    holm_m: int | None              # the size of its family; None outside every family
    family: str | None              # the family its verdict is decided in, in words
    p_adjusted: float | None        # Holm over the family: decides "differs from 0"
    p_tost_adjusted: float | None   # Holm over the family: decides "within ±M"
    differs: bool | None
    equivalent: bool | None
    underpowered: bool | None       # the margin is below the MDE: the design cannot support "within ±M"
    verdict: str | None
    method: str | None              # the procedure behind p and the interval: "sign-flip" or "bootstrap"
    p_min: float | None             # the smallest p that procedure can give on this design
    decidable: bool | None          # p_min below the Holm threshold α/m of its family (set with the family)
    ci_note: str | None             # why an interval is absent or is a bound (no variation), in words
    n_interactions: int | None      # the interactions the quantity uses


def check_margin(margin: Any) -> float:
    """The equivalence margin, a proportion strictly between 0 and 1."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) \
            or not 0 < margin < 1:
        raise InputError(f"the equivalence margin must be a proportion in (0, 1), got {margin!r}", field="margin")
    return float(margin)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def equivalence(q: Mapping[str, Any] | None, margin: float, holm_m: int | None,
                alpha: float = ALPHA) -> Equivalence | None:
    """From one estimate of `Quantities.run` (run with `margin`); None when it is undefined. The
    decision fields stay None until `decisions.decide_family` sees its family."""
    if q is None or q.get("estimate") is None:
        return None
    se, df = q.get("se"), q.get("df")
    p_min = float(q.get("p_min") or 0.0)
    return {
        "margin": margin, "alpha": alpha, "ci90": q.get("ci90"), "p": q.get("p"), "p_tost": q.get("p_tost"),
        "se": se, "df": df,
        "mde": detectable(se, alpha, df, p_min),
        "mde_holm": None if not holm_m else detectable(se, alpha / holm_m, df, p_min),
        "holm_m": holm_m, "family": None, "p_adjusted": None, "p_tost_adjusted": None,
        "differs": None, "equivalent": None, "underpowered": None, "verdict": None,
        "method": q.get("method"), "p_min": p_min, "decidable": None, "ci_note": q.get("ci_note"),
        "n_interactions": q.get("n_interactions"),
    }


def detectable(se: float | None, level: float, df: float | None, p_min: float) -> float | None:
    """The MDE at `level`; None when the design's smallest attainable p is not below it (no true
    effect, however large, is detected: the design cannot decide), and None for a standard error
    of 0 (nothing varied between interactions: that is no evidence of power, and an MDE of 0
    would claim any effect is detectable)."""
    if se is None or se <= 0 or p_min >= level:
        return None
    return _finite(mde(se, level, POWER, df))
