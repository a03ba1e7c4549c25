"""The one rule behind every word the estimators print (docs/estimators.md, Decisions).

A "differs from 0" verdict, a star, a bold row, a "yes" and a plain-language sentence are all one
decision: the Holm-adjusted p below α within a family that is fixed before the data are seen and
named in the output. "Within ±M" is the same decision on the equivalence (TOST) p-values of the
family. Intervals shown beside a verdict are the unadjusted (1 − α) intervals (95% at the default
α), labelled so; the verdict never contradicts them (a Holm-adjusted p is at least the unadjusted
one, and p < α exactly when that interval excludes 0).

Every significance decision in the package — a verdict, a star, a failed placebo, a changed
ranking, an end of a range over the failed calls, a study's "holds", the gate — is `rejects`
below, made here (`decide_family`, `decide_pvalues`, `decide_adjusted`, `all_within`) or in
`robust.end_verdict`, and read from its record by every surface; nothing else compares a p with
α (tests/test_one_rule.py swaps `rejects` and checks every surface follows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from guardeval.errors import InputError
from guardeval.estimators.verdicts import separation
from guardeval.estimators.verdicts.equivalence import Equivalence, detectable
from guardeval.estimators.verdicts.holm import holm
from guardeval.estimators.verdicts.power import ALPHA, POWER
from guardeval.estimators.verdicts.record import Decision, words

if TYPE_CHECKING:   # for annotations only (estimators/types imports this package)
    from guardeval.estimators.types import AllWithin, Family, Power

DIFFERS = "differs from 0"
INCONCLUSIVE = "inconclusive"
OUTSIDE = "not tested (outside the family)"
RULE = ("verdict: 'differs from 0' when the two-sided p, Holm-adjusted within the stated family, is below α; "
        "'within ±M' when the equivalence p (two one-sided tests against ±M), Holm-adjusted within the same "
        "family, is below α; both when both hold; else 'inconclusive'. A quantity outside every family is not "
        "tested. Intervals beside a verdict are unadjusted (1 − α) intervals. MDE = (t_{df,1−α/2} + t_{df,0.80})·SE, "
        "SE the bootstrap standard deviation, at α and at α/m (the first Holm step over the family's m members)")


def rejects(p: float | None, alpha: float) -> bool | None:
    """The one comparison behind every significance decision: p (Holm-adjusted where a family is
    decided) below α. None for an undefined p (no estimate): nothing is decided. Elsewhere in
    verdicts/ it is called through this module (`decisions.rejects`), so that swapping it swaps
    every decision (tests/test_one_rule.py does, to show no surface decides on its own)."""
    return None if p is None else p < alpha


def decide_adjusted(p_adjusted: float | None, family: str, alpha: float, *, p: float | None = None,
                    size: int | None = None) -> Decision:
    """The decision record of a member whose Holm-adjusted p is already known (a compare row's
    `p_holm`) and that has no equivalence record to read: 'differs from 0' when `rejects`."""
    made = Decision.of({"differs": rejects(p_adjusted, alpha), "p": p, "p_adjusted": p_adjusted,
                        "family": family, "holm_m": size, "alpha": alpha})
    assert made is not None     # a non-empty record always reads as one
    return made


def decide_pvalues(pvalues: Sequence[float | None], family: str, alpha: float) -> list[Decision]:
    """Holm over a family known only by its members' p-values (a placebo's Δ among its family, the
    reversals of a ranking), and each member's decision record, in input order. An undefined p
    still counts in m and decides nothing (`differs` None)."""
    return [decide_adjusted(a, family, alpha, p=p, size=len(pvalues)) for p, a in zip(pvalues, holm(pvalues))]


def family_name(members: Sequence[str], kind: str) -> str:
    """'3 interventions', '4 conditions', '6 (3 pairs × 2 interventions)': how a verdict names its family."""
    m = len(members)
    return f"{m} {kind}{'' if m == 1 else 's'}"


def family_record(members: Sequence[str], name: str, quantity: str) -> Family:
    return {"quantity": quantity, "members": list(members), "size": len(members), "name": name,
            "adjustment": "Holm"}


def check_alpha(alpha: Any) -> float:
    """The decision level, strictly between 0 and 0.5."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) \
            or not 0 < alpha < 0.5:
        raise InputError(f"the decision level must lie in (0, 0.5), got {alpha!r}", field="alpha")
    return float(alpha)


def within(margin: float) -> str:
    return f"within ±{margin:g}"


def verdict_text(differs: bool | None, equivalent: bool | None, margin: float) -> str:
    if differs is None:
        return OUTSIDE
    if differs and equivalent:
        return f"{DIFFERS}, {within(margin)}"
    return DIFFERS if differs else within(margin) if equivalent else INCONCLUSIVE


def decide_family(records: Sequence[Equivalence | None], family: str, alpha: float = ALPHA) -> None:
    """Holm over the family's members, in place: every member's p and TOST p adjusted over all
    m of them (an undefined member still counts in m), its MDE at α/m, and its verdict."""
    m = len(records)
    adj = holm([None if r is None else r["p"] for r in records])
    adj_tost = holm([None if r is None else r["p_tost"] for r in records])
    for r, a, at in zip(records, adj, adj_tost):
        if r is None:
            continue
        r["alpha"], r["family"], r["holm_m"] = alpha, family, m
        r["p_adjusted"], r["p_tost_adjusted"] = a, at
        r["differs"] = bool(rejects(a, alpha))
        r["equivalent"] = bool(rejects(at, alpha))
        r["mde_holm"] = detectable(r["se"], alpha / m, r["df"], float(r.get("p_min") or 0.0))
        # The design cannot decide this member when no p it can give survives Holm's first step.
        r["decidable"] = float(r.get("p_min") or 0.0) < alpha / m
        # With no variation there is no MDE: the design is too small exactly when the exact
        # bound is wider than the margin (its equivalence test fails).
        flat = r["se"] is not None and r["se"] <= 0
        r["underpowered"] = (not r["decidable"] or (not r["equivalent"] if flat else r["mde"] is None)
                             or (r["mde"] is not None and r["margin"] < r["mde"]))
        r["verdict"] = verdict_text(r["differs"], r["equivalent"], r["margin"])


def outside(record: Equivalence | None) -> None:
    """A quantity in no family: shown, not tested."""
    if record is not None:
        record["verdict"] = OUTSIDE


def all_within(records: Mapping[str, Equivalence | None], what: str, margin: float, alpha: float) -> AllWithin:
    """'Every member within ±M': an intersection–union claim, true when every member's own TOST
    p is below α (no adjustment: the claim fails if any one fails)."""
    members = list(records)
    ps = [None if r is None else r["p_tost"] for r in records.values()]
    holds = bool(members) and all(rejects(p, alpha) for p in ps)
    # Members the design cannot show to be equivalent at this margin (a member that differs
    # from 0 needs no equivalence claim to be read).
    weak = [c for c, r in records.items() if r is not None and r["underpowered"] and not r["differs"]]
    return {"claim": f"every {what} within ±{margin:g}", "members": members, "margin": margin, "alpha": alpha,
            "holds": holds, "max_p_tost": None if any(p is None for p in ps) or not ps else max(ps),  # type: ignore[type-var]
            "underpowered": weak,
            "rule": "intersection–union test: holds when every member's unadjusted TOST p is below α"}


def significant(eq: Mapping[str, Any] | None) -> bool:
    """The star, the bold row, the "yes": the Holm-adjusted decision "differs from 0"."""
    d = Decision.of(eq)
    return d is not None and d.starred


def _n(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "—"
    return f"{x:+.{digits}f}".replace("-", "−").replace("+0.000", "0.000").replace("−0.000", "0.000")


def ci_words(ci: Sequence[float] | None, level: str = "95%") -> str:
    return "no interval" if ci is None else f"unadjusted {level} CI {_n(ci[0])} to {_n(ci[1])}"


def _decision_words(eq: Mapping[str, Any] | None) -> str:
    return words(Decision.of(eq))


def effect_sentence(condition: str, who: str, estimate: float | None, ci: Sequence[float] | None,
                    eq: Mapping[str, Any] | None, reference: str, level: str = "95%") -> str:
    """e.g. "tool_alias lowers haiku-4.5's block rate by 0.450 (unadjusted 95% CI −0.530 to
    −0.370) beyond the placebo format_placebo; significant after Holm over the 3 interventions
    (p_Holm 0.0003)." `reference`: "beyond the placebo X" or "against the baseline Y"."""
    if estimate is None:
        return f"{condition}: no estimate for {who} (no paired base)."
    if abs(estimate) < 5e-4:
        move = f"leaves {who}'s block rate unchanged ({_n(estimate)}; {ci_words(ci, level)})"
    else:
        move = (f"{'raises' if estimate > 0 else 'lowers'} {who}'s block rate by {abs(estimate):.3f} "
                f"({ci_words(ci, level)})")
    return f"{condition} {move} {reference}; {_decision_words(eq)}."


def difference_sentence(condition: str, a: str, b: str, eff_a: float | None, eff_b: float | None,
                        diff: float | None, ci: Sequence[float] | None, eq: Mapping[str, Any] | None,
                        what: str, level: str = "95%") -> str:
    """Who is more sensitive to a condition, by how much, and whether that survives the family, in
    one phrasing whatever the signs (`separation.pair` decides it): the guard of the larger effect
    first, e.g. "tool_alias (Δ − placebo): B −0.350, A −0.140; B − A −0.210 (unadjusted 95% CI
    −0.300 to −0.120): B is the more sensitive, by 0.210; significant after Holm over 3
    interventions (p_Holm 0.0012)."; a tie when the sizes are equal or the data do not separate
    them. `diff` and `ci` are B − A; the sentence reads the same whichever guard is A."""
    s = separation.pair(a, b, eff_a, eff_b, eq)
    x, y = (s.top, s.bottom) if s.top is not None and s.bottom is not None else sorted((a, b))
    if diff is None:
        return f"{condition} ({what}): no paired difference ({x} vs {y})."
    if x == a:      # the sentence's x − y is A − B: turn B − A round
        diff, ci = -diff, None if ci is None else [-ci[1], -ci[0]]
    e_x, e_y = (eff_a, eff_b) if x == a else (eff_b, eff_a)
    head = f"{condition} ({what}): {x} {_n(e_x)}, {y} {_n(e_y)}; {x} − {y} {_n(diff)} ({ci_words(ci, level)})"
    claim = ""
    if s.kind == "separated":
        claim = f": {x} is the more sensitive, by {abs(diff):.3f}"
    elif s.kind == "tie" and s.equal_sizes:
        opposite = s.decision is not None and s.decision.differs
        claim = (": effects of one size" + (" in opposite directions" if opposite else "")
                 + ", so neither is the more sensitive (a tie)")
    elif s.kind == "tie":
        claim = ": the data do not separate them (a tie)"
    return f"{head}{claim}; {_decision_words(eq)}."


def power_record(alpha: float = ALPHA) -> Power:
    """What the report's `power` key says about every decision record."""
    return {"power": POWER, "alpha": alpha, "rule": RULE}
