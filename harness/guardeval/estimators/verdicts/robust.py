"""Decisions about failed calls (docs/estimators.md, Failed calls; issue 45).

Two decisions, each from the records the headline's own inference procedure gives
(`Quantities.run`: the sign-flip test below its degrees-of-freedom switch, the bootstrap above):

* `robust`: a contrast's worst-case (Manski) range when every failed call is set to block or to
  allow, whichever moves it most. Each end of the range is decided as the headline is — its p,
  Holm-adjusted over the same family at the same end — and the verdict is "differs, raising",
  "differs, lowering" or "does not differ". The contrast is robust to its failed calls when both
  ends give the same verdict.
* `depends_on_condition`: whether the share of failed calls differs between a condition and the
  baseline (paired by base), Holm over the conditions in a family of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from guardeval.estimators.verdicts import decisions
from guardeval.estimators.verdicts.holm import holm

if TYPE_CHECKING:   # estimators/types loads numpy and scipy (via verdicts/power): not for readers of the record
    from guardeval.estimators.types import DecidedEnd, End

EndVerdict = Literal["raises", "lowers", "does not differ", "not tested"]
ROBUST_RULE = ("bounds: the contrast's range when each failed call is set to block or to allow, whichever moves it "
               "most (worst-case bounds); each end has its interval and p from the procedure the headline uses and "
               "is decided as the headline is (Holm over the same family, at the same end); robust when both ends "
               "give the same verdict (differs with the same sign, or does not differ)")
DEPENDS_RULE = ("failure dependence: the share of failed calls under each condition minus the baseline's, paired by "
                "base, with the procedure the headline uses for its design size, Holm over the conditions in a "
                "family of its own; 'differs' when any member differs")


def end_verdict(estimate: float | None, p_adjusted: float | None, alpha: float) -> EndVerdict:
    """One end of a range, decided: its sign when its Holm-adjusted p is below α."""
    if estimate is None or p_adjusted is None:
        return "not tested"
    if decisions.rejects(p_adjusted, alpha):
        return "raises" if estimate > 0 else "lowers"
    return "does not differ"


def decide_ends(ends: Sequence[End | None], alpha: float) -> list[DecidedEnd | None]:
    """Holm over one end of every member of a family (undefined members still count in m): each
    end's record with `p_holm` and `verdict` added."""
    adj = holm([None if e is None else e.get("p") for e in ends])
    out: list[DecidedEnd | None] = []
    for e, a in zip(ends, adj):
        if e is None:
            out.append(None)
            continue
        out.append({**e, "p_holm": a, "verdict": end_verdict(e["estimate"], a, alpha)})
    return out


def robust(lo: DecidedEnd | None, hi: DecidedEnd | None) -> bool | None:
    """Both ends give the same verdict; None where an end is undefined or untested."""
    if lo is None or hi is None or "not tested" in (lo["verdict"], hi["verdict"]):
        return None
    return bool(lo["verdict"] == hi["verdict"])


def robust_words(robust_flag: bool | None) -> str:
    return {True: "robust", False: "not robust", None: "not decided"}[robust_flag]
