"""Holm's step-down adjustment over a declared family of contrasts."""

from __future__ import annotations

from collections.abc import Sequence


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in input order. Sorted ascending p_(1..m):
    adj_(j) = max_{k<=j} min(1, (m − k + 1)·p_(k)). An undefined p (None) still counts in m
    (the family is what was declared, not what happened to have data) and stays None."""
    m = len(pvalues)
    order = sorted((i for i in range(m) if pvalues[i] is not None), key=lambda i: pvalues[i])  # type: ignore[arg-type, return-value]
    out: list[float | None] = [None] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))  # type: ignore[arg-type]
        out[i] = running
    return out
