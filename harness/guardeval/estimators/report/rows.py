"""The effects table, built once: a typed row per contrast of report.json (`EffectRow`, which the
Python API returns as `guardeval.api.Effect`) and the table's columns, declared once here.

The terminal, report.md and report.html render these rows and columns, each in its own format
(`report.human_text`, `report.markdown`, `view.tables.contrasts_table`); effects.png reads the
same rows. A column says what its cell holds (an estimate with its interval, a p, a proportion,
the decision's words), never how a format prints it; a row's star, p_Holm and verdict are its
decision records (`verdicts/record.Decision`), read once in `EffectRow.of`.

A new quantity of the effects table is one field of `EffectRow` (read in `of`) and one `Column`
in `columns`: every format and the API follow."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from guardeval.estimators.report.formats import level, rules_differ
from guardeval.estimators.verdicts.record import Decision, headline, headline_decision, short
from guardeval.records import Record

if TYPE_CHECKING:   # estimators/types loads numpy and scipy (via verdicts/power): not for readers of the record
    from guardeval.estimators.types import Contrast

Interval = tuple[float, float]
Headline = Literal["delta", "delta_minus_placebo"]
Format = Literal["terminal", "markdown", "html"]
PAGES: frozenset[Format] = frozenset({"markdown", "html"})
EVERY: frozenset[Format] = frozenset({"terminal", "markdown", "html"})


def interval_of(value: Any) -> Interval | None:
    return (float(value[0]), float(value[1])) if isinstance(value, (list, tuple)) and len(value) == 2 else None


@dataclass(frozen=True)
class EffectRow(Record):
    """One condition against the baseline (docs/estimators.md): block-rate differences as
    proportions. Intervals are unadjusted at 1 − α; verdicts are Holm decisions within the stated
    families. The effects table's row, and the API's `Effect`."""

    condition: str
    role: str
    in_family: bool
    delta: float | None
    ci: Interval | None
    p: float | None
    p_holm: float | None
    delta_minus_placebo: float | None
    ci_minus_placebo: Interval | None
    p_minus_placebo: float | None
    increase: int                           # bases whose block rate rose
    decrease: int
    tie: int
    n_bases: int
    block_rate: float | None
    p_holm_minus_placebo: float | None = None
    verdict: Decision | None = None          # Δ's decision
    verdict_minus_placebo: Decision | None = None   # the corrected effect's (the headline, where defined)
    starred: bool = False                    # the table's `*`: the headline decision's `starred`
    is_placebo: bool = False                 # the placebo's own row (its Δ checks the placebo; never starred)
    n_clusters: int | None = None
    same_round_flip_rate: float | None = None
    by_rule: dict[str, float | None] = field(default_factory=dict, hash=False)   # Δ under each failure rule
    headline_quantity: Headline = "delta"    # the row's headline: Δ − placebo for an intervention, else Δ
    # The headline's worst-case range over the failed calls and whether its verdict holds at both
    # ends (estimators/excluded.py); None in a report.json from before it.
    bounds: Interval | None = None
    robust: bool | None = None

    @classmethod
    def of(cls, c: Contrast, placebo: str | None = None) -> EffectRow:
        """The row of one contrast of report.json; `placebo`: the report's placebo condition.
        Each decision is starred only where the table puts its star: on the row's headline,
        never on the placebo's own row."""
        name, _ = headline(c)
        star = headline_decision(c)
        # A placebo's own row: the report's placebo, or with condition families any placebo (its headline).
        is_placebo = (placebo is not None and c["condition"] == placebo) or c.get("headline") == "placebo"
        # The placebo's own row is never starred, even in a report.json from before the `headline` key.
        on = star is not None and star.starred and not is_placebo
        bounds, robust = _bounds(c, name)
        return cls(condition=c["condition"], role=c["role"], in_family=bool(c["in_family"]), delta=c["delta"],
                   ci=interval_of(c["ci"]), p=c["p"], p_holm=c["p_holm"], delta_minus_placebo=c["delta_minus_placebo"],
                   ci_minus_placebo=interval_of(c["ci_minus_placebo"]), p_minus_placebo=c["p_minus_placebo"],
                   increase=c["increase"], decrease=c["decrease"], tie=c["tie"], n_bases=c["n_bases"],
                   block_rate=c.get("block_rate"), p_holm_minus_placebo=c.get("p_holm_minus_placebo"),
                   verdict=Decision.of(c.get("equivalence"), star=on and name == "delta"),
                   verdict_minus_placebo=Decision.of(c.get("equivalence_minus_placebo"),
                                                     star=on and name == "delta_minus_placebo"),
                   starred=on, is_placebo=is_placebo, n_clusters=c.get("n_clusters"),
                   same_round_flip_rate=c.get("same_round_flip_rate"), by_rule=dict(c.get("by_rule") or {}),
                   headline_quantity="delta_minus_placebo" if name == "delta_minus_placebo" else "delta",
                   bounds=bounds, robust=robust)

    @property
    def headline(self) -> Decision | None:
        """The decision behind the row's star: the corrected effect's for an intervention (None
        where it is undefined), Δ's for the placebo and without a placebo."""
        return self.verdict_minus_placebo if self.headline_quantity == "delta_minus_placebo" else self.verdict

    @property
    def headline_p(self) -> float | None:
        """The Holm-adjusted p of the headline (what the star follows)."""
        return None if self.headline is None else self.headline.p_adjusted

    @property
    def significant(self) -> bool:
        """The row's `*` in the effects table: the headline differs from 0 after Holm in the
        interventions' family. The placebo's own row is never starred (its Δ is a check of the
        placebo, decided in the Δ family: see `verdict`)."""
        return self.starred


def _bounds(c: Contrast, name: str) -> tuple[Interval | None, bool | None]:
    """The headline's (range, robust); (None, None) in a report.json from before `bounds`."""
    b = c.get("bounds")
    if not isinstance(b, Mapping):
        return None, None
    return interval_of(b.get("corrected" if name == "delta_minus_placebo" else "delta")), b.get("robust")


def effect_rows(report: Mapping[str, Any]) -> list[EffectRow]:
    """Every contrast of a report as its table row, in the report's order."""
    return [EffectRow.of(c, report.get("placebo")) for c in report["contrasts"]]


# -- what a cell holds ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Name:
    """A row's label: the condition, the placebo's tag, the star (and, on a starred row whose
    verdict does not survive its failed calls, that it is not robust: never a bare star)."""

    condition: str
    placebo: bool
    starred: bool
    fragile: bool = False


@dataclass(frozen=True)
class Est:
    """A signed effect and its interval."""

    value: float | None
    ci: Interval | None


@dataclass(frozen=True)
class P:
    """A p-value; `absent` is said where there is none ('not in family')."""

    p: float | None
    absent: str = "—"


@dataclass(frozen=True)
class Rate:
    """A proportion without sign (a block rate, a flip rate)."""

    value: float | None


@dataclass(frozen=True)
class Signed:
    """A signed proportion without an interval (Δ under one failure rule)."""

    value: float | None


Cell = Name | Est | P | Rate | Signed | str | int | None
ColumnKey = Literal["condition", "delta", "p", "p_holm", "delta_minus_placebo", "p_minus_placebo",
                    "p_holm_minus_placebo", "headline_p", "counts", "bases", "clusters", "block_rate",
                    "flip_rate", "rule", "verdicts", "bounds"]


@dataclass(frozen=True)
class Column:
    """One column of the effects table: its header on the pages (report.md, report.html), the
    terminal's shorter header where it shows the column, and what its cell holds."""

    key: ColumnKey
    head: str
    cell: Callable[[EffectRow], Cell]
    shown: frozenset[Format] = PAGES
    terminal_head: str | None = None


def _p_holm_corrected(r: EffectRow) -> Cell:
    if r.delta_minus_placebo is None:
        return "—"
    return P(r.p_holm_minus_placebo, absent="not in family")


def _verdicts(r: EffectRow) -> str:
    return f"{short(r.verdict)} · {short(r.verdict_minus_placebo)}"


def _by_rule(rule: str) -> Callable[[EffectRow], Cell]:
    return lambda r: Signed(r.by_rule.get(rule))


def range_cell(r: EffectRow) -> str:
    if r.bounds is None:
        return "—"
    lo, hi = (f"{x:+.4f}".replace("-", "−") for x in r.bounds)
    return f"[{lo}, {hi}] {ROBUST_WORDS[r.robust]}"


ROBUST_WORDS = {True: "robust", False: "NOT robust", None: "not decided"}


def name_cell(r: EffectRow) -> Name:
    return Name(r.condition, r.is_placebo, r.starred, fragile=r.starred and r.robust is False)


def columns(report: Mapping[str, Any], rules: Sequence[str] = ()) -> list[Column]:
    """The effects table's columns for `report`; `rules`: the failure rules given a column each
    (those whose answers differ; none when every rule agrees), and then the headline's range over
    the failed calls."""
    lv = level(report)
    margin = report.get("margin")
    return [
        Column("condition", "condition", name_cell, EVERY, "condition"),
        Column("delta", f"Δ [{lv} CI, unadjusted]", lambda r: Est(r.delta, r.ci), EVERY,
               f"Δ vs {report['baseline']} [{lv} CI]"),
        Column("p", "p", lambda r: P(r.p)),
        Column("p_holm", "p_Holm (Δ)", lambda r: P(r.p_holm) if r.in_family else "not in family"),
        Column("delta_minus_placebo", f"Δ − placebo [{lv} CI, unadjusted]",
               lambda r: Est(r.delta_minus_placebo, r.ci_minus_placebo), EVERY, f"Δ − placebo [{lv} CI]"),
        Column("p_minus_placebo", "p (corr.)", lambda r: P(r.p_minus_placebo)),
        Column("p_holm_minus_placebo", "p_Holm (corr.)", _p_holm_corrected),
        # The terminal has room for one p_Holm: the headline's, which the star follows.
        Column("headline_p", "p_Holm", lambda r: P(r.headline_p), frozenset({"terminal"}), "p_Holm"),
        Column("counts", "+/−/=", lambda r: f"{r.increase}/{r.decrease}/{r.tie}", EVERY, "+/−/="),
        Column("bases", "bases", lambda r: r.n_bases, EVERY, "bases"),
        Column("clusters", "clusters", lambda r: r.n_clusters),
        Column("block_rate", "block rate", lambda r: Rate(r.block_rate)),
        Column("flip_rate", "same-round flip rate", lambda r: Rate(r.same_round_flip_rate)),
        *(Column("rule", f"Δ {rule}", _by_rule(rule)) for rule in rules),
        *([Column("bounds", "headline range, failed calls as block / allow", range_cell)] if rules else []),
        Column("verdicts", f"verdict; MDE (Δ · Δ − placebo{f'; margin ±{margin:g}' if margin else ''})", _verdicts),
    ]


@dataclass(frozen=True)
class EffectsTable:
    """The effects table of one report: its rows and columns, for a format to render."""

    rows: list[EffectRow]
    columns: list[Column]

    def shown(self, fmt: Format) -> list[Column]:
        return [c for c in self.columns if fmt in c.shown]

    def heads(self, fmt: Format) -> list[str]:
        return [c.terminal_head or c.head if fmt == "terminal" else c.head for c in self.shown(fmt)]

    def cells(self, fmt: Format) -> list[list[Cell]]:
        cols = self.shown(fmt)
        return [[c.cell(r) for c in cols] for r in self.rows]


def effects_table(report: Mapping[str, Any]) -> EffectsTable:
    """The effects table of `report`: a column per failure rule only when the rules give
    different answers (else every format says once that they agree)."""
    rules = list(report["failure_rules"]) if rules_differ(report) else []
    return EffectsTable(effect_rows(report), columns(report, rules))


# -- the strata tables -------------------------------------------------------------------------------

STRATA_TITLES = {"domain": "by domain", "label": "by original label (0 safe, 1 unsafe)"}


@dataclass(frozen=True)
class StrataTable:
    """Δ per condition within each stratum of one kind (domain, original label): one table that
    report.md and report.html both render."""

    kind: str
    title: str
    heads: list[str]
    cells: list[list[Cell]]


def strata_tables(report: Mapping[str, Any]) -> list[StrataTable]:
    """A table per kind of stratum in the report, in its order; a kind the report does not hold as
    an object is left out."""
    conds = [c["condition"] for c in report["contrasts"]]
    out = []
    for kind, strata in (report.get("strata") or {}).items():
        if not isinstance(strata, Mapping):
            continue
        cells: list[list[Cell]] = []
        for name, s in strata.items():
            cs = s.get("contrasts") or {}
            cells.append([str(name), s.get("n_bases"),
                          *(Est((cs.get(c) or {}).get("delta"), interval_of((cs.get(c) or {}).get("ci"))) for c in conds)])
        out.append(StrataTable(kind, STRATA_TITLES.get(kind, f"by {kind}"),
                               [kind, "bases", *(f"Δ {c} [{level(report)} CI]" for c in conds)], cells))
    return out
