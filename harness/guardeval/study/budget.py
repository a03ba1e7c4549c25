"""One budget for a whole study (`study launch|resume|add --max-cost USD`), beside each run's own
cap (`--guard-max-cost LABEL=USD`).

Each run keeps its own `Budget` (harness/guardeval/run/dispatch/budget.py: reported spend, estimates for answers
the provider did not price, the per-call reserve for calls in flight) under its own cap; the
study's `SharedBudget` adds one more rule to every run's gate: the spend of every run of the
study, plus what every run's calls in flight may still cost, plus the next call, stays within
the study's limit. Runs that are not being dispatched count with what they have spent. All the
runs are dispatched in one event loop, so the pool is read and charged without locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guardeval.run.dispatch.budget import Budget, Gate
from guardeval.run.folder.spend import Prices, Unpriced


class SharedBudget:
    def __init__(self, max_cost: float | None, spent_elsewhere: float = 0.0) -> None:
        self.max_cost = max_cost
        self.spent_elsewhere = spent_elsewhere     # runs of the study not dispatched now
        self._members: dict[str, tuple[Budget, Callable[[], int]]] = {}

    def member(self, label: str, in_flight: Callable[[], int]) -> Callable[..., Budget]:
        """The budget class a run's dispatcher builds (`DispatchOptions.budget_type`); `in_flight`
        tells how many of that run's calls are in flight now."""
        pool = self

        class Member(Budget):
            def __init__(self, max_cost: float | None, prices: Prices | None, *, spent: float = 0.0,
                         unpriced: Unpriced | None = None) -> None:
                super().__init__(max_cost, prices, spent=spent, unpriced=unpriced)
                pool._members[label] = (self, in_flight)   # the dispatcher's last one counts

            def gate(self, in_flight: int) -> Gate:
                own = super().gate(in_flight)
                return own if own is not Gate.ADMIT else pool.gate(label, in_flight)

        return Member

    @property
    def total(self) -> float:
        return self.spent_elsewhere + sum(b.total for b, _ in self._members.values())

    def gate(self, label: str, in_flight: int) -> Gate:
        """The study's rule for one more call of run `label` with `in_flight` of its own in flight."""
        if self.max_cost is None:
            return Gate.ADMIT
        total = self.total
        if total >= self.max_cost:
            return Gate.STOP
        reserve = 0.0
        for other, (budget, flying) in self._members.items():
            per_call = budget.per_call()
            n = in_flight + 1 if other == label else flying()
            if per_call is None:
                if other == label and n > 1 and not budget.unenforceable:
                    return Gate.WAIT       # nothing known of this run's price yet: one call at a time
                continue                   # (a run whose answers carry no price cannot be held to it)
            reserve += n * per_call
        return Gate.STOP if total + reserve > self.max_cost else Gate.ADMIT

    def record(self) -> dict[str, Any]:
        return {"max_cost": self.max_cost, "spent": round(self.total, 10)}
