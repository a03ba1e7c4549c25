"""The answer of a study in words (docs/study.md, "The answer"): for each intervention, which
guard it moves most and which least (by the size of the placebo-corrected effect), by how much (their paired difference, in Δ and
after the placebo correction, with intervals), and whether that difference holds after the
stated correction (guards of one size, or whose difference the data do not decide, tie: no most or
least; `verdicts.separation`); then, for each guard, under which interventions its placebo-corrected effect
differs from 0.

Whether a difference "holds" is the decision record's (guardeval.estimators.verdicts.record,
`Decision.of` over the row's `equivalence…` record, decided by the compare or the estimator at
its α): it is read in one place, `decision`, and never re-derived. A row without a record carrying
`differs` (a quantity with no estimate: its p is undefined too) falls back to the decision
`verdicts.decisions` makes on the Holm-adjusted p of the row it belongs to at the α its
comparison was run at (the `alpha` of the compare result or the guard's report; for a pair of
guards, Holm over the interventions within the pair; for one guard, Holm over its interventions):
nothing here compares a p with α. Everything else here arranges numbers the comparison already
holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardeval.estimators.report.formats import interval, num, pval
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts.power import ALPHA
from guardeval.estimators.verdicts.record import Decision
from guardeval.estimators.verdicts.separation import SAME_SIZE, separate

PAIR_FAMILY = "Holm over the interventions, within the pair"
GUARD_FAMILY = "Holm over the guard's interventions"


def alpha_of(result: Mapping[str, Any]) -> float:
    """The level a compare result or a guard's report was decided at (the estimators' default
    for a record that predates the field)."""
    alpha = result.get("alpha")
    return float(alpha) if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) else ALPHA


def decision(verdict: Mapping[str, Any] | None, fallback: Decision) -> Decision:
    """Does a quantity differ from 0 after the stated correction? The one place a verdict is read:
    the decision record of `verdict` (an `equivalence…` record) when it carries `differs`, else
    `fallback`, the decision `verdicts.decisions` made on the row's Holm-adjusted p (its family
    named also where the record names none)."""
    if verdict is not None and "differs" in verdict:
        return _record({**verdict, "family": verdict.get("family") or fallback.family})
    return fallback


def _record(eq: Mapping[str, Any]) -> Decision:
    made = Decision.of(eq)
    assert made is not None     # a non-empty record always reads as one
    return made


def words(d: Decision) -> str:
    """The decision in the answer's words: 'p_adj 0.0006, <family>', or why there is none."""
    if d.differs is None:
        return "undefined (no paired base)"
    return f"p_adj {pval(d.p_adjusted)}, {d.family}"


def pair_decision(row: Mapping[str, Any], alpha: float) -> tuple[Decision, str]:
    """A compare pair row's headline decision and the family it falls back to naming: the
    difference of the placebo-corrected effects (or of Δ when the study has no placebo)."""
    if row.get("difference_minus_placebo") is not None:
        return decision(row.get("equivalence_minus_placebo"),
                        dc.decide_adjusted(row.get("p_holm_minus_placebo"), PAIR_FAMILY, alpha)), PAIR_FAMILY
    family = "Holm over the family, within the pair"
    return decision(row.get("equivalence"), dc.decide_adjusted(row.get("p_holm"), family, alpha)), family


def _flip(ci: Sequence[float] | None) -> list[float] | None:
    return None if ci is None else [-ci[1], -ci[0]]


def _pair_row(result: Mapping[str, Any], x: str, y: str, condition: str) -> tuple[dict[str, Any], bool]:
    """The pair row of `x` and `y` under `condition`, and whether its B − A is x − y."""
    for pair in result["pairs"]:
        if {pair["a"], pair["b"]} == {x, y}:
            row = next(r for r in pair["conditions"] if r["condition"] == condition)
            return row, pair["b"] == x
    raise KeyError((x, y))


def _oriented(row: Mapping[str, Any], key: str, same: bool) -> tuple[float | None, list[float] | None]:
    value, ci = row.get(key), row.get("ci_" + key)
    if value is None or same:
        return value, ci
    return -value, _flip(ci)


def _names(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + f" and {labels[-1]}"


def condition_answer(result: Mapping[str, Any], condition: str) -> dict[str, Any]:
    """Most and least sensitive guard under `condition` (by |headline effect|: the placebo-corrected
    effect, Δ without a placebo), the gap between them, and whether it holds after the correction.
    Who is most and least is the separation decision (`verdicts.separation`) over the pairs'
    decision records: equal sizes, or a gap the data do not decide, are a tie, and the answer is
    the same whatever order the guards came in."""
    board = result["leaderboard"][condition]
    alpha = alpha_of(result)
    by = {e["label"]: e for e in board}

    def decided(x: str, y: str) -> Decision:
        return pair_decision(_pair_row(result, x, y, condition)[0], alpha)[0]

    sep = separate({e["label"]: e["headline_effect"] for e in board}, decided)
    if sep.top is None or sep.bottom is None:
        return {"condition": condition, "text": f"{condition}: undefined (fewer than two guards with paired bases)."}
    top, bottom = by[sep.top], by[sep.bottom]
    row, same = _pair_row(result, sep.top, sep.bottom, condition)
    gap, gap_ci = _oriented(row, "difference", same)
    gap_c, gap_c_ci = _oriented(row, "difference_minus_placebo", same)
    d = sep.decision if sep.decision is not None else pair_decision(row, alpha)[0]
    corrected = gap_c is not None
    holds = "holds" if d.differs else "is not shown" if d.differs is False else "is undefined"
    t, b = sep.top, sep.bottom

    def effect(e: Mapping[str, Any]) -> str:
        if e["delta_minus_placebo"] is None:
            return f"Δ {num(e['delta'])} {interval(e['ci'])}"
        return (f"{num(e['delta_minus_placebo'])} {interval(e['ci_minus_placebo'])} after the placebo correction, "
                f"Δ {num(e['delta'])}")

    def effects(labels: Sequence[str]) -> str:
        return "; ".join(f"{g} {effect(by[g])}" if len(labels) > 1 else effect(by[g]) for g in labels)

    by_how_much = (f"{num(gap_c)} {interval(gap_c_ci)} after the placebo correction (Δ: {num(gap)} "
                   f"{interval(gap_ci)})" if corrected else f"{num(gap)} {interval(gap_ci)} in Δ (no placebo)")
    decided_words = f"The difference {holds} after the stated correction ({words(d)})."
    either = [g for g in sep.most if g in sep.least]
    if sep.separated and either:
        # The ends are separated, a guard between them from neither: no guard alone at either end.
        text = (f"{condition}: {t} moves more than {b} ({t} {effect(top)}; {b} {effect(bottom)}), but the data "
                f"separate {'; '.join(f'{g} ({effect(by[g])})' for g in either)} from neither, so no guard alone is "
                f"the most or the least sensitive (most: {_names(list(sep.most))}; least: {_names(list(sep.least))}); "
                f"{t} − {b}: {by_how_much}. {decided_words}")
    elif sep.separated:
        most, least = list(sep.most), list(sep.least)
        shared = ", not separated from each other"
        text = (f"{condition}: {_names(most)} {'is' if len(most) == 1 else 'are'} the most sensitive"
                f"{shared if len(most) > 1 else ''} ({effects(most)}), {_names(least)} the least"
                f"{shared if len(least) > 1 else ''} ({effects(least)}); {t} − {b}: {by_how_much}. {decided_words}")
    elif sep.equal_sizes:
        names = sorted(g for g in by if by[g]["headline_effect"] is not None)
        text = (f"{condition}: the guards tie: {_names(names)} are equally sensitive (the same size of effect, "
                f"{effect(top)}); the data give them a shared rank, no most or least; {t} − {b}: {by_how_much}. "
                f"{decided_words}")
    else:
        def same_size(e: Mapping[str, Any]) -> list[str]:
            return [g for g in sorted(by) if by[g]["headline_effect"] is not None
                    and abs(abs(by[g]["headline_effect"]) - abs(e["headline_effect"])) <= SAME_SIZE]

        ends = (f"the largest effect ({_names(same_size(top))}, {effect(top)}) from the smallest "
                f"({_names(same_size(bottom))}, {effect(bottom)})")
        said = (f"the guards tie: the data do not separate {ends}" if sep.kind == "tie"
                else f"no decision separates {ends} (their difference is not tested)")
        text = (f"{condition}: {said}, so no guard is the most or the least sensitive; {t} − {b}: {by_how_much}. "
                f"{decided_words}")
    # A guard is named alone only where it holds its place alone.
    return {"condition": condition, "most": sep.most[0] if len(sep.most) == 1 else None,
            "least": sep.least[0] if len(sep.least) == 1 else None,
            "most_guards": list(sep.most), "least_guards": list(sep.least), "tied": not sep.separated,
            "separation": sep.kind, "top": t, "bottom": b, "top_effect": top["headline_effect"],
            "bottom_effect": bottom["headline_effect"], "top_delta": top["delta"], "bottom_delta": bottom["delta"],
            "difference": gap, "ci_difference": gap_ci,
            "difference_minus_placebo": gap_c, "ci_difference_minus_placebo": gap_c_ci,
            "holds": d.differs, "p_adjusted": d.p_adjusted, "family": d.family, "text": text}


def guard_answer(label: str, report: Mapping[str, Any]) -> dict[str, Any]:
    """Under which interventions one guard's placebo-corrected effect differs from 0 (its own
    estimate; Holm over its interventions of the family)."""
    placebo = report["placebo"]
    fam = [c for c in report["family"] if c != placebo]
    by = {c["condition"]: c for c in report["contrasts"]}
    if placebo is None:
        return {"label": label, "effects": [], "undefined": [], "checked": [],
                "text": f"{label}: no placebo, so no corrected effect."}
    alpha = alpha_of(report)
    fallback = dict(zip(fam, dc.decide_pvalues([by[c]["p_minus_placebo"] for c in fam], GUARD_FAMILY, alpha)))
    found, checked = [], []
    for c in fam:
        d = decision(by[c].get("equivalence_minus_placebo"), fallback[c])
        entry = {"condition": c, "delta_minus_placebo": by[c]["delta_minus_placebo"],
                 "ci_minus_placebo": by[c]["ci_minus_placebo"], "differs": d.differs, "p_adjusted": d.p_adjusted,
                 "family": d.family}
        checked.append(entry)
        if d.differs:
            found.append(entry)
    undefined = [e["condition"] for e in checked if e["differs"] is None]
    defined = [c for c in fam if c not in undefined]
    if found:
        listed = "; ".join(f"{e['condition']} {num(e['delta_minus_placebo'])} {interval(e['ci_minus_placebo'])}"
                           for e in found)
        text = f"{label}: a placebo-corrected effect under {listed} ({GUARD_FAMILY}, α {alpha:g})."
    elif not defined:
        text = f"{label}: no placebo-corrected effect can be estimated (no base paired under the question)."
    else:
        text = (f"{label}: no placebo-corrected effect under any of {', '.join(defined)} ({GUARD_FAMILY}, "
                f"α {alpha:g}).")
    if undefined and defined:
        text = text[:-1] + f"; undefined under {', '.join(undefined)} (no paired base)."
    return {"label": label, "effects": [e["condition"] for e in found], "undefined": undefined, "checked": checked,
            "text": text}


def answer(result: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The study's answer: per intervention (the family, less the placebo), then per guard."""
    placebo = result["placebo"]
    conditions = [c for c in result["family"] if c != placebo and c in result["leaderboard"]]
    per_condition = [condition_answer(result, c) for c in conditions]
    per_guard = [guard_answer(label, reports[label]) for label in (i["label"] for i in result["inputs"])]
    held = [a for a in per_condition if a.get("separation") == "separated"]
    if held:
        def gap(a: Mapping[str, Any]) -> float:
            return abs(a["difference_minus_placebo"] if a["difference_minus_placebo"] is not None else a["difference"])

        # The largest gap; equal gaps in the family's order (never the guards' order).
        big = max(held, key=gap)
        # (a guard the data place at neither end is left out of both)
        most = [g for g in big["most_guards"] if g not in big["least_guards"]]
        least = [g for g in big["least_guards"] if g not in big["most_guards"]]
        lead = (f"The guards differ most under {big['condition']}: {_names(most)} "
                f"{'moves' if len(most) == 1 else 'move'} {gap(big):.3f} more than {_names(least)}; {len(held)} of "
                f"{len(per_condition)} interventions separate the most and the least sensitive guard after the "
                "stated correction.")
    else:
        lead = (f"No intervention separates the most and the least sensitive guard after the stated correction "
                f"({len(per_condition)} tested).")
    return {"lead": lead, "conditions": per_condition, "guards": per_guard,
            "rule": ("most and least sensitive by the size of the headline effect under each intervention (the "
                     "placebo-corrected effect; Δ without a placebo); the difference between them is their paired "
                     "difference on bases paired in both, and it holds when its Holm-adjusted p is below "
                     f"{alpha_of(result):g} within its stated family; guards of one size, or whose difference does "
                     "not hold, tie (no most or least)"),
            "text": [lead, *(a["text"] for a in per_condition), *(g["text"] for g in per_guard)]}
