"""The decision record: one typed value per (quantity, member) that every surface reads.

`decide_family` writes a member's decision into its equivalence record (the documented JSON keys
`differs`, `verdict`, `p_adjusted`, …); `Decision.of` reads that record once into a frozen value,
and the star, the verdict cell and the sentence's words are its fields, never re-derived."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from guardeval.records import Record

Outcome = Literal["differs", "equivalent", "differs and equivalent", "inconclusive", "not tested"]
OUTSIDE_WORDS = "outside the family, not tested"


def pval(p: float | None) -> str:
    """A p as every output prints it ('0.0012', '3.1e-05', '—' for none): the decision's words
    here, and every table through `estimators/report/formats` (which re-exports it), so the decision
    layer depends on no presentation module."""
    return "—" if p is None else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


@dataclass(frozen=True)
class Decision(Record):
    """One member's decision in its Holm family at level α: what a star, a verdict cell and a
    sentence say about it. `starred` is False outside a star-bearing row (the placebo's own row
    of an estimate: its Δ is a check of the placebo, decided but never starred)."""

    family: str | None          # '3 interventions'; None outside every family
    size: int | None            # the family's m
    alpha: float | None
    p: float | None
    p_adjusted: float | None
    outcome: Outcome
    verdict: str | None         # the verdict's words: 'differs from 0', 'within ±0.05', …
    differs: bool | None        # None: outside every family
    equivalent: bool | None
    decidable: bool | None
    underpowered: bool | None
    margin: float | None
    mde: float | None
    mde_holm: float | None
    p_min: float | None
    starred: bool

    @classmethod
    def of(cls, eq: Mapping[str, Any] | None, *, star: bool = True) -> Decision | None:
        """The decision an equivalence record carries (None for no record); `star` False for a row
        that is never starred."""
        if not eq:
            return None
        differs, equivalent = eq.get("differs"), eq.get("equivalent")
        outcome: Outcome = ("not tested" if differs is None else "differs and equivalent" if differs and equivalent
                            else "differs" if differs else "equivalent" if equivalent else "inconclusive")
        return cls(family=eq.get("family"), size=eq.get("holm_m"), alpha=eq.get("alpha"), p=eq.get("p"),
                   p_adjusted=eq.get("p_adjusted"), outcome=outcome, verdict=eq.get("verdict"),
                   differs=differs, equivalent=equivalent, decidable=eq.get("decidable"),
                   underpowered=eq.get("underpowered"), margin=eq.get("margin"), mde=eq.get("mde"),
                   mde_holm=eq.get("mde_holm"), p_min=eq.get("p_min"), starred=star and bool(differs))

    @property
    def family_words(self) -> str:
        """'after Holm over the 3 interventions' (or 'outside the family, not tested')."""
        return f"after Holm over {self.family}" if self.family else OUTSIDE_WORDS

    @property
    def short(self) -> str:
        """Verdict and MDE in one cell: 'within ±0.05; MDE 0.0712'."""
        if self.verdict is None:
            return "—"
        return f"{self.verdict}; MDE {'—' if self.mde is None else f'{self.mde:.4f}'}"

    @property
    def words(self) -> str:
        """The sentence's decision: 'significant after Holm over 3 interventions (p_Holm 0.0012)', and
        what the design can and cannot decide."""
        if self.differs is None:
            return OUTSIDE_WORDS
        words = (("significant" if self.differs else "not significant")
                 + f" {self.family_words} (p_Holm {pval(self.p_adjusted)})")
        if self.equivalent:
            words += f"; within ±{self.margin:g} (equivalence, Holm over the same family)"
        if self.decidable is False:
            words += (f"; this design cannot decide it (its smallest attainable p, {self.p_min:.3g}, is not below "
                      f"α/{self.size})")
        elif self.underpowered and not self.differs:
            mde_txt = "" if self.mde is None else f" (MDE {self.mde:.3f})"
            words += f"; the design is too small to show equivalence within ±{self.margin:g}{mde_txt}"
        return words


def headline(c: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    """A contrast's headline quantity and its decision record: the placebo-corrected effect of an
    intervention, else Δ (the placebo's own row, or no placebo)."""
    h = c.get("headline")
    if h == "delta_minus_placebo" or (h is None and c.get("equivalence_minus_placebo") is not None):
        return "delta_minus_placebo", c.get("equivalence_minus_placebo")
    return "delta", c.get("equivalence")


def headline_decision(c: Mapping[str, Any]) -> Decision | None:
    """The decision behind an estimate row's star: its headline's. The placebo's own row is never
    starred: its Δ is a check of the placebo (decided in the Δ family, said in its sentence), so
    the stars are one family — the interventions' corrected effects (Δ's without a placebo)."""
    return Decision.of(headline(c)[1], star=c.get("headline") != "placebo")


def headline_significant(c: Mapping[str, Any]) -> bool:
    """The star of an estimate's row: its headline decision's `starred`."""
    d = headline_decision(c)
    return d is not None and d.starred


def short(decision: Decision | None) -> str:
    return "—" if decision is None else decision.short


def words(decision: Decision | None) -> str:
    return OUTSIDE_WORDS if decision is None else decision.words


def power_words(eq: Mapping[str, Any] | None) -> str:
    """The MDE said after a quantity's sentence: ' Detectable with 80% power: 0.127 (0.148 at the
    Holm level α/3).'; nothing for a design that cannot decide it (its words say so, and no
    effect is detectable there); for a quantity with no variation, that no MDE can be estimated
    (a standard error of 0 says nothing of power)."""
    if not eq or eq.get("decidable") is False:
        return ""
    se = eq.get("se")
    if se is not None and se <= 0:
        return " The MDE cannot be estimated from a design with no variation."
    if eq.get("mde") is None:
        return ""
    holm = (f" ({eq['mde_holm']:.3f} at the Holm level α/{eq['holm_m']})"
            if eq.get("mde_holm") is not None and eq.get("holm_m") else "")
    return f" Detectable with 80% power: {eq['mde']:.3f}{holm}."
