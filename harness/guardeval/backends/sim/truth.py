"""What a simulated guard of a given profile *should* find: the expected block probability of
every instance of a cohort, and from them the true effects the estimators estimate.

The server decides block ⇔ u < p, with u uniform and p the profile's probability for the
rendered request (`guardeval.backends.sim.guard`), so p *is* the expected decision of every call of that
instance, whatever the noise seed or the repetition. The estimand of `estimate` and `compare`
is a base-equal mean over the bases a contrast pairs (docs/estimators.md), so the truth is:

    Δ_c              = mean over bases with c and the baseline of  p(base, c) − p(base, baseline)
    Δ_c − Δ_placebo  = mean over bases with c, baseline and placebo of  p(base, c) − p(base, placebo)

These hold for the bases of the cohort as they are (the cohort is fixed, not sampled), which is
what a test that "the estimate lands on the truth" needs. Rendering is the guard config's and
prompt's (by default the `sim` preset and its prompt): the guard reads the rendered messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from guardeval.backends.config import GuardConfig, load_guard_config
from guardeval.backends.prompts import Prompt, load_prompt
from guardeval.backends.registry import make_renderer
from guardeval.backends.sim import guard as sim_guard
from guardeval.backends.sim.profiles import Profile
from guardeval.backends.sim.wire import ProfileRecord

Cell = tuple[str, str]   # (base_id, condition)


@dataclass(frozen=True)
class TrueEffect:
    condition: str
    role: str
    block_rate: float
    delta: float | None                 # None for the baseline
    delta_minus_placebo: float | None   # None for the baseline, the placebo, or with no placebo
    n_bases: int


class TrueEffectRecord(TypedDict):
    condition: str
    role: str
    block_rate: float
    delta: float | None
    delta_minus_placebo: float | None
    n_bases: int


class TruthRecord(TypedDict):
    profile: ProfileRecord
    baseline: str
    placebo: str | None
    effects: dict[str, TrueEffectRecord]


@dataclass(frozen=True)
class Truth:
    profile: Profile
    baseline: str
    placebo: str | None
    probabilities: dict[Cell, float] = field(repr=False)
    effects: dict[str, TrueEffect] = field(default_factory=dict)

    def record(self) -> TruthRecord:
        return {"profile": self.profile.record(), "baseline": self.baseline, "placebo": self.placebo,
                "effects": {c: {"condition": e.condition, "role": e.role, "block_rate": e.block_rate, "delta": e.delta,
                                "delta_minus_placebo": e.delta_minus_placebo, "n_bases": e.n_bases}
                            for c, e in self.effects.items()}}


def renderer(config: GuardConfig | None = None, prompt: Prompt | None = None
             ) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The request bodies a guard config sends (default: the `sim` preset with its prompt)."""
    config = config or load_guard_config("sim")
    return make_renderer(config, prompt or load_prompt(config.prompt))


def expected_block_probabilities(instances: Iterable[Mapping[str, Any]], profile: Profile, *,
                                 render: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
                                 ) -> dict[Cell, float]:
    """p(base, condition) of every instance (a cohort's rows: `cohort.iter_instances()`)."""
    render = render or renderer()
    return {(str(inst["base_id"]), str(inst["condition"])):
            sim_guard.block_probability(render(inst)["messages"], profile.weights) for inst in instances}


def true_effects(instances: Iterable[Mapping[str, Any]], profile: Profile, *,
                 render: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
                 baseline: str | None = None, placebo: str | None = None) -> Truth:
    """The true block rate, Δ and placebo-corrected effect of every condition for `profile`.
    The baseline and placebo default to the conditions whose rows have those roles."""
    rows = list(instances)
    roles = {str(r["condition"]): str(r.get("role") or "intervention") for r in rows}
    baseline = baseline or next((c for c, r in roles.items() if r == "baseline"), "original")
    placebo = placebo or next((c for c, r in roles.items() if r == "placebo"), None)
    p = expected_block_probabilities(rows, profile, render=render)
    bases = sorted({b for b, _ in p})
    effects: dict[str, TrueEffect] = {}
    for c in roles:
        with_c = [b for b in bases if (b, c) in p]
        paired = [b for b in with_c if (b, baseline) in p]
        corrected = [b for b in paired if placebo is not None and (b, placebo) in p]
        effects[c] = TrueEffect(
            condition=c, role=roles[c], block_rate=_mean([p[(b, c)] for b in with_c]),
            delta=None if c == baseline else _mean([p[(b, c)] - p[(b, baseline)] for b in paired]),
            delta_minus_placebo=(None if c in (baseline, placebo) or placebo is None or not corrected
                                 else _mean([p[(b, c)] - p[(b, placebo)] for b in corrected])),
            n_bases=len(paired) if c != baseline else len(with_c))
    return Truth(profile, baseline, placebo, p, effects)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
