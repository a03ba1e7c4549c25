"""One rule decides (issue 49 §1): every significance decision — a verdict, a failed placebo, a
changed ranking, an end of a range, a study's answer (its fallback included), the gate — is
`verdicts.decisions.rejects`, made in `estimators/verdicts/` and read from its record.

Each test runs a comparison, two estimates, a study's answer and the gate under the rule as
shipped and under its opposite (a p at or above α "differs"), and checks every surface's decision
against the rule in force. A surface that compares a p with α on its own keeps its own answer
under one of the two rules and fails here; tests/test_layers.py holds the same line statically."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from guardeval.estimators import estimate
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.gate import gate
from guardeval.estimators.verdicts import decisions
from guardeval.study.answer import answer

pytestmark = pytest.mark.fast

ALPHA = 0.05
CONDITIONS = ("original", "alias", "marker", "format_placebo")
# A's placebo moves it (a failed control); alias and marker move the guards in opposite orders (a
# reversed ranking of conditions and of guards); the guards' block rates differ under the baseline.
RATES = {"A": {"original": 0.3, "alias": 0.6, "marker": 0.3, "format_placebo": 0.45},
         "B": {"original": 0.4, "alias": 0.4, "marker": 0.7, "format_placebo": 0.4}}

Rule = Callable[[float | None, float], "bool | None"]


def shipped(p: float | None, alpha: float) -> bool | None:
    return None if p is None else p < alpha


def opposite(p: float | None, alpha: float) -> bool | None:
    return None if p is None else p >= alpha


def table(rates: Mapping[str, float], seed: int, n_inter: int = 24, reps: int = 2) -> list[dict[str, Any]]:
    """A complete decision table: n_inter interactions of two bases; condition c blocks with
    probability rates[c]."""
    rng = np.random.default_rng(seed)
    return [{"base_id": f"b{g:02d}-{j}", "interaction_id": f"g{g:02d}", "domain": f"D{g % 2}", "condition": c,
             "repetition": r, "status": "ok", "decision": int(rng.random() < rates[c])}
            for g in range(n_inter) for j in range(2) for c in CONDITIONS for r in range(reps)]


def decided(rule: Rule, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every output under `rule` (swapped in for the shipped one)."""
    monkeypatch.setattr(decisions, "rejects", rule)
    tables = {label: table(rates, seed) for seed, (label, rates) in enumerate(RATES.items(), start=1)}
    result = compare_inputs([CompareInput(k, t) for k, t in tables.items()], n_boot=200, seed=3, alpha=ALPHA)
    reports = {k: estimate(t, n_boot=200, seed=3, alpha=ALPHA) for k, t in tables.items()}
    # Records that predate the decision fields: the answer falls back to the rows' Holm p.
    bare_result, bare_reports = copy.deepcopy(result), copy.deepcopy(reports)
    for row in (r for pr in bare_result["pairs"] for r in pr["conditions"]):
        row["equivalence"] = row["equivalence_minus_placebo"] = None
    for c in (c for rep in bare_reports.values() for c in rep["contrasts"]):
        del c["equivalence_minus_placebo"]
    return {"result": result, "reports": reports, "answer": answer(result, reports),
            "bare": answer(bare_result, bare_reports), "gate": gate(result, "differs")}


def surfaces(out: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(where, what it decided, the adjusted p it decided on) for every decision of every surface;
    for a ranking, the adjusted p of every reversal it lists (it changed when one is decided)."""
    result = out["result"]
    rows = [(pr, r) for pr in result["pairs"] for r in pr["conditions"]]
    for _, r in rows:
        for key in ("equivalence", "equivalence_minus_placebo"):
            eq = r[key]
            if eq is not None and eq["holm_m"] is not None:
                yield f"compare record {key}: {r['condition']}", eq["differs"], eq["p_adjusted"]
        for quantity, ends in r["bounds"]["ends"].items():
            for side, e in ends.items():
                if e is not None and e["p_holm"] is not None:
                    yield f"compare bound {quantity} {side}: {r['condition']}", e["verdict"] in ("raises", "lowers"), \
                        e["p_holm"]
    for check in result["placebo_checks"]:
        yield f"compare placebo check: {check['label']}", check["failed"], check["p_holm"]
    for pr in result["pairs"]:
        yield (f"compare ranking of conditions: {pr['a']}, {pr['b']}", pr["ranking_changed"],
               [x["p_holm"] for x in pr["reversed_pairs"]])
    for c, s in result["ranking_stability"]["by_condition"].items():
        yield f"compare order of guards: {c}", s["ranking_changed"], [x["p_holm"] for x in s["reversed_pairs"]]
    for label, report in out["reports"].items():
        pc = report["placebo_check"]
        yield f"estimate placebo check: {label}", pc["failed"], pc["p_holm"]
    for which in ("answer", "bare"):
        for a in out[which]["conditions"]:
            yield f"study {which} holds: {a['condition']}", a["holds"], a["p_adjusted"]
        for g in out[which]["guards"]:
            for e in g["checked"]:
                yield f"study {which} guard {g['label']}: {e['condition']}", e["differs"], e["p_adjusted"]
    tripped = {(t["a"], t["b"], t["condition"]) for t in out["gate"]["tripped"]}
    for pr, r in rows:
        eq = r["equivalence_minus_placebo"]
        if eq is not None and eq["holm_m"] is not None:
            yield f"gate: {r['condition']}", (pr["a"], pr["b"], r["condition"]) in tripped, eq["p_adjusted"]


def expected(rule: Rule, where: str, p: Any) -> bool | None:
    """What `rule` decides there: a ranking changed when one of its reversals is decided; a flag
    (a record's `differs`, a placebo's `failed`, an end's sign, a gate's trip) is False for an
    undefined p; the study's answer says None (undefined) for one."""
    if where.startswith(("compare ranking", "compare order")):
        return any(rule(x, ALPHA) for x in p)
    if where.startswith(("compare placebo", "estimate placebo", "compare record", "compare bound", "gate")):
        return bool(rule(p, ALPHA))
    return rule(p, ALPHA)


def kind(where: str) -> str:
    return where.split(":")[0]


KINDS = ("compare record equivalence", "compare record equivalence_minus_placebo", "compare placebo check",
         "compare ranking of conditions", "compare order of guards", "estimate placebo check", "study answer holds",
         "study bare holds", "study answer guard A", "study bare guard A", "study bare guard B", "gate")


@pytest.mark.parametrize("rule", [shipped, opposite])
def test_every_surface_decides_by_the_one_rule(rule: Rule, monkeypatch: pytest.MonkeyPatch) -> None:
    out = decided(rule, monkeypatch)
    seen = list(surfaces(out))
    wrong = [(where, said, p) for where, said, p in seen if said != expected(rule, where, p)]
    assert wrong == [], f"decided outside verdicts/ (under the {rule.__name__} rule): {wrong}"
    # Each kind of decision is there to be checked, with a p to decide on.
    assert set(KINDS) <= {kind(where) for where, _, p in seen if p}


def test_the_two_rules_decide_differently_on_every_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test above can fail only if each surface's decision moves with the rule: it does, on
    # this data, for every kind of decision (a surface that decided on its own would not have).
    said = {rule.__name__: {where: value for where, value, _ in surfaces(decided(rule, monkeypatch))}
            for rule in (shipped, opposite)}
    assert said["shipped"].keys() == said["opposite"].keys()
    moved = {kind(where) for where in said["shipped"] if said["shipped"][where] != said["opposite"][where]}
    assert set(KINDS) <= moved, set(KINDS) - moved
