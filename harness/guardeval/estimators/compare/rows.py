"""A comparison's pair rows, built once: one typed row per condition of a pair (B − A), which the
Python API returns as `guardeval.api.Difference` and from which the pair tables of the terminal,
compare.md/html and study.md/html are built (`compare_text.corrected_table`, `delta_table`). A
row's star, p_Holm and verdict are its decision records (`verdicts/record.Decision`), read once
in `PairRow.of`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardeval.estimators.report.rows import Interval, interval_of
from guardeval.estimators.verdicts.record import Decision
from guardeval.records import Record


@dataclass(frozen=True)
class PairRow(Record):
    """One condition's effect in run A and run B, and their paired difference (B − A), of Δ and
    of the placebo-corrected effect (the headline), each with its decision."""

    condition: str
    delta_a: float | None                   # Δ (condition − baseline block rate) in run A
    ci_a: Interval | None                   # its unadjusted (1 − α) interval
    delta_b: float | None                   # Δ in run B
    ci_b: Interval | None
    difference: float | None                # B − A of Δ (not the headline)
    ci_difference: Interval | None
    p_difference: float | None
    p_holm: float | None                    # p_difference after Holm in its family
    delta_minus_placebo_a: float | None = None   # the corrected effect Δ − Δ_placebo in run A
    delta_minus_placebo_b: float | None = None   # ... in run B
    difference_minus_placebo: float | None = None   # the headline: B − A of the corrected effect
    ci_difference_minus_placebo: Interval | None = None   # its unadjusted (1 − α) interval
    p_difference_minus_placebo: float | None = None
    p_holm_minus_placebo: float | None = None   # the headline's p after Holm
    verdict: Decision | None = None          # the decision on `difference`
    verdict_minus_placebo: Decision | None = None   # the decision on the headline
    # The headline difference's range over both inputs' failed calls and whether its verdict holds
    # at both ends (compare._pair_bounds); None in a comparison from before it.
    bounds: Interval | None = None
    robust: bool | None = None

    @classmethod
    def of(cls, r: Mapping[str, Any]) -> PairRow:
        """The row of one condition of a pair (compare.json's `conditions`, a pair's `conditions`)."""
        return cls(condition=r["condition"], delta_a=r["delta_a"], ci_a=interval_of(r["ci_a"]), delta_b=r["delta_b"],
                   ci_b=interval_of(r["ci_b"]), difference=r["difference"], ci_difference=interval_of(r["ci_difference"]),
                   p_difference=r["p_difference"], p_holm=r["p_holm"],
                   delta_minus_placebo_a=r.get("delta_minus_placebo_a"),
                   delta_minus_placebo_b=r.get("delta_minus_placebo_b"),
                   difference_minus_placebo=r.get("difference_minus_placebo"),
                   ci_difference_minus_placebo=interval_of(r.get("ci_difference_minus_placebo")),
                   p_difference_minus_placebo=r.get("p_difference_minus_placebo"),
                   p_holm_minus_placebo=r.get("p_holm_minus_placebo"), verdict=Decision.of(r.get("equivalence")),
                   verdict_minus_placebo=Decision.of(r.get("equivalence_minus_placebo")), **_bounds(r))

    @property
    def headline(self) -> Decision | None:
        """The headline's decision: B − A of the corrected effect (of Δ for the placebo)."""
        return self.verdict_minus_placebo if self.verdict_minus_placebo is not None else self.verdict

    @property
    def significant(self) -> bool:
        """The headline difference (corrected; Δ for the placebo) differs from 0 in its family."""
        return bool(self.headline is not None and self.headline.starred)

    @property
    def has_corrected(self) -> bool:
        """Whether the row belongs in the headline table (a corrected effect on either side)."""
        return self.difference_minus_placebo is not None or self.delta_minus_placebo_a is not None


def _bounds(r: Mapping[str, Any]) -> dict[str, Any]:
    b = r.get("bounds")
    if not isinstance(b, Mapping):
        return {}
    corrected = r.get("difference_minus_placebo") is not None
    return {"bounds": interval_of(b.get("difference_minus_placebo" if corrected else "difference")),
            "robust": b.get("robust")}


def pair_rows(pair: Mapping[str, Any]) -> list[PairRow]:
    """Every condition of a pair as its row, in the comparison's order."""
    return [PairRow.of(r) for r in pair["conditions"]]
