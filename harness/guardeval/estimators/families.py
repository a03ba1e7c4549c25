"""Condition families (docs/estimators.md, Families): when a cohort's record names each
condition's family (names, arguments, schemas, markers), the estimate decides within each family.

* Each intervention is corrected by its family's own placebo (`schema_placebo` for the schemas
  family), else by the placebo without a family (`format_placebo`), else it has none and its Δ
  is its headline. `--placebo` names one placebo for every family.
* Holm runs over each family's members: Δ over the family's conditions (its placebo too, whose Δ
  is that placebo's check), Δ − placebo over its interventions. Every decision record names its
  family ("the arguments family (3 interventions)"); conditions without a family form the
  `general` family.
* The worst case over a family: the lowest Δ (the representation under which the guard blocks
  least, the seed's "maximum ASR over representations"), with a simultaneous interval: each
  member's interval at 1 − α/m (Bonferroni over the family's m interventions), so all of them
  cover at once with probability ≥ 1 − α, and then [min lower, min upper] covers the minimum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardeval.estimators import effects as fx
from guardeval.estimators.frame import Frame
from guardeval.estimators.quantities import Quantities
from guardeval.estimators.types import AllWithin, Contrast, Family
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts.decidable import family_decidability

GENERAL = "general"
WORST_RULE = ("the lowest Δ over the family's interventions (the representation under which the guard blocks "
              "least); simultaneous interval: every member's interval at 1 − α/m (Bonferroni over the m "
              "interventions, from the same procedure as its own interval), then [min of the lower ends, min of "
              "the upper ends], which covers the smallest true Δ whenever all m cover, with probability ≥ 1 − α")


def family_of(condition: str, families: Mapping[str, str]) -> str:
    return families.get(condition) or GENERAL


def placebo_of(contrasts: Sequence[str], families: Mapping[str, str], roles: Mapping[str, str],
               general: str | None, explicit: bool) -> dict[str, str | None]:
    """Each contrast's placebo: none for a placebo; `general` for everything when it was named
    (`--placebo`); else its family's own placebo, else `general` (maybe None)."""
    own: dict[str, str] = {}
    for c in contrasts:
        if roles.get(c) == "placebo" and c in families:
            own.setdefault(families[c], c)
    out: dict[str, str | None] = {}
    for c in contrasts:
        if roles.get(c) == "placebo" or c == general:
            out[c] = None
        elif explicit:
            out[c] = general
        else:
            out[c] = own.get(family_of(c, families), general)
    return out


def family_members(contrasts: Sequence[str], families: Mapping[str, str]) -> dict[str, list[str]]:
    """{family: its conditions, in report order}."""
    out: dict[str, list[str]] = {}
    for c in contrasts:
        out.setdefault(family_of(c, families), []).append(c)
    return out


def family_placebos(contrasts: Sequence[str], families: Mapping[str, str], placebos: Mapping[str, str | None],
                    roles: Mapping[str, str]) -> dict[str, str | None]:
    """{family: the placebo its interventions are corrected by (None: none)}, for the families
    with an intervention (a family of placebos only corrects nothing)."""
    out: dict[str, str | None] = {}
    for fam, members in family_members(contrasts, families).items():
        inter = [c for c in members if roles.get(c) != "placebo"]
        if inter:
            out[fam] = next((p for c in inter if (p := placebos.get(c)) is not None), None)
    return out


def placebo_note(by_family: Mapping[str, str | None]) -> str:
    parts = [f"{fam}: {p or 'none (its Δ is the headline)'}" for fam, p in by_family.items()]
    return "placebo by condition family: " + "; ".join(parts)


def family_label(fam: str, members: Sequence[str], kind: str) -> str:
    """'the arguments family (3 interventions)': how a verdict names its family."""
    return f"the {fam} family ({dc.family_name(members, kind)})"


def decide_by_family(contrasts: list[Contrast], fam: Sequence[str], families: Mapping[str, str],
                     roles: Mapping[str, str], margin: float,
                     alpha: float) -> tuple[dict[str, Family], dict[str, AllWithin]]:
    """As `core._decide`, within each condition family: `families` keys are
    '<quantity>:<family>', each record carrying its `quantity` and `condition_family`."""
    by_name = {x["condition"]: x for x in contrasts}
    out: dict[str, Family] = {}
    within: dict[str, AllWithin] = {}
    decided_delta: set[str] = set()
    decided_corr: set[str] = set()
    for name, members in family_members([c for c in fam], families).items():
        rec = dc.family_record(members, family_label(name, members, "condition"), "delta")
        rec["condition_family"] = name
        eqs = [by_name[c]["equivalence"] for c in members]
        dc.decide_family(eqs, rec["name"], alpha)
        rec.update(family_decidability(eqs, alpha))
        out[f"delta:{name}"] = rec
        decided_delta.update(members)
        within[f"delta:{name}"] = dc.all_within({c: by_name[c]["equivalence"] for c in members},
                                                f"{name} condition's Δ", margin, alpha)
        corr = [c for c in members if roles.get(c) != "placebo" and by_name[c]["headline"] == "delta_minus_placebo"]
        if corr:
            crec = dc.family_record(corr, family_label(name, corr, "intervention"), "delta_minus_placebo")
            crec["condition_family"] = name
            ceqs = [by_name[c]["equivalence_minus_placebo"] for c in corr]
            dc.decide_family(ceqs, crec["name"], alpha)
            crec.update(family_decidability(ceqs, alpha))
            out[f"delta_minus_placebo:{name}"] = crec
            decided_corr.update(corr)
            within[f"delta_minus_placebo:{name}"] = dc.all_within(
                {c: by_name[c]["equivalence_minus_placebo"] for c in corr},
                f"{name} intervention's Δ − placebo", margin, alpha)
    for x in contrasts:
        x["condition_family"] = family_of(x["condition"], families)
    mark_decided(contrasts, decided_delta, decided_corr)
    return out, within


def mark_decided(contrasts: list[Any], decided_delta: set[str], decided_corr: set[str]) -> None:
    """Each contrast's p_Holm from the family that decided it, in place; a quantity no family
    decided is marked outside (shown, not tested). With or without condition families."""
    for x in contrasts:
        eq, eqc = x["equivalence"], x["equivalence_minus_placebo"]
        if x["condition"] not in decided_delta:
            dc.outside(eq)
        elif eq is not None:
            x["p_holm"] = eq["p_adjusted"]
        if x["condition"] not in decided_corr:
            dc.outside(eqc)
        elif eqc is not None:
            x["p_holm_minus_placebo"] = eqc["p_adjusted"]


def worst_cases(f: Frame, fam: Sequence[str], families: Mapping[str, str], roles: Mapping[str, str],
                n_boot: int, seed: int, alpha: float) -> dict[str, Any]:
    """{family: its worst case} over each family's interventions (see the module's docstring)."""
    out: dict[str, Any] = {}
    p = f.p
    for name, members in family_members([c for c in fam], families).items():
        inter = [c for c in members if roles.get(c) != "placebo"]
        if not inter:
            continue
        m = len(inter)
        qs = Quantities()
        for c in inter:
            ci = f.idx(c)
            qs.add(("delta", c), p[:, ci] - p[:, f.b], f.paired(ci))
        level = 1 - alpha / m
        est = qs.run(f.design.base_cluster, f.design.cluster_domain, n_boot, seed, None, level)
        defined = {c: est[("delta", c)] for c in inter if est[("delta", c)]["estimate"] is not None
                   and est[("delta", c)]["ci"] is not None}
        if not defined:
            out[name] = {"members": inter, "condition": None, "delta": None, "ci": None, "level": 1 - alpha,
                         "member_level": level, "rule": WORST_RULE}
            continue
        worst = min(defined, key=lambda c: (defined[c]["estimate"], inter.index(c)))
        cis = [q["ci"] for q in defined.values() if q["ci"] is not None]   # every one (`defined`)
        lo = min(float(ci[0]) for ci in cis)
        hi = min(float(ci[1]) for ci in cis)
        out[name] = {"members": inter, "condition": worst, "delta": defined[worst]["estimate"],
                     "block_rate": fx.block_rate(p, f.idx(worst)), "ci": [lo, hi], "level": 1 - alpha,
                     "member_level": level, "member_ci": {c: q["ci"] for c, q in defined.items()},
                     "n_undefined": m - len(defined), "rule": WORST_RULE}
    return out
