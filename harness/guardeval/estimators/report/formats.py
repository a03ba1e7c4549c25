"""How the estimators write numbers and tables (report.md, the terminal, the plots): one place,
imported by the report, its sections and the plots alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A p is printed one way, by the decision record's words and every table alike: defined with the
# record (the decision layer imports nothing from here), re-exported for the tables.
from guardeval.estimators.verdicts.record import pval as pval


def num(x: float | None, digits: int = 4, sign: bool = True) -> str:
    if x is None:
        return "—"
    if round(x, digits) == 0:
        x = 0.0  # no "-0.0000"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def level(obj: Mapping[str, Any] | None) -> str:
    """The printed intervals' level, '95%' at α 0.05: every interval is at 1 − α (a report's or a
    comparison's `alpha`), so a verdict at α never disagrees with the interval beside it."""
    a = (obj or {}).get("alpha", 0.05) if isinstance(obj, Mapping) else 0.05
    return f"{100 * (1 - float(a)):g}%"


def interval(ci: Sequence[float] | None) -> str:
    return "—" if ci is None else f"[{num(ci[0])}, {num(ci[1])}]"


def rules_differ(report: Mapping[str, Any]) -> bool:
    """True when some contrast's effect or interval depends on the failure rule (there were failures)."""
    for c in report["contrasts"]:
        for key in ("by_rule", "by_rule_ci", "by_rule_minus_placebo"):
            values = {repr(v) for v in (c.get(key) or {}).values()}
            if len(values) > 1:
                return True
    return False


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


def md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def pct(x: float) -> str:
    """A share as a whole percentage ('41%'), one decimal below 1% ('0.5%')."""
    return f"{100 * x:.0f}%" if x == 0 or x >= 0.01 else f"{100 * x:.1f}%"
