"""Typed records of a comparison (`compare --json`; docs/estimators.md, compare). Proportions
everywhere; None where a quantity is undefined (never NaN)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from guardeval.estimators.compare.leaderboard import Entry
from guardeval.estimators.types import Excluded, Family, Power, Quarantine
from guardeval.estimators.verdicts.equivalence import Equivalence
from guardeval.inspect_logs import LogIdentity

Interval = list[float]


class GuardSeen(TypedDict):
    """A run's guard as a comparison names it (estimators/runs.compare_input)."""

    name: object                    # the recorded config's, as recorded
    model: object
    answered_by: dict[str, int]
    named_by: str


class InputSource(TypedDict, total=False):
    """Where one input's decisions came from: a run (`run` …), a decision table (`table`,
    `sha256`) or Inspect logs (`inspect_logs`)."""

    run: str
    run_id: str
    schedule_sha256: str | None
    verified: bool
    verify_skipped: list[dict[str, str]]
    guard: GuardSeen
    table: str
    sha256: str
    inspect_logs: list[LogIdentity]


def no_source() -> InputSource:
    return {}


class HolmFamily(TypedDict):
    """A fixed family a set of reversals is decided in (Holm at `alpha`)."""

    size: int
    adjustment: str
    alpha: float
    name: str


class CompareFamily(Family):
    """A decision family of the comparison: the conditions it holds, besides Family's fields."""

    conditions: list[str]


class InputPlaceboCheck(TypedDict):
    """One input's placebo Δ, decided in its own Δ family (`failed`: a failed control)."""

    label: str
    condition: str
    delta: float | None
    ci: Interval | None
    p_holm: float | None
    family: str
    failed: bool


class Bootstrap(TypedDict):
    n: int
    seed: int
    paired: str


class Tripped(TypedDict):
    a: str
    b: str
    condition: str
    difference: float | None
    p_holm: float | None


class Unpublishable(TypedDict):
    label: str
    failed: int
    quarantined: int
    share: float
    limit: float


class GateRecord(TypedDict):
    """`compare --fail-on`: which headline rows tripped it, which inputs it cannot vouch for."""

    fail_on: str
    quantity: str
    family: str | None
    tripped: list[Tripped]
    unpublishable: list[Unpublishable]
    exit: int


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
    family: HolmFamily


class InputRecord(TypedDict):
    label: str
    source: InputSource
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
    families: dict[str, CompareFamily]   # the decision families (compare._decide)
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
    ranking_family: HolmFamily
    leaderboard: dict[str, list[Entry]]
    ranking_stability: RankingStability
    missing: str
    complete: bool
    publishable: bool
    allow_unpublishable: bool
    bootstrap: Bootstrap
    cannot_decide: list[str]                 # families this design cannot decide, in words (said first)
    placebo_checks: list[InputPlaceboCheck]       # each input's placebo Δ in its own Δ family (failed: said first)
    inference: dict[str, str]
    gate: NotRequired[GateRecord]            # `compare --fail-on`: which headline rows tripped it
    run_a: NotRequired[InputSource]         # set by the CLI: the first two inputs' source
    run_b: NotRequired[InputSource]
