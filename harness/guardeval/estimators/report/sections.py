"""The report's sections for the diagnostic families (docs/estimators.md): contrast diagnostics,
placebo-corrected strata, block rates, stability, order, accuracy and the worst case.

Each is a `Section` (a title, a sentence saying what it shows, a table of display text), so
report.md (`markdown_lines`) and report.html (`guardeval.view.tables`) show the same numbers.
Names (conditions, domains) can come from a hand-written table: control characters, bidi
overrides and the like are escaped (`guardeval.terminal.safe`) before they reach either file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardeval.estimators.report.formats import interval, level, md_table, num, pval
from guardeval.terminal import safe


@dataclass(frozen=True)
class Section:
    key: str                 # the report.json key it shows (report.html links its definitions by it)
    title: str
    intro: str
    head: list[str]
    rows: list[list[str]]


def clean(name: Any) -> str:
    return safe(name)


def _rate(x: float | None) -> str:
    return num(x, sign=False)


def _counts(c: Mapping[str, int] | None, keys: Sequence[str]) -> str:
    return "—" if c is None else "/".join(str(c[k]) for k in keys)


def _sign(t: Mapping[str, Any] | None) -> str:
    return "—" if t is None else f"+{t['positive']}/−{t['negative']}/={t['tie']}, p {pval(t['p'])}"


def _loo(x: Mapping[str, Any] | None) -> str:
    return "—" if x is None else f"[{num(x['min'])}, {num(x['max'])}] over {x['n_tools']} tools"


def _list(xs: Sequence[float | None] | None) -> str:
    return "—" if xs is None else ", ".join(num(x) for x in xs)


def notes(report: Mapping[str, Any]) -> list[str]:
    return [f"> Note: {clean(n)}" for n in report.get("notes", [])] + ([""] if report.get("notes") else [])


def _has(rows: Any, key: str) -> bool:
    """Whether the first of `rows` (a list, or a dict's values) has `key`: a report.json written by an
    earlier version lacks the later families, and report.html is still made from it."""
    first = next(iter(rows.values() if isinstance(rows, Mapping) else rows or []), None)
    return isinstance(first, Mapping) and key in first


def contrast_diagnostics(report: Mapping[str, Any]) -> list[Section]:
    """Per contrast against the baseline, and (with a placebo) the same diagnostics against the placebo."""
    if not _has(report["contrasts"], "sign_test"):
        return []
    head = ["condition", "sign test by interaction", "by repetition", "flips 0→0/0→1/1→0/1→1",
            "unanimous 0→0/0→1/1→0/1→1/other", f"accuracy Δ [{level(report)} CI]", "leave one tool out"]
    rows = [[clean(c["condition"]), _sign(c["sign_test"]), _list(c["by_repetition"]),
             _counts(c["flip_counts"], ("0->0", "0->1", "1->0", "1->1")),
             _counts(c["unanimous_shift"], ("0->0", "0->1", "1->0", "1->1", "nonunanimous")),
             f"{num(c['accuracy_delta'])} {interval(c['accuracy_delta_ci'])}", _loo(c["leave_one_tool_out"])]
            for c in report["contrasts"]]
    reps = ", ".join(str(r) for r in report.get("repetitions", []))
    out = [Section("contrasts", "Contrast diagnostics",
                   "Sign test: interactions whose mean paired change is positive / negative / zero, exact two-sided "
                   f"binomial p on the untied ones. By repetition: the effect within each round ({reps}). Flips: "
                   "same-round baseline→condition transitions over (base, round) pairs. Unanimous: bases whose "
                   "repetitions all agree in both conditions, by baseline→condition value.", head, rows)]
    placebo = report.get("placebo")
    if placebo is None:
        return out
    head = ["condition", "+/−/= vs placebo", "bases", "sign test by interaction", "by repetition",
            f"accuracy Δ − placebo [{level(report)} CI]", "leave one tool out"]
    rows = [[clean(c["condition"]),
             f"{c['increase_minus_placebo']}/{c['decrease_minus_placebo']}/{c['tie_minus_placebo']}",
             str(c["n_bases_minus_placebo"]), _sign(c["sign_test_minus_placebo"]),
             _list(c["by_repetition_minus_placebo"]),
             f"{num(c['accuracy_delta_minus_placebo'])} {interval(c['accuracy_delta_ci_minus_placebo'])}",
             _loo(c["leave_one_tool_out_minus_placebo"])]
            for c in report["contrasts"] if c["condition"] != placebo]
    return [*out, Section("contrasts", "Contrast diagnostics against the placebo",
                          f"The same quantities with the placebo ({clean(placebo)}) in place of the baseline, on the "
                          "bases counted under the condition, the baseline and the placebo.", head, rows)]


def strata_corrected(report: Mapping[str, Any]) -> list[Section]:
    first = next(iter(((report.get("strata") or {}).get("domain") or {}).values()), None)
    if report.get("placebo") is None or first is None or not _has(first.get("contrasts"), "increase_minus_placebo"):
        return []
    out: list[Section] = []
    conds = [c["condition"] for c in report["contrasts"] if c["condition"] != report["placebo"]]
    for kind, title in (("domain", "domain"), ("label", "original label")):
        head = [title, *(f"{clean(c)} (corrected)" for c in conds)]
        rows = [[clean(name), *(f"{num(s['contrasts'][c]['delta_minus_placebo'])} "
                                f"{interval(s['contrasts'][c]['ci_minus_placebo'])} "
                                f"(+{s['contrasts'][c]['increase_minus_placebo']}/"
                                f"−{s['contrasts'][c]['decrease_minus_placebo']}/"
                                f"={s['contrasts'][c]['tie_minus_placebo']})" for c in conds)]
                for name, s in report["strata"][kind].items()]
        out.append(Section("strata", f"Placebo-corrected strata by {title}",
                           "Δ − placebo on the bases of each stratum, with its interval and the bases whose "
                           "block rate rose / fell / tied against the placebo.", head, rows))
    return out


def block_rates(report: Mapping[str, Any]) -> list[Section]:
    if "block_rate_exact_ci" not in report:
        return []
    by_rule = report.get("block_rate_by_rule") or {}     # {rule: {condition: rate}}
    # A column per failure rule only when the rules give different rates (there were failures).
    differ = any(len({repr((by_rule.get(r) or {}).get(c)) for r in report["failure_rules"]}) > 1
                 for c in report["block_rate"])
    rules = list(report["failure_rules"]) if differ else []
    lv = level(report)
    head = ["condition", "block rate", f"cluster bootstrap {lv} CI", f"exact {lv} CI over calls (Clopper–Pearson)",
            *(f"under {r}" for r in rules)]
    rows = [[clean(c), _rate(v), interval(report["block_rate_ci"][c]), interval(report["block_rate_exact_ci"][c]),
             *(_rate((by_rule.get(r) or {}).get(c)) for r in rules)]
            for c, v in report["block_rate"].items()]
    return [Section("block_rate", "Block rates",
                    "The block rate is the base-equal mean; the exact interval is over counted calls taken as "
                    "independent (repetitions and interactions are not), so it is narrower than the bootstrap when "
                    "they correlate.", head, rows)]


def stability(report: Mapping[str, Any]) -> list[Section]:
    if "stability" not in report:
        return []
    head = ["condition", "repeat disagreement", f"{level(report)} CI", "unanimous rate", "bases (≥ 2 repetitions)"]
    rows = [[clean(c), _rate(s["repeat_disagreement"]), interval(s["ci"]), _rate(s["unanimous_rate"]),
             str(s["n_bases"])] for c, s in report["stability"].items()]
    return [Section("stability", "Stability",
                    "Repeat disagreement: mean over bases of the share of disagreeing pairs among a base's "
                    "repetitions of one condition; unanimous rate: the share of bases whose repetitions all agree.",
                    head, rows)]


def _third(t: Mapping[str, Any]) -> str:
    if not t["n_calls"]:
        return "0 calls"
    return f"{t['n_calls']} calls from {t['first_started']} to {t['last_started']}"


def order(report: Mapping[str, Any]) -> list[Section]:
    if "order" not in report:
        return []
    o = report["order"]
    if o is None:
        return [Section("order", "Order (dispatch drift)", "No start times (a table without `started`): "
                                                           "dispatch-order diagnostics not computed.", [], [])]
    head = ["quantity", "third 1", "third 2", "third 3", f"drift (slope per third) [{level(report)} CI]", "p"]
    rows = [[f"effect of {clean(c)}", *(num(x) for x in xs), f"{num(o['drift'][c]['slope'])} "
             f"{interval(o['drift'][c]['ci'])}", pval(o["drift"][c]["p"])] for c, xs in o["by_dispatch_third"].items()]
    rows += [[f"block rate of {clean(c)}", *(_rate(x) for x in xs), f"{num(o['block_rate_drift'][c]['slope'])} "
              f"{interval(o['block_rate_drift'][c]['ci'])}", pval(o["block_rate_drift"][c]["p"])]
             for c, xs in o["block_rate_by_dispatch_third"].items()]
    spans = "; ".join(_third(t) for t in o["thirds"])
    later = o.get("retried_by_third")
    if later and any(later):
        rows.append(["calls counted at a retry's decision", *(str(n) for n in later), "", ""])
    return [Section("order", "Order (dispatch drift)",
                    f"Calls ranked by {o['clock']} and cut into thirds ({spans}). Drift is the least-squares slope "
                    "over the thirds, (third 3 − third 1)/2." + (" A retried call is ranked by its retry: a later "
                                                               "measurement." if later and any(later) else ""),
                    head, rows)]


def retried(report: Mapping[str, Any]) -> list[Section]:
    """The calls counted at the decision of a retry (`resume --retry-failed`), by round."""
    r = report.get("retried")
    if not r or not r.get("n_calls"):
        return []
    head = ["retry round", "calls", "first attempt started", "last attempt started"]
    rows = [[str(x["round"]), str(x["n_calls"]), str(x["first_started"] or "—"), str(x["last_started"] or "—")]
            for x in r["rounds"]]
    return [Section("retried", "Retried calls",
                    f"{r['n_calls']} of {report['n_calls']} calls are counted at the decision of a retry "
                    "(`guardeval resume --retry-failed`): their first decisions failed, and the new ones were "
                    "measured later, at the times below; the superseded decisions stay in decisions.jsonl.",
                    head, rows)]


def _roc(x: Mapping[str, Any] | None, unit: str) -> str:
    return "—" if x is None else f"{_rate(x[unit])} {interval(x[unit + '_ci'])}"


def labels(report: Mapping[str, Any]) -> list[Section]:
    acc = report.get("accuracy")
    if not acc:
        return []
    head = ["condition", "row F1", "interaction F1", "row bal. acc.", "interaction bal. acc.", "rows", "interactions"]
    rows = [[clean(c), _rate(a["row_f1"]), _rate(a["interaction_f1"]), _rate(a["row_balanced_accuracy"]),
             _rate(a["interaction_balanced_accuracy"]), str(a["n_rows"]), str(a["n_interactions"])]
            for c, a in acc.items()]
    return [Section("accuracy", "F1 and balanced accuracy (unsafe = positive)",
                    "F1 and balanced accuracy on the counted calls of labelled bases (headline failure rule): every "
                    "call weighing 1 (row), or every interaction weighing 1 in total (interaction).", head, rows)]


def accuracy(report: Mapping[str, Any]) -> list[Section]:
    acc = report.get("accuracy")
    if not acc or not _has(acc, "auc"):
        return []
    lv = level(report)
    head = ["condition", f"row accuracy [{lv} CI]", f"interaction accuracy [{lv} CI]", "row AUC", "interaction AUC",
            "row TPR at 1% FPR", "interaction TPR at 1% FPR", "scored rows"]
    rows = [[clean(c), f"{_rate(a['row_accuracy'])} {interval(a['row_accuracy_ci'])}",
             f"{_rate(a['interaction_accuracy'])} {interval(a['interaction_accuracy_ci'])}",
             _roc(a["auc"], "row"), _roc(a["auc"], "interaction"), _roc(a["tpr_at_1pct_fpr"], "row"),
             _roc(a["tpr_at_1pct_fpr"], "interaction"), str(a["n_scored"])] for c, a in acc.items()]
    return [Section("accuracy", "Accuracy and ROC",
                    "Against the labels (unsafe = positive). AUC and TPR use the guard's score on valid calls; ties "
                    "count as ranks.", head, rows)]


def worst_case(report: Mapping[str, Any]) -> list[Section]:
    w = report.get("worst_case")
    if w is None:
        return []
    lv = level(report)
    head = ["quantity", f"under the baseline [{lv} CI]", f"under at least one condition [{lv} CI]", "bases"]
    rows = [["miss rate (unsafe allowed)", f"{_rate(w['miss_rate_baseline'])} {interval(w['miss_rate_baseline_ci'])}",
             f"{_rate(w['miss_rate_any'])} {interval(w['miss_rate_any_ci'])}", str(w["n_unsafe_bases"])],
            ["false block rate (safe blocked)",
             f"{_rate(w['false_block_rate_baseline'])} {interval(w['false_block_rate_baseline_ci'])}",
             f"{_rate(w['false_block_rate_any'])} {interval(w['false_block_rate_any_ci'])}", str(w["n_safe_bases"])]]
    return [Section("worst_case", "Worst case over representations",
                    "Per repetition round, a base counts as allowed (blocked) under at least one condition when "
                    "any condition counted in that round allowed (blocked) it; shares averaged over rounds, then "
                    "bases.", head, rows)]


def _end(e: Mapping[str, Any] | None) -> str:
    if not e:
        return "—"
    return f"{num(e['estimate'])} {interval(e.get('ci'))}, p_Holm {pval(e.get('p_holm'))}: {e.get('verdict')}"


_ROBUST = {True: "yes", False: "NO", None: "—"}


def excluded(report: Mapping[str, Any]) -> list[Section]:
    """The calls left out of every estimate (failed and quarantined), by condition, with the test of
    whether failures depend on the condition; then each contrast's range over the failed calls."""
    ex = report.get("excluded")
    if not isinstance(ex, Mapping) or not ex.get("failed"):   # no failed call: the quarantine section says it all
        return []
    dep = ex.get("depends_on_condition") or {}
    members = dep.get("members") or {}
    lv = level(report)
    head = ["condition", "calls", "failed", "share failed", f"− baseline's share [{lv} CI]", "p_Holm",
            "failures depend on it"]
    rows = []
    for c, v in (ex.get("by_condition") or {}).items():
        m = members.get(c)
        share = v["failed"] / v["calls"] if v.get("calls") else None
        rows.append([clean(c), str(v["calls"]), str(v["failed"]), _rate(share),
                     "—" if m is None else f"{num(m['difference'])} {interval(m.get('ci'))}",
                     "—" if m is None else pval(m.get("p_holm")),
                     "—" if m is None else ("yes" if m.get("differs") else "no")])
    verdict = "publishable" if ex["publishable"] else "NOT PUBLISHABLE"
    out = [Section("excluded", "Excluded calls",
                   f"{ex['failed']} failed and {ex['quarantined']} quarantined of {report['n_calls']} calls: "
                   f"{100 * ex['share']:.2f}% left out of every estimate; limit {100 * ex['limit']:g}% for both "
                   f"together: {verdict}. Whether failures depend on the condition: "
                   f"{dep.get('verdict', '—')} ({dep.get('family', '—')}, Holm at α {report.get('alpha', 0.05):g}: the "
                   "share of failed calls minus the baseline's, paired by base, by the procedure the headline uses).",
                   head, rows)]
    if not _has(report["contrasts"], "bounds"):
        return out
    head = ["condition", "Δ range", "Δ, failed → allow/block (low end)", "Δ, the high end", "Δ robust",
            "Δ − placebo range", "Δ − placebo, low end", "Δ − placebo, high end", "Δ − placebo robust"]
    rows = []
    for c in report["contrasts"]:
        b = c["bounds"]
        ends = b.get("ends") or {}
        rows.append([clean(c["condition"]), interval(b.get("delta")), _end((ends.get("delta") or {}).get("lo")),
                     _end((ends.get("delta") or {}).get("hi")), _ROBUST[b.get("robust_delta")],
                     interval(b.get("corrected")), _end((ends.get("corrected") or {}).get("lo")),
                     _end((ends.get("corrected") or {}).get("hi")), _ROBUST[b.get("robust_corrected")]])
    out.append(Section("bounds", "Bounds over the failed calls",
                       "Each contrast with every failed call set to block or to allow, whichever moves it most "
                       "(worst-case bounds): the low end counts the condition's failed calls as allows and the "
                       "reference's as blocks, the high end the reverse. Each end has its interval and p from the "
                       "procedure the headline uses, Holm over the same family at the same end; robust: both ends "
                       "give the same verdict.", head, rows))
    return out


def family_sections(report: Mapping[str, Any]) -> list[Section]:
    return [*contrast_diagnostics(report), *strata_corrected(report), *block_rates(report), *stability(report),
            *order(report), *retried(report), *accuracy(report), *worst_case(report)]


def markdown_lines(sections: Sequence[Section]) -> list[str]:
    out: list[str] = []
    for sec in sections:
        out += [f"## {sec.title}", "", sec.intro, ""]
        if sec.head:
            out += [md_table(sec.head, sec.rows), ""]
    return out
