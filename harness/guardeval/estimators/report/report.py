"""Report files (report.json, report.md, effects.png) and the human effects table."""

from __future__ import annotations

import io
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from guardeval.estimators.excluded import publishable
from guardeval.estimators.report import rows, sections
from guardeval.estimators.report.formats import interval, level, md_table, num, pct, pval, rules_differ
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts.record import headline, power_words
from guardeval.run.folder.folder import RunFolder, write_into
from guardeval.run.folder.layout import EFFECTS_PNG, REPORT_JSON, REPORT_MD
from guardeval.terminal import safe as terminal_safe

JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY


def dumps_json(report: Mapping[str, Any]) -> str:
    """Pretty JSON; non-finite floats cannot occur (undefined values are null)."""
    return orjson.dumps(report, option=JSON_OPTS).decode("utf-8")


def md_cell(cell: rows.Cell) -> str:
    """A cell of the effects table as report.md writes it."""
    if isinstance(cell, rows.Name):
        return (cell.condition + (" (placebo)" if cell.placebo else "") + (" *" if cell.starred else "")
                + (" (not robust to failed calls)" if cell.fragile else ""))
    if isinstance(cell, rows.Est):
        return num(cell.value) + ("" if cell.ci is None else f" {interval(cell.ci)}")
    if isinstance(cell, rows.P):
        return cell.absent if cell.p is None else pval(cell.p)
    if isinstance(cell, rows.Rate):
        return num(cell.value, sign=False)
    if isinstance(cell, rows.Signed):
        return num(cell.value)
    return "—" if cell is None else str(cell)


def effects_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """report.md's effects table: the columns of `rows.effects_table`, in words."""
    t = rows.effects_table(report)
    return t.heads("markdown"), [[md_cell(c) for c in r] for r in t.cells("markdown")]


def rules_note(report: Mapping[str, Any]) -> str:
    """Said under the effects table when it has no column per failure rule."""
    return ("The three failure rules agree (no failed calls): every effect is the same under "
            f"{', '.join(report['failure_rules'])}.")


def _who(report: Mapping[str, Any]) -> str:
    g = (report.get("source") or {}).get("guard") or {}
    return str(g.get("name")) if g.get("name") else "the guard"


def failure_dependence_sentence(ex: Mapping[str, Any]) -> str | None:
    """'failed calls depend on the condition: tool_alias 41% against original 0% …', when the
    failure-rate family says a condition differs (estimators/excluded.py)."""
    dep = ex.get("depends_on_condition") or {}
    if not dep.get("differs"):
        return None
    by = ex.get("by_condition") or {}
    share = {c: (v["failed"] / v["calls"] if v.get("calls") else 0.0) for c, v in by.items()}
    base = next((c for c in by if c not in dep["members"]), None)
    parts = [f"{c} {pct(share.get(c, 0.0))}" for c, m in dep["members"].items() if m.get("differs")]
    against = f" against {base} {pct(share.get(base, 0.0))}" if base is not None else ""
    ps = ", ".join(f"p_Holm {pval(m['p_holm'])}" for m in dep["members"].values() if m.get("differs"))
    return (f"Failed calls depend on the condition: {', '.join(parts)}{against} (paired by base; {ps} over the "
            f"{dep['family']}). The estimates below rest on the calls that did not fail, a subset the condition "
            "chose: read each headline's range over the failed calls.")


def excluded_sentences(report: Mapping[str, Any]) -> list[str]:
    """When any call failed: the count and share, the conditions they fell under, whether that
    depends on the condition, and which headlines survive them (said first, issue 45)."""
    ex = report.get("excluded")
    if not isinstance(ex, Mapping) or not ex.get("failed"):
        return []
    out = []
    dep = failure_dependence_sentence(ex)
    if dep:
        out.append(dep)
    where = ", ".join(f"{c} {v['failed']} of {v['calls']}" for c, v in (ex.get("by_condition") or {}).items()
                      if v.get("failed"))
    quar = f" and {ex['quarantined']} were quarantined" if ex.get("quarantined") else ""
    verdict = ("within" if ex["publishable"] else "past") + f" the {pct(ex['limit'])} limit"
    line = (f"{ex['failed']} of {report['n_calls']} calls failed{quar} ({pct(ex['share'])} of the calls left out, "
            f"{verdict}{'' if ex['publishable'] else ': NOT PUBLISHABLE'}); failed calls by condition: {where}.")
    robust: list[str] = []
    fragile: list[str] = []
    for c in report["contrasts"]:
        b = c.get("bounds") or {}
        if c.get("headline") == "placebo":
            continue
        (robust if b.get("robust") else fragile if b.get("robust") is False else []).append(c["condition"])
    if robust or fragile:
        line += (" With each failed call set to block or to allow, the headline verdict "
                 + "; ".join(x for x in (f"holds for {', '.join(robust)}" if robust else "",
                                         f"changes for {', '.join(fragile)} (not robust)" if fragile else "") if x)
                 + ".")
    out.append(line)
    return out


def robustness_words(c: Mapping[str, Any], quantity: str, failed: int) -> str:
    """After a headline's sentence when calls failed: its range over them and whether its verdict holds."""
    b = c.get("bounds")
    if not failed or not isinstance(b, Mapping):
        return ""
    rng = b.get("corrected" if quantity == "delta_minus_placebo" else "delta")
    if rng is None:
        return ""
    ends = ((b.get("ends") or {}).get("corrected" if quantity == "delta_minus_placebo" else "delta") or {})
    lo, hi = ends.get("lo") or {}, ends.get("hi") or {}
    span = (f"from {dc._n(rng[0])} ({lo.get('verdict', '—')}) to {dc._n(rng[1])} ({hi.get('verdict', '—')}) "
            f"with the {failed} failed calls set to block or to allow")
    flag = b.get("robust_corrected" if quantity == "delta_minus_placebo" else "robust_delta")
    if flag is False:
        return f" NOT robust to the failed calls: it ranges {span}, so its verdict rests on what they would have said."
    if flag:
        return f" Robust to the failed calls: it ranges {span}, the same verdict at both ends."
    return f" It ranges {span}."


def up_front(report: Mapping[str, Any]) -> list[str]:
    """What a reader must know before any effect: the calls that failed (and whether the headlines
    survive them), a placebo that failed as a control, and the families this design cannot decide
    at all (issue 35). Said once, first, in every output."""
    out = excluded_sentences(report)
    # With condition families each placebo is checked (placebo_checks); else the one placebo.
    for pc in report.get("placebo_checks") or [report.get("placebo_check")]:
        if pc and pc.get("failed"):
            out.append(placebo_failed_sentence(pc, _who(report), level(report)))
    out += list(report.get("cannot_decide") or [])
    return out


def placebo_failed_sentence(pc: Mapping[str, Any], who: str, lv: str = "95%") -> str:
    p = pc.get("p_holm")
    return (f"The placebo {pc['condition']} failed as a control: by itself it moved {who}'s block rate by "
            f"{dc._n(pc['delta'])} ({dc.ci_words(pc.get('ci'), lv)}; differs from 0 after Holm over "
            f"{pc.get('family')}, p_Holm {'—' if p is None else f'{p:.4g}'}). Every Δ − placebo below is measured "
            "against a control that itself changed the guard: read each condition's own Δ beside it.")


def _placebo_of(c: Mapping[str, Any], report: Mapping[str, Any]) -> str | None:
    """The placebo that corrects contrast c: its condition family's (estimators/families.py), else the report's."""
    fam = c.get("condition_family")
    if fam is not None and fam in (report.get("family_placebos") or {}):
        return report["family_placebos"][fam]
    return report.get("placebo")


def _against_failed_placebo(c: Mapping[str, Any], report: Mapping[str, Any], eq: Mapping[str, Any] | None) -> str:
    """The corrected effect of an intervention when the placebo failed: never 'lowers' or 'raises'
    (that reads as the intervention's doing); its own Δ first."""
    lv = level(report)
    own = c["delta"]
    line = (f"{c['condition']}: its own Δ against the baseline {report['baseline']} is {dc._n(own)} "
            f"({dc.ci_words(c['ci'], lv)}); against the failed placebo {_placebo_of(c, report)} its Δ − placebo is "
            f"{dc._n(c['delta_minus_placebo'])} ({dc.ci_words(c['ci_minus_placebo'], lv)})")
    if own is not None and abs(own) < 5e-4:
        line += f", which is the placebo's own effect, not {c['condition']}'s"
    return f"{line}; {dc._decision_words(eq)}."


def headline_sentences(report: Mapping[str, Any]) -> list[str]:
    """One sentence a reader can quote per contrast, for its headline (the placebo-corrected
    effect; Δ for the placebo itself or without a placebo), sign explicit, with its decision and
    the family it was decided in, then its MDE; after what must be said first (`up_front`)."""
    if "families" not in report:    # a report.json from before the decisions were stated
        return []
    failed_placebos = {pc["condition"] for pc in report.get("placebo_checks") or [report.get("placebo_check")]
                       if pc and pc.get("failed")}
    out = up_front(report)
    for c in report["contrasts"]:
        quantity, eq = headline(c)
        placebo = _placebo_of(c, report)
        if quantity == "delta_minus_placebo" and placebo in failed_placebos and c["delta_minus_placebo"] is not None:
            line = _against_failed_placebo(c, report, eq)
        else:
            if quantity == "delta_minus_placebo":
                ref, est, ci = f"beyond the placebo {placebo}", c["delta_minus_placebo"], c["ci_minus_placebo"]
            else:
                ref, est, ci = f"against the baseline {report['baseline']}", c["delta"], c["ci"]
            line = dc.effect_sentence(c["condition"], _who(report), est, ci, eq, ref, level(report))
        line += power_words(eq)
        if eq and eq.get("ci_note"):
            line += f" ({eq['ci_note']}.)"
        line += robustness_words(c, quantity, int((report.get("excluded") or {}).get("failed") or 0))
        out.append(line)
    return out


def decision_lines(report: Mapping[str, Any]) -> list[str]:
    """How every verdict was decided: the level, each family (fixed before the data), and the
    family-wide equivalence claims."""
    fams = report.get("families")
    if not fams:
        return []
    # A family's key is its quantity, or '<quantity>:<condition family>' (estimators/families.py).
    parts = [f"{'Δ − placebo' if f.get('quantity', q) == 'delta_minus_placebo' else 'Δ'} over "
             f"{'' if f.get('condition_family') else 'the '}{f['name']} ({', '.join(f['members'])})"
             for q, f in fams.items()]
    out = [f"Decisions: Holm at α {report['alpha']:g} within each family, fixed before the data: " + "; ".join(parts)
           + ". * marks an intervention whose headline (Δ − placebo; Δ without a placebo) differs from 0 in its "
             "family; the placebo's own Δ is a check of the placebo, decided in the Δ family and said in its "
             f"sentence. Intervals are unadjusted {level(report)} (1 − α)."]
    for fam, wc in (report.get("worst_case_by_family") or {}).items():
        if wc.get("condition") is not None:
            out.append(f"Worst case over the {fam} family ({', '.join(wc['members'])}): {wc['condition']}, "
                       f"Δ {dc._n(wc['delta'])}, simultaneous {wc['level']:.0%} interval {interval(wc['ci'])} "
                       f"(each member at {wc['member_level']:.4g}, Bonferroni over {len(wc['members'])}).")
    for eqf in (report.get("equivalence_family") or {}).values():
        out.append(f"{eqf['claim'][0].upper()}{eqf['claim'][1:]} (intersection–union: every member's own TOST at "
                   f"α {eqf['alpha']:g}): {'yes' if eqf['holds'] else 'no'}"
                   + (f"; the margin is below the MDE of {', '.join(eqf['underpowered'])}: this design cannot "
                      "support that claim" if eqf.get("underpowered") else "") + ".")
    return out


def summary_line(report: Mapping[str, Any]) -> str:
    q = report["quarantine"]
    ex = report.get("excluded")
    left_out = (f"failed {ex['failed']}, quarantined {q['count']} ({ex['share']:.2%} left out, limit "
                f"{ex['limit']:.0%})" if isinstance(ex, Mapping) and ex.get("failed")
                else f"quarantined {q['count']} ({q['fraction']:.2%})")
    return (f"{report['n_bases']} bases, {report['n_interactions']} interactions, {report['n_calls']} calls; "
            f"baseline {report['baseline']}, placebo {report['placebo'] or 'none'}; "
            f"headline failure rule {report['failure_rule']}; "
            f"{left_out}{'' if publishable(report) else ' — NOT PUBLISHABLE'}"
            f"{'' if report['complete'] else '; INCOMPLETE run (partial estimate)'}"
            + (f"; {n} calls counted at a retry's decision (later measurements)"
               if (n := (report.get("retried") or {}).get("n_calls")) else ""))


# The table's column names, defined once under it (the long forms: docs/estimators.md and
# harness/guardeval/estimators/report/definitions.py, shown in report.html).
SHORT_TERMS = (
    ("Δ", "mean over bases of the paired difference in block rate against the baseline"),
    ("Δ − placebo", "Δ minus the placebo's Δ on the same bases (the headline)"),
    ("CI", "unadjusted, at 1 − α; below 28 effective df a sign-flip test's inversion, else the interaction-cluster "
           "bootstrap at the t-calibrated level (each record's method); excludes 0 exactly when p < α"),
    ("p_Holm", "the headline's p (same procedure as its CI), Holm-adjusted over its family"),
    ("+/−/=", "bases whose block rate rose / fell / tied"),
    ("bases", "bases paired with the baseline"),
)


def _n3(x: float | None) -> str:
    return num(x, digits=3)


def _ci3(ci: Sequence[float] | None) -> str:
    return "" if ci is None else f"[{_n3(ci[0])}, {_n3(ci[1])}]"


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first); 100 when stdout is not a terminal."""
    return shutil.get_terminal_size((100, 24)).columns


def human_text(report: Mapping[str, Any], width: int | None = None) -> str:
    """The effects table for a terminal, fitted to `width` columns (default: the terminal's),
    with the definitions of its columns under it. Effects are proportions; names from the
    cohort are shown with control characters escaped."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    safe = terminal_safe
    width = width or terminal_width()
    effects = rows.effects_table(report)
    # Fixed widths for the numbers, the rest for the names: the table never passes `width`.
    one_line = width >= 104
    est_w = 23 if one_line else 16
    names = [safe(md_cell(rows.Name(r.condition, r.is_placebo, True, r.robust is False))) for r in effects.rows]
    # p_w fits pval's longest form ("1.0e-100"): a p cut to "1.5e-…" cannot be read.
    p_w, count_w, bases_w = 8, 8, 5
    # each of the 5 gaps: padding on both sides and the (blank) column rule
    name_w = max(9, min(max(map(len, names), default=9), width - (2 * est_w + p_w + count_w + bases_w) - 5 * 3))
    # An estimate and its interval on one line when they fit, else the interval under it.
    sep = " " if one_line else "\n"
    fit = {"condition": (name_w, "left"), "delta": (est_w, "left"), "delta_minus_placebo": (est_w, "left"),
           "headline_p": (p_w, "right"), "counts": (count_w, "right"), "bases": (bases_w, "right")}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False)
    for col, head in zip(effects.shown("terminal"), effects.heads("terminal")):
        w, justify = fit.get(col.key, (None, "right"))
        table.add_column(safe(head).replace(" [", sep + "["), justify=justify,  # type: ignore[arg-type]
                         overflow="ellipsis" if col.key == "headline_p" else "fold", width=w)

    def cell(c: rows.Cell) -> str:
        if isinstance(c, rows.Name):
            return safe(md_cell(c))
        if isinstance(c, rows.Est):
            return f"{_n3(c.value)}{sep}{_ci3(c.ci)}".strip()
        return md_cell(c)

    for r in effects.cells("terminal"):
        table.add_row(*(Text(cell(c)) for c in r))
    by_rule = None
    if rules_differ(report):
        by_rule = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False,
                        title="Δ under each failure rule (failed calls: dropped / counted as block / as allow)")
        by_rule.add_column("condition", overflow="fold")
        for rule in report["failure_rules"]:
            by_rule.add_column(rule + (" (headline)" if rule == report["failure_rule"] else ""), justify="right")
        has_bounds = any(e.bounds is not None for e in effects.rows)
        if has_bounds:
            by_rule.add_column("headline range (block / allow)", justify="right")
        for e in effects.rows:
            by_rule.add_row(Text(safe(e.condition)), *(Text(_n3(e.by_rule.get(r))) for r in report["failure_rules"]),
                            *([Text(rows.range_cell(e))] if has_bounds else []))
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False)
    console.print(Text(safe(summary_line(report))))
    said = headline_sentences(report)
    if said:
        console.print(Text("In words:"))
    for line in said:
        console.print(Text("- " + safe(line)))
    console.print(table)
    if by_rule is not None:
        console.print(by_rule)
    rd = report["repeat_disagreement"]
    rule_note = (f"failure rule {report['failure_rule']}" if by_rule is not None
                 else f"failure rule {report['failure_rule']}; the three failure rules agree (no failed calls)")
    notes = [
        *(safe(x) for x in decision_lines(report)), rule_note,
        "; ".join(f"{term}: {text}" for term, text in SHORT_TERMS),
        f"repeated-original disagreement (diagnostic, not subtracted): {num(rd, sign=False)} "
        f"over {report['repeat_disagreement_n_bases']} bases",
        f"{report['flip_rate']['label']}: " + ", ".join(
            f"{safe(c)} {num(v, sign=False)}" for c, v in report["flip_rate"]["by_condition"].items()),
        f"bootstrap: {report['bootstrap']['n']} replicates, seed {report['bootstrap']['seed']}; "
        "definitions: docs/estimators.md",
    ]
    for line in notes:
        console.print(Text(line))
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


def markdown(report: Mapping[str, Any]) -> str:
    head, body = effects_rows(report)
    fp = (report.get("source") or {}).get("fingerprint")
    pin = [f"Run fingerprint `{fp}` (`guardeval verify RUN --expect {fp}` checks the run against it).", ""] if fp else []
    words = headline_sentences(report)
    out = ["# guardeval estimate", "", summary_line(report), "", *pin, *sections.notes(report),
           *(["## In words", "", *(f"- {line}" for line in words), ""] if words else []),
           "## Effects", "", md_table(head, body), "", *([] if rules_differ(report) else [rules_note(report), ""]),
           "Effects are proportions: Δc = mean over bases of p(i,c) − p(i,baseline); Δ − placebo is "
           "Δc − Δplacebo on the bases present in all three conditions. "
           + "; ".join(f"{term}: {text}" for term, text in SHORT_TERMS) + ".", "",
           *(f"- {line}" for line in decision_lines(report)),
           f"- {report['power']['rule']}" if "power" in report else "", ""]
    cov_head = ["condition", "expected", "received", "valid", "failed", "missing", "quarantined", "block rate"]
    cov_rows = [[c, *(str(v[k]) for k in cov_head[1:7]), num(report["block_rate"].get(c), sign=False)]
                for c, v in report["coverage"].items()]
    out += ["## Coverage", "", md_table(cov_head, cov_rows), ""]
    q = report["quarantine"]
    out += sections.markdown_lines(sections.excluded(report))
    out += ["## Quarantine", "",
            f"{q['count']} of {report['n_calls']} calls ({q['fraction']:.2%}); threshold {q['threshold']:.0%} "
            f"(failed and quarantined calls together); publishable: {'yes' if publishable(report) else 'NO'}", "",
            md_table(["reason", "calls"], [[k, str(v)] for k, v in q["by_reason"].items()]), ""]
    out += ["## Diagnostics", "",
            f"- repeated-original disagreement (mean pairwise, diagnostic only): "
            f"{num(report['repeat_disagreement'], sign=False)} over {report['repeat_disagreement_n_bases']} bases",
            f"- {report['flip_rate']['label']}: " + ", ".join(
                f"{c} {num(v, sign=False)}" for c, v in report["flip_rate"]["by_condition"].items()), ""]
    for st in rows.strata_tables(report):
        out += [f"## Strata {st.title}", "", md_table(st.heads, [[md_cell(c) for c in r] for r in st.cells]), ""]
    out += sections.markdown_lines(sections.labels(report))
    if report.get("components"):
        c_rows = [[c, name, num(v["rate"], sign=False), str(v["n"])]
                  for c, comps in report["components"].items() for name, v in comps.items()]
        out += ["## Component rates", "", md_table(["condition", "component", "mean", "calls"], c_rows), ""]
    out += sections.markdown_lines(sections.family_sections(report))
    bs = report["bootstrap"]
    out += ["## Method", "", f"- bootstrap: {bs['n']} replicates, seed {bs['seed']} ({bs['rng']}); {bs['resampling']}",
            f"- interval: {bs['interval']}; p-value: {bs['p_value']}; Holm over: {', '.join(report['family'])}",
            *([f"- which procedure: {report['inference']['switch']}", f"- sign-flip: {report['inference']['sign_flip']}"]
              if report.get("inference") else []), ""]
    return "\n".join(out)


def write_reports(report: Mapping[str, Any], out: Path | RunFolder, title: str | None = None) -> list[Path]:
    """report.json, report.md and effects.png (titled `title`) into `out`: a run folder (each
    file replaced, never written through a link) or the `--out` folder (created if needed)."""
    from guardeval.estimators.report.plot import forest_plot  # matplotlib loads only when a plot is drawn

    if not isinstance(out, RunFolder):
        out.mkdir(parents=True, exist_ok=True)
    js, md = (dumps_json(report) + "\n").encode("utf-8"), markdown(report).encode("utf-8")
    return [write_into(out, REPORT_JSON, lambda fh: fh.write(js)),
            write_into(out, REPORT_MD, lambda fh: fh.write(md)),
            write_into(out, EFFECTS_PNG, lambda fh: forest_plot(report, fh, title=title))]
