"""Dispatch-order diagnostics (docs/estimators.md, Order): is there provider drift over the run?

Every call with a known start time (its final attempt's `started` in raw.jsonl) is ranked by
that time and the run is cut into three thirds of equal call counts. Within each third the
paired effect is computed as usual from the calls of that third only, and so is each
condition's block rate. The drift of a quantity is its least-squares slope over the thirds
(x = 0, 1, 2): (third 3 − third 1) / 2 per third, with a cluster-bootstrap interval.

A call retried by `resume --retry-failed` is counted at its newest decision, whose final attempt
started at the retry: a later measurement, so it falls in a later third. How many calls of each
third come from a retry is reported beside the thirds (`retried_by_third`), and `retried` gives
the retry rounds with their call counts and start times.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from guardeval.estimators.effects import Design, base_counts_where, base_rates
from guardeval.estimators.frame import Frame
from guardeval.estimators.quantities import Estimates, Quantities
from guardeval.estimators.types import Drift, Order, Retried, RetryRound, Third

N_PARTS = 3
# Least-squares slope over x = 0, 1, 2 with equal weights: (y3 − y1) / 2.
SLOPE = {0: -0.5, 2: 0.5}
CLOCK = "start time of each call's final attempt (raw.jsonl `started`; `started` in a table)"


def dispatch_parts(d: Design) -> np.ndarray | None:
    """Third (0, 1, 2) of each row by start time, -1 where unknown; None when no row has one.
    Equal times are broken by (base, condition, repetition), so row order never matters."""
    timed = np.nonzero(~np.isnan(d.row_time))[0]
    if not len(timed):
        return None
    order = np.lexsort((d.row_rep[timed], d.row_cond[timed], d.row_base[timed], d.row_time[timed]))
    rank = np.empty(len(timed), dtype=np.int64)
    rank[order] = np.arange(len(timed))
    part = np.full(len(d.row_time), -1, dtype=np.int64)
    part[timed] = (N_PARTS * rank) // len(timed)
    return part


def add_order(qs: Quantities, f: Frame, part: np.ndarray) -> None:
    """Per third: each condition's block rate and each contrast's paired effect, from the calls
    of that third; then their slopes."""
    d = f.design
    for t in range(N_PARTS):
        s, n = base_counts_where(d, f.rule, part == t)
        p, has = base_rates(s, n), n > 0
        for ci, c in enumerate(d.conditions):
            qs.add(("order_rate", c, t), p[:, ci], has[:, ci])
            if c != f.baseline:
                qs.add(("order", c, t), p[:, ci] - p[:, f.b], has[:, ci] & has[:, f.b])
    for c in d.conditions:
        qs.add_combination(("order_rate_slope", c), {("order_rate", c, t): w for t, w in SLOPE.items()})
        if c != f.baseline:
            qs.add_combination(("order_slope", c), {("order", c, t): w for t, w in SLOPE.items()})


def _drift(q: Mapping[str, Any]) -> Drift:
    return {"slope": q["estimate"], "ci": q["ci"], "p": q["p"]}


def order(f: Frame, est: Estimates, part: np.ndarray) -> Order:
    d = f.design
    thirds = range(N_PARTS)
    return {
        "clock": CLOCK,
        "n_calls": int((part >= 0).sum()),
        "thirds": part_summary(d, part),
        "by_dispatch_third": {c: [est[("order", c, t)]["estimate"] for t in thirds] for c in f.contrasts},
        "by_dispatch_third_ci": {c: [est[("order", c, t)]["ci"] for t in thirds] for c in f.contrasts},
        "drift": {c: _drift(est[("order_slope", c)]) for c in f.contrasts},
        "block_rate_by_dispatch_third": {c: [est[("order_rate", c, t)]["estimate"] for t in thirds]
                                         for c in d.conditions},
        "block_rate_drift": {c: _drift(est[("order_rate_slope", c)]) for c in d.conditions},
        "retried_by_third": [int(((part == t) & (d.row_retry > 0)).sum()) for t in thirds],
    }


def retried(d: Design) -> Retried:
    """The calls counted at a retry's decision (retry round > 0): how many, and per round how
    many with the first and last start time of their final attempts."""
    rounds: list[RetryRound] = []
    for r in np.unique(d.row_retry[d.row_retry > 0]):
        sel = d.row_retry == r
        times = d.row_time[sel & ~np.isnan(d.row_time)]
        rounds.append({"round": int(r), "n_calls": int(sel.sum()),
                       "first_started": _iso(float(times.min())) if len(times) else None,
                       "last_started": _iso(float(times.max())) if len(times) else None})
    return {"n_calls": int((d.row_retry > 0).sum()), "rounds": rounds}


def part_summary(d: Design, part: np.ndarray) -> list[Third]:
    out: list[Third] = []
    for t in range(N_PARTS):
        times = d.row_time[part == t]
        out.append({"n_calls": int(len(times)),
                    "first_started": _iso(float(times.min())) if len(times) else None,
                    "last_started": _iso(float(times.max())) if len(times) else None})
    return out


def _iso(t: float) -> str | None:
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):  # a table's odd but valid timestamp (year 1 with an offset)
        return None
