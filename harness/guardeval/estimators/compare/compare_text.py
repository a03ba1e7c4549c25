"""The tables and lines of a comparison (the result of `compare.compare_inputs`), shared by the
terminal output, compare.md and compare.html: per pair the corrected differences (the
headline) and the Δ differences, the condition rankings, the leaderboard per condition and the
ranking stability of the guards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardeval.estimators.compare.rows import PairRow, pair_rows
from guardeval.estimators.report.formats import interval, level, num, pval, text_table
from guardeval.estimators.report.rows import ROBUST_WORDS
from guardeval.estimators.verdicts import decisions as dc
from guardeval.estimators.verdicts.record import Decision, short
from guardeval.run.folder.answered import describe

Table = tuple[list[str], list[list[str]]]


def who(inp: Mapping[str, Any]) -> str:
    src = inp.get("source") or {}
    if src.get("table"):
        return f"{inp['label']}: table {src['table']}"
    logs = src.get("inspect_logs")
    if isinstance(logs, list) and logs:
        # An Inspect log: its file, the model it names and its eval id (it has no run folder).
        said = ", ".join(f"{lg.get('path')} (model {lg.get('model')}, eval {lg.get('eval_id')})"
                         for lg in logs if isinstance(lg, dict))
        return f"{inp['label']}: Inspect log {said}"
    g = src.get("guard") or {}
    seen = g.get("answered_by")
    # Who answered first (the simulator's profile, the reported model), then what the config asked for.
    said = f"answered by {describe(seen)}; " if isinstance(seen, dict) else ""
    return f"{inp['label']}: {said}config {g.get('name')}, model {g.get('model')}; run {src.get('run_id')}"


def input_lines(result: Mapping[str, Any]) -> list[str]:
    return [who(i) for i in result["inputs"]]


def method_line(result: Mapping[str, Any]) -> str:
    bs = result["bootstrap"]
    return (f"baseline {result['baseline']}; placebo {result['placebo'] or 'none'}; failure rule "
            f"{result['failure_rule']}; {bs['n']} paired replicates, seed {bs['seed']}; equivalence margin "
            f"±{result['margin']:g}; every verdict at α {result.get('alpha', 0.05):g}")


def up_front(result: Mapping[str, Any]) -> list[str]:
    """What must be said before anything else (issue 35): an input whose placebo failed as a
    control, and the families this design cannot decide at all."""
    out = []
    for pc in result.get("placebo_checks") or []:
        if pc.get("failed"):
            p = pc.get("p_holm")
            out.append(f"The placebo {pc['condition']} failed as a control for {pc['label']}: by itself it moved "
                       f"{pc['label']}'s block rate by {num(pc['delta'])} (unadjusted {level(result)} CI "
                       f"{interval(pc.get('ci'))}; differs from 0 after Holm over {pc['family']}, p_Holm "
                       f"{'—' if p is None else f'{p:.4g}'}). Its Δ − placebo, and every B − A of it, is measured "
                       "against a control that itself changed the guard: read the B − A of Δ beside it.")
    return excluded_lines(result) + out + list(result.get("cannot_decide") or [])


def excluded_lines(result: Mapping[str, Any]) -> list[str]:
    """When any input's calls failed (issue 45): per input the count and share, where they fell,
    whether that depends on the condition; then whether each headline difference survives them."""
    out = []
    for inp in result.get("inputs") or []:
        ex = inp.get("excluded")
        if not isinstance(ex, Mapping) or not ex.get("failed"):
            continue
        where = ", ".join(f"{c} {v['failed']} of {v['calls']}" for c, v in ex["by_condition"].items() if v["failed"])
        line = (f"{inp['label']}: {ex['failed']} calls failed ({100 * ex['share']:.1f}% of its calls left out with "
                f"{ex['quarantined']} quarantined; {'within' if ex['publishable'] else 'past'} the "
                f"{100 * ex['limit']:g}% limit{'' if ex['publishable'] else ': NOT PUBLISHABLE'}): {where}.")
        dep = ex.get("depends_on_condition") or {}
        if dep.get("differs"):
            said = ", ".join(f"{c} (p_Holm {pval(m['p_holm'])})" for c, m in dep["members"].items() if m["differs"])
            line += f" Failed calls depend on the condition: {said}, against {result['baseline']}."
        out.append(line)
    if not out:
        return out
    fragile = [f"{pr['b']} − {pr['a']}: " + ", ".join(names) for pr in result["pairs"]
               if (names := [r.condition for r in pair_rows(pr) if r.robust is False])]
    out.append("With each failed call set to block or to allow, the headline verdict of every difference holds."
               if not fragile else
               f"With each failed call set to block or to allow, the verdict changes for {'; '.join(fragile)}: "
               "not robust to the failed calls.")
    return out


def decision_lines(result: Mapping[str, Any]) -> list[str]:
    """The families every verdict of the comparison is decided in (fixed before the data)."""
    fams = result.get("families")
    if not fams:
        return []
    what = {"difference": "B − A of Δ", "difference_minus_placebo": "B − A of Δ − placebo (the headline)"}
    parts = [f"{what[q]}: Holm over {f['name']} ({', '.join(f['conditions'])})" for q, f in fams.items()]
    return ["Decisions (every verdict, * and 'yes'): " + "; ".join(parts) + f", each at α {result['alpha']:g}. "
            f"Intervals are unadjusted {level(result)} (1 − α); p_Holm is the decision's adjusted p."]


def _headline(r: Mapping[str, Any], side: str) -> float | None:
    corr = r.get(f"delta_minus_placebo_{side}")
    return corr if corr is not None else r.get(f"delta_{side}")


def words(result: Mapping[str, Any]) -> list[str]:
    """One sentence per pair and condition for its headline (B − A of the placebo-corrected
    effect; of Δ for the placebo): who is more sensitive, by how much, whether that survives the
    stated family."""
    if "families" not in result:
        return []
    failed = {pc["label"] for pc in result.get("placebo_checks") or [] if pc.get("failed")}
    out = []
    for pair in result["pairs"]:
        for r in pair["conditions"]:
            if r.get("difference_minus_placebo") is not None or r.get("equivalence_minus_placebo") is not None:
                sentence = dc.difference_sentence(r["condition"], pair["a"], pair["b"], r["delta_minus_placebo_a"],
                                                  r["delta_minus_placebo_b"], r["difference_minus_placebo"],
                                                  r["ci_difference_minus_placebo"], r["equivalence_minus_placebo"],
                                                  "Δ − placebo", level(result))
                broken = [x for x in (pair["a"], pair["b"]) if x in failed]
                if broken:
                    # The corrected difference leans on a control that moved the guard: the B − A of
                    # Δ itself, with its own decision, is read beside it (issue 35 §4).
                    sentence += (f" The placebo failed as a control for {' and '.join(broken)}, so read beside it the "
                                 "B − A of Δ: " + dc.difference_sentence(r["condition"], pair["a"], pair["b"], r["delta_a"],
                                                                         r["delta_b"], r["difference"], r["ci_difference"],
                                                                         r["equivalence"], "Δ", level(result)))
                out.append(sentence + _robust_words(r, "difference_minus_placebo"))
            else:
                out.append(dc.difference_sentence(r["condition"], pair["a"], pair["b"], r["delta_a"], r["delta_b"],
                                                  r["difference"], r["ci_difference"], r["equivalence"], "Δ",
                                                  level(result)) + _robust_words(r, "difference"))
    return out


def _robust_words(r: Mapping[str, Any], quantity: str) -> str:
    """After a headline difference's sentence, when its verdict does not survive the failed calls."""
    b = r.get("bounds") or {}
    rng = b.get(quantity)
    if b.get(f"robust_{quantity}") is not False or rng is None:
        return ""
    return (f" NOT robust to the failed calls: with each set to block or to allow, B − A ranges from "
            f"{dc._n(rng[0])} to {dc._n(rng[1])} and the verdict changes.")


def _sig(d: Decision | None, robust: bool | None = None) -> str:
    starred = d is not None and d.starred
    return (" *" if starred else "") + (" (not robust to failed calls)" if starred and robust is False else "")


def _shows_range(rows: Sequence[PairRow]) -> bool:
    return any(r.bounds is not None and r.bounds[0] != r.bounds[1] for r in rows)


def _range(r: PairRow) -> str:
    return "—" if r.bounds is None else f"{interval(r.bounds)} {ROBUST_WORDS[r.robust]}"


def _p_decision(d: Decision | None) -> str:
    if d is None or not d.family:
        return "(not in family)"
    return pval(d.p_adjusted)


def corrected_table(pair: Mapping[str, Any], lv: str = "95%") -> Table:
    """The headline: B − A of the placebo-corrected effect, decided in the stated family."""
    head = ["condition", "A Δ − placebo", "B Δ − placebo", "B − A", f"{lv} CI (unadjusted)", "p", "p_Holm",
            "verdict; MDE"]
    chosen = [r for r in pair_rows(pair) if r.has_corrected]
    ranged = _shows_range(chosen)
    # The range over the failed calls, when any failed, before the verdict (which stays last).
    head[-1:-1] = ["B − A, failed calls as block / allow"] if ranged else []
    rows = [[r.condition + _sig(r.verdict_minus_placebo, r.robust), num(r.delta_minus_placebo_a),
             num(r.delta_minus_placebo_b), num(r.difference_minus_placebo), interval(r.ci_difference_minus_placebo),
             pval(r.p_difference_minus_placebo), _p_decision(r.verdict_minus_placebo),
             *([_range(r)] if ranged else []), short(r.verdict_minus_placebo)]
            for r in chosen]
    return head, rows


def delta_table(pair: Mapping[str, Any], lv: str = "95%") -> Table:
    head = ["condition", "A Δ", f"A {lv} CI", "B Δ", f"B {lv} CI", "B − A", f"{lv} CI (unadjusted)", "p", "p_Holm",
            "verdict; MDE"]
    every = pair_rows(pair)
    # The range is the headline's: here only where the headline is B − A of Δ (no corrected effect).
    ranged = _shows_range([r for r in every if r.difference_minus_placebo is None])
    head[-1:-1] = ["B − A, failed calls as block / allow"] if ranged else []
    rows = [[r.condition + _sig(r.verdict, r.robust if r.difference_minus_placebo is None else None), num(r.delta_a),
             interval(r.ci_a), num(r.delta_b), interval(r.ci_b), num(r.difference), interval(r.ci_difference),
             pval(r.p_difference), _p_decision(r.verdict),
             *([_range(r) if r.difference_minus_placebo is None else "—"] if ranged else []), short(r.verdict)]
            for r in every]
    return head, rows


TABLE_TERMS = ("A Δ − placebo, B Δ − placebo: each guard's placebo-corrected effect; B − A: their paired difference "
               "on the bases counted in both; p: its two-sided bootstrap p; p_Holm: that p adjusted in the decision's "
               "family (named above); * marks B − A differing from 0 there; verdict as defined under the tables; "
               "MDE: the difference detectable with 80% power at α")


def ranking_lines(pair: Mapping[str, Any], result: Mapping[str, Any] | None = None) -> list[str]:
    """The two rankings of conditions by Δ, each pair of conditions whose order reversed in the
    point estimates with its reversal test, and the verdict."""
    pairs = pair["reversed_pairs"]
    fam = ((result or {}).get("ranking_family") or {}).get("name")
    over = f"Holm over {fam}" if fam else "Holm"
    lines = [f"ranking A: {' > '.join(pair['ranking_a'])}", f"ranking B: {' > '.join(pair['ranking_b'])}"]
    for pr in pairs:
        x, y = pr["conditions"]
        if "p_reversal" in pr:
            lines.append(f"reversed in the estimates: {x} vs {y}: order in A p {pval(pr['p_order_a'])}, in B p "
                         f"{pval(pr['p_order_b'])}; reversal p {pval(pr['p_reversal'])}, {over} {pval(pr['p_holm'])}")
        else:   # a comparison made before the reversal test
            lines.append(f"reversed: {x} vs {y}: difference of differences {num(pr['difference_of_differences'])} "
                         f"{interval(pr['ci'])}, p {pval(pr['p'])}, Holm {pval(pr['p_holm'])}")
    if pair["ranking_changed"]:
        verdict = f"yes (a reversal is established in both guards and survives {over})"
    elif pairs:
        verdict = f"no (no reversal is established in both guards after {over})"
    else:
        verdict = "no (no pair of conditions reversed)"
    return [*lines, f"ranking changed: {verdict}"]


def pair_title(pair: Mapping[str, Any]) -> str:
    return f"A = {pair['a']}, B = {pair['b']}"


def leaderboard_table(result: Mapping[str, Any], condition: str) -> Table:
    rows_in = result["leaderboard"][condition]
    labelled = any("accuracy" in r for r in rows_in)
    lv = level(result)
    head = ["guard", "block rate", f"{lv} CI", "Δ", "Δ − placebo", f"{lv} CI (corr.)", "rank by rate (1 = highest)",
            "rank by |effect| (1 = least moved)"]
    if labelled:
        head += ["accuracy", "row F1", "interaction F1", "rank by accuracy (1 = highest)"]
    rows = []
    for r in rows_in:
        rk = r["rank"]
        cells = [str(r["label"]), num(r["block_rate"], sign=False), interval(r["block_rate_ci"]), num(r["delta"]),
                 num(r["delta_minus_placebo"]), interval(r["ci_minus_placebo"]), _rank(rk["block_rate"]),
                 _rank(rk["effect"])]
        if labelled:
            cells += [num(r.get("accuracy"), sign=False), num(r.get("row_f1"), sign=False),
                      num(r.get("interaction_f1"), sign=False), _rank(rk["accuracy"])]
        rows.append(cells)
    return head, rows


def _rank(x: int | None) -> str:
    return "—" if x is None else str(x)


LEADERBOARD_TERMS = ("block rate: the base-equal mean of the guard's block decisions under the condition; Δ and "
                     "Δ − placebo: its effect, as estimate reports it (unadjusted (1 − α) intervals); ranks: competition "
                     "ranks (1, 1, 3), descriptive (they decide nothing; the paired differences above do)")


def stability_lines(result: Mapping[str, Any]) -> list[str]:
    st = result["ranking_stability"]
    fam = (st.get("family") or {}).get("name")
    over = f"Holm over {fam}" if fam else "Holm"
    out = []
    for c, s in st["by_condition"].items():
        line = (f"{c}: Kendall τ {num(s['kendall_tau'])} {interval(s['kendall_tau_ci'])} (description) between the "
                f"guards' order under {result['baseline']} ({' > '.join(s['order_baseline'])}) and under {c} "
                f"({' > '.join(s['order_condition'])})")
        out.append(line)
        for r in s["reversed_pairs"]:
            x, y = r["guards"]
            if "p_reversal" in r:
                out.append(f"  reversed in the estimates: {x} vs {y}: order under {result['baseline']} p "
                           f"{pval(r['p_order_baseline'])}, under {c} p {pval(r['p_order_condition'])}; reversal p "
                           f"{pval(r['p_reversal'])}, {over} {pval(r['p_holm'])}")
            else:
                out.append(f"  reversed: {x} vs {y}: difference of differences {num(r['difference_of_differences'])} "
                           f"{interval(r['ci'])}, p {pval(r['p'])}, Holm {pval(r['p_holm'])}")
        verdict = (f"yes (both orders are established and the reversal survives {over})" if s["ranking_changed"]
                   else f"no (no reversal is established after {over})" if s["reversed_pairs"]
                   else "no (no pair of guards reversed)")
        out.append(f"  guard order changed under {c}: {verdict}")
    return out


def _answer(result: Mapping[str, Any]) -> list[str]:
    """What every terminal output opens with: what must be said first, the inputs, the method,
    the families, and the words."""
    said = words(result)
    first = up_front(result)
    out = [*first, *([""] if first else []), *input_lines(result), method_line(result), *decision_lines(result), ""]
    if said:
        out += ["In words:", *(f"- {x}" for x in said), ""]
    return out


def headline_text(result: Mapping[str, Any]) -> str:
    """The answer and each pair's headline table (B − A of the placebo-corrected effect; of Δ
    without a placebo): what `guardeval compare` prints; the rest is in compare.md/html and
    `text` (`--full`)."""
    out = _answer(result)
    for pair in result["pairs"]:
        head, rows = corrected_table(pair, level(result))
        title = f"{pair_title(pair)}: the headline, B − A of the placebo-corrected effect"
        if not rows:
            head, rows = delta_table(pair, level(result))
            title = f"{pair_title(pair)}: the headline, B − A of Δ (no placebo)"
        out += [title, "", text_table(head, rows), ""]
    return "\n".join([*out, TABLE_TERMS])


def text(result: Mapping[str, Any]) -> str:
    """Everything: the answer, both tables of every pair, rankings, leaderboards, stability."""
    out = _answer(result)
    for pair in result["pairs"]:
        out += [f"{pair_title(pair)}: the headline, B − A of the placebo-corrected effect", "",
                text_table(*corrected_table(pair, level(result))), "", "B − A of Δ", "",
                text_table(*delta_table(pair, level(result))), "",
                TABLE_TERMS, "", *ranking_lines(pair, result), ""]
    for c in result["leaderboard"]:
        out += [f"leaderboard under {c}", "", text_table(*leaderboard_table(result, c)), ""]
    out += [LEADERBOARD_TERMS, "", "ranking stability (guards ordered by block rate)", *stability_lines(result)]
    return "\n".join(out)
