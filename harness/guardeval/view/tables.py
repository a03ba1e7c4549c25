"""report.json as HTML tables: specific tables for the quantities the estimator writes today,
and a generic rendering for any key it learns later (a dict of dicts becomes a table, a
dict of scalars a two-column table, a list of objects a table), so nothing in report.json is
left out of the report. Every string is escaped; nothing here emits script."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from guardeval.estimators.report.definitions import DEFINITIONS
from guardeval.estimators.report.formats import num
from guardeval.estimators.report.presentation import Presentation
from guardeval.estimators.report.rows import Cell, EffectRow, Est, Name, P, Rate, Signed
from guardeval.estimators.report.sections import Section
from guardeval.estimators.verdicts.record import short


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """A value from report.json as display text (not yet escaped)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.2e}"
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{fmt(value[0])}, {fmt(value[1])}]"
    if isinstance(value, Sequence) and all(not isinstance(v, (Mapping, list)) for v in value):
        return ", ".join(fmt(v) for v in value)
    return orjson.dumps(value).decode()


def signed(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:+.4f}".replace("-0.0000", "+0.0000")


def est_ci_cell(x: float | None, ci: Sequence[float] | None) -> Raw:
    """An estimate and its interval that may wrap between the two, or inside the interval after
    its comma (so the effects table fits 1000 pixels), never inside a number."""
    if ci is None:
        return Raw(esc(signed(x)))
    return Raw(f'<span class="nw">{esc(signed(x))}</span> <span class="nw">[{esc(signed(ci[0]))},</span> '
               f'<span class="nw">{esc(signed(ci[1]))}]</span>')


def whole_words(rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """Cells that may wrap at their spaces only: each word kept on one line ("8.6e-10", never
    "8.6e-" / "10"), for a table whose number cells wrap (class "wraps")."""
    return [[c if isinstance(c, Raw) else Raw(" ".join(f'<span class="nw">{esc(w)}</span>' for w in fmt(c).split(" ")))
             for c in r] for r in rows]


def pv(p: float | None) -> str:
    return "—" if p is None else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


def pv_cell(p: float | None) -> Raw:
    """A p in a table whose cells may wrap: kept on one line ("8.6e-10", never "8.6e-" / "10")."""
    return Raw(f'<span class="nw">{esc(pv(p))}</span>')


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], *, cls: str = "", num_from: int = 1,
          row_attrs: Sequence[str] | None = None) -> str:
    """An HTML table; cells given as (text) are escaped, cells given as Raw are not."""
    out = [f'<div class="scroll"><table class="{esc(cls)}"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(rows):
        attrs = row_attrs[i] if row_attrs else ""
        cells = []
        for j, c in enumerate(r):
            text = c.html if isinstance(c, Raw) else esc(fmt(c))
            cells.append(f'<td class="num">{text}</td>' if j >= num_from else f"<td>{text}</td>")
        out.append(f"<tr{attrs}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def pair_table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A pair's table of B − A (compare.html, study.html): headers and cells wrap at spaces, so
    it fits a 1000-pixel window."""
    return table(head, whole_words(rows), cls="wraps")


class Raw:
    """Cell HTML built here from escaped parts."""

    def __init__(self, html_text: str) -> None:
        self.html = html_text


def definitions(*groups: str) -> str:
    if not groups:
        return ""
    items = []
    for g in groups:
        section, terms = DEFINITIONS[g]
        items += [f"<dt>{esc(t)}</dt><dd>{esc(d)}</dd>" for t, d in terms]
        items.append(f'<dd class="ref">docs/estimators.md § {esc(section)}</dd>')
    return f'<details class="defs"><summary>Definitions</summary><dl>{"".join(items)}</dl></details>'


# -- generic rendering ---------------------------------------------------------------------------

def _cells(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object's fields as table cells: a nested object of scalars becomes one compact cell
    ("tp 30, fp 91, …"), anything deeper its own generic table."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, Mapping) and all(not isinstance(x, (Mapping, list)) for x in v.values()):
            out[k] = ", ".join(f"{kk} {fmt(vv)}" for kk, vv in v.items())
        elif isinstance(v, (Mapping, list)) and not _short(v):
            out[k] = Raw(generic(v))
        else:
            out[k] = v
    return out


def generic(value: Any, *, row_name: str = "", fields_as_rows: bool = False) -> str:
    """Any JSON value as HTML: tables where the shape allows, else its text. `fields_as_rows`: an
    object of objects with many fields and few keys (report.json's accuracy: some 20 fields per
    condition) as a row per field and a column per key, which fits a 1000-pixel window."""
    if isinstance(value, Mapping):
        if value and all(isinstance(v, Mapping) for v in value.values()):
            flat = {k: _cells(v) for k, v in value.items()}
            cols: list[str] = []
            for f in flat.values():
                cols += [c for c in f if c not in cols]
            if fields_as_rows:
                return table([f"field \\ {row_name}" if row_name else "", *flat],
                             [[c, *(f.get(c) for f in flat.values())] for c in cols], cls="fields")
            # Headers and cells wrap at spaces, each word whole (a compact cell such as coverage's
            # failures_by_status is a long list): the table fits a 1000-pixel window.
            return table([row_name, *cols], whole_words([[k, *(f.get(c) for c in cols)] for k, f in flat.items()]),
                         cls="wraps")
        return table(["", ""], [[k, v if not isinstance(v, (Mapping, list)) else Raw(generic(v))]
                                for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        flat_rows = [_cells(v) for v in value]
        cols = []
        for f in flat_rows:
            cols += [c for c in f if c not in cols]
        return table(cols, whole_words([[f.get(c) for c in cols] for f in flat_rows]), num_from=1, cls="wraps")
    return f"<p>{esc(fmt(value))}</p>"


# -- the tables of today's report.json -----------------------------------------------------------

def section(sec: Section) -> str:
    """A family of report.md (`guardeval.estimators.report.sections`) as HTML: the same rows."""
    return (f"<h3>{esc(sec.title)}</h3><p class=\"note\">{esc(sec.intro)}</p>"
            + (table(sec.head, sec.rows, cls="section") if sec.head else ""))


# Per-contrast keys shown by the contrasts table and the contrast-diagnostics section; any other
# goes to "More per-contrast quantities".
CONTRAST_KEYS = {"condition", "role", "in_family", "delta", "ci", "p", "p_holm", "delta_minus_placebo",
                 "p_holm_minus_placebo", "headline",
                 "ci_minus_placebo", "p_minus_placebo", "n_bases_minus_placebo", "increase", "decrease", "tie",
                 "n_bases", "n_clusters", "by_rule", "by_rule_ci", "by_rule_minus_placebo", "block_rate",
                 "same_round_flip_rate", "n_undefined_replicates", "sign_test", "sign_test_minus_placebo",
                 "by_repetition", "by_repetition_minus_placebo", "flip_counts", "unanimous_shift", "accuracy_delta",
                 "accuracy_delta_ci", "leave_one_tool_out", "increase_minus_placebo", "decrease_minus_placebo",
                 "tie_minus_placebo", "accuracy_delta_minus_placebo", "accuracy_delta_ci_minus_placebo",
                 "leave_one_tool_out_minus_placebo", "equivalence", "equivalence_minus_placebo",
                 "bounds"}   # the "Bounds over the failed calls" section


def effect_cell(cell: Cell) -> Any:
    """A cell of the effects table (`estimators.report.rows`) as report.html shows it."""
    if isinstance(cell, Name):
        return Raw(breakable(cell.condition) + (' <span class="tag">placebo</span>' if cell.placebo else "")
                   + (' <span class="sig" title="its headline differs from 0 after Holm in its family">*</span>'
                      if cell.starred else "")
                   + (' <span class="bad" title="at one end of its range over the failed calls the verdict changes">'
                      '(not robust to failed calls)</span>' if cell.fragile else ""))
    if isinstance(cell, Est):
        return est_ci_cell(cell.value, cell.ci)
    if isinstance(cell, P):
        return cell.absent if cell.p is None else pv_cell(cell.p)
    if isinstance(cell, Signed):
        return signed(cell.value)
    if isinstance(cell, Rate):
        return num(cell.value, sign=False)
    return cell


def breakable(name: str) -> str:
    """A name (a condition's) escaped, with a line break allowed after each `_`, `-` or `.` and
    nowhere else ("format_|placebo", never "format_pla|cebo"; report.css keeps the rest whole)."""
    return re.sub(r"([_.-])", r"\1<wbr>", esc(name))


def _verdicts_cell(r: EffectRow) -> Raw:
    """The last column's two verdicts, each named: Δ's, then Δ − placebo's (the row's own
    quantities; a placebo has no corrected effect)."""
    return Raw(f'<div><span class="vq">Δ:</span> {esc(short(r.verdict))}</div> <div><span class="vq">Δ − placebo:</span> '
               f"{esc(short(r.verdict_minus_placebo))}</div>")


def contrasts_table(p: Presentation) -> str:
    """The effects table (`estimators.report.rows`: the rows and columns report.md and the
    terminal show), then how its verdicts were decided."""
    report, effects = p.report, p.effects
    head = effects.heads("html")
    shown = effects.shown("html")
    # The verdicts column names which verdict is Δ's and which Δ − placebo's in each cell.
    cells = [[_verdicts_cell(r) if col.key == "verdicts" else effect_cell(c) for col, c in zip(shown, cs)]
             for r, cs in zip(effects.rows, effects.cells("html"))]
    attrs = [' class="significant"' if r.starred else "" for r in effects.rows]
    out = table(head, cells, num_from=1, cls="contrasts", row_attrs=attrs)
    out += "".join(f'<p class="note">{esc(line)}</p>' for line in p.decision_lines)
    if report.get("inference"):
        out += f'<p class="note">Method: {esc(report["inference"]["switch"])}.</p>'
    if "power" in report:
        out += definitions("equivalence")
    if p.rules_note is not None:   # no column per failure rule: said once that they agree
        out += f'<p class="note">{esc(p.rules_note)}</p>'
    extra = sorted({k for c in report["contrasts"] for k in c} - CONTRAST_KEYS)
    if extra:
        out += "<h4>More per-contrast quantities</h4>" + table(
            ["condition", *extra], [[c["condition"], *(c.get(k) if not isinstance(c.get(k), (Mapping, list))
                                                       or _short(c.get(k)) else Raw(generic(c.get(k)))
                                                       for k in extra)] for c in report["contrasts"]])
    return out


def _short(v: Any) -> bool:
    return len(fmt(v)) <= 60


def strata_tables(p: Presentation) -> str:
    """The strata tables report.md shows too (`estimators.report.rows.strata_tables`), then each
    kind's block rates."""
    out = []
    for st in p.strata:
        # Wraps at spaces, each word whole: an interval breaks between its numbers, never inside one.
        out.append(f"<h4>{esc(st.title)}</h4>"
                   + table(st.heads, whole_words([[effect_cell(c) for c in r] for r in st.cells]), cls="wraps"))
        strata = p.report["strata"][st.kind]
        rates = {name: s["block_rate"] for name, s in strata.items() if isinstance(s.get("block_rate"), Mapping)}
        if rates:
            out.append(f"<details><summary>block rates {esc(st.title)}</summary>"
                       + generic(rates, row_name=st.kind) + "</details>")
    return "".join(out)


def coverage_table(report: Mapping[str, Any]) -> str:
    cov = report.get("coverage") or {}
    rows = {c: {**v, "block rate": (report.get("block_rate") or {}).get(c)} for c, v in cov.items()}
    return generic(rows, row_name="condition")


def quarantine_table(p: Presentation) -> str:
    report = p.report
    q = report["quarantine"]
    ok = p.publishable
    verdict = ("publishable" if ok else "NOT PUBLISHABLE")
    pct = lambda x: f"{x:.2%}" if isinstance(x, (int, float)) else fmt(x)  # noqa: E731
    head = (f'<p class="{"ok" if ok else "bad"}">{esc(q.get("count"))} of '
            f'{esc(report.get("n_calls"))} calls quarantined ({esc(pct(q.get("fraction")))}); threshold '
            f'{esc(pct(q.get("threshold")))} for failed and quarantined calls together: {verdict}</p>')
    rest = {k: v for k, v in q.items() if k not in ("count", "fraction", "publishable", "threshold", "by_reason")}
    return (head + table(["reason", "calls"], list((q.get("by_reason") or {}).items()))
            + (generic(rest) if rest else ""))


def diagnostics(report: Mapping[str, Any]) -> str:
    fr = report.get("flip_rate") or {}
    bs = report.get("bootstrap") or {}
    items = [
        ("repeated-original disagreement", f"{fmt(report.get('repeat_disagreement'))} over "
                                           f"{fmt(report.get('repeat_disagreement_n_bases'))} bases (diagnostic)"),
        (fr.get("label", "flip rate"), ", ".join(f"{c} {fmt(v)}" for c, v in (fr.get("by_condition") or {}).items())),
        ("bootstrap", f"{fmt(bs.get('n'))} replicates, seed {fmt(bs.get('seed'))} ({fmt(bs.get('rng'))}); "
                      f"{fmt(bs.get('resampling'))}"),
        ("interval / p-value", f"{fmt(bs.get('interval'))}; {fmt(bs.get('p_value'))}"),
        ("Holm family", ", ".join(map(str, report.get("family") or []))),
        ("failure rules", f"headline {report.get('failure_rule')}; all of {', '.join(report.get('failure_rules') or [])}"),
        ("calls without a decision", {"exclude": "counted nowhere (--missing exclude)",
                                      "as-failure": "counted as failed calls (--missing as-failure)"}
         .get(str(report.get("missing")), fmt(report.get("missing")))),
    ]
    return "<dl class=\"facts\">" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


def notes(report: Mapping[str, Any]) -> str:
    return "".join(f'<p class="note">Note: {esc(n)}</p>' for n in report.get("notes") or [])


# Top-level keys that the sections above render; anything else goes to "More in report.json".
HANDLED = {"n_bases", "n_calls", "n_interactions", "n_domains", "baseline", "placebo", "failure_rule",
           "failure_rules", "family", "complete", "publishable", "allow_partial", "allow_unpublishable",
           "block_rate", "repeat_disagreement", "repeat_disagreement_n_bases", "flip_rate", "coverage",
           "quarantine", "excluded", "contrasts", "strata", "components", "bootstrap", "accuracy", "source", "missing",
           "notes", "repetitions", "block_rate_ci", "block_rate_exact_ci", "block_rate_by_rule", "stability",
           "worst_case", "order", "margin", "power", "retried", "alpha", "families", "equivalence_family",
           "cannot_decide", "placebo_check",   # both said first, in "In words"
           "inference"}                        # under the effects table


def more_sections(report: Mapping[str, Any]) -> str:
    out = []
    for key in report:
        if key in HANDLED:
            continue
        out.append(f'<section class="more" id="more-{esc(key)}"><h3>{esc(key)}</h3>{generic(report[key])}</section>')
    return "".join(out)


def in_words(p: Presentation) -> str:
    """The report's opening: one sentence a reader can quote per headline."""
    lines = p.in_words
    if not lines:
        return ""
    return "<h2>In words</h2><ul class=\"words\">" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>"
