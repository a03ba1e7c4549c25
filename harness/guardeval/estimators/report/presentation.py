"""The presentation model of one report (issue 49 §3): what a page shows of report.json, built
once, here, by the builders report.md uses too (the effects and strata tables of `rows.py`, the
families of `sections.py`, the sentences and notes of `report.py`, the publishing verdict of
`estimators/excluded.py`).

report.html (`guardeval.view.html`, `guardeval.view.tables`) reads this record and calls none of
those builders itself: the walk from the report to the view goes one way, down into the
estimators once and back, and the estimators never call into the view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardeval.estimators.excluded import publishable
from guardeval.estimators.report import sections as S
from guardeval.estimators.report.formats import level
from guardeval.estimators.report.report import decision_lines, headline_sentences, rules_note
from guardeval.estimators.report.rows import EffectsTable, StrataTable, effects_table, strata_tables
from guardeval.estimators.report.sections import Section


@dataclass(frozen=True)
class Presentation:
    """One report as its pages show it. `report` is report.json's object itself, for what a page
    lists field by field (the run's summary, coverage, diagnostics, "More in report.json")."""

    report: Mapping[str, Any]
    level: str                          # the intervals' level ('95%' at α 0.05)
    publishable: bool                   # the one verdict on publishing
    in_words: list[str]                 # one sentence per headline, after what must be said first
    effects: EffectsTable               # the rows and columns every format of the table renders
    decision_lines: list[str]           # how every verdict was decided
    rules_note: str | None              # said when the table has no column per failure rule
    strata: list[StrataTable]
    # The families report.md shows, grouped as report.html's headings group them; [] for a
    # report.json from an earlier version that lacks one.
    contrast_diagnostics: list[Section]
    block_rates: list[Section]          # with stability
    strata_corrected: list[Section]
    order: list[Section]                # with the retried calls
    excluded: list[Section]
    labels: list[Section]               # with accuracy; [] when the report has no accuracy
    worst_case: list[Section]


def presentation(report: Mapping[str, Any]) -> Presentation:
    effects = effects_table(report)
    return Presentation(
        report=report, level=level(report), publishable=publishable(report), in_words=headline_sentences(report),
        effects=effects, decision_lines=decision_lines(report),
        rules_note=None if any(c.key == "rule" for c in effects.columns) else rules_note(report),
        strata=strata_tables(report), contrast_diagnostics=S.contrast_diagnostics(report),
        block_rates=S.block_rates(report) + S.stability(report), strata_corrected=S.strata_corrected(report),
        order=S.order(report) + S.retried(report), excluded=S.excluded(report),
        labels=S.labels(report) + S.accuracy(report) if report.get("accuracy") else [],
        worst_case=S.worst_case(report))
