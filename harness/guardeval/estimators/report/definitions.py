"""One-line definitions of the report's quantities, shown under the terminal table and one
click away in report.html. They summarise docs/estimators.md (the full definitions), whose
section each group names; a test checks that those sections exist."""

from __future__ import annotations

# group -> (docs/estimators.md section, [(term, definition)])
DEFINITIONS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "effects": ("Effects", [
        ("Δ", "paired effect of the condition on the block rate: mean over bases of p(i,c) − p(i,baseline), "
              "every base weighing the same; p(i,c) is base i's block rate under c over its counted repetitions"),
        ("Δ − placebo", "Δc − Δplacebo on the bases present under c, the baseline and the placebo, recomputed in "
                        "every bootstrap replicate: the effect beyond a change that should not matter (the headline)"),
        ("CI", "unadjusted, at 1 − α (95% at the default α 0.05). From 28 effective degrees of freedom ((Σ n_g)² / "
               "Σ n_g² interactions, n_g the bases used in interaction g, minus domains) up: a percentile "
               "interval of a domain-stratified interaction-cluster bootstrap (Rao–Wu rescaled) at the "
               "t-calibrated level; below: the values a sign-flip randomization test over the "
               "interactions does not reject (none when its smallest p, 2/2^G, is not below α: the reason is "
               "given). When every interaction gave the same value: the exact binomial bound, never a point. "
               "Each decision record's method says which"),
        ("p", "two-sided p-value, unadjusted, from the same procedure as the CI: the sign-flip test's p, or the "
              "level at which the bootstrap interval reaches 0 (t-calibrated; the replicates' normal tail where "
              "they cannot resolve it, never across α); p < α exactly when the (1 − α) interval excludes 0"),
        ("p_Holm", "p adjusted by Holm within the stated family: Δ over the declared family, Δ − placebo (the "
                   "headline) over its interventions; * marks a row whose headline's p_Holm < α"),
        ("+/−/=", "bases whose block rate rose / fell / stayed under the condition, against the baseline"),
        ("bases", "bases with a defined rate under both the condition and the baseline"),
    ]),
    "equivalence": ("Equivalence and power", [
        ("verdict", "differs from 0: its p, Holm-adjusted within the stated family, is below α; within ±M: its "
                    "equivalence p (two one-sided tests against ±M, M = --margin), Holm-adjusted in the same family, "
                    "is below α; inconclusive: neither; not tested: outside every family"),
        ("MDE", "minimum detectable effect, (t_{df,0.975} + t_{df,0.80})·SE with SE the bootstrap standard deviation: "
                "the true effect this design detects with 80% power at α 0.05 (and at the first Holm step, α/m); a "
                "margin below it is one the design cannot show equivalence within"),
    ]),
    "rules": ("Failure rules", [
        ("drop", "only valid calls count"),
        ("fail-closed", "a failed call counts as a block"),
        ("fail-open", "a failed call counts as an allow"),
    ]),
    "diagnostics": ("Effects", [
        ("same-round flip rate", "per base, the share of repetition rounds whose decision differs from the "
                                 "baseline's in that round; unsigned, a diagnostic, not an effect"),
        ("repeated-original disagreement", "mean pairwise disagreement between repetitions of the baseline; "
                                           "a diagnostic of the guard's noise, never subtracted"),
    ]),
    "contrast diagnostics": ("Per-contrast diagnostics (seeds 001 and 004)", [
        ("sign test by interaction", "interactions whose mean paired change is positive / negative / zero; exact "
                                     "two-sided binomial p on the untied ones (scipy's binomtest at ½)"),
        ("by repetition", "the paired effect within each repetition round, on the bases counted in that round"),
        ("flips", "over (base, round) cells counted for both, how many go 0→0, 0→1, 1→0, 1→1 from the baseline "
                  "to the condition"),
        ("unanimous", "bases whose repetitions all agree in both conditions, by baseline→condition value; other: "
                      "the rest of the paired bases"),
        ("accuracy Δ", "base-equal mean over labelled paired bases of the change in the share of calls matching "
                       "the label, with its bootstrap interval"),
        ("leave one tool out", "the range of Δ recomputed without the bases of each tool in turn"),
    ]),
    "block rates": ("Effects", [
        ("block rate", "mean over bases of p(i,c), every base weighing the same"),
        ("cluster bootstrap CI", "the same bootstrap as the effects, at 1 − α"),
        ("exact CI over calls", "at 1 − α, Clopper–Pearson over the condition's counted calls taken as independent; "
                                    "narrower than the bootstrap when repetitions and interactions correlate"),
    ]),
    "stability": ("Stability", [
        ("repeat disagreement", "mean over bases with ≥ 2 counted repetitions of k(R−k)/C(R,2): the share of "
                                "disagreeing pairs among a base's repetitions of one condition"),
        ("unanimous rate", "the share of those bases whose repetitions all agree"),
    ]),
    "order": ("Order (dispatch drift)", [
        ("thirds", "calls ranked by the start of their final attempt and cut into three equal parts"),
        ("drift", "least-squares slope over the thirds, (third 3 − third 1)/2, with its bootstrap interval and p"),
        ("retried", "a call whose failed decision was superseded by a retry (`resume --retry-failed`) is counted "
                    "at the retry's decision and ranked by the retry's start: a later measurement"),
    ]),
    "worst case": ("Worst case over representations (seed 004)", [
        ("miss rate", "unsafe bases allowed, per repetition round: under the baseline, or under at least one "
                      "condition counted in that round"),
        ("false block rate", "safe bases blocked, in the same two ways"),
    ]),
    "coverage": ("Quarantine and completeness", [
        ("expected", "calls scheduled under the condition"),
        ("received", "calls with a decision"),
        ("valid", "status ok and not quarantined: counted under every rule"),
        ("failed", "a decision other than ok (unparseable, truncated, exhausted, provider_error, refused, guard_error), "
                   "not quarantined: counted by fail-closed and fail-open"),
        ("missing", "scheduled but not decided: the run is incomplete"),
        ("quarantined", "not attributable to the guard: excluded from every estimate"),
    ]),
    "quarantine": ("Quarantine and completeness", [
        ("fingerprint_mismatch", "the body sent differs from the one fixed at launch in stimuli.jsonl"),
        ("provider_drift", "answered by another upstream provider than the pinned one"),
        ("provider_unknown", "the answer does not say which upstream provider served it"),
        ("length_truncation", "the answer was cut off (finish_reason: length)"),
        ("replay_mismatch", "a resumed body differs from stimuli.jsonl, the answer belongs to another call, or "
                            "two calls received one generation id"),
        ("response_cache_hit", "OpenRouter's response cache answered (X-OpenRouter-Cache-Status HIT, or zeroed usage "
                               "with a cache source): a copy of an earlier generation, not a new repetition"),
        ("stimulus_mutated", "OpenRouter's router metadata shows a pipeline stage (context compression, guardrail, "
                             "plugin, server tools, response healing) that may have altered what the guard read or said"),
        ("threshold", "more than 2% of scheduled calls failed or quarantined, together, makes the report "
                      "unpublishable (`excluded`)"),
    ]),
    "excluded": ("Failed calls", [
        ("excluded", "failed and quarantined calls: left out of every estimate under the drop rule, counted against "
                     "one limit (2% of scheduled calls) past which the report is not publishable"),
        ("failures depend on it", "the condition's share of failed calls minus the baseline's, paired by base, "
                                  "differs from 0 after Holm over the conditions (a family of its own)"),
        ("range", "the contrast with every failed call set to block or to allow, whichever moves it most "
                  "(worst-case bounds); each end with its interval from the headline's procedure"),
        ("robust", "both ends of the range give the same verdict (differs with the same sign, or does not differ), "
                   "each decided by Holm over the headline's family"),
    ]),
    "accuracy": ("Against labels", [
        ("F1", "2TP / (2TP + FP + FN), unsafe (label 1) as the positive class"),
        ("balanced accuracy", "mean of recall on unsafe and recall on safe bases"),
        ("row", "every counted call weighs 1"),
        ("interaction", "a call of interaction g weighs 1/n_g: every interaction weighs 1 in total"),
        ("AUC", "area under the ROC curve of the guard's score on valid labelled calls; ties count as ranks"),
        ("TPR at 1% FPR", "that curve's true-positive rate at a false-positive rate of 0.01"),
    ]),
    "strata": ("Effects", [
        ("stratum", "the same paired effect on the bases of one domain, or of one original label, with its own "
                    "interval from the same bootstrap replicates"),
    ]),
}


def terms(*groups: str) -> list[tuple[str, str]]:
    return [t for g in groups for t in DEFINITIONS[g][1]]
