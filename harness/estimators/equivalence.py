"""Is a null informative? (docs/estimators.md, Equivalence and power.) For one bootstrapped
quantity: the equivalence test against ±margin (two one-sided tests, read off the 90%
percentile interval of the same replicates), a verdict a reader can quote, and the minimum
detectable effect at 80% power from its bootstrap standard error, at α = 0.05 and at the first
step of Holm over its family (α/m)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

from harness.errors import InputError
from harness.estimators.power import ALPHA, POWER, mde

DEFAULT_MARGIN = 0.05
DIFFERS = "differs from 0"
INCONCLUSIVE = "inconclusive"
RULE = ("verdict: 'differs from 0' when the 95% interval excludes 0; 'within ±M' when the 90% interval "
        "lies inside (−M, M) (two one-sided tests at 0.05); both when both hold; else 'inconclusive'. "
        "MDE = (z_{1−α/2} + z_{0.80})·SE, SE the bootstrap standard deviation, at α = 0.05 and at α/m "
        "(the first Holm step over the m members of the quantity's family)")


class Equivalence(TypedDict):
    margin: float
    ci90: list[float] | None
    p_tost: float | None
    se: float | None
    mde: float | None
    mde_holm: float | None
    holm_m: int | None
    verdict: str | None


def check_margin(margin: Any) -> float:
    """The equivalence margin, a proportion strictly between 0 and 1."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) \
            or not 0 < margin < 1:
        raise InputError(f"the equivalence margin must be a proportion in (0, 1), got {margin!r}", field="margin")
    return float(margin)


def within(margin: float) -> str:
    return f"within ±{margin:g}"


# Replicate ratios carry float residue (1e-17 for an exact 0): below this an end counts as 0.
EPS = 1e-12


def verdict(ci: list[float] | None, ci90: list[float] | None, margin: float) -> str | None:
    if ci is None or ci90 is None:
        return None
    differs = ci[0] > EPS or ci[1] < -EPS
    inside = -margin < ci90[0] and ci90[1] < margin
    if differs and inside:
        return f"{DIFFERS}, {within(margin)}"
    return DIFFERS if differs else within(margin) if inside else INCONCLUSIVE


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def equivalence(q: Mapping[str, Any] | None, margin: float, holm_m: int | None) -> Equivalence | None:
    """From one estimate of `Quantities.run` (run with `margin`); None when it is undefined."""
    if q is None or q.get("estimate") is None:
        return None
    se = q.get("se")
    return {
        "margin": margin, "ci90": q.get("ci90"), "p_tost": q.get("p_tost"), "se": se,
        "mde": None if se is None else _finite(mde(se, ALPHA, POWER)),
        "mde_holm": None if se is None or not holm_m else _finite(mde(se, ALPHA / holm_m, POWER)),
        "holm_m": holm_m, "verdict": verdict(q.get("ci"), q.get("ci90"), margin),
    }


def _n(x: float | None) -> str:
    return "—" if x is None else f"{x:+.4f}"


def _a(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def short(eq: Mapping[str, Any] | None) -> str:
    """Verdict and MDE in one cell: 'within ±0.05; MDE 0.0712'."""
    if not eq or eq.get("verdict") is None:
        return "—"
    return f"{eq['verdict']}; MDE {_a(eq.get('mde'))}"


def sentence(name: str, what: str, estimate: float | None, eq: Mapping[str, Any] | None) -> str:
    """A sentence a reader can quote, e.g. 'tool_alias, Δ − placebo +0.0120: within ±0.05
    (90% interval [−0.0210, +0.0410]); detectable with 80% power at α 0.05: 0.0712 (at the
    Holm level α/3: 0.0864).'"""
    if not eq or eq.get("verdict") is None:
        return f"{name}, {what}: undefined (no paired base)."
    ci90 = eq.get("ci90") or [None, None]
    holm = (f" (at the Holm level α/{eq['holm_m']}: {_a(eq['mde_holm'])})"
            if eq.get("holm_m") and eq.get("mde_holm") is not None else "")
    tost = "—" if eq.get("p_tost") is None else f"{eq['p_tost']:.4f}"
    return (f"{name}, {what} {_n(estimate)}: {eq['verdict']} (90% interval [{_n(ci90[0])}, {_n(ci90[1])}], "
            f"TOST p {tost} against ±{eq['margin']:g}); detectable with 80% power at α 0.05: "
            f"{_a(eq.get('mde'))}{holm}.")


def power_record() -> dict[str, Any]:
    """What the report's `power` key says about every `equivalence` record."""
    return {"power": POWER, "alpha": ALPHA, "rule": RULE}


def headline_sentences(report: Mapping[str, Any]) -> list[str]:
    """One sentence per contrast for its headline quantity: the placebo-corrected effect where
    it is defined, else Δ (the placebo's own row, or no placebo)."""
    out = []
    for c in report["contrasts"]:
        if c.get("equivalence_minus_placebo") is not None:
            out.append(sentence(c["condition"], "Δ − placebo", c["delta_minus_placebo"], c["equivalence_minus_placebo"]))
        else:
            out.append(sentence(c["condition"], "Δ", c["delta"], c.get("equivalence")))
    return out
