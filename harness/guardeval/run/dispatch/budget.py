"""Spend and the `--max-cost` gate (docs/design.md §7).

Spend is what the provider reported, as `usage.cost` (plus `upstream_inference_cost` for a BYOK
call: `guardeval.run.folder.spend.reported_cost`), summed over attempts; a cost that is negative, not finite or not a
number is unknown, never a refund, so spend never decreases.
Some providers price nothing (a local server, a free model: cost 0 or absent). Then:

* with prices in the guard config, each answer the provider did not price is charged at them
  (its token counts, or the config's upper estimate per call when it reports none), and the
  budget holds on that estimate;
* without, the budget cannot be enforced: after the first answer this is said once, and calls
  are admitted at full concurrency (before it, one call goes at a time, so that a priced
  provider cannot overrun the budget while nothing is known).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from guardeval.run.folder.spend import Prices, Unpriced, reported_cost


def projected_cost(prompt_tokens: int, output_tokens: int, price_in_per_mtok: float,
                   price_out_per_mtok: float) -> float:
    """USD for that many tokens at the config's prices: what `launch --dry-run` projects (with
    every call's max_tokens as its output, an upper estimate) and `guardeval plan` quotes."""
    return prompt_tokens / 1e6 * price_in_per_mtok + output_tokens / 1e6 * price_out_per_mtok


class Gate(Enum):
    ADMIT = "admit"
    WAIT = "wait"      # nothing priced yet and a call in flight: one at a time
    STOP = "stop"      # the budget is spent, or one more call could pass it


class Budget:
    def __init__(self, max_cost: float | None, prices: Prices | None, *, spent: float = 0.0,
                 unpriced: Unpriced | None = None) -> None:
        # Estimates only serve the budget: without --max-cost, spend is what the provider said.
        self.max_cost, self.prices = max_cost, prices if max_cost is not None else None
        self.spent = spent                                    # reported by the provider
        before = unpriced or Unpriced()
        self.estimated = before.priced(self.prices) if self.prices else 0.0   # charged at the config's prices
        self._answers = before.n            # answers seen (any pricing), for "is anything known"
        self._charged_sum, self._charged_n = 0.0, 0   # answers that cost something (reported or estimated)
        self.unenforceable = False              # said once: no price from the provider or the config

    @property
    def total(self) -> float:
        return self.spent + self.estimated

    def charge(self, usage: Mapping[str, object], *, answered: bool) -> float:
        """Account one attempt; return what it added to the total."""
        reported = reported_cost(usage)
        cost = reported if reported is not None else 0.0
        self.spent += cost
        if not answered:
            return cost
        self._answers += 1
        if cost > 0:
            charged = cost
        else:
            charged = self.prices.of(usage) if self.prices else 0.0
            self.estimated += charged
        if charged > 0:
            self._charged_sum += charged
            self._charged_n += 1
        return charged

    def per_call(self) -> float | None:
        """What one more call is expected to cost: the mean charged answer, else the config's
        upper estimate; None when neither is known."""
        if self._charged_n:
            return self._charged_sum / self._charged_n
        return self.prices.per_call if self.prices and self.prices.per_call > 0 else None

    def gate(self, in_flight: int) -> Gate:
        if self.max_cost is None:
            return Gate.ADMIT
        if self.total >= self.max_cost:
            return Gate.STOP
        per_call = self.per_call()
        if per_call is None:
            if self._answers:
                self.unenforceable = True   # the provider answers without prices: admit freely
                return Gate.ADMIT
            return Gate.WAIT if in_flight else Gate.ADMIT
        return Gate.STOP if self.total + (in_flight + 1) * per_call > self.max_cost else Gate.ADMIT
