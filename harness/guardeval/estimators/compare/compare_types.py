"""Typed records of a comparison (`compare --json`; docs/estimators.md, compare). Proportions
everywhere; None where a quantity is undefined (never NaN)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from guardeval.estimators.compare.leaderboard import Entry
from guardeval.estimators.types import Excluded, Family, Power, Quarantine
from guardeval.estimators.verdicts.equivalence import Equivalence

Interval = list[float]


class PairRow(TypedDict):
    """One condition of one pair of inputs: B − A of Δ and of the placebo-corrected effect."""

    condition: str
    in_family: bool
    in_family_minus_placebo: bool
    delta_a: float | None
    ci_a: Interval | None
    n_bases_a: int
    delta_b: float | None
    ci_b: Interval | None
    n_bases_b: int
    difference: float | None
    ci_difference: Interval | None
    p_difference: float | None
    p_holm: float | None
    p_holm_across_pairs: float | None
    p_holm_all_pairs: float | None
    n_bases_difference: int
    n_clusters_difference: int
    equivalence: Equivalence | None
    delta_minus_placebo_a: float | None
    ci_minus_placebo_a: Interval | None
    delta_minus_placebo_b: float | None
    ci_minus_placebo_b: Interval | None
    difference_minus_placebo: float | None
    ci_difference_minus_placebo: Interval | None
    p_difference_minus_placebo: float | None
    p_holm_minus_placebo: float | None
    p_holm_across_pairs_minus_placebo: float | None
    p_holm_all_pairs_minus_placebo: float | None
    n_bases_difference_minus_placebo: int | None
    equivalence_minus_placebo: Equivalence | None
    bounds: NotRequired[dict[str, Any]]   # B − A's range over both inputs' failed calls (compare._pair_bounds)


class Reversal(TypedDict):
    """A pair of conditions (`conditions`) or of guards (`guards`) whose order reversed in the
    point estimates, with the test that it reversed (`p_reversal`: intersection–union) and its
    Holm p over the fixed family of every pair; the difference of differences is description."""

    conditions: NotRequired[list[str]]
    guards: NotRequired[list[str]]
    difference_of_differences: float | None
    ci: Interval | None
    p: float | None
    p_order_a: NotRequired[float | None]
    p_order_b: NotRequired[float | None]
    p_order_baseline: NotRequired[float | None]
    p_order_condition: NotRequired[float | None]
    p_reversal: float
    p_holm: float | None


class Pair(TypedDict):
    a: str
    b: str
    conditions: list[PairRow]
    ranking_a: list[str]
    ranking_b: list[str]
    reversed_pairs: list[Reversal]
    ranking_changed: bool


class ConditionStability(TypedDict):
    kendall_tau: float | None
    kendall_tau_ci: Interval | None
    order_baseline: list[str]
    order_condition: list[str]
    reversed_pairs: list[Reversal]
    ranking_changed: bool


class RankingStability(TypedDict):
    order_by: str
    rule: str
    by_condition: dict[str, ConditionStability]
    family: dict[str, Any]


class InputRecord(TypedDict):
    label: str
    source: dict[str, Any]
    complete: bool
    quarantine: Quarantine
    excluded: Excluded            # failed + quarantined calls against one limit (estimators/excluded.py)


class CompareResult(TypedDict):
    inputs: list[InputRecord]
    baseline: str
    placebo: str | None
    failure_rule: str
    family: list[str]
    family_minus_placebo: list[str]
    alpha: float
    families: dict[str, Family]     # the decision families (compare._decide)
    margin: float
    power: Power
    n_bases: int
    n_interactions: int
    difference: str
    headline: str
    pairs: list[Pair]
    a: str
    b: str
    conditions: list[PairRow]
    ranking_a: list[str]
    ranking_b: list[str]
    ranking_changed: bool
    reversed_pairs: list[Reversal]
    ranking_rule: str
    ranking_family: dict[str, Any]
    leaderboard: dict[str, list[Entry]]
    ranking_stability: RankingStability
    missing: str
    complete: bool
    publishable: bool
    allow_unpublishable: bool
    bootstrap: dict[str, Any]
    cannot_decide: list[str]                 # families this design cannot decide, in words (said first)
    placebo_checks: list[dict[str, Any]]     # each input's placebo Δ in its own Δ family (failed: said first)
    inference: dict[str, str]
    gate: NotRequired[dict[str, Any]]        # `compare --fail-on`: which headline rows tripped it
    run_a: NotRequired[dict[str, Any]]      # set by the CLI: the first two inputs' source
    run_b: NotRequired[dict[str, Any]]
