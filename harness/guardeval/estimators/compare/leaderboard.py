"""The leaderboard of `compare` (docs/estimators.md, compare): per condition, each guard's block
rate, Δ, placebo-corrected effect and, with labels, accuracy and F1, with ranks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from guardeval.estimators.quantities import Estimates


def ranks(values: Sequence[float | None], key: Callable[[float], float]) -> list[int | None]:
    """Competition ranks (1, 1, 3) by `key` ascending; None for an undefined value."""
    keyed = [None if v is None else key(v) for v in values]
    return [None if kv is None else 1 + sum(1 for o in keyed if o is not None and o < kv) for kv in keyed]


def _q(est: Estimates, key: tuple[Any, ...], field: Literal["estimate", "ci"] = "estimate") -> Any:
    q = est.get(key)
    return None if q is None else q[field]


class F1(TypedDict):
    """A guard's point F1 under one condition, per row and per interaction."""

    row_f1: float | None
    interaction_f1: float | None


class Ranks(TypedDict):
    block_rate: int | None
    effect: int | None              # None for the baseline (no effect of its own)
    accuracy: int | None


class Entry(TypedDict):
    """One guard under one condition in the leaderboard."""

    label: str
    block_rate: float | None
    block_rate_ci: list[float] | None
    delta: float | None
    ci: list[float] | None
    delta_minus_placebo: float | None
    ci_minus_placebo: list[float] | None
    headline_effect: float | None   # Δ − placebo, or Δ where there is none
    accuracy: NotRequired[float | None]     # with labels
    accuracy_ci: NotRequired[list[float] | None]
    row_f1: NotRequired[float | None]
    interaction_f1: NotRequired[float | None]
    rank: NotRequired[Ranks]


def leaderboard(labels: Sequence[str], conditions: Sequence[str], baseline: str,
                est: Estimates, f1: Mapping[tuple[int, str], F1] | None) -> dict[str, list[Entry]]:
    """{condition: [entry per guard, in input order]}. `est` holds ("rate", k, c), ("delta", k, c),
    ("corr", k, c) and, with labels, ("accuracy", k, c); `f1[(k, c)]` the point F1s.

    Ranks: `block_rate` highest first; `effect` by |headline effect| smallest first (the guard
    the condition moves least: the corrected effect, Δ for the placebo); `accuracy` highest first."""
    out: dict[str, list[Entry]] = {}
    for c in conditions:
        rows: list[Entry] = []
        for k, label in enumerate(labels):
            delta, corr = _q(est, ("delta", k, c)), _q(est, ("corr", k, c))
            entry: Entry = {
                "label": label,
                "block_rate": _q(est, ("rate", k, c)), "block_rate_ci": _q(est, ("rate", k, c), "ci"),
                "delta": delta, "ci": _q(est, ("delta", k, c), "ci"),
                "delta_minus_placebo": corr, "ci_minus_placebo": _q(est, ("corr", k, c), "ci"),
                "headline_effect": corr if corr is not None else delta,
            }
            if f1 is not None:
                entry["accuracy"], entry["accuracy_ci"] = _q(est, ("accuracy", k, c)), _q(est, ("accuracy", k, c), "ci")
                entry["row_f1"], entry["interaction_f1"] = f1[(k, c)]["row_f1"], f1[(k, c)]["interaction_f1"]
            rows.append(entry)
        by_rate = ranks([r["block_rate"] for r in rows], lambda v: -v)
        by_effect = ranks([r["headline_effect"] for r in rows], abs)
        by_acc = ranks([r.get("accuracy") for r in rows], lambda v: -v) if f1 is not None else [None] * len(rows)
        for r, a, b, d in zip(rows, by_rate, by_effect, by_acc):
            r["rank"] = {"block_rate": a, "effect": None if c == baseline else b, "accuracy": d}
        out[c] = rows
    return out
