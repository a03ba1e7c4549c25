"""What an attempt cost, as its raw line tells it, and the config's prices (docs/design.md §7).

The run folder's own readers (the raw log's scans on open, the call rows) and the dispatcher's
budget (`guardeval.run.dispatch.budget`) read spend the same way, so it lives here, below both:
a cost that is negative, not finite or not a number is unknown, never a refund.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardeval.backends.base import valid_cost


@dataclass(frozen=True)
class Prices:
    """USD per million tokens from the guard config, and its upper estimate for one call."""

    in_per_mtok: float
    out_per_mtok: float
    per_call: float

    def of(self, usage: Mapping[str, object]) -> float:
        tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(tin) is int and type(tout) is int and tin >= 0 and tout >= 0:
            return tin / 1e6 * self.in_per_mtok + tout / 1e6 * self.out_per_mtok
        return self.per_call


@dataclass
class Unpriced:
    """Answers the provider did not price, as the raw log tells them (for `resume`)."""

    n: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    untokened: int = 0          # answers without both token counts

    def add(self, usage: Mapping[str, object]) -> None:
        self.n += 1
        tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(tin) is int and type(tout) is int and tin >= 0 and tout >= 0:
            self.tokens_in += tin
            self.tokens_out += tout
        else:
            self.untokened += 1

    def merge(self, other: Unpriced) -> None:
        self.n += other.n
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.untokened += other.untokened

    def priced(self, prices: Prices) -> float:
        return (self.tokens_in / 1e6 * prices.in_per_mtok + self.tokens_out / 1e6 * prices.out_per_mtok
                + self.untokened * prices.per_call)


def reported_cost(usage: Any) -> float | None:
    """What the provider says one attempt cost, from its `usage` record: `cost`, plus the
    upstream's own charge (`upstream_inference_cost`) when the call ran on the caller's own
    provider key (`is_byok`: OpenRouter's `cost` is then only its part). None when unknown
    (absent, or not a finite number >= 0)."""
    if not isinstance(usage, dict):
        return None
    parts = [usage.get("cost")]
    if usage.get("is_byok") is True:
        parts.append(usage.get("upstream_inference_cost"))
    valid = [float(c) for c in parts if valid_cost(c)]
    return sum(valid) if valid else None


def priced_cost(usage: Mapping[str, object]) -> float | None:
    """The positive cost the provider reported for an attempt, or None (absent, 0 or invalid)."""
    cost = reported_cost(usage)
    return cost if cost is not None and cost > 0 else None
