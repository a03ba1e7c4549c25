"""Can a design decide at all? (issue 35; docs/explanation/verdicts.md.)

A family of m members decided by Holm at α needs some member's p below α/m. With few
interactions the sign-flip test's smallest p is 2/2^G: when that is not below α/m, no data of
this design can produce a "differs", and the outputs say so once, up front, with the number of
interactions that would do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from guardeval.estimators.signflip import interactions_needed
from guardeval.estimators.verdicts.equivalence import Equivalence

if TYPE_CHECKING:   # for annotations only (estimators/types imports this package)
    from guardeval.estimators.types import Decidability, Family


def family_decidability(records: Sequence[Equivalence | None], alpha: float) -> Decidability:
    """{decidable, p_min, threshold, n_interactions, interactions_needed} of a family: decidable
    when some defined member's smallest attainable p lies below α/m (m the declared members)."""
    m = len(records)
    defined = [r for r in records if r is not None]
    threshold = alpha / max(1, m)
    if not defined:
        return {"decidable": None, "p_min": None, "threshold": threshold, "n_interactions": None,
                "interactions_needed": None}
    p_min = min(float(r.get("p_min") or 0.0) for r in defined)
    g = max(int(r.get("n_interactions") or 0) for r in defined)
    return {"decidable": p_min < threshold, "p_min": p_min, "threshold": threshold, "n_interactions": g,
            "interactions_needed": interactions_needed(threshold)}


def cannot_decide_sentence(info: Family, alpha: float, family: str, what: str) -> str | None:
    """'With 6 interactions this design cannot reach a decision at α 0.05 over 2 interventions
    (Δ − placebo): …; collect at least 7 interactions.' None when the family can decide."""
    if info.get("decidable") is not False:
        return None
    return (f"With {info['n_interactions']} interactions this design cannot reach a decision at α {alpha:g} over "
            f"{family} ({what}): the smallest p a sign-flip test over {info['n_interactions']} interactions can give, "
            f"{info['p_min']:.3g}, is not below the Holm threshold α/{round(alpha / info['threshold'])} = "
            f"{info['threshold']:.3g}; every verdict there is 'inconclusive' by construction. Collect at least "
            f"{info['interactions_needed']} interactions.")
