"""harness/guardeval/run/dispatch/budget.py: spend from untrusted cost numbers and the --max-cost gate."""

from __future__ import annotations

import math

import pytest

from guardeval.backends.base import valid_cost
from guardeval.run.dispatch.budget import Budget, Gate
from guardeval.run.folder.spend import Prices, Unpriced

pytestmark = pytest.mark.fast

PRICES = Prices(in_per_mtok=1.0, out_per_mtok=5.0, per_call=0.005)
TOKENS = {"prompt_tokens": 1000, "completion_tokens": 20}     # $0.0011 at PRICES


# Above MAX_CALL_COST_USD ($1,000) a cost is implausible: unknown, like a negative one.
@pytest.mark.parametrize("value, ok", [(0, True), (0.5, True), (10**30, False), (1000, True), (1000.5, False),
                                       (1e308, False), (-1000, False), (-0.0, True),
                                       (math.inf, False), (math.nan, False), ("1", False), (True, False),
                                       (None, False), ([1], False)])
def test_valid_cost(value, ok):
    assert valid_cost(value) is ok


@pytest.mark.parametrize("bad", [-1000, math.inf, -math.inf, math.nan, "abc", True, None])
def test_spend_never_decreases(bad):
    b = Budget(0.05, None)
    b.charge({"cost": 0.01}, answered=True)
    before = b.total
    b.charge({"cost": bad}, answered=True)
    assert b.total == before == 0.01


def test_reported_costs_gate_on_their_mean():
    b = Budget(0.05, None)
    assert b.gate(0) is Gate.ADMIT and b.gate(1) is Gate.WAIT       # nothing known: one at a time
    b.charge({"cost": 0.01}, answered=True)
    assert b.gate(2) is Gate.ADMIT and b.gate(4) is Gate.STOP        # 0.01 + 5 x 0.01 > 0.05
    b.charge({"cost": 0.04}, answered=True)
    assert b.gate(0) is Gate.STOP


@pytest.mark.parametrize("usage", [{"cost": 0}, {}, {"cost_invalid": True}])
def test_no_price_anywhere_is_said_and_admits(usage):
    b = Budget(0.05, None)
    b.charge({**usage, **TOKENS}, answered=True)
    assert [b.gate(n) for n in (0, 15, 1000)] == [Gate.ADMIT] * 3 and b.unenforceable
    assert b.total == 0


@pytest.mark.parametrize("usage", [{"cost": 0}, {}, {"cost_invalid": True}])
def test_unpriced_answers_are_charged_at_the_config_prices(usage):
    b = Budget(0.02, PRICES)
    assert b.gate(3) is Gate.ADMIT and b.gate(4) is Gate.STOP         # before any answer: 0.005 a call
    for _ in range(10):
        b.charge({**usage, **TOKENS}, answered=True)
    assert b.spent == 0 and b.estimated == pytest.approx(0.011)
    assert b.gate(7) is Gate.ADMIT and b.gate(8) is Gate.STOP         # 0.011 + 9 x 0.0011 > 0.02
    b.charge(usage, answered=True)                                     # no token counts: the upper estimate
    assert b.estimated == pytest.approx(0.016) and not b.unenforceable


def test_failed_attempts_are_not_charged_estimates():
    b = Budget(0.02, PRICES)
    assert b.charge({}, answered=False) == 0 and b.total == 0


def test_resume_rebuilds_the_estimate():
    u = Unpriced()
    for _ in range(3):
        u.add(TOKENS)
    u.add({})
    b = Budget(0.02, PRICES, spent=0.001, unpriced=u)
    assert b.total == pytest.approx(0.001 + 3 * 0.0011 + 0.005)
    assert Budget(0.02, None, unpriced=u).gate(5) is Gate.ADMIT        # answers known, none priced


def test_without_max_cost_nothing_is_estimated():
    b = Budget(None, PRICES)
    b.charge(TOKENS, answered=True)
    assert b.total == 0 and b.gate(10**6) is Gate.ADMIT


def test_without_max_cost_a_resume_estimates_nothing_either():
    # Resumed without --max-cost, the unpriced answers already logged are not estimated either:
    # spend is then what the provider said, as in the session that logged them.
    u = Unpriced()
    u.add(TOKENS)
    u.add({})
    b = Budget(None, PRICES, spent=0.001, unpriced=u)
    assert b.total == 0.001 and b.estimated == 0
