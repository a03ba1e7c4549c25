"""Plots of a report (effects.png, the report's inline SVG) and of a comparison (compare.png).

The forest plot leads with what a reader should take away: the placebo-corrected effect of each
condition (Δc − Δplacebo) as a filled marker with its interval, the uncorrected effect beside it
in grey, the placebo's own effect as its row; Holm-significant contrasts starred; the numbers in
a column to the right; one marker per failure rule only when the rules give different answers;
the legend below the data. Labels come from cohorts and configs, so mathtext is off (a `$` in a
condition name is text) and control characters are escaped.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from guardeval.estimators.report.formats import level, rules_differ  # noqa: E402
from guardeval.estimators.report.rows import effect_rows  # noqa: E402
from guardeval.terminal import safe  # noqa: E402

CORRECTED, RAW, PLACEBO = "#1b4f8a", "#8c8c8c", "#b8860b"
RULE_STYLE = {"drop": ("o", "#1b4f8a"), "fail-closed": ("s", "#c0392b"), "fail-open": ("^", "#2e8b57")}
_RC: Any = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "guardeval", "font.size": 9}


def _label(text: Any, limit: int = 40) -> str:
    s = safe(text)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}".replace("-0.000", "+0.000")


def _ci(ci: Sequence[float] | None) -> str:
    return "" if ci is None else f" [{_num(ci[0])}, {_num(ci[1])}]"


def _p(p: float | None) -> str:
    return "—" if p is None else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


def forest_figure(report: Mapping[str, Any], title: str | None = None) -> Figure:
    contrasts = list(report["contrasts"])
    # Each row's star and headline p: the effects table's rows (the same records every format reads).
    marks = effect_rows(report)
    placebo = report.get("placebo")
    rules = list(report["failure_rules"]) if rules_differ(report) else []
    n = max(1, len(contrasts))
    with plt.rc_context(_RC):
        fig = plt.figure(figsize=(9.5, 2.2 + 0.62 * n + (0.25 * n if rules else 0)), layout="constrained")
        grid = fig.add_gridspec(1, 2, width_ratios=(3.1, 1.9))
        ax, side = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
        side.axis("off")
        ys = list(range(len(contrasts)))[::-1]              # first contrast on top
        for y, c, mark in zip(ys, contrasts, marks):
            is_placebo = c["condition"] == placebo
            corrected = None if is_placebo else c.get("delta_minus_placebo")
            lift = 0.16 if corrected is not None else 0.0
            # uncorrected effect: grey, or the placebo's own row in its colour
            colour = PLACEBO if is_placebo else RAW
            if c.get("ci") is not None:
                ax.plot(c["ci"], [y - lift] * 2, color=colour, lw=1.4, solid_capstyle="butt")
            if c.get("delta") is not None:
                ax.plot([c["delta"]], [y - lift], marker="o", ms=6, color=colour,
                        mfc="white" if not is_placebo else colour, ls="none",
                        label="placebo effect (Δplacebo)" if is_placebo else "uncorrected Δ vs " + _label(report["baseline"]))
            if corrected is not None:
                if c.get("ci_minus_placebo") is not None:
                    ax.plot(c["ci_minus_placebo"], [y + lift] * 2, color=CORRECTED, lw=2.6, solid_capstyle="butt")
                ax.plot([corrected], [y + lift], marker="D", ms=7, color=CORRECTED, ls="none",
                        label="placebo-corrected Δ − Δplacebo (headline)")
            for k, rule in enumerate(rules):
                d, ci = c["by_rule"].get(rule), c["by_rule_ci"].get(rule)
                if d is None:
                    continue
                marker, rc = RULE_STYLE.get(rule, ("x", "black"))
                yy = y - lift - 0.14 * (k + 1)
                if ci is not None:
                    ax.plot(ci, [yy] * 2, color=rc, lw=0.9)
                ax.plot([d], [yy], marker=marker, ms=4, color=rc, ls="none", label=f"Δ under rule {rule}")
            headline = (f"Δ − placebo {_num(corrected)}{_ci(c.get('ci_minus_placebo'))}" if corrected is not None
                        else f"Δ {_num(c.get('delta'))}{_ci(c.get('ci'))}")
            # The p beside the headline is the headline's own Holm p (Δ − placebo's; Δ's for the placebo).
            hp = mark.headline_p
            p_text = (f"p_Holm {_p(hp)}" if hp is not None
                      else "not in family" if not c.get("in_family") or corrected is not None else "p_Holm —")
            star = ("  * not robust" if mark.starred and mark.robust is False else "  *" if mark.starred else "")
            side.text(0.02, y, f"{headline}\n{p_text}{star}", va="center", ha="left",
                      fontsize=8.5, family="monospace", weight="bold" if mark.starred else "normal",
                      transform=side.get_yaxis_transform())
        ax.axvline(0.0, color="black", lw=0.8)
        labels = [_label(c["condition"]) + (" (placebo)" if c["condition"] == placebo else "")
                  + (" *" if m.starred else "") for c, m in zip(contrasts, marks)]
        ax.set_yticks(ys, labels)
        for tick, m in zip(ax.get_yticklabels(), marks):
            if m.starred:
                tick.set_fontweight("bold")
        ax.set_ylim(-0.7, len(contrasts) - 0.3)
        side.set_ylim(ax.get_ylim())
        ax.set_xlabel(f"paired effect on block rate vs {_label(report['baseline'])} (proportion), "
                      f"unadjusted {level(report)} cluster-bootstrap CI")
        ax.grid(axis="x", alpha=0.3)
        fig.suptitle(_label(title or "guardeval: effects", 160), fontsize=10.5, x=0.01, ha="left")
        handles, names = ax.get_legend_handles_labels()
        unique = dict(zip(names, handles))
        alpha = report.get("alpha", 0.05)
        fams = report.get("families") or {}
        sizes = ", ".join(f"{'Δ − placebo' if f.get('quantity', q) == 'delta_minus_placebo' else 'Δ'} over {f['name']}"
                          for q, f in fams.items())
        note = (f"* the headline differs from 0: Holm-adjusted p < {alpha:g} ({sizes}); "
                f"headline failure rule {report['failure_rule']}")
        if not rules:
            note += " (all failure rules agree)"
        fig.legend(unique.values(), unique.keys(), loc="outside lower left", ncol=2, fontsize=8, frameon=False,
                   title=note, title_fontsize=7.5, alignment="left")
    return fig


def save(fig: Figure, target: str | Path | IO[bytes], fmt: str | None = None) -> None:
    # No timestamps in the files: the same report gives the same bytes.
    metadata = {"Date": None} if (fmt or Path(str(target)).suffix.lstrip(".")) == "svg" else {"Software": None}
    with plt.rc_context(_RC):
        fig.savefig(target, format=fmt, dpi=120, metadata=metadata)
    plt.close(fig)


def figure_bytes(fig: Figure, fmt: str = "svg") -> bytes:
    buf = io.BytesIO()
    save(fig, buf, fmt)
    return buf.getvalue()


def forest_plot(report: Mapping[str, Any], path: str | Path | IO[bytes], title: str | None = None) -> None:
    save(forest_figure(report, title), path, "png" if not isinstance(path, (str, Path)) else None)
