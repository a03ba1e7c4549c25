"""The tables and lines of a comparison (the result of `compare.compare_inputs`), shared by the
terminal output, compare.md and compare.html: per pair the corrected differences (the
headline) and the Δ differences, the condition rankings, the leaderboard per condition and the
ranking stability of the guards."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.estimators.equivalence import short
from harness.estimators.formats import interval, num, pval, text_table

Table = tuple[list[str], list[list[str]]]


def who(inp: Mapping[str, Any]) -> str:
    src = inp.get("source") or {}
    if src.get("table"):
        return f"{inp['label']}: table {src['table']}"
    g = src.get("guard") or {}
    return f"{inp['label']}: {g.get('name')} ({g.get('model')}), run {src.get('run_id')}"


def input_lines(result: Mapping[str, Any]) -> list[str]:
    return [who(i) for i in result["inputs"]]


def method_line(result: Mapping[str, Any]) -> str:
    bs = result["bootstrap"]
    return (f"baseline {result['baseline']}; placebo {result['placebo'] or 'none'}; failure rule "
            f"{result['failure_rule']}; {bs['n']} paired replicates, seed {bs['seed']}; equivalence margin "
            f"±{result['margin']:g}")


def corrected_table(pair: Mapping[str, Any]) -> Table:
    """The headline: B − A of the placebo-corrected effect, Holm over the interventions."""
    head = ["condition", "A Δ − placebo", "B Δ − placebo", "B − A", "95% CI", "p", "p_Holm", "p_Holm pairs",
            "verdict; MDE"]
    rows = [[str(r["condition"]), num(r["delta_minus_placebo_a"]), num(r["delta_minus_placebo_b"]),
             num(r["difference_minus_placebo"]), interval(r["ci_difference_minus_placebo"]),
             pval(r["p_difference_minus_placebo"]), pval(r["p_holm_minus_placebo"]),
             pval(r["p_holm_across_pairs_minus_placebo"]), short(r["equivalence_minus_placebo"])]
            for r in pair["conditions"] if r["difference_minus_placebo"] is not None
            or r["delta_minus_placebo_a"] is not None]
    return head, rows


def delta_table(pair: Mapping[str, Any]) -> Table:
    head = ["condition", "A Δ", "A 95% CI", "B Δ", "B 95% CI", "B − A", "95% CI", "p", "p_Holm", "p_Holm pairs",
            "verdict; MDE"]
    rows = [[str(r["condition"]), num(r["delta_a"]), interval(r["ci_a"]), num(r["delta_b"]), interval(r["ci_b"]),
             num(r["difference"]), interval(r["ci_difference"]), pval(r["p_difference"]), pval(r["p_holm"]),
             pval(r["p_holm_across_pairs"]), short(r["equivalence"])]
            for r in pair["conditions"]]
    return head, rows


def ranking_lines(pair: Mapping[str, Any]) -> list[str]:
    """The two rankings of conditions, each reversed pair with the test of its difference of
    differences, and the verdict."""
    pairs = pair["reversed_pairs"]
    lines = [f"ranking A: {' > '.join(pair['ranking_a'])}", f"ranking B: {' > '.join(pair['ranking_b'])}"]
    lines += [f"reversed: {x} vs {y}: difference of differences {num(pr['difference_of_differences'])} "
              f"{interval(pr['ci'])}, p {pval(pr['p'])}, Holm {pval(pr['p_holm'])}"
              for pr in pairs for x, y in [pr["conditions"]]]
    if pair["ranking_changed"]:
        verdict = "yes (a reversal survives Holm across the reversed pairs)"
    elif pairs:
        verdict = "no (no reversal survives Holm across the reversed pairs)"
    else:
        verdict = "no (no pair of conditions reversed)"
    return [*lines, f"ranking changed: {verdict}"]


def pair_title(pair: Mapping[str, Any]) -> str:
    return f"A = {pair['a']}, B = {pair['b']}"


def leaderboard_table(result: Mapping[str, Any], condition: str) -> Table:
    rows_in = result["leaderboard"][condition]
    labelled = any("accuracy" in r for r in rows_in)
    head = ["guard", "block rate", "95% CI", "Δ", "Δ − placebo", "95% CI (corr.)", "rank (rate)", "rank (|effect|)"]
    if labelled:
        head += ["accuracy", "row F1", "interaction F1", "rank (accuracy)"]
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


def stability_lines(result: Mapping[str, Any]) -> list[str]:
    st = result["ranking_stability"]
    out = []
    for c, s in st["by_condition"].items():
        line = (f"{c}: Kendall τ {num(s['kendall_tau'])} {interval(s['kendall_tau_ci'])} between the guards' order "
                f"under {result['baseline']} ({' > '.join(s['order_baseline'])}) and under {c} "
                f"({' > '.join(s['order_condition'])})")
        out.append(line)
        out += [f"  reversed: {x} vs {y}: difference of differences {num(r['difference_of_differences'])} "
                f"{interval(r['ci'])}, p {pval(r['p'])}, Holm {pval(r['p_holm'])}"
                for r in s["reversed_pairs"] for x, y in [r["guards"]]]
        verdict = ("yes (a reversal survives Holm)" if s["ranking_changed"]
                   else "no (no reversal survives Holm)" if s["reversed_pairs"] else "no (no pair of guards reversed)")
        out.append(f"  guard order changed under {c}: {verdict}")
    return out


def text(result: Mapping[str, Any]) -> str:
    out = [*input_lines(result), method_line(result), ""]
    for pair in result["pairs"]:
        out += [f"{pair_title(pair)}: the headline, B − A of the placebo-corrected effect", "",
                text_table(*corrected_table(pair)), "", "B − A of Δ", "", text_table(*delta_table(pair)), "",
                *ranking_lines(pair), ""]
    for c in result["leaderboard"]:
        out += [f"leaderboard under {c}", "", text_table(*leaderboard_table(result, c)), ""]
    out += ["ranking stability (guards ordered by block rate)", *stability_lines(result)]
    return "\n".join(out)
