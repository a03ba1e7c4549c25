"""One presentation model (issue 38 §3): the effects table's rows and columns are built once
(`estimators/report/rows.py`) and rendered by the terminal, report.md and report.html; a
comparison's pair rows likewise (`estimators/compare/rows.py`); the Python API returns those rows
themselves, not copies mapped by hand."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser

import numpy as np
import pytest

import guardeval.api as ge
from guardeval.api.results import difference_record, estimate_record
from guardeval.estimators import estimate
from guardeval.estimators import synthetic as sy
from guardeval.estimators.compare import compare_text
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.rows import PairRow, pair_rows
from guardeval.estimators.report import report as rp
from guardeval.estimators.report import rows
from guardeval.estimators.report.formats import md_table
from guardeval.estimators.report.presentation import presentation
from guardeval.view import tables

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def report() -> dict:
    rng = np.random.default_rng(5)
    effects = {**sy.EFFECTS, sy.PLACEBO: 0.30}     # a placebo that moves the guard: its row is decided, unstarred
    # 48 interactions (72 bases): the bootstrap decides, and threat_names' Δ differs (at 32, with 48
    # bases, the sign flips decide since issue 50 and it does not at 300 flips).
    return estimate(sy.rows(sy.population(sy.design(48), rng), effects, rng), roles=sy.ROLES, n_boot=300)


class _Cells(HTMLParser):
    """The header and body cells of the first table, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
            self._in = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in = False

    def handle_data(self, data: str) -> None:
        if self._in:
            self.rows[-1][-1] += data


def _html_rows(report: dict) -> list[list[str]]:
    p = _Cells()
    p.feed(tables.contrasts_table(presentation(report)))
    return [[" ".join(c.split()) for c in r] for r in p.rows]


def _md_rows(report: dict) -> list[list[str]]:
    head, body = rp.effects_rows(report)
    return [head, *body]


def test_the_api_returns_the_tables_rows_not_copies(report: dict) -> None:
    assert ge.Effect is rows.EffectRow and ge.Difference is PairRow
    est = estimate_record(report)
    assert est.effects == rows.effect_rows(report)
    placebo = est.effect(sy.PLACEBO)
    assert placebo.is_placebo and placebo.verdict is not None and placebo.verdict.differs and not placebo.starred
    # to_dict is the record's JSON shape: intervals as lists, decisions as objects.
    d = est.effect("tool_alias").to_dict()
    assert isinstance(d["ci"], list) and isinstance(d["verdict_minus_placebo"], dict) and "by_rule" in d


def test_report_md_and_report_html_render_the_same_columns_and_cells(report: dict) -> None:
    report = copy.deepcopy(report)
    report["contrasts"][1]["block_rate"] = 1e-5          # small rates: one way of writing them
    report["contrasts"][2]["same_round_flip_rate"] = 4e-4
    md, html = _md_rows(report), _html_rows(report)
    assert md[0] == html[0] == rows.effects_table(report).heads("markdown")
    assert len(md) == len(html) == len(report["contrasts"]) + 1
    verdicts = md[0].index(next(h for h in md[0] if h.startswith("verdict; MDE")))
    for m, h in zip(md[1:], html[1:]):
        # The same words in every cell; the formats differ only in markup (the placebo's tag, the
        # star's span, and report.html naming each of the two verdicts in their cell).
        m = [c.replace("(placebo)", "placebo") for c in m]
        delta, corrected = m[verdicts].split(" · ")
        m[verdicts] = f"Δ: {delta} Δ − placebo: {corrected}"
        assert m == h
    starred = {r.condition for r in rows.effect_rows(report) if r.starred}
    assert starred and sy.PLACEBO not in starred
    assert {r[0].split()[0] for r in md[1:] if r[0].endswith(" *")} == starred


def test_one_column_declared_once_reaches_every_format(report: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe for a new quantity: one `Column` (and its field); terminal, report.md and
    report.html all show it, none edited."""
    declared = rows.columns

    def more(rep, rules=()):
        return [*declared(rep, rules),
                rows.Column("clusters", "twice the bases", lambda r: r.n_bases * 2, rows.EVERY, "2×bases")]

    monkeypatch.setattr(rows, "columns", more)
    md, html = _md_rows(report), _html_rows(report)
    assert md[0][-1] == html[0][-1] == "twice the bases"
    for m, h, r in zip(md[1:], html[1:], rows.effect_rows(report)):
        assert m[-1] == h[-1] == str(2 * r.n_bases)
    text = rp.human_text(report, width=200)
    assert "2×bases" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("tool_alias"))
    alias = next(r for r in rows.effect_rows(report) if r.condition == "tool_alias")
    assert line.split()[-1] == str(2 * alias.n_bases)


def test_the_pair_tables_are_built_from_the_apis_pair_rows() -> None:
    rng = np.random.default_rng(4)
    pop = sy.population(sy.design(32), rng)
    a, b = sy.guards(pop, [sy.EFFECTS, {**sy.EFFECTS, "threat_names": 0.25}], rng)
    out = compare_inputs([CompareInput("A", a, sy.ROLES), CompareInput("B", b, sy.ROLES)], n_boot=300)
    pair = out["pairs"][0]
    got = pair_rows(pair)
    assert got == [difference_record(r) for r in pair["conditions"]]
    _, corrected = compare_text.corrected_table(pair)
    _, delta = compare_text.delta_table(pair)
    for table, pick in ((corrected, lambda r: r.verdict_minus_placebo), (delta, lambda r: r.verdict)):
        by_name = {re.sub(r" \*$", "", row[0]): row for row in table}
        for r in got:
            if r.condition not in by_name:
                continue
            d = pick(r)
            row = by_name[r.condition]
            assert row[0].endswith(" *") == bool(d is not None and d.starred), r.condition
            assert row[-1] == ("—" if d is None else d.short), r.condition
    assert got and all(r.verdict is not None for r in got)   # every row decided (stars: test_decisions_agree)


def test_report_md_and_report_html_render_the_same_strata_tables(report: dict) -> None:
    """The strata tables too are built once (`rows.strata_tables`) and rendered by both formats."""
    built = rows.strata_tables(report)
    assert [t.kind for t in built] == list(report["strata"])
    md = rp.markdown(report)
    html = tables.strata_tables(presentation(report))
    for t in built:
        assert f"## Strata {t.title}" in md and f"<h4>{t.title}</h4>" in html
        assert md_table(t.heads, [[rp.md_cell(c) for c in r] for r in t.cells]) in md
        p = _Cells()
        p.feed(html[html.index(f"<h4>{t.title}</h4>"):])
        shown = [[" ".join(c.split()) for c in r] for r in p.rows[:len(t.cells) + 1]]
        assert shown == [t.heads, *([rp.md_cell(c) for c in r] for r in t.cells)]


def test_an_intervention_without_a_corrected_effect_shows_no_headline_p_and_no_star(report: dict) -> None:
    """Its headline (Δ − placebo) is undefined: no star, p_Holm '—' in the terminal and the plot's
    rows, and the API's headline is None, though its own Δ is decided."""
    report = copy.deepcopy(report)
    c = next(c for c in report["contrasts"] if c["condition"] == "threat_names")
    for key in ("delta_minus_placebo", "ci_minus_placebo", "p_minus_placebo", "p_holm_minus_placebo",
                "equivalence_minus_placebo"):
        c[key] = None
    assert c["headline"] == "delta_minus_placebo" and c["equivalence"]["differs"]
    row = next(r for r in rows.effect_rows(report) if r.condition == "threat_names")
    assert row.headline is None and row.headline_p is None and not row.starred and row.verdict is not None
    # The effects table's row (not a wrapped sentence about failed calls that starts with the name).
    line = next(ln for ln in rp.human_text(report, width=200).splitlines()
                if ln.startswith("threat_names") and " of " not in ln)
    assert "*" not in line and line.split()[-4:-2] == ["—", "—"], line   # Δ − placebo, p_Holm
    md = next(r for r in _md_rows(report) if r[0].startswith("threat_names"))
    assert md[0] == "threat_names" and md[6] == "—"


def test_an_older_report_without_the_headline_key_never_stars_the_placebo(report: dict) -> None:
    report = copy.deepcopy(report)
    for c in report["contrasts"]:
        del c["headline"]
    placebo = rows.effect_rows(report)[0]
    assert placebo.is_placebo and placebo.verdict is not None and placebo.verdict.differs
    assert not placebo.starred and not _md_rows(report)[1][0].endswith("*")
    assert len({hash(r) for r in rows.effect_rows(report)}) == len(report["contrasts"])   # records hash
