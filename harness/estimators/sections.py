"""report.md sections for the diagnostic families (docs/estimators.md): contrast diagnostics,
placebo-corrected strata, block rates, stability, order, accuracy and the worst case.

Names (conditions, domains) can come from a hand-written table: control characters, bidi
overrides and the like are escaped (`harness.terminal.safe`) before they reach the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.estimators.report import interval, md_table, num, pval
from harness.terminal import safe


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


def contrast_diagnostics(report: Mapping[str, Any]) -> list[str]:
    head = ["condition", "sign test by interaction", "sign test (corrected)", "by repetition",
            "corrected by repetition", "flips 0→0/0→1/1→0/1→1", "unanimous 0→0/0→1/1→0/1→1/other",
            "accuracy Δ [95% CI]", "leave one tool out"]
    rows = [[clean(c["condition"]), _sign(c["sign_test"]), _sign(c["sign_test_minus_placebo"]),
             _list(c["by_repetition"]), _list(c["by_repetition_minus_placebo"]),
             _counts(c["flip_counts"], ("0->0", "0->1", "1->0", "1->1")),
             _counts(c["unanimous_shift"], ("0->0", "0->1", "1->0", "1->1", "nonunanimous")),
             f"{num(c['accuracy_delta'])} {interval(c['accuracy_delta_ci'])}", _loo(c["leave_one_tool_out"])]
            for c in report["contrasts"]]
    reps = ", ".join(str(r) for r in report.get("repetitions", []))
    return ["## Contrast diagnostics", "",
            "Sign test: interactions whose mean paired change is positive / negative / zero, exact two-sided "
            f"binomial p on the untied ones. By repetition: the effect within each round ({reps}). Flips: "
            "same-round baseline→condition transitions over (base, round) pairs. Unanimous: bases whose "
            "repetitions all agree in both conditions, by baseline→condition value.", "",
            md_table(head, rows), ""]


def strata_corrected(report: Mapping[str, Any]) -> list[str]:
    if report.get("placebo") is None:
        return []
    out: list[str] = []
    conds = [c["condition"] for c in report["contrasts"] if c["condition"] != report["placebo"]]
    for kind, title in (("domain", "domain"), ("label", "original label")):
        head = [title, *(f"{clean(c)} (corrected)" for c in conds)]
        rows = [[clean(name), *(f"{num(s['contrasts'][c]['delta_minus_placebo'])} "
                                f"{interval(s['contrasts'][c]['ci_minus_placebo'])} "
                                f"(+{s['contrasts'][c]['increase_minus_placebo']}/"
                                f"−{s['contrasts'][c]['decrease_minus_placebo']}/"
                                f"={s['contrasts'][c]['tie_minus_placebo']})" for c in conds)]
                for name, s in report["strata"][kind].items()]
        out += [f"## Placebo-corrected strata by {title}", "", md_table(head, rows), ""]
    return out


def block_rates(report: Mapping[str, Any]) -> list[str]:
    head = ["condition", "block rate", "cluster bootstrap 95% CI", "exact 95% CI over calls (Clopper–Pearson)"]
    rows = [[clean(c), _rate(v), interval(report["block_rate_ci"][c]), interval(report["block_rate_exact_ci"][c])]
            for c, v in report["block_rate"].items()]
    return ["## Block rates", "",
            "The block rate is the base-equal mean; the exact interval is over counted calls taken as independent "
            "(repetitions and interactions are not), so it is narrower than the bootstrap when they correlate.", "",
            md_table(head, rows), ""]


def stability(report: Mapping[str, Any]) -> list[str]:
    head = ["condition", "repeat disagreement", "95% CI", "unanimous rate", "bases (≥ 2 repetitions)"]
    rows = [[clean(c), _rate(s["repeat_disagreement"]), interval(s["ci"]), _rate(s["unanimous_rate"]),
             str(s["n_bases"])] for c, s in report["stability"].items()]
    return ["## Stability", "",
            "Repeat disagreement: mean over bases of the share of disagreeing pairs among a base's repetitions "
            "of one condition; unanimous rate: the share of bases whose repetitions all agree.", "",
            md_table(head, rows), ""]


def order(report: Mapping[str, Any]) -> list[str]:
    o = report.get("order")
    if o is None:
        return ["## Order", "", "No start times (a table without `started`): dispatch-order diagnostics not computed.", ""]
    head = ["quantity", "third 1", "third 2", "third 3", "drift (slope per third) [95% CI]", "p"]
    rows = [[f"effect of {clean(c)}", *(num(x) for x in xs), f"{num(o['drift'][c]['slope'])} "
             f"{interval(o['drift'][c]['ci'])}", pval(o["drift"][c]["p"])] for c, xs in o["by_dispatch_third"].items()]
    rows += [[f"block rate of {clean(c)}", *(_rate(x) for x in xs), f"{num(o['block_rate_drift'][c]['slope'])} "
              f"{interval(o['block_rate_drift'][c]['ci'])}", pval(o["block_rate_drift"][c]["p"])]
             for c, xs in o["block_rate_by_dispatch_third"].items()]
    spans = "; ".join(f"{t['n_calls']} calls from {t['first_started']} to {t['last_started']}" for t in o["thirds"])
    return ["## Order", "",
            f"Calls ranked by {o['clock']} and cut into thirds ({spans}). Drift is the least-squares slope over "
            "the thirds, (third 3 − third 1)/2.", "", md_table(head, rows), ""]


def _roc(x: Mapping[str, Any] | None, unit: str) -> str:
    return "—" if x is None else f"{_rate(x[unit])} {interval(x[unit + '_ci'])}"


def accuracy(report: Mapping[str, Any]) -> list[str]:
    acc = report.get("accuracy")
    if not acc:
        return []
    head = ["condition", "row accuracy [95% CI]", "interaction accuracy [95% CI]", "row AUC", "interaction AUC",
            "row TPR at 1% FPR", "interaction TPR at 1% FPR", "scored rows"]
    rows = [[clean(c), f"{_rate(a['row_accuracy'])} {interval(a['row_accuracy_ci'])}",
             f"{_rate(a['interaction_accuracy'])} {interval(a['interaction_accuracy_ci'])}",
             _roc(a["auc"], "row"), _roc(a["auc"], "interaction"), _roc(a["tpr_at_1pct_fpr"], "row"),
             _roc(a["tpr_at_1pct_fpr"], "interaction"), str(a["n_scored"])] for c, a in acc.items()]
    return ["## Accuracy", "",
            "Against the labels (unsafe = positive). AUC and TPR use the guard's score on valid calls; ties count "
            "as ranks.", "", md_table(head, rows), ""]


def worst_case(report: Mapping[str, Any]) -> list[str]:
    w = report.get("worst_case")
    if w is None:
        return []
    head = ["quantity", "under the baseline [95% CI]", "under at least one condition [95% CI]", "bases"]
    rows = [["miss rate (unsafe allowed)", f"{_rate(w['miss_rate_baseline'])} {interval(w['miss_rate_baseline_ci'])}",
             f"{_rate(w['miss_rate_any'])} {interval(w['miss_rate_any_ci'])}", str(w["n_unsafe_bases"])],
            ["false block rate (safe blocked)",
             f"{_rate(w['false_block_rate_baseline'])} {interval(w['false_block_rate_baseline_ci'])}",
             f"{_rate(w['false_block_rate_any'])} {interval(w['false_block_rate_any_ci'])}", str(w["n_safe_bases"])]]
    return ["## Worst case over representations", "",
            "Per repetition round, a base counts as allowed (blocked) under at least one condition when any "
            "condition counted in that round allowed (blocked) it; shares averaged over rounds, then bases.", "",
            md_table(head, rows), ""]


def family_sections(report: Mapping[str, Any]) -> list[str]:
    return [*contrast_diagnostics(report), *strata_corrected(report), *block_rates(report), *stability(report),
            *order(report), *accuracy(report), *worst_case(report)]
