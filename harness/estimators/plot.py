"""Forest plot of the contrasts (effects.png): each failure rule its own marker and colour,
the placebo effect as a dashed vertical line, zero as a thin line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"drop": ("o", "#1f77b4"), "fail-closed": ("s", "#d62728"), "fail-open": ("^", "#2ca02c")}


def forest_plot(report: Mapping[str, Any], path: str | Path) -> None:
    contrasts = report["contrasts"]
    rules = report["failure_rules"]
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.6 * max(1, len(contrasts))))
    offsets = {r: (i - (len(rules) - 1) / 2) * 0.22 for i, r in enumerate(rules)}
    for y, c in enumerate(reversed(contrasts)):
        for rule in rules:
            d = c["by_rule"][rule]
            if d is None:
                continue
            marker, colour = STYLE[rule]
            ci = c["by_rule_ci"][rule]
            yy = y + offsets[rule]
            if ci is not None:
                ax.plot(ci, [yy, yy], color=colour, lw=2.2 if rule == report["failure_rule"] else 1.2)
            ax.plot([d], [yy], marker=marker, color=colour, ms=7 if rule == report["failure_rule"] else 5,
                    ls="none", label=rule + (" (headline)" if rule == report["failure_rule"] else ""))
    ax.axvline(0.0, color="black", lw=0.8)
    placebo = next((c for c in contrasts if c["condition"] == report["placebo"]), None)
    if placebo is not None and placebo["delta"] is not None:
        ax.axvline(placebo["delta"], color="grey", ls="--", lw=1.2, label=f"placebo ({report['placebo']})")
    ax.set_yticks(range(len(contrasts)), [c["condition"] for c in reversed(contrasts)])
    ax.set_xlabel(f"paired effect on block rate vs {report['baseline']} (proportion), 95% cluster-bootstrap CI")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
