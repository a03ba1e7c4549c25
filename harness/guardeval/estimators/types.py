"""Typed records of the estimate report (report.json = `estimate --json`; docs/estimators.md,
Output). Proportions everywhere; None where a quantity is undefined (never NaN)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from guardeval.estimators.accuracy import Units
from guardeval.estimators.verdicts.equivalence import Equivalence

Interval = list[float]          # [low, high]
Counts = dict[str, int]


class SignTest(TypedDict):
    negative: int
    positive: int
    tie: int
    p: float


class LeaveOneOut(TypedDict):
    min: float | None
    max: float | None
    n_tools: int


class Decidability(TypedDict):
    """Whether a family can reach a decision at all (verdicts/decidable.family_decidability)."""

    decidable: bool | None
    p_min: float | None
    threshold: float
    n_interactions: int | None
    interactions_needed: int | None


class PlaceboCheck(TypedDict):
    """A placebo's own Δ, decided in the Δ family (estimators/core.placebo_check): `failed` when
    it differs from 0 there, a failed control."""

    condition: str
    delta: float | None
    ci: list[float] | None
    p_holm: float | None
    family: str | None
    failed: bool


class Family(TypedDict):
    """One decision family (verdicts/decisions.family_record), with its decidability once decided."""

    quantity: str
    members: list[str]
    size: int
    name: str
    adjustment: str
    condition_family: NotRequired[str]   # with condition families: the family it is decided in
    decidable: NotRequired[bool | None]
    p_min: NotRequired[float | None]
    threshold: NotRequired[float]
    n_interactions: NotRequired[int | None]
    interactions_needed: NotRequired[int | None]


class AllWithin(TypedDict):
    """'Every member within ±M' over one family (verdicts/decisions.all_within)."""

    claim: str
    members: list[str]
    margin: float
    alpha: float
    holds: bool
    max_p_tost: float | None
    underpowered: list[str]
    rule: str


class Power(TypedDict):
    """The report's `power` key (verdicts/decisions.power_record)."""

    power: float
    alpha: float
    rule: str


class Quarantine(TypedDict):
    """Quarantined calls over the scheduled ones (estimators/quarantine.quarantine_summary)."""

    count: int
    fraction: float
    publishable: bool
    threshold: float
    by_reason: dict[str, int]


class DependsMember(TypedDict):
    difference: float | None        # the condition's share of failed calls minus the baseline's
    ci: Interval | None
    p: float | None
    p_holm: float | None
    method: str | None
    differs: bool
    equivalence: Equivalence | None


class Depends(TypedDict):
    """Do failed calls depend on the condition? (estimators/excluded.decide_depends)"""

    quantity: str
    family: str
    alpha: float
    rule: str
    members: dict[str, DependsMember]
    differs: bool
    verdict: str


class Excluded(TypedDict):
    """Failed and quarantined calls against one limit (estimators/excluded.excluded_record)."""

    failed: int
    quarantined: int
    share: float
    limit: float
    publishable: bool
    by_condition: dict[str, dict[str, int]]   # {condition: {failed, calls}}
    depends_on_condition: Depends


class End(TypedDict):
    """One end of a worst-case range (estimators/excluded.py): its estimate, interval and p."""

    estimate: float
    ci: Interval | None
    p: float | None
    method: NotRequired[str | None]   # absent on a compare pair's own difference (no failed call)


class DecidedEnd(End):
    """An end decided as its headline is (verdicts/robust.decide_ends)."""

    p_holm: float | None
    verdict: str      # verdicts/robust.EndVerdict


class EndPair(TypedDict):
    lo: DecidedEnd | None
    hi: DecidedEnd | None


class ContrastBounds(TypedDict):
    """A contrast's worst-case range over its failed calls, for Δ and for Δ − placebo, and whether
    each verdict holds at both ends (`robust`: the headline's)."""

    delta: Interval | None
    robust_delta: bool | None
    ends: dict[str, EndPair]        # {"delta": …, "corrected": …}
    corrected: Interval | None
    robust_corrected: bool | None
    robust: bool | None


class Contrast(TypedDict):
    """One condition against the baseline (an entry of `contrasts`)."""

    condition: str
    role: str
    in_family: bool
    delta: float | None
    ci: Interval | None
    p: float | None
    p_holm: float | None
    delta_minus_placebo: float | None
    ci_minus_placebo: Interval | None
    p_minus_placebo: float | None
    p_holm_minus_placebo: float | None
    condition_family: NotRequired[str]   # with condition families: the family it is decided in
    n_bases_minus_placebo: int | None
    headline: str                   # "delta_minus_placebo" or "delta": which record decides the row's star
    equivalence: Equivalence | None
    equivalence_minus_placebo: Equivalence | None
    increase: int
    decrease: int
    tie: int
    increase_minus_placebo: int | None
    decrease_minus_placebo: int | None
    tie_minus_placebo: int | None
    n_bases: int
    n_clusters: int
    by_rule: dict[str, float | None]
    by_rule_ci: dict[str, Interval | None]
    by_rule_minus_placebo: dict[str, float | None]
    block_rate: float | None
    same_round_flip_rate: float | None
    n_undefined_replicates: int | None
    sign_test: SignTest
    sign_test_minus_placebo: SignTest | None
    by_repetition: list[float | None]
    by_repetition_minus_placebo: list[float | None] | None
    flip_counts: Counts
    unanimous_shift: Counts
    accuracy_delta: float | None
    accuracy_delta_ci: Interval | None
    accuracy_delta_minus_placebo: float | None
    accuracy_delta_ci_minus_placebo: Interval | None
    leave_one_tool_out: LeaveOneOut | None
    leave_one_tool_out_minus_placebo: LeaveOneOut | None
    bounds: NotRequired[ContrastBounds]   # worst-case range over the failed calls (estimators/excluded.py)


class StratumContrast(TypedDict):
    delta: float | None
    ci: Interval | None
    n_bases: int
    increase: int
    decrease: int
    tie: int
    delta_minus_placebo: float | None
    ci_minus_placebo: Interval | None
    n_bases_minus_placebo: int | None
    increase_minus_placebo: int | None
    decrease_minus_placebo: int | None
    tie_minus_placebo: int | None


class Stratum(TypedDict):
    """One domain or one original label (an entry of `strata["domain"]` / `strata["label"]`)."""

    n_bases: int
    block_rate: dict[str, float | None]
    contrasts: dict[str, StratumContrast]


class Stability(TypedDict):
    repeat_disagreement: float | None
    unanimous_rate: float | None
    ci: Interval | None
    n_bases: int


class WorstCase(TypedDict):
    miss_rate_baseline: float | None
    miss_rate_baseline_ci: Interval | None
    miss_rate_any: float | None
    miss_rate_any_ci: Interval | None
    false_block_rate_baseline: float | None
    false_block_rate_baseline_ci: Interval | None
    false_block_rate_any: float | None
    false_block_rate_any_ci: Interval | None
    n_unsafe_bases: int
    n_safe_bases: int
    conditions: list[str]


class Drift(TypedDict):
    slope: float | None
    ci: Interval | None
    p: float | None


class Third(TypedDict):
    """One third of the run by dispatch time (estimators/order.part_summary)."""

    n_calls: int
    first_started: str | None       # ISO 8601, UTC
    last_started: str | None


class RetryRound(TypedDict):
    """The calls decided at one retry round (estimators/order.retried)."""

    round: int
    n_calls: int
    first_started: str | None
    last_started: str | None


class Coverage(TypedDict):
    """One condition's calls: scheduled, answered, counted, failed (by status), missing, quarantined."""

    expected: int
    received: int
    valid: int
    failed: int
    missing: int
    quarantined: int
    failures_by_status: dict[str, int]


class FlipRate(TypedDict):
    label: str
    by_condition: dict[str, float | None]


class Roc(TypedDict):
    """A score-based metric of one condition, weighted per row and per interaction."""

    row: float | None
    row_ci: Interval | None
    interaction: float | None
    interaction_ci: Interval | None


class Accuracy(Units):
    """One condition's accuracy against the labels (estimators/labelled.accuracy)."""

    row_accuracy: float | None
    row_accuracy_ci: Interval | None
    interaction_accuracy: float | None
    interaction_accuracy_ci: Interval | None
    auc: Roc | None                 # None: the guard gave no scores
    tpr_at_1pct_fpr: Roc | None
    n_scored: int


class Order(TypedDict):
    clock: str
    n_calls: int
    thirds: list[Third]
    by_dispatch_third: dict[str, list[float | None]]
    by_dispatch_third_ci: dict[str, list[Interval | None]]
    drift: dict[str, Drift]
    block_rate_by_dispatch_third: dict[str, list[float | None]]
    block_rate_drift: dict[str, Drift]
    retried_by_third: list[int]


class Retried(TypedDict):
    n_calls: int
    rounds: list[RetryRound]


class Bootstrap(TypedDict):
    n: int
    seed: int
    rng: str
    resampling: str
    interval: str
    p_value: str


class Report(TypedDict):
    """The whole estimate report."""

    n_bases: int
    n_calls: int
    n_interactions: int
    n_domains: int
    baseline: str
    placebo: str | None
    failure_rule: str
    failure_rules: list[str]
    missing: str
    family: list[str]
    alpha: float
    families: dict[str, Family]         # "delta", "delta_minus_placebo" (or "delta:<family>", …)
    margin: float
    power: Power
    equivalence_family: dict[str, AllWithin]  # the family-wide "every member within ±M" claims (decisions.all_within)
    complete: bool
    publishable: bool
    allow_partial: bool
    allow_unpublishable: bool
    notes: list[str]
    cannot_decide: list[str]                 # families this design cannot decide, in words (said first)
    placebo_check: PlaceboCheck | None       # the placebo's own Δ in the Δ family: failed = it moved the guard
    inference: dict[str, str]                # the procedures behind p and intervals, and the switch between them
    repetitions: list[int]
    block_rate: dict[str, float | None]
    block_rate_ci: dict[str, Interval | None]
    block_rate_exact_ci: dict[str, Interval | None]
    block_rate_by_rule: dict[str, dict[str, float | None]]
    repeat_disagreement: float | None
    repeat_disagreement_n_bases: int
    stability: dict[str, Stability]
    flip_rate: FlipRate
    coverage: dict[str, Coverage]
    quarantine: Quarantine
    excluded: Excluded                       # failed + quarantined calls against one limit (estimators/excluded.py)
    contrasts: list[Contrast]
    strata: dict[str, dict[str, Stratum]]
    components: dict[str, dict[str, dict[str, float | int]]]
    worst_case: WorstCase | None
    order: Order | None
    retried: Retried
    bootstrap: Bootstrap
    accuracy: NotRequired[dict[str, Accuracy]]
    source: NotRequired[dict[str, Any]]
    # Only when the cohort's record names condition families (estimators/families.py):
    condition_families: NotRequired[dict[str, list[str]]]       # {family: its conditions}
    family_placebos: NotRequired[dict[str, str | None]]         # {family: the placebo its interventions use}
    placebo_checks: NotRequired[list[PlaceboCheck]]             # every placebo's check, each in its Δ family
    worst_case_by_family: NotRequired[dict[str, dict[str, Any]]]  # the lowest Δ, simultaneous interval
