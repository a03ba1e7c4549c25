"""Plots of a comparison: compare.png (one pair of guards: each guard's headline effect per
condition and their paired difference) and the leaderboard's dot plot (every guard's
placebo-corrected effect per condition). Labels come from outside, so mathtext is off and
control characters are escaped (guardeval.estimators.report.plot's rc and labels); long titles wrap
instead of running off the figure, and the p-values sit in their own column, clear of the data."""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from matplotlib.figure import Figure

from guardeval.estimators.report.formats import level
from guardeval.estimators.report.plot import _RC, _label, _p, plt
from guardeval.estimators.verdicts.decisions import significant

COLOURS = ("#1b4f8a", "#c0392b", "#2e8b57", "#b8860b", "#6a3d9a", "#8c8c8c", "#e377c2", "#17becf")
DIFFERENCE = "#222222"   # B − A: no guard's colour
TITLE_CHARS = 100   # about what one line of a 9.5-inch figure holds at 10.5 pt


def _slot(label: str) -> int:
    """A guard's own place in COLOURS: a stable hash of its label (not Python's salted hash())."""
    return int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:4], "big") % len(COLOURS)


def guard_colours(labels: Iterable[str]) -> dict[str, str]:
    """Each guard's colour on a page, from its label alone, so the order the inputs come in
    changes nothing: guards claim their hashed slot in label order, and a guard whose slot is
    taken takes the next free one (two guards on a page never share a colour while COLOURS lasts)."""
    taken: dict[int, str] = {}
    out: dict[str, str] = {}
    for label in sorted(set(labels), key=lambda x: (_slot(x), x)):
        slot = _slot(label)
        if len(taken) < len(COLOURS):
            while slot in taken:
                slot = (slot + 1) % len(COLOURS)
        taken[slot] = label
        out[label] = COLOURS[slot]
    return out


def guard_colour(result: Mapping[str, Any], label: str) -> str:
    """One colour per guard on a page (compare.html, study.html: every input of the comparison),
    the same in the pair plots and the leaderboard's dot plot, whatever the inputs' order."""
    labels = [str(i["label"]) for i in result["inputs"]]
    return guard_colours([*labels, label])[label]


def title_lines(title: str) -> list[str]:
    """A long title in lines of at most TITLE_CHARS, broken at spaces only: never inside a name
    ("alias-" / "sensitive")."""
    return textwrap.wrap(_label(title, 400), TITLE_CHARS, break_on_hyphens=False)


def _title(fig: Figure, title: str) -> None:
    fig.suptitle("\n".join(title_lines(title)) or " ", fontsize=10.5, x=0.01, ha="left")


def _headline(r: Mapping[str, Any], side: str) -> tuple[float | None, Any]:
    """A guard's headline effect in a pair row: corrected where defined, else Δ."""
    corr = r.get(f"delta_minus_placebo_{side}")
    if corr is not None:
        return corr, r.get(f"ci_minus_placebo_{side}")
    return r.get(f"delta_{side}"), r.get(f"ci_{side}")


def _difference(r: Mapping[str, Any]) -> tuple[float | None, Any, Mapping[str, Any] | None, bool]:
    """A pair row's headline difference: its value, unadjusted interval, decision record and
    whether it is the corrected one."""
    if r.get("difference_minus_placebo") is not None:
        return r["difference_minus_placebo"], r.get("ci_difference_minus_placebo"), r.get("equivalence_minus_placebo"), True
    return r.get("difference"), r.get("ci_difference"), r.get("equivalence"), False


def _family_note(result: Mapping[str, Any]) -> str:
    fams = result.get("families") or {}
    names = "; ".join(f"{'Δ − placebo' if q == 'difference_minus_placebo' else 'Δ'}: over {f['name']}"
                      for q, f in fams.items())
    return f"* B − A differs from 0: Holm-adjusted p < {result.get('alpha', 0.05):g} ({names})"


def paired_figure(result: Mapping[str, Any], pair: Mapping[str, Any], title: str) -> Figure:
    rows = list(pair["conditions"])
    n = max(1, len(rows))
    with plt.rc_context(_RC):
        fig = plt.figure(figsize=(9.5, 2.4 + 0.6 * n), layout="constrained")
        grid = fig.add_gridspec(1, 3, width_ratios=(3, 2, 1.1))
        ax = fig.add_subplot(grid[0])
        dx = fig.add_subplot(grid[1], sharey=ax)
        side = fig.add_subplot(grid[2], sharey=ax)
        side.axis("off")
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows):
            for off, key, marker in ((0.15, "a", "o"), (-0.15, "b", "D")):
                colour = guard_colour(result, pair[key])
                est, ci = _headline(r, key)
                if ci is not None:
                    ax.plot(ci, [y + off] * 2, color=colour, lw=1.8)
                if est is not None:
                    ax.plot([est], [y + off], marker=marker, ms=6, color=colour, ls="none",
                            label=_label(pair[key], 60))
            est, ci, eq, corrected = _difference(r)
            if ci is not None:
                dx.plot(ci, [y] * 2, color=DIFFERENCE, lw=2.2)
            if est is not None:
                dx.plot([est], [y], marker="s", ms=6, color=DIFFERENCE, ls="none", label="B − A (paired)")
            sig, p_holm = significant(eq), (eq or {}).get("p_adjusted")
            # Named as the tables name them: p_Holm (Δ), p_Holm (Δ − placebo).
            side.text(0.0, y, f"p_Holm ({'Δ − placebo' if corrected else 'Δ'})\n{_p(p_holm)}{' *' if sig else ''}",
                      va="center", ha="left", fontsize=7.5, family="monospace",
                      weight="bold" if sig else "normal")
        for a in (ax, dx):
            a.axvline(0.0, color="black", lw=0.8)
            a.grid(axis="x", alpha=0.3)
        ax.set_yticks(ys, [_label(r["condition"]) for r in rows])
        dx.tick_params(labelleft=False)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(f"Δ − placebo (Δ for the placebo) vs {_label(result['baseline'])}, unadjusted {level(result)} CI")
        dx.set_xlabel(f"difference B − A, paired unadjusted {level(result)} CI")
        _title(fig, title)
        handles, labels = [], []
        for a in (ax, dx):
            h, l_ = a.get_legend_handles_labels()
            handles += h
            labels += l_
        unique = dict(zip(labels, handles))
        fig.legend(unique.values(), unique.keys(), loc="outside lower left", ncol=3, fontsize=8, frameon=False,
                   title=_family_note(result),
                   title_fontsize=7.5, alignment="left")
    return fig


def leaderboard_figure(result: Mapping[str, Any], title: str) -> Figure:
    """Each guard's placebo-corrected effect per condition (Δ for the placebo), with its interval."""
    conds = [c for c in result["leaderboard"] if c != result["baseline"]]
    labels = [i["label"] for i in result["inputs"]]
    n, k = max(1, len(conds)), len(labels)
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(9.5, 2.2 + 0.25 * n * k + 0.3 * n), layout="constrained")
        ys = list(range(len(conds)))[::-1]
        width = 0.7 / max(1, k)
        for y, c in zip(ys, conds):
            for g, entry in enumerate(result["leaderboard"][c]):
                yy = y + 0.35 - width * (g + 0.5)
                colour = guard_colour(result, labels[g])
                ci = entry["ci_minus_placebo"] if entry["delta_minus_placebo"] is not None else entry["ci"]
                if ci is not None:
                    ax.plot(ci, [yy] * 2, color=colour, lw=1.6)
                if entry["headline_effect"] is not None:
                    ax.plot([entry["headline_effect"]], [yy], marker="o", ms=5, color=colour, ls="none",
                            label=_label(labels[g], 60))
        ax.axvline(0.0, color="black", lw=0.8)
        ax.grid(axis="x", alpha=0.3)
        ax.set_yticks(ys, [_label(c) + (" (Δ; placebo)" if c == result["placebo"] else "") for c in conds])
        ax.set_ylim(-0.6, len(conds) - 0.4)
        ax.set_xlabel(f"Δ − placebo vs {_label(result['baseline'])} (proportion), unadjusted {level(result)} CI")
        _title(fig, title)
        h, l_ = ax.get_legend_handles_labels()
        unique = dict(zip(l_, h))
        fig.legend(unique.values(), unique.keys(), loc="outside lower left", ncol=4, fontsize=8, frameon=False)
    return fig
