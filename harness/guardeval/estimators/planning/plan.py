"""Plan a design from a pilot (docs/estimators.md, Planning a design): variance components of
each effect, the standard error they predict for more or fewer bases and repetitions, and the
minimum detectable effect (`power.mde`, the same function the effects table uses).

Model, per base i of interaction g in domain d, for an effect of condition c against a reference
k (the placebo for a corrected effect, the baseline for Δ), x_i = p(i,c) − p(i,k):

    x_i = θ_d + u_g + v_i + e_i,   Var u_g = σ²_G, Var v_i = σ²_B, Var e_i = σ²_W / R

u_g: between interactions, v_i: between bases within an interaction, e_i: the mean of R
repetitions of calls whose per-call variance, summed over c and k, is σ²_W. The estimate is the
base-equal mean over N bases, so with κ = Σ_g n_g² / N (bases per interaction, weighted):

    SE²(N, R) = (κ·σ²_G + σ²_B + σ²_W / R) / N

Moment estimates: σ²_W from the spread of each base's repetitions; κ·σ²_G + σ²_B from the
stratified cluster variance (what the bootstrap of `estimate` estimates) less the repetition
noise, so the pilot's own design predicts the pilot's cluster standard error; σ²_B from the
spread of bases within interactions, σ²_G the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from guardeval.errors import InputError
from guardeval.estimators import effects as fx
from guardeval.estimators import signflip as sf
from guardeval.estimators.core import resolve_conditions, validated
from guardeval.estimators.frame import Frame, make_frame
from guardeval.estimators.verdicts.power import ALPHA, POWER, mde
from guardeval.run.dispatch.budget import projected_cost

TARGET_LEVELS = ("nominal", "holm")
MAX_DESIGN = 10_000_000   # bases or repetitions beyond this are a typo, not a design
MAX_GRID = 10_000         # designs in one plan: more is a typo, and an unreadable table


@dataclass
class Components:
    """Variance components of one effect (proportions², per base; `within_base` per call)."""

    quantity: str                      # "corrected" (c − placebo) or "delta" (c − baseline)
    condition: str
    reference: str
    estimate: float                    # the pilot's point estimate
    n_bases: int
    n_interactions: int
    n_domains: int
    reps: float                        # mean counted calls per base and condition in the pilot
    between_interactions: float        # σ²_G (0 when the moment estimate is negative)
    between_bases: float | None        # σ²_B; None when no interaction has two bases
    within_base: float                 # σ²_W, per call, the two conditions' variances summed
    cluster_factor: float              # κ = Σ n_g² / N
    pilot_se: float                    # sqrt of the stratified cluster variance of the pilot
    truncated: list[str]               # moment estimates out of range, set to their bound

    def se(self, bases: int, reps: int) -> float:
        """Predicted standard error for `bases` bases with `reps` repetitions each."""
        between = self.cluster_factor * self.between_interactions + (self.between_bases or 0.0)
        return math.sqrt(max(0.0, between + self.within_base / reps) / bases)

    def df(self, bases: int) -> float:
        """Degrees of freedom of the design's test (estimate t-calibrates it): its interactions,
        the pilot's per base scaled to `bases`, minus the domains."""
        return max(1.0, round(self.n_interactions * bases / max(1, self.n_bases)) - self.n_domains)


@dataclass(frozen=True)
class Arrays:
    """One effect's pilot data as arrays over the bases it uses."""

    x: np.ndarray          # (n,) p(i,c) − p(i,k)
    s_c: np.ndarray        # (n,) blocks and counted calls of c and k
    n_c: np.ndarray
    s_k: np.ndarray
    n_k: np.ndarray
    cluster: np.ndarray    # (n,) interaction index (into all interactions)
    cluster_domain: np.ndarray   # (n_clusters,) domain of every interaction of the table


def _sample_var(s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Unbiased per-call variance of 0/1 values with s ones in n calls; nan where n < 2."""
    with np.errstate(invalid="ignore", divide="ignore"):
        p = s / n
        return np.where(n >= 2, n / (n - 1) * p * (1 - p), np.nan)


def decompose(a: Arrays, *, quantity: str = "corrected", condition: str = "c", reference: str = "k") -> Components:
    """Moment estimates of σ²_W, σ²_B, σ²_G (module docstring). InputError naming the component
    that cannot be estimated: no base with two counted repetitions of each condition, or no
    domain with two interactions."""
    what = f"{quantity} effect of {condition} (against {reference})"
    n = len(a.x)
    if n < 2:
        raise InputError(f"too few bases to plan the {what}: {n} base(s) with calls of both conditions, 2 needed",
                         field="bases")
    var_c, var_k = _sample_var(a.s_c, a.n_c), _sample_var(a.s_k, a.n_k)
    pooled = []
    for name, v in ((condition, var_c), (reference, var_k)):
        ok = ~np.isnan(v)
        if not ok.any():
            raise InputError(f"too few repetitions to plan the {what}: no base has two counted repetitions of "
                             f"{name}, so the between-repetition component cannot be estimated (launch with "
                             "--reps 2 or more)", field="reps")
        pooled.append(float(v[ok].mean()))
    within = pooled[0] + pooled[1]
    # Each base's own error variance of x_i; a base with one counted call of a condition uses the
    # pooled per-call variance of that condition.
    eps = (np.where(np.isnan(var_c), pooled[0], var_c) / a.n_c
           + np.where(np.isnan(var_k), pooled[1], var_k) / a.n_k)

    theta = float(a.x.mean())
    n_clusters = len(a.cluster_domain)
    sizes = np.bincount(a.cluster, minlength=n_clusters).astype(np.float64)
    z = np.bincount(a.cluster, weights=a.x - theta, minlength=n_clusters)
    # The stratified cluster variance the rescaled bootstrap estimates: per domain with m_d
    # interactions, m_d/(m_d − 1)·Σ (z_g − z̄_d)², over N²; interactions without a used base
    # count with z_g = 0, as they are drawn (with weight and nothing to add) in the bootstrap.
    total = 0.0
    usable = 0
    for dom in np.unique(a.cluster_domain):
        members = a.cluster_domain == dom
        m = int(members.sum())
        if m < 2 or not sizes[members].any():
            continue
        usable += 1
        zd = z[members]
        total += m / (m - 1) * float(((zd - zd.mean()) ** 2).sum())
    if usable == 0:
        raise InputError(f"too few interactions to plan the {what}: no domain has two interactions, so the "
                         "between-interaction component cannot be estimated", field="bases")
    v_pilot = total / n ** 2

    # The between-base part of the pilot's variance, κ·σ²_G + σ²_B, straight from the cluster
    # variance; the split between its two terms (for the report, and for designs of another κ)
    # from the spread of bases within interactions of two or more bases.
    truncated: list[str] = []
    sum_sq = float((sizes ** 2).sum())
    kappa = sum_sq / n
    between = (n ** 2 * v_pilot - float(eps.sum())) / n
    if between < 0:
        truncated.append("between")
        between = 0.0
    multi = sizes >= 2
    between_bases: float | None = None
    if multi[a.cluster].any():
        use = multi[a.cluster]
        means = np.bincount(a.cluster, weights=a.x, minlength=n_clusters) / np.where(sizes > 0, sizes, 1)
        ss = float(((a.x[use] - means[a.cluster[use]]) ** 2).sum())
        noise = float(((1 - 1 / sizes[a.cluster[use]]) * eps[use]).sum())
        dof = float((sizes[multi] - 1).sum())
        between_bases = (ss - noise) / dof
        if between_bases < 0:
            truncated.append("between_bases")
            between_bases = 0.0
        if between_bases > between:
            truncated.append("between_interactions")
            between_bases = between
    between_int = (between - (between_bases or 0.0)) / kappa
    return Components(quantity=quantity, condition=condition, reference=reference, estimate=theta, n_bases=n,
                      n_interactions=int((sizes > 0).sum()), n_domains=int(len(np.unique(a.cluster_domain[a.cluster]))),
                      reps=float((a.n_c.mean() + a.n_k.mean()) / 2), between_interactions=float(between_int),
                      between_bases=None if between_bases is None else float(between_bases),
                      within_base=float(within), cluster_factor=kappa, pilot_se=math.sqrt(v_pilot),
                      truncated=truncated)


def effect_arrays(f: Frame, c: int, k: int, mask: np.ndarray) -> Arrays:
    s, n = f.s, f.n
    d = f.design
    return Arrays(x=(f.p[:, c] - f.p[:, k])[mask], s_c=s[mask, c], n_c=n[mask, c], s_k=s[mask, k], n_k=n[mask, k],
                  cluster=d.base_cluster[mask], cluster_domain=d.cluster_domain)


# ----------------------------------------------------------------------------- designs


def check_sizes(values: Iterable[int], what: str) -> list[int]:
    out = sorted(set(values))
    for v in out:
        if type(v) is not int or v < 1 or v > MAX_DESIGN:
            raise InputError(f"a design size must be a whole number from 1 to {MAX_DESIGN}, got {v!r}", field=what)
    if not out:
        raise InputError("no design size given", field=what)
    return out


def default_bases(pilot: int) -> list[int]:
    """Half the pilot's bases up to eight times as many."""
    return sorted({max(2, math.ceil(pilot / 2)), pilot, 2 * pilot, 4 * pilot, 8 * pilot})


def default_reps(pilot: int) -> list[int]:
    return sorted({1, 2, 3, 5, max(1, pilot), 2 * max(1, pilot)})


def plan_rows(rows: Iterable[Any], *, baseline: str = "original", placebo: str | None = None,
              failure_rule: str = "drop", missing: str = "exclude", roles: Mapping[str, str] | None = None,
              bases: Sequence[int] | None = None, reps: Sequence[int] | None = None,
              target_mde: float | None = None, target_level: str = "nominal",
              prompt_tokens: tuple[int, int] | None = None, prices: Mapping[str, Any] | None = None,
              source: object = None, cohort_bases: int | None = None) -> dict[str, Any]:
    """The plan as a JSON-ready dict (docs/estimators.md, Planning a design).

    `cohort_bases`: the bases the pilot's cohort holds (a run's cohort copy); a design needing
    more is marked (`beyond_cohort`) and named in a note: it needs a larger cohort, not a launch.

    `prompt_tokens` (rough prompt tokens of one call of every instance of the pilot's cohort,
    summed; its number of bases) and `prices` ({price_in_per_mtok, price_out_per_mtok,
    max_tokens}) give each design's cost as `launch --dry-run` projects it, the prompt tokens
    scaled to the design's bases; without them cost is null and a note says so."""
    rows = validated(rows, path=source)
    fx.check_rule(failure_rule)
    if target_mde is not None and not (0 < target_mde < 1):
        raise InputError(f"--target-mde must lie in (0, 1) (a proportion), got {target_mde!r}", field="target-mde")
    if target_level not in TARGET_LEVELS:
        raise InputError(f"unknown target level {target_level!r} (use {', '.join(TARGET_LEVELS)})",
                         field="target-level")
    design = fx.build_design(rows, condition_order=list(roles or ()), missing=missing)
    baseline, placebo, contrasts, _ = resolve_conditions(design, baseline, placebo, None, roles)
    f = make_frame(design, failure_rule, baseline, placebo, contrasts)
    notes: list[str] = []
    interventions = [c for c in contrasts if c != placebo]
    corrected: list[Components] = []
    if placebo is not None:
        for c in interventions:
            ci = f.idx(c)
            mask = f.corrected(ci)
            assert mask is not None and f.pl is not None
            corrected.append(decompose(effect_arrays(f, ci, f.pl, mask), quantity="corrected", condition=c,
                                       reference=placebo))
    else:
        notes.append("no placebo: no corrected effect is defined, so the target and the headline use Δ "
                     "(pass --placebo to choose one)")
    deltas = [decompose(effect_arrays(f, f.idx(c), f.b, f.paired(f.idx(c))), quantity="delta", condition=c,
                        reference=baseline) for c in contrasts]
    floor = [f"{c.condition}" for c in corrected or deltas if "between" in c.truncated]
    if floor:
        notes.append(f"{', '.join(floor)}: the pilot's cluster variance is below its own repetition noise, so the "
                     "between-base components are set to 0 and designs are predicted from that noise alone "
                     "(above the pilot's cluster SE: conservative)")
    headline = corrected or deltas
    pilot_reps = len(f.rounds.rounds)
    pilot_bases = design.n_bases
    grid_b = check_sizes(bases, "bases") if bases is not None else default_bases(pilot_bases)
    grid_r = check_sizes(reps, "reps") if reps is not None else default_reps(pilot_reps)
    if len(grid_b) * len(grid_r) > MAX_GRID:
        raise InputError(f"{len(grid_b)} x {len(grid_r)} designs: at most {MAX_GRID} in one plan", field="bases")
    n_cond = len(design.conditions)
    m = {"corrected": max(1, len(corrected)), "delta": max(1, len(deltas))}
    priced = prompt_tokens is not None and prices is not None and all(
        prices.get(k) is not None for k in ("price_in_per_mtok", "price_out_per_mtok", "max_tokens"))
    if not priced:
        notes.append("cost omitted: " + ("a table carries no guard config and no prompts"
                                         if prompt_tokens is None else
                                         "the guard config has no price_in_per_mtok/price_out_per_mtok"))

    designs: list[dict[str, Any]] = []
    for nb in grid_b:
        for nr in grid_r:
            calls = nb * n_cond * nr
            cost = None
            if priced:
                assert prices is not None and prompt_tokens is not None
                total, per = prompt_tokens
                tin = (total if nb == per else round(total * nb / per)) * nr
                cost = projected_cost(tin, calls * int(prices["max_tokens"]), float(prices["price_in_per_mtok"]),
                                      float(prices["price_out_per_mtok"]))
            effects = []
            g = design_interactions(design.n_clusters, pilot_bases, nb)
            for comp in corrected + deltas:
                se, df = comp.se(nb, nr), comp.df(nb)
                effects.append({"quantity": comp.quantity, "condition": comp.condition, "se": se, "df": df,
                                "mde": mde(se, ALPHA, POWER, df),
                                "mde_holm": mde(se, ALPHA / m[comp.quantity], POWER, df)})
            designs.append({"bases": nb, "reps": nr, "calls": calls, "cost_usd_upper_est": cost,
                            "pilot": nb == pilot_bases and nr == pilot_reps,
                            "beyond_cohort": cohort_bases is not None and nb > cohort_bases, "effects": effects,
                            "interactions": g,
                            "decidable": {q: can_decide(g, len(design.domains), ALPHA / m[q]) for q in m}})
    beyond = sorted({d["bases"] for d in designs if d["beyond_cohort"]})
    if beyond:
        notes.append(f"designs of {', '.join(map(str, beyond))} bases need more bases than the cohort has "
                     f"({cohort_bases}): build a larger cohort first")
    head_q = headline[0].quantity
    cannot = []
    pilot_say = cannot_decide_line(design.n_clusters, len(design.domains), ALPHA, m[head_q],
                                   "interventions" if head_q == "corrected" else "conditions", "the pilot's design")
    if pilot_say:
        cannot.append(pilot_say)
    small = sorted({d["bases"] for d in designs if not d["decidable"][head_q]})
    if small:
        cannot.append(f"designs of {', '.join(map(str, small))} bases (at the pilot's bases per interaction) cannot "
                      f"reach a decision at α {ALPHA:g} over {m[head_q]} "
                      f"{'interventions' if head_q == 'corrected' else 'conditions'}: their MDE is not attainable")
    target = None
    if target_mde is not None:
        target = choose(designs, target_mde, target_level, headline[0].quantity)
        chosen = target.get("design")
        if chosen is not None and cohort_bases is not None and chosen["bases"] > cohort_bases:
            notes.append(f"the target design needs {chosen['bases']} bases; the cohort has {cohort_bases}")
    return {
        "baseline": baseline, "placebo": placebo, "failure_rule": failure_rule, "missing": missing,
        "conditions": list(design.conditions), "interventions": interventions,
        "pilot": {"bases": pilot_bases, "interactions": design.n_clusters, "domains": len(design.domains),
                  "reps": pilot_reps, "calls": len(rows)},
        "cohort_bases": cohort_bases,
        "power": POWER, "alpha": ALPHA,
        "holm_m": m, "alpha_holm": {k: ALPHA / v for k, v in m.items()},
        "components": [asdict(c) for c in corrected + deltas],
        "headline": headline[0].quantity,
        "designs": designs,
        "target": target,
        "cost_known": priced,
        "notes": notes,
        "cannot_decide": cannot,
    }


def design_interactions(pilot_interactions: int, pilot_bases: int, bases: int) -> int:
    """A design's interactions: the pilot's per base, scaled to `bases` (at least 1)."""
    return max(1, round(pilot_interactions * bases / max(1, pilot_bases)))


def can_decide(interactions: int, domains: int, threshold: float) -> bool:
    """Whether `estimate` on a design of this size can give a p below `threshold` at all: the
    sign-flip test it runs below 28 effective degrees of freedom has smallest p 2/2^G (issue 35),
    far below any threshold from 28 interactions up, whichever procedure decides there."""
    if interactions - domains >= sf.SIGNFLIP_BELOW_DF:
        return True
    return sf.smallest_p(interactions) < threshold


def cannot_decide_line(interactions: int, domains: int, alpha: float, m: int, kind: str, which: str) -> str | None:
    """'with 6 interactions the pilot's design cannot reach a decision at α 0.05 over 2 interventions; …'."""
    threshold = alpha / max(1, m)
    if can_decide(interactions, domains, threshold):
        return None
    return (f"with {interactions} interactions {which} cannot reach a decision at α {alpha:g} over {m} {kind} (the "
            f"smallest p a sign-flip test over {interactions} interactions can give, {sf.smallest_p(interactions):.3g}, "
            f"is not below α/{m} = {threshold:.3g}); collect at least {sf.interactions_needed(threshold)} interactions")


def choose(designs: list[dict[str, Any]], target: float, level: str, quantity: str) -> dict[str, Any]:
    """The cheapest design whose MDE (at α, or at the Holm first-step level) is at most `target`
    for every effect of `quantity`; cheapest by projected cost when known, else by calls."""
    key = "mde" if level == "nominal" else "mde_holm"
    ok = [d for d in designs if all(e[key] <= target for e in d["effects"] if e["quantity"] == quantity)
          and d.get("decidable", {}).get(quantity, True)]
    out: dict[str, Any] = {"mde": target, "level": level, "quantity": quantity,
                           "by": "cost" if designs and designs[0]["cost_usd_upper_est"] is not None else "calls"}
    if not ok:
        out.update(design=None, reached=False)
        return out
    best = min(ok, key=lambda d: (d["cost_usd_upper_est"] if d["cost_usd_upper_est"] is not None else 0.0,
                                  d["calls"], d["reps"]))
    out.update(design={"bases": best["bases"], "reps": best["reps"], "calls": best["calls"],
                       "cost_usd_upper_est": best["cost_usd_upper_est"]}, reached=True)
    return out
