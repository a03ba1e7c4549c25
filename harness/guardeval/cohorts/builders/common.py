"""What every builder shares: conditions -> checked rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from guardeval.cohorts.model import Condition, build_row
from guardeval.cohorts.transforms import (
    Transform,
    apply_checked,
    check_row,
    combined,
    format_placebo,
    identity,
    make_marker_rewrite,
    make_tool_alias,
)


@dataclass(frozen=True)
class ConditionSpec:
    """A cohort condition: its name, role and the transform that produces it."""

    name: str
    role: str
    transform: Transform

    def condition(self) -> Condition:
        keeps = ", ".join(("label", *self.transform.keeps))
        return Condition(self.name, self.role, f"{self.transform.description}; keeps {keeps} byte-identical",
                         self.transform.acts_on)


def marker_and_alias_conditions(alias_table: Mapping[str, str]) -> list[ConditionSpec]:
    """The five conditions of an agent-trajectory cohort: the baseline, the formatting placebo, the
    marker rewrite, the tools renamed by `alias_table`, and both (demo, agentdojo, inspect)."""
    return [
        ConditionSpec("original", "baseline", identity()),
        ConditionSpec("format_placebo", "placebo", format_placebo()),
        ConditionSpec("marker_rewrite", "intervention", make_marker_rewrite()),
        ConditionSpec("tool_alias", "intervention", make_tool_alias(alias_table)),
        ConditionSpec("combined", "intervention", combined(alias_table)),
    ]


def build_rows(bases: Iterable[Mapping[str, Any]], specs: list[ConditionSpec]) -> list[dict[str, Any]]:
    """One row per base x condition, in base order then condition order; every variant checked."""
    rows: list[dict[str, Any]] = []
    for base in bases:
        for spec in specs:
            variant = apply_checked(spec.transform, base, spec.name)
            row = build_row(base, spec.name, spec.role, variant.content, variant.render)
            check_row(base, row, spec.name)
            rows.append(row)
    return rows


def select_conditions(specs: list[ConditionSpec], wanted: str | None) -> list[ConditionSpec]:
    """`--conditions a,b`: keep the named ones (baseline always kept, order of `specs`)."""
    from guardeval.errors import InputError

    if not wanted:
        return specs
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    known = {s.name for s in specs}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown condition(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}",
                         field="--conditions")
    return [s for s in specs if s.name in names or s.role == "baseline"]
