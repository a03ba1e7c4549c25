"""`compare --fail-on differs`: a gate for pipelines (issue 35; docs/how-to/gate-a-guard-update.md).

The gate trips when any headline difference — B − A of the placebo-corrected effect (of Δ when
there is no placebo) — differs from 0 after Holm within the family the comparison states. It
reads the same decision records the printed verdicts read, so the gate and the text never
disagree. An input with more failed and quarantined calls than the limit (its `excluded` record
is not publishable) leaves the gate unable to vouch either way: it exits EXIT_CANNOT_VOUCH (4),
whatever the differences say, and whether or not --allow-unpublishable was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from guardeval.estimators.compare.compare_types import GateRecord, Tripped, Unpublishable
from guardeval.estimators.verdicts.decisions import significant

FailOn = Literal["differs"]
FAIL_ON: tuple[FailOn, ...] = ("differs",)
EXIT_TRIPPED = 3
EXIT_CANNOT_VOUCH = 4


def gate(result: Mapping[str, Any], fail_on: FailOn) -> GateRecord:
    """{fail_on, quantity, family, tripped: [{a, b, condition, difference, p_holm}], exit}."""
    corrected = "difference_minus_placebo" in (result.get("families") or {})
    quantity = "difference_minus_placebo" if corrected else "difference"
    eq_key = "equivalence_minus_placebo" if corrected else "equivalence"
    family = ((result.get("families") or {}).get(quantity) or {}).get("name")
    tripped: list[Tripped] = []
    for pair in result["pairs"]:
        for r in pair["conditions"]:
            eq = r.get(eq_key)
            if significant(eq):
                tripped.append({"a": pair["a"], "b": pair["b"], "condition": r["condition"],
                                "difference": r.get(quantity), "p_holm": eq.get("p_adjusted")})
    past: list[Unpublishable] = [{"label": i["label"], "failed": e["failed"], "quarantined": e["quarantined"], "share": e["share"],
             "limit": e["limit"]}
            for i in result.get("inputs") or [] if isinstance(e := i.get("excluded"), Mapping) and not e["publishable"]]
    return {"fail_on": fail_on, "quantity": quantity, "family": family, "tripped": tripped, "unpublishable": past,
            "exit": EXIT_CANNOT_VOUCH if past else EXIT_TRIPPED if tripped else 0}


def gate_line(g: Mapping[str, Any]) -> str:
    """The stderr line that explains the exit status."""
    what = "B − A of Δ − placebo" if g["quantity"] == "difference_minus_placebo" else "B − A of Δ"
    if g.get("unpublishable"):
        said = ", ".join(f"{x['label']} ({x['failed']} failed, {x['quarantined']} quarantined: {x['share']:.2%} > "
                         f"{x['limit']:.0%})" for x in g["unpublishable"])
        return (f"guardeval: --fail-on {g['fail_on']}: cannot vouch for the comparison: calls left out past the "
                f"limit in {said} (exit {EXIT_CANNOT_VOUCH})")
    if not g["tripped"]:
        return (f"guardeval: --fail-on {g['fail_on']}: no {what} differs after Holm over {g['family']} (exit 0)")
    rows = ", ".join(f"{t['b']} − {t['a']}: {t['condition']} (p_Holm {t['p_holm']:.4g})" for t in g["tripped"])
    return (f"guardeval: --fail-on {g['fail_on']}: {len(g['tripped'])} {what} differ after Holm over "
            f"{g['family']}: {rows} (exit {EXIT_TRIPPED})")
