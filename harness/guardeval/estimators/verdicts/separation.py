"""Which guard a condition moves more, and whether the data separate them (docs/estimators.md,
Decisions; issue 45 §6, issue 47 §4): the one decision behind "more sensitive", "most" and
"least" in compare's and a study's words.

A guard's sensitivity to a condition is the size of its headline effect (the placebo-corrected
effect; Δ without a placebo). Two guards are *separated* when their sizes differ and their paired
difference differs from 0 in its stated family (the pair's decision record, `Decision`): the guard
with the larger effect is then the more sensitive, by the paired difference of the two effects
(the difference measured in the direction of the larger effect, σ·(e_x − e_y) > 0, is what the
pair's test decides). Equal sizes, or a difference the data do not decide, are a tie: no guard is
named more or less sensitive. A difference outside every family is not tested, and says neither.

Nothing here depends on the order the guards were given in: guards of equal size are taken in
the order of their labels, so the same effects and decisions give the same answer whatever the
order of `--guard`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from guardeval.estimators.verdicts.record import Decision
from guardeval.records import Record

# Sizes closer than this are one size (float noise, not a difference the data could carry).
SAME_SIZE = 1e-12

Kind = Literal["separated", "tie", "not tested", "undefined"]


@dataclass(frozen=True)
class Separation(Record):
    """The guards a condition moves most and least, as their pair decisions separate them.
    `top` and `bottom` are the guards of the largest and the smallest effect (equal sizes: the
    first by label); `most` and `least` the guards not separated from them (sorted by label;
    empty unless separated; a guard separated from neither end is in both);
    `decision` the top–bottom pair's decision. `kind`: "separated" (top moved more than bottom,
    decided), "tie" (equal sizes, or a tested difference that is not decided), "not tested" (the
    pair's difference is outside every family), "undefined" (fewer than two effects)."""

    kind: Kind
    top: str | None
    bottom: str | None
    most: tuple[str, ...]
    least: tuple[str, ...]
    decision: Decision | None
    equal_sizes: bool

    @property
    def separated(self) -> bool:
        return self.kind == "separated"


PairDecision = Callable[[str, str], "Decision | None"]


def _order(effects: Mapping[str, float]) -> list[str]:
    """Largest size first; equal sizes by label (so no order of the inputs shows through)."""
    return sorted(effects, key=lambda g: (-abs(effects[g]), g))


def separate(effects: Mapping[str, float | None], decided: PairDecision) -> Separation:
    """The separation of guards under one condition: `effects` label → headline effect (None:
    undefined, left out), `decided(x, y)` the decision record of x and y's paired difference."""
    defined = {g: float(e) for g, e in effects.items() if e is not None}
    if len(defined) < 2:
        return Separation(kind="undefined", top=None, bottom=None, most=(), least=(), decision=None,
                          equal_sizes=False)
    order = _order(defined)
    top, bottom = order[0], order[-1]

    def apart(x: str, y: str) -> bool:
        if abs(abs(defined[x]) - abs(defined[y])) <= SAME_SIZE:
            return False
        d = decided(x, y)
        return d is not None and d.differs is True

    d = decided(top, bottom)
    equal = abs(abs(defined[top]) - abs(defined[bottom])) <= SAME_SIZE
    if apart(top, bottom):
        kind: Kind = "separated"
    elif not equal and (d is None or d.differs is None):
        kind = "not tested"
    else:
        kind = "tie"
    most: tuple[str, ...] = ()
    least: tuple[str, ...] = ()
    if kind == "separated":
        # A guard the data do not separate from the top shares the top's place (a guard is the
        # most sensitive alone only when separated from every other); one separated from neither
        # end shares both places.
        most = tuple(sorted(g for g in order if not apart(g, top)))
        least = tuple(sorted(g for g in order if not apart(g, bottom)))
    return Separation(kind=kind, top=top, bottom=bottom, most=most, least=least, decision=d, equal_sizes=equal)


def pair(a: str, b: str, eff_a: float | None, eff_b: float | None, record: Mapping[str, object] | None) -> Separation:
    """Two guards and the decision record of their paired difference (compare's B − A)."""
    d = Decision.of(record)
    return separate({a: eff_a, b: eff_b}, lambda x, y: d)
