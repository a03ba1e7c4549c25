"""A decision table counted once under every failure rule: what every family of estimates reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from guardeval.estimators import effects as fx
from guardeval.estimators.rounds import RoundCells, round_cells


@dataclass
class Frame:
    design: fx.Design
    rule: str                  # the headline failure rule
    baseline: str
    placebo: str | None
    contrasts: list[str]       # every condition but the baseline, in report order
    counts: dict[str, tuple[np.ndarray, np.ndarray]]   # rule -> (S, N) per base × condition
    rates: dict[str, np.ndarray]                       # rule -> p(i,c)
    rounds: RoundCells                                 # headline rule, one cell per (base, round)
    # Condition families: each contrast's own placebo (None: none, or it is a placebo); None
    # when the table has no families (every contrast corrected by `placebo`).
    placebo_of: dict[str, str | None] | None = None
    base_domain: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.base_domain = self.design.cluster_domain[self.design.base_cluster]

    @property
    def b(self) -> int:
        return self.design.cond_index(self.baseline)

    @property
    def pl(self) -> int | None:
        return None if self.placebo is None else self.design.cond_index(self.placebo)

    @property
    def s(self) -> np.ndarray:
        return self.counts[self.rule][0]

    @property
    def n(self) -> np.ndarray:
        return self.counts[self.rule][1]

    @property
    def p(self) -> np.ndarray:
        return self.rates[self.rule]

    def pl_for(self, c: int) -> int | None:
        """The placebo that corrects contrast c (its family's, or the table's)."""
        if self.placebo_of is None:
            return self.pl
        own = self.placebo_of.get(self.design.conditions[c])
        return None if own is None else self.design.cond_index(own)

    def idx(self, condition: str) -> int:
        return self.design.cond_index(condition)

    def has(self, c: int, rule: str | None = None) -> np.ndarray:
        return self.counts[rule or self.rule][1][:, c] > 0

    def paired(self, c: int, rule: str | None = None) -> np.ndarray:
        """Bases with counted calls for c and the baseline."""
        return self.has(c, rule) & self.has(self.b, rule)

    def corrected(self, c: int, rule: str | None = None) -> np.ndarray | None:
        """Bases with counted calls for c, the baseline and the placebo; None where the placebo
        correction is not defined (no placebo, or c is the placebo)."""
        pl = self.pl_for(c)
        if pl is None or c == pl:
            return None
        return self.paired(c, rule) & self.has(pl, rule)


def make_frame(design: fx.Design, rule: str, baseline: str, placebo: str | None, contrasts: list[str],
               placebo_of: dict[str, str | None] | None = None) -> Frame:
    counts = {r: fx.base_counts(design, r) for r in fx.RULES}
    rates = {r: fx.base_rates(*counts[r]) for r in fx.RULES}
    return Frame(design, rule, baseline, placebo, contrasts, counts, rates, round_cells(design, rule), placebo_of)
