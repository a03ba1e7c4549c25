"""`estimate(rows, ...)`: the whole estimator stage on one decision table (docs/design.md §10,
docs/estimators.md). Each family of estimates adds its quantities to one bootstrap, then builds
its part of the report from the results."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from guardeval.errors import CheckFailed, InputError
from guardeval.estimators import contrasts as cx
from guardeval.estimators import effects as fx
from guardeval.estimators import excluded as ex
from guardeval.estimators import families as fm
from guardeval.estimators import labelled as lab
from guardeval.estimators import order as od
from guardeval.estimators import signflip as sf
from guardeval.estimators.frame import make_frame
from guardeval.estimators.quantities import Quantities
from guardeval.estimators.quarantine import quarantine_summary
from guardeval.estimators.table import FAILURE_STATUSES, MISSING, ValidatedRows, validate_rows
from guardeval.estimators.types import AllWithin, Contrast, Coverage, Family, PlaceboCheck, Report
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts.decidable import cannot_decide_sentence, family_decidability
from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN, check_margin
from guardeval.estimators.verdicts.power import ALPHA

DEFAULT_PLACEBO = "format_placebo"
P_VALUE_RULE = ("two-sided bootstrap p that inverts the printed interval: each side's share of the replicate "
                "distribution beyond 0 (interpolated as the interval's quantiles are), t-calibrated: T_df(Phi^-1(q)), "
                "p = 2*min of the two; beyond one replicate's share raised to the smaller of the t-calibrated 1/(B+1) "
                "and the replicates' normal tail, never across alpha; p < alpha exactly when the interval excludes 0; "
                "df = the interactions the quantity uses minus their domains")
INTERVAL_RULE = ("percentile interval at the t-calibrated level: the replicates' quantiles at a'/2 and 1 - a'/2, "
                 "a' = 2*(1 - Phi(t_{df, 0.975})), df = the interactions the quantity uses minus their domains "
                 "(the plain percentile interval undercovers with few interactions)")
FLIP_LABEL = "same-round unsigned flip rate (one-draw disagreement with the baseline; not an effect)"
RESAMPLING = ("stratified interaction-cluster bootstrap, Rao-Wu rescaled: in each replicate and domain with m_d "
              "interactions, m_d - 1 interactions drawn uniformly with replacement, each draw weighted "
              "m_d/(m_d - 1); a domain with one interaction keeps it with weight 1")
NO_PLACEBO = ("no placebo: --placebo was not given, no condition has the role placebo and none is named "
              "format_placebo; the *_minus_placebo fields are null and every condition is an intervention")

__all__ = ["Quantities", "estimate", "exit_status", "resolve_conditions", "validated"]


class Incomplete(CheckFailed):
    """Calls of the run have no decision and --allow-partial was not given (exit 1)."""

    def __init__(self, missing: int, scheduled: int, how: str = "use --allow-partial to estimate anyway") -> None:
        self.missing, self.scheduled = missing, scheduled
        super().__init__(f"incomplete run: {missing} of {scheduled} scheduled calls have no decision ({how})")


def validated(rows: Iterable[Any], *, path: object = None, lines: Iterable[int] | None = None) -> ValidatedRows:
    return rows if isinstance(rows, ValidatedRows) else validate_rows(rows, path=path, lines=lines)


def resolve_conditions(design: fx.Design, baseline: str, placebo: str | None, family: Sequence[str] | None,
                       roles: Mapping[str, str] | None, *, by_role: bool = True
                       ) -> tuple[str, str | None, list[str], list[str]]:
    """(baseline, placebo, contrasts, family) checked against the conditions in the table."""
    return resolve_names(design.conditions, baseline, placebo, family, roles, by_role=by_role)


def resolve_names(conds: Sequence[str], baseline: str, placebo: str | None, family: Sequence[str] | None,
                  roles: Mapping[str, str] | None, *, by_role: bool = True
                  ) -> tuple[str, str | None, list[str], list[str]]:
    """`resolve_conditions` over condition names (a cohort's, before there is a table: a study's question)."""
    if baseline not in conds:
        raise InputError(f"baseline condition {baseline!r} has no rows (conditions: {', '.join(conds)})",
                         field="baseline")
    if placebo is not None:
        if placebo not in conds:
            raise InputError(f"placebo condition {placebo!r} has no rows (conditions: {', '.join(conds)})",
                             field="placebo")
    elif by_role:   # (a table with condition families chose its placebo already, maybe none)
        placebos = [c for c, r in (roles or {}).items() if r == "placebo" and c in conds]
        placebo = placebos[0] if placebos else (DEFAULT_PLACEBO if DEFAULT_PLACEBO in conds else None)
    if placebo == baseline:
        raise InputError("the placebo cannot be the baseline", field="placebo")
    contrasts = [c for c in conds if c != baseline]
    if family is None:
        fam = list(contrasts)
    else:
        fam = list(dict.fromkeys(family))
        for c in fam:
            if c not in contrasts:
                raise InputError(f"family member {c!r} is not a non-baseline condition of this table "
                                 f"({', '.join(contrasts)})", field="family")
        if not fam:
            raise InputError("the family is empty", field="family")
    return baseline, placebo, contrasts, fam


def _coverage(design: fx.Design) -> dict[str, Coverage]:
    out: dict[str, Coverage] = {}
    for ci, c in enumerate(design.conditions):
        sel = design.row_cond == ci
        kind = design.row_kind[sel]
        status = design.row_status[sel]
        failures = {s: int(((status == s) & (kind == fx.KIND_FAIL)).sum()) for s in FAILURE_STATUSES}
        out[c] = {
            "expected": int(sel.sum()),
            "received": int((kind != fx.KIND_MISSING).sum()),
            "valid": int((kind == fx.KIND_OK).sum()),
            "failed": int((kind == fx.KIND_FAIL).sum()),
            "missing": int((kind == fx.KIND_MISSING).sum()),
            "quarantined": int((kind == fx.KIND_QUARANTINED).sum()),
            "failures_by_status": failures,
        }
    return out


def _notes(placebo: str | None, roles: Mapping[str, str] | None, explicit: bool) -> list[str]:
    """Things a reader must know once, in words (also printed to stderr by the CLI)."""
    if placebo is None:
        return [NO_PLACEBO]
    if not explicit and not any(r == "placebo" for r in (roles or {}).values()):
        return [f"placebo: {placebo} (chosen by its name; pass --placebo to choose another)"]
    return []


def estimate(rows: Iterable[Any], *, baseline: str = "original", placebo: str | None = None,
             family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
             failure_rule: str = "drop", missing: str = "exclude", roles: Mapping[str, str] | None = None,
             n_scheduled: int | None = None, complete: bool = True, allow_partial: bool = False,
             allow_unpublishable: bool = False, source: object = None, margin: float = DEFAULT_MARGIN,
             alpha: float = ALPHA, families: Mapping[str, str] | None = None) -> Report:
    """The estimate report as a JSON-ready dict.

    Raises InputError for a bad table or option, CheckFailed for an incomplete run unless
    `allow_partial`. An unpublishable report (failed and quarantined calls above 2% of scheduled calls:
    `excluded`) is returned, marked; the
    caller decides the exit status (see `exit_status`). `missing="as-failure"` counts a
    scheduled call without a decision as a failed call under each failure rule. `families`:
    {condition: family} from the cohort's record; with it, Holm runs within each condition
    family, each intervention is corrected by its family's placebo (else the placebo without a
    family), and each family's worst case gets a simultaneous interval (docs/estimators.md)."""
    rows = validated(rows, path=source)
    fx.check_rule(failure_rule)
    margin = check_margin(margin)
    alpha = dc.check_alpha(alpha)
    if n_boot < 1:
        raise InputError("the number of bootstrap replicates must be >= 1", field="bootstrap")
    n_missing = sum(1 for r in rows if r["status"] == MISSING)
    n_sched = len(rows) if n_scheduled is None else int(n_scheduled)
    is_complete = bool(complete) and n_missing == 0 and n_sched <= len(rows)
    if not is_complete and not allow_partial:
        raise Incomplete(n_missing + max(0, n_sched - len(rows)), n_sched)
    design = fx.build_design(rows, condition_order=list(roles or ()), missing=missing)
    explicit_placebo = placebo is not None
    fams_of = {c: str(v) for c, v in (families or {}).items() if c in design.conditions}
    if fams_of and placebo is None:
        # The table's placebo is the one without a family (the placebo of every family without its own).
        placebo = next((c for c in design.conditions if (roles or {}).get(c) == "placebo" and c not in fams_of), None)
    baseline, placebo, contrasts, fam = resolve_conditions(design, baseline, placebo, family, roles,
                                                           by_role=not fams_of)
    placebo_of = fm.placebo_of(contrasts, fams_of, roles or {}, placebo, explicit_placebo) if fams_of else None
    f = make_frame(design, failure_rule, baseline, placebo, contrasts, placebo_of)
    labelled = lab.has_labels(f)
    part = od.dispatch_parts(design)

    qs = Quantities()
    cx.add_contrasts(qs, f)
    cx.add_strata(qs, f)
    cx.add_block_rates(qs, f)
    cx.add_stability(qs, f)
    ex.add_bounds(qs, f)
    ex.add_failure_rates(qs, f)
    if labelled:
        lab.add_accuracy(qs, f)
        lab.add_worst_case(qs, f)
    if part is not None:
        od.add_order(qs, f, part)
    # Intervals at 1 − α: a verdict at α never disagrees with the interval printed beside it.
    est = qs.run(design.base_cluster, design.cluster_domain, n_boot, seed, margin, 1 - alpha)

    contrast_out = cx.contrast_entries(f, est, fam, roles or {}, margin, alpha)
    if fams_of:
        decided, all_within = fm.decide_by_family(contrast_out, fam, fams_of, roles or {}, margin, alpha)
    else:
        decided, all_within = _decide(contrast_out, fam, placebo, margin, alpha)
    ex.bounds(f, est, contrast_out, ex.decided_groups(decided), alpha)
    stability = cx.stability(f, est)
    block_ci, block_exact = cx.block_rate_intervals(f, est, 1 - alpha)
    quarantine = quarantine_summary(rows, n_sched)
    excluded = ex.excluded_record(design, quarantine["count"], n_sched, ex.depends_on_condition(f, est, margin, alpha))
    # One verdict on publishing: failed and quarantined calls together (the quarantine record says the same).
    quarantine["publishable"] = excluded["publishable"]
    components = {c: fx.component_rates(design, ci) for ci, c in enumerate(design.conditions)}
    report: Report = {
        "n_bases": design.n_bases,
        "n_calls": n_sched,
        "n_interactions": design.n_clusters,
        "n_domains": len(design.domains),
        "baseline": baseline,
        "placebo": placebo,
        "failure_rule": failure_rule,
        "failure_rules": list(fx.RULES),
        "missing": missing,
        "family": fam,
        "alpha": alpha,
        "families": decided,
        "margin": margin,
        "power": dc.power_record(alpha),
        "equivalence_family": all_within,
        "complete": is_complete,
        "publishable": excluded["publishable"],
        "allow_partial": allow_partial,
        "allow_unpublishable": allow_unpublishable,
        "notes": _notes(placebo, roles, explicit_placebo),
        "cannot_decide": _cannot_decide(decided, alpha),
        "placebo_check": placebo_check(contrast_out, placebo),
        "repetitions": f.rounds.rounds,
        "block_rate": {c: fx.block_rate(f.p, ci) for ci, c in enumerate(design.conditions)},
        "block_rate_ci": block_ci,
        "block_rate_exact_ci": block_exact,
        "block_rate_by_rule": {rule: {c: fx.block_rate(f.rates[rule], ci) for ci, c in enumerate(design.conditions)}
                               for rule in fx.RULES},
        "repeat_disagreement": stability[baseline]["repeat_disagreement"],
        "repeat_disagreement_n_bases": stability[baseline]["n_bases"],
        "stability": stability,
        "flip_rate": {"label": FLIP_LABEL,
                      "by_condition": {x["condition"]: x["same_round_flip_rate"] for x in contrast_out}},
        "coverage": _coverage(design),
        "quarantine": quarantine,
        "excluded": excluded,
        "contrasts": contrast_out,
        "strata": cx.strata(f, est),
        "components": {c: v for c, v in components.items() if v},
        "worst_case": lab.worst_case(f, est) if labelled else None,
        "order": od.order(f, est, part) if part is not None else None,
        "retried": od.retried(design),
        "bootstrap": {"n": n_boot, "seed": seed, "rng": "numpy.random.default_rng(seed)",
                      "resampling": RESAMPLING, "interval": INTERVAL_RULE, "p_value": P_VALUE_RULE},
        "inference": inference_record(),
    }
    if labelled:
        report["accuracy"] = lab.accuracy(f, est)
    if fams_of:
        # Additive keys: a cohort without families gives the report it always gave.
        report["condition_families"] = fm.family_members(contrasts, fams_of)
        report["family_placebos"] = fm.family_placebos(contrasts, fams_of, placebo_of or {}, roles or {})
        report["placebo_checks"] = [chk for c in contrasts if (roles or {}).get(c) == "placebo"
                                    and (chk := placebo_check(contrast_out, c)) is not None]
        if report["placebo_check"] is None and report["placebo_checks"]:
            report["placebo_check"] = report["placebo_checks"][0]
        report["notes"] = [n for n in report["notes"] if n != NO_PLACEBO] + [fm.placebo_note(report["family_placebos"])]
        report["worst_case_by_family"] = fm.worst_cases(f, fam, fams_of, roles or {}, n_boot, seed, alpha)
    return report


def _decide(contrasts: list[Contrast], fam: Sequence[str], placebo: str | None, margin: float,
            alpha: float) -> tuple[dict[str, Family], dict[str, AllWithin]]:
    """Every contrast's verdicts (decisions.py): Δ by Holm over the declared family, the
    placebo-corrected effect (the headline) by Holm over the family's interventions."""
    by_name = {x["condition"]: x for x in contrasts}
    # An undefined member still counts (the family is what was declared, not what had data).
    corr_fam = [c for c in fam if c != placebo] if placebo is not None else []
    families = {"delta": dc.family_record(fam, dc.family_name(fam, "condition"), "delta")}
    dc.decide_family([by_name[c]["equivalence"] for c in fam], families["delta"]["name"], alpha)
    families["delta"].update(family_decidability([by_name[c]["equivalence"] for c in fam], alpha))
    if corr_fam:
        families["delta_minus_placebo"] = dc.family_record(corr_fam, dc.family_name(corr_fam, "intervention"),
                                                           "delta_minus_placebo")
        dc.decide_family([by_name[c]["equivalence_minus_placebo"] for c in corr_fam],
                         families["delta_minus_placebo"]["name"], alpha)
        families["delta_minus_placebo"].update(
            family_decidability([by_name[c]["equivalence_minus_placebo"] for c in corr_fam], alpha))
    fm.mark_decided(contrasts, set(fam), set(corr_fam))
    within = {"delta": dc.all_within({c: by_name[c]["equivalence"] for c in fam}, "condition's Δ", margin, alpha)}
    if corr_fam:
        within["delta_minus_placebo"] = dc.all_within({c: by_name[c]["equivalence_minus_placebo"] for c in corr_fam},
                                                      "intervention's Δ − placebo", margin, alpha)
    return families, within


INFERENCE_SWITCH = (f"each quantity by the interactions it uses: fewer than {sf.SIGNFLIP_BELOW_DF} effective degrees of "
                    "freedom ((sum n_g)^2 / sum n_g^2 interactions, n_g the bases it uses in interaction g, minus "
                    "their domains): the sign-flip test and its inversion; from there up: the "
                    "bootstrap interval and the p that inverts it. Either way the p and the interval printed for "
                    "a quantity come from one procedure, so the interval excludes 0 exactly when p < α. A "
                    "quantity whose interactions all gave the same value gets the exact binomial bound, never a "
                    "zero-width interval")


def inference_record() -> dict[str, str]:
    """What report.json says about the procedure behind every p and interval (each decision
    record's `method` names the one used)."""
    return {"switch": INFERENCE_SWITCH, "sign_flip": sf.RULE, "bootstrap": INTERVAL_RULE}


def _cannot_decide(families: Mapping[str, Family], alpha: float) -> list[str]:
    what = {"delta": "Δ", "delta_minus_placebo": "Δ − placebo"}
    out = [cannot_decide_sentence(f, alpha, f["name"], what[f.get("quantity", q)]) for q, f in families.items()]
    return [x for x in out if x]


def placebo_check(contrasts: Sequence[Mapping[str, Any]], placebo: str | None) -> PlaceboCheck | None:
    """Did the control hold? The placebo's own Δ, decided in the Δ family: `failed` when it
    differs from 0 there (a failed placebo is said first in every output)."""
    if placebo is None:
        return None
    c = next((x for x in contrasts if x["condition"] == placebo), None)
    if c is None:
        return None
    eq = c.get("equivalence") or {}
    return {"condition": placebo, "delta": c["delta"], "ci": c["ci"], "p_holm": c.get("p_holm"),
            "family": eq.get("family"), "failed": bool(eq.get("differs"))}


def exit_status(report: Mapping[str, Any]) -> int:
    """0 ok; 1 when the report is unpublishable and that was not allowed (an incomplete run
    without --allow-partial never gets here: `estimate` refuses it)."""
    if not ex.publishable(report) and not report.get("allow_unpublishable"):
        return 1
    return 0
