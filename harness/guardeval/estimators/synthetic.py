"""Decision tables drawn from a model with a known truth (the calibration check of every verdict:
benchmarks/calibration.py and tests/test_calibration.py; docs/estimators.md, How we know the
verdicts hold).

Per base i of interaction g in domain d, condition c:

    p(i, c) = a_d + u_g + v_i + β_c + h_{g,c} + k_{i,c}

u, v, h, k independent, uniform and centred (interaction and base random effects, and the
condition's effect varying by interaction and by base); a guard is its vector β. Every call is a
Bernoulli draw with that probability; a small share fails at random (status `unparseable`). The
ranges keep every probability inside [0, 1] (checked), so no clipping moves the truth: the true
paired effect of c against the baseline b, the base-equal mean over the population, is exactly
β_c − β_b; the corrected effect β_c − β_placebo; a block rate the domain-weighted a_d plus β_c.
Two guards share the random effects and differ only in β (identical guards: the same β), each
drawing its own calls — the same stimuli shown to two guards.

`LogitModel` (issue 50) is the heterogeneous alternative: on the logit scale,

    logit p(i, c) = logit(level_d) + u_g + v_i + β_c + b_{i,c},   b_{i,c} ~ N(0, sd_c²)

every base its own effect of each condition (standard deviation 0.35 for the placebo and 0.6 for
the interventions; a placebo whose mean effect is 0 on the logit scale), u and v normal. Its
truth is the population's base-equal mean of p(i,c) − p(i,baseline), by Gauss–Hermite quadrature
over the normal effects (exact to far below any Monte-Carlo error here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit, logit

BASELINE, PLACEBO = "original", "format_placebo"
CONDITIONS = (BASELINE, PLACEBO, "provenance_marker", "tool_alias", "threat_names")
ROLES = {BASELINE: "baseline", PLACEBO: "placebo", "provenance_marker": "intervention",
         "tool_alias": "intervention", "threat_names": "intervention"}
# A guard whose conditions all do something (the placebo a little), and the null: no effect at all.
EFFECTS = {BASELINE: 0.0, PLACEBO: 0.02, "provenance_marker": 0.10, "tool_alias": -0.08, "threat_names": 0.15}
NULL = dict.fromkeys(CONDITIONS, 0.0)
DOMAIN_LEVELS = (0.35, 0.40, 0.45, 0.50)


@dataclass(frozen=True)
class Model:
    """The random-effect ranges (each effect is uniform on ±half-width)."""

    interaction: float = 0.12       # u_g
    base: float = 0.06              # v_i
    heterogeneity: float = 0.06     # h_{g,c}: the condition's effect varies by interaction
    base_heterogeneity: float = 0.02  # k_{i,c}
    fail_rate: float = 0.02
    domain_levels: tuple[float, ...] = DOMAIN_LEVELS


@dataclass(frozen=True)
class LogitModel:
    """Heterogeneous effects on the logit scale (issue 50): normal interaction and base effects
    and, per condition (in CONDITIONS order), the standard deviation of a base's own effect."""

    interaction: float = 0.5        # u_g
    base: float = 0.3               # v_i
    effect_sd: tuple[float, ...] = (0.0, 0.35, 0.6, 0.6, 0.6)
    fail_rate: float = 0.02
    domain_levels: tuple[float, ...] = DOMAIN_LEVELS


# Logit-scale effects of a guard under LogitModel (the placebo's mean effect 0), a second guard
# that reads the marker more, and the heterogeneous null: every condition, the baseline included,
# with the same spread of per-base effects and no mean effect, so the conditions are exchangeable
# and every true Δ is exactly 0.
HET_EFFECTS = {BASELINE: 0.0, PLACEBO: 0.0, "provenance_marker": 0.45, "tool_alias": -0.35, "threat_names": 0.65}
HET_OTHER = {**HET_EFFECTS, "provenance_marker": 0.85}
HET_NULL_MODEL = LogitModel(effect_sd=(0.35,) * len(CONDITIONS))
AnyModel = Model | LogitModel
QUADRATURE_NODES = 80


@dataclass(frozen=True)
class Design:
    """Interactions per domain and bases per interaction (fixed, so the truth does not move)."""

    sizes: tuple[tuple[int, ...], ...]     # per domain, the bases of each interaction
    reps: int = 3

    @property
    def n_interactions(self) -> int:
        return sum(len(s) for s in self.sizes)

    @property
    def n_bases(self) -> int:
        return sum(sum(s) for s in self.sizes)


def design(n_interactions: int, n_bases: int | None = None, n_domains: int = 4, reps: int = 3) -> Design:
    """`n_interactions` spread evenly over the domains, `n_bases` (default 1.5 per interaction)
    dealt one per interaction, then one more to every interaction in turn, domain by domain."""
    if n_interactions < n_domains:
        raise ValueError("fewer interactions than domains")
    n_bases = n_bases if n_bases is not None else (3 * n_interactions) // 2
    if n_bases < n_interactions:
        raise ValueError("fewer bases than interactions")
    per = [n_interactions // n_domains + (1 if d < n_interactions % n_domains else 0) for d in range(n_domains)]
    sizes = [[1] * m for m in per]
    extra, k = n_bases - n_interactions, 0
    order = [(d, j) for j in range(max(per)) for d in range(n_domains) if j < per[d]]
    while extra:
        d, j = order[k % len(order)]
        sizes[d][j] += 1
        extra -= 1
        k += 1
    return Design(tuple(tuple(s) for s in sizes), reps)


@dataclass(frozen=True)
class Truth:
    delta: dict[str, float]
    corrected: dict[str, float]
    block_rate: dict[str, float]


def truth(effects: Mapping[str, float], d: Design, model: AnyModel = Model()) -> Truth:
    levels = model.domain_levels
    weight = np.array([sum(s) for s in d.sizes], dtype=np.float64)
    if isinstance(model, LogitModel):
        return _logit_truth(effects, weight / weight.sum(), model)
    level = float(np.dot(weight / weight.sum(), levels[:len(d.sizes)]))
    b, pl = effects[BASELINE], effects[PLACEBO]
    return Truth(delta={c: effects[c] - b for c in CONDITIONS if c != BASELINE},
                 corrected={c: effects[c] - pl for c in CONDITIONS if c not in (BASELINE, PLACEBO)},
                 block_rate={c: level + effects[c] for c in CONDITIONS})


def _logit_truth(effects: Mapping[str, float], weight: np.ndarray, model: LogitModel) -> Truth:
    """Per condition, the domain-weighted E[expit(logit(level_d) + β_c + Z_c)], Z_c normal with
    the interaction, base and effect variances summed (probabilists' Gauss–Hermite nodes)."""
    x, w = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
    w = w / w.sum()
    a = logit(np.array(model.domain_levels[:len(weight)]))
    rate = {}
    for c, sd in zip(CONDITIONS, model.effect_sd):
        s = float(np.sqrt(model.interaction ** 2 + model.base ** 2 + sd ** 2))
        per_domain = expit(a[:, None] + effects[c] + s * x[None, :]) @ w
        rate[c] = float(per_domain @ weight)
    delta = {c: rate[c] - rate[BASELINE] for c in CONDITIONS if c != BASELINE}
    return Truth(delta=delta, corrected={c: delta[c] - delta[PLACEBO] for c in CONDITIONS if c not in (BASELINE, PLACEBO)},
                 block_rate=rate)


@dataclass
class Population:
    """One draw of the random effects: the probabilities every guard's calls are drawn from."""

    design: Design
    base_cluster: np.ndarray
    base_domain: np.ndarray
    common: np.ndarray                      # (bases × conditions): a_d + u_g + v_i + h + k (LogitModel: logits)
    model: AnyModel = field(default_factory=Model)

    def probabilities(self, effects: Mapping[str, float]) -> np.ndarray:
        beta = np.array([effects[c] for c in CONDITIONS])[None, :]
        if isinstance(self.model, LogitModel):
            return np.asarray(expit(self.common + beta))
        p = self.common + beta
        if p.min() < -1e-12 or p.max() > 1 + 1e-12:
            raise ValueError("a block probability lies outside [0, 1]: narrow the model or the effects")
        return np.clip(p, 0.0, 1.0)


def population(d: Design, rng: np.random.Generator, model: AnyModel = Model()) -> Population:
    cluster, domain = [], []
    g = 0
    for dom, sizes in enumerate(d.sizes):
        for s in sizes:
            cluster += [g] * s
            domain += [dom] * s
            g += 1
    base_cluster = np.array(cluster, dtype=np.int64)
    base_domain = np.array(domain, dtype=np.int64)
    n, k = len(base_cluster), len(CONDITIONS)
    if isinstance(model, LogitModel):
        lin = (logit(np.array(model.domain_levels))[base_domain] + rng.normal(0.0, model.interaction, g)[base_cluster]
               + rng.normal(0.0, model.base, n))
        own = rng.normal(size=(n, k)) * np.array(model.effect_sd)[None, :]
        return Population(d, base_cluster, base_domain, lin[:, None] + own, model)
    u = rng.uniform(-model.interaction, model.interaction, g)
    v = rng.uniform(-model.base, model.base, n)
    h = rng.uniform(-model.heterogeneity, model.heterogeneity, (g, k))
    kk = rng.uniform(-model.base_heterogeneity, model.base_heterogeneity, (n, k))
    h[:, 0] = 0.0     # the baseline is the reference: its own effect does not vary
    kk[:, 0] = 0.0
    level = np.array(model.domain_levels)[base_domain]
    common = (level + u[base_cluster] + v)[:, None] + h[base_cluster] + kk
    return Population(d, base_cluster, base_domain, common, model)


def calls(pop: Population, effects: Mapping[str, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, failed): one guard's calls as (bases × conditions × repetitions) booleans."""
    p = pop.probabilities(effects)
    reps = pop.design.reps
    n, k = p.shape
    blocks = rng.random((n, k, reps)) < p[:, :, None]
    failed = rng.random((n, k, reps)) < pop.model.fail_rate
    return blocks, failed


def counts(blocks: np.ndarray, failed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, N) per base × condition under the drop rule: what `estimate` counts from `table`'s rows."""
    ok = ~failed
    return (blocks & ok).sum(axis=2).astype(np.float64), ok.sum(axis=2).astype(np.float64)


def rows(pop: Population, effects: Mapping[str, float], rng: np.random.Generator) -> list[dict[str, Any]]:
    """One guard's decision table (the rows `estimate --table` reads)."""
    return table(pop, *calls(pop, effects, rng))


def table(pop: Population, blocks: np.ndarray, failed: np.ndarray) -> list[dict[str, Any]]:
    """The decision table of calls drawn by `calls`."""
    n, k, reps = blocks.shape
    out = []
    for i in range(n):
        base, inter, dom = f"b{i:04d}", f"g{int(pop.base_cluster[i]):04d}", f"d{int(pop.base_domain[i])}"
        for j, c in enumerate(CONDITIONS):
            for r in range(reps):
                bad = bool(failed[i, j, r])
                out.append({"base_id": base, "interaction_id": inter, "domain": dom, "condition": c,
                            "repetition": r, "decision": None if bad else int(blocks[i, j, r]),
                            "status": "unparseable" if bad else "ok"})
    return out


def guards(pop: Population, effects: Sequence[Mapping[str, float]], rng: np.random.Generator) -> list[list[dict[str, Any]]]:
    """A table per guard on the same population (the same stimuli, each guard's own calls)."""
    return [rows(pop, e, rng) for e in effects]
