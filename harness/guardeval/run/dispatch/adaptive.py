"""Adaptive concurrency: the wire gate and the controller that moves its limit (docs/design.md §7).

A 429 means one of two things, which call for opposite answers. A *load-driven* 429 (a rate
cap, an overloaded provider) grows more frequent as more requests are in flight, and cutting
the limit is the fix. A *background* 429 (a provider refusing a share of requests whatever the
load) is as frequent at any limit: cutting only throws throughput away, and cutting on every
one of them collapses the limit to 1.

The controller cuts as it always did (a 429 to an attempt sent after the last cut cuts the limit
to what the provider was serving at once, by Little's law, and by at least 10%; it grows back by
about one request per round trip while it binds) and watches what its cuts do. Cuts in a row
that bring the limit to half of where they began are a test. Where they began is the most
attempts that were in flight at once where the cuts began, not the limit: a client that cannot
fill its limit (a slow or busy machine, few calls left) never sent at that level, and halving
an unused limit leaves the attempts in flight, and their 429s, where they were. Under load, half the level is
below the cap (unless more than half of the attempts were refused where the cuts began: then
they simply stand), so the 429 fraction must fall to a third of what it was or less; background
keeps it where it was.
A likelihood-ratio test on the attempts sent at each level decides: if the fraction held, the
limit goes back to where the cuts began and the 429s join the learned *background rate*; if it
fell, the cuts stand. Cuts that stop short of half found a ceiling and stand. With a background
rate known, a 429 only cuts (and pauses every new attempt for its `Retry-After`) when the recent
window holds more 429s than that rate explains; a 429 within it only delays its own call.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import anyio

ANSWER_HORIZON_S = 2.0      # answers that count as "recent" for the served level
MIN_ANSWERS = 10            # answers needed before the served level is trusted
WINDOW_MIN = 40             # recent outcomes judged against the background rate: at least this many,
WINDOW_ROUND_TRIPS = 2      # or this many round trips at the current limit
ALPHA_CUT = 0.01            # a window this unlikely under the background rate is load
ALPHA_SAME = 0.05           # a reference no less likely than this under the background rate is background
BEFORE_MIN = 10             # outcomes at a level needed to judge its 429 fraction
BACKGROUND_MAX = 0.5        # a 429 fraction above this is load, whatever the level
TEST_DEPTH = 0.55           # cuts in a row are tested once they reach about half the level they began at
LOAD_SHARE = 1 / 3          # at half the level, load leaves at most this share of the 429 fraction
DECIDE_LLR = math.log(20)   # evidence (log likelihood ratio) that settles a test either way
TEST_ROUND_TRIPS = 20       # a test with no verdict by then leaves the cuts standing
MIN_EXPECTED_429 = 3        # a test is only run if background would show this many 429s in that time


def _mostly_refused(tally: Tally) -> bool:
    """More than half of the attempts refused, beyond doubt."""
    return tally.n >= BEFORE_MIN and binomial_tail(tally.limited, tally.n, BACKGROUND_MAX) < ALPHA_CUT


class WireGate:
    """A semaphore whose capacity can change while calls wait (the adaptive limit).

    Waiters queue FIFO and each release wakes at most the waiters that now fit, so a gate far
    below the calls waiting on it costs O(1) per release, not a wake-up of everyone.
    """

    def __init__(self, capacity: float) -> None:
        self.limit = float(capacity)
        self.active = 0
        self._queue: deque[anyio.Event] = deque()

    @property
    def capacity(self) -> int:
        return capacity_of(self.limit)

    @property
    def saturated(self) -> bool:
        return bool(self._queue) or self.active >= self.capacity

    async def acquire(self) -> None:
        if not self._queue and self.active < self.capacity:
            self.active += 1
            return
        ev = anyio.Event()
        self._queue.append(ev)
        try:
            await ev.wait()
        except BaseException:
            if ev.is_set():
                self.release()      # handed a slot while being cancelled: give it back
            else:
                self._queue.remove(ev)
            raise

    def release(self) -> None:
        self.active -= 1
        self.wake()

    def wake(self) -> None:
        # The releaser counts the slot for the woken waiter, so nobody can take it in between.
        while self._queue and self.active < self.capacity:
            self.active += 1
            self._queue.popleft().set()


def capacity_of(limit: float) -> int:
    # Rounded, not truncated: at a limit of 1.9 (a cut just under 2 served) truncation would
    # halve the rate.
    return max(1, int(limit + 0.5))


class AnswerMeter:
    """Recent answers (time, latency): what the provider is delivering right now."""

    def __init__(self, horizon_s: float = ANSWER_HORIZON_S) -> None:
        self.horizon = horizon_s
        self._seen: deque[tuple[float, float]] = deque()

    def add(self, now: float, latency: float) -> None:
        self._seen.append((now, latency))
        self._expire(now)

    def in_flight_served(self, now: float) -> float | None:
        """Requests the provider was serving at once (answers/s x mean latency), or None while
        too few answers are known to say."""
        self._expire(now)
        if len(self._seen) < MIN_ANSWERS:
            return None
        mean_latency = self.mean_latency()
        span = now - self._seen[0][0]
        if span < 2 * mean_latency:
            return None
        return len(self._seen) / span * mean_latency

    def mean_latency(self) -> float:
        return sum(lat for _, lat in self._seen) / len(self._seen) if self._seen else 0.0

    def _expire(self, now: float) -> None:
        while self._seen and now - self._seen[0][0] > self.horizon:
            self._seen.popleft()


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        term = math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
        total += term
        if i > n * p and term < total * 1e-12:
            break   # past the mode the terms only shrink
    return min(1.0, total)


def best_log_likelihood(ref: Tally, test: Tally, *, share: float, floor: float) -> float:
    """The highest log likelihood of both tallies when the reference has 429 fraction p (any)
    and the test floor + share x (p - floor). Concave in p: a golden-section search finds it."""
    def log_likelihood(p: float) -> float:
        q = min(1 - 1e-9, max(1e-9, floor + share * (p - floor)))
        return (ref.limited * math.log(p) + (ref.n - ref.limited) * math.log1p(-p)
                + test.limited * math.log(q) + (test.n - test.limited) * math.log1p(-q))

    lo, hi = 1e-6, 1 - 1e-6
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = log_likelihood(a), log_likelihood(b)
    for _ in range(48):        # the bracket shrinks to about 1e-10
        if fa < fb:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = log_likelihood(b)
        else:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = log_likelihood(a)
    return max(fa, fb)


@dataclass
class Tally:
    """Outcomes counted: attempts answered (any way but 429) and refused with 429."""

    n: int = 0
    limited: int = 0

    def add(self, limited: bool) -> None:
        self.n += 1
        self.limited += limited

    def rate(self) -> float:
        # Half a 429 of prior: an empty or 429-free tally is not a rate of exactly 0.
        return (self.limited + 0.5) / (self.n + 1)


@dataclass
class _Chain:
    """Cuts in a row, from the level they began at, and the evidence on what they removed."""

    above: float            # the limit before the first cut
    since: float            # its epoch began then: attempts sent from then until `at` are `reference`
    at: float               # time of the first cut
    reference: Tally        # outcomes of attempts sent at `above`
    peak: int = 0           # the most attempts in flight at once among `reference`'s
    test_since: float | None = None   # when the limit reached half of the level and the test began
    test: Tally = field(default_factory=Tally)   # outcomes of attempts sent since

    @property
    def level(self) -> float:
        """The level the cuts are tested against: what was in flight where they began."""
        return min(self.above, float(self.peak)) if self.peak else self.above


class RateController:
    """Decides the wire limit from answers and 429s; pure logic on a caller-supplied clock.

    The dispatcher reports every answer (`answered`) and every 429 (`rate_limited`) with the
    monotonic time its attempt was sent, and copies `limit` to the wire gate afterwards.
    """

    def __init__(self, max_limit: int) -> None:
        self.max_limit = float(max(1, max_limit))
        self.limit = self.max_limit
        self.meter = AnswerMeter()
        self.cuts = 0               # cuts made
        self.restores = 0           # cuts undone: their 429s proved to be background
        self.min_capacity = capacity_of(self.limit)
        self._background = Tally()  # outcomes that proved to be background (its rate: `background`)
        self._epoch = -math.inf     # time of the last cut or restore: attempts sent before are another level
        self._window: deque[tuple[bool, int]] = deque()   # recent outcomes of this epoch (429?, in flight at send)
        self._window_429 = 0
        self._chain: _Chain | None = None
        self._ceiling: float | None = None    # requests served at once when the last cut measured it
        self._hold_until = 0.0                # no probing above the ceiling before this time
        self._latency = 0.0                   # moving mean round trip of every outcome, 429s included

    @property
    def capacity(self) -> int:
        return capacity_of(self.limit)

    @property
    def background(self) -> float | None:
        """The learned background 429 fraction, or None while none has been seen."""
        return self._background.limited / self._background.n if self._background.n else None

    # -- events ------------------------------------------------------------------------------
    def answered(self, sent: float, now: float, *, saturated: bool, in_flight: int | None = None) -> None:
        """An answer that was not a 429; `saturated`: the gate was full (the limit binds);
        `in_flight`: attempts in flight when it was sent, itself included (default: the limit)."""
        self.meter.add(now, now - sent)
        self._count(sent, now, limited=False, in_flight=in_flight)
        chain = self._chain
        if not saturated or self.limit >= self.max_limit or (chain is not None and chain.test_since is not None):
            return   # an unused limit is no evidence of headroom; a level under test holds still
        if self._ceiling is not None and self.limit >= self._ceiling and now < self._hold_until:
            return   # back at the measured ceiling: wait before probing past it again
        # Additive increase: about +1 request in flight per round trip of `limit` answers.
        self.limit = min(self.max_limit, self.limit + 1.0 / self.limit)
        if chain is not None and self.limit >= chain.above:
            self._chain = None      # grown back to where the cuts began: they are over

    def rate_limited(self, sent: float, now: float, *, in_flight: int | None = None) -> bool:
        """A 429. True when it is taken for load (its Retry-After should pause every attempt)."""
        self._count(sent, now, limited=True, in_flight=in_flight)
        if self._explained_by_background():
            return False
        # Sent before the last cut (or restore): part of what that change already answered. A
        # level under test holds still.
        chain = self._chain
        if sent >= self._epoch and (chain is None or chain.test_since is None):
            self._cut(now)
        return True

    # -- internals ---------------------------------------------------------------------------
    def _count(self, sent: float, now: float, *, limited: bool, in_flight: int | None) -> None:
        """File an outcome under the level its attempt was sent at, and review the cuts."""
        self._latency += ((now - sent) - self._latency) / 8 if self._latency else now - sent
        level = self.capacity if in_flight is None else in_flight
        chain = self._chain
        if chain is not None and chain.since <= sent < chain.at:
            chain.reference.add(limited)    # sent before the first cut, answered after it
            chain.peak = max(chain.peak, level)
        if sent >= self._epoch:
            self._window.append((limited, level))
            self._window_429 += limited
            while len(self._window) > max(WINDOW_MIN, WINDOW_ROUND_TRIPS * self.capacity):
                self._window_429 -= self._window.popleft()[0]
            if chain is not None and chain.test_since is not None:
                chain.test.add(limited)
        if chain is not None:
            self._review(chain, now)

    def _explained_by_background(self) -> bool:
        bg = self._background
        if not bg.limited:
            return False
        # Judged against the rate's upper confidence bound: an underestimate from a short test
        # must not turn background into false alarms.
        p = bg.limited / bg.n
        upper = min(BACKGROUND_MAX, p + 2 * math.sqrt(p * (1 - p) / bg.n))
        return binomial_tail(self._window_429, len(self._window), upper) >= ALPHA_CUT

    def _cut(self, now: float) -> None:
        served = self.meter.in_flight_served(now)
        # Cut to what the provider was serving (a little under, so the next probe starts below
        # the cap), and never by less than 10%; with no measurement yet, halve.
        above = self.limit
        self.limit = max(1.0, above / 2 if served is None else min(above * 0.9, served * 0.95))
        # Near a measured ceiling, probing again every round trip would cost a 429 each time:
        # hold there for several round trips (at least a second) first.
        self._ceiling = served
        self._hold_until = now + max(1.0, 8 * self.meter.mean_latency())
        if self.limit >= above:
            return   # already at 1
        self.cuts += 1
        self.min_capacity = min(self.min_capacity, self.capacity)
        if self._chain is None:
            # What the level's 429 fraction was: the window up to the 429 that cut (its
            # likelihood is that of the sequence, whichever 429 stopped it), then the attempts
            # still in flight. Once a background is known, the cut was chosen by a test on the
            # whole window, which would flatter it: only attempts still in flight count.
            whole = not self._background.n   # with a background known, only attempts still in flight
            reference = Tally(n=len(self._window), limited=self._window_429) if whole else Tally()
            peak = max((level for _, level in self._window), default=0) if whole else 0
            self._chain = _Chain(above=above, since=self._epoch, at=now, reference=reference, peak=peak)
        self._new_epoch(now)
        self._begin_test(self._chain, now)

    def _begin_test(self, chain: _Chain, now: float) -> None:
        """The cuts are tested once the limit is half the level they began at (or less)."""
        if chain.test_since is None and self.limit <= chain.level * TEST_DEPTH:
            chain.test_since = now

    def _review(self, chain: _Chain, now: float) -> None:
        """End the chain of cuts, keeping or undoing them, once the evidence allows."""
        ref, test = chain.reference, chain.test
        if (ref.n >= BEFORE_MIN and ref.rate() > BACKGROUND_MAX) or _mostly_refused(test):
            # Over half refused where the cuts began (so half the level may be over a cap
            # too), or beyond doubt at half the level: load, whatever the level.
            self._chain = None
            return
        # (Before any answer, 429s alone say how long a round trip takes.)
        round_trip = max(self.meter.mean_latency() or self._latency, 1e-3)
        if ref.n < BEFORE_MIN:
            if (now - chain.at) / round_trip >= 2:
                self._chain = None  # all answered, and too few to judge: the cuts stand
            return                  # attempts sent before the first cut are still being answered
        background = self.background
        if background is not None and binomial_tail(ref.limited, ref.n, background) >= ALPHA_SAME:
            self._restore(chain, now)   # no more 429s than background where the cuts began: a false alarm
            return
        self._begin_test(chain, now)   # the level may prove lower as the reference's last answers come in
        if chain.test_since is None:
            return
        p_ref = ref.rate()
        if p_ref * self.limit * TEST_ROUND_TRIPS < MIN_EXPECTED_429:
            self._chain = None      # 429s too rare to tell in time (and for cuts to add up to much): they stand
            return
        # Two readings, each with the reference level's fraction free: background (the same
        # fraction at half the level) and load (at half the level, under the cap, the 429s
        # above the background shrink to LOAD_SHARE). Evidence = their best log likelihoods' gap.
        floor = background or 0.0
        evidence = (best_log_likelihood(ref, test, share=1.0, floor=floor)
                    - best_log_likelihood(ref, test, share=LOAD_SHARE, floor=floor))
        # Past the deadline, the likelier reading wins.
        late = (now - chain.test_since) / round_trip > TEST_ROUND_TRIPS
        background_like = ref.limited + test.limited <= BACKGROUND_MAX * (ref.n + test.n)
        if test.n >= BEFORE_MIN and background_like and (evidence >= DECIDE_LLR or (late and evidence > 0)):
            self._restore(chain, now)   # the same fraction at half the level: background
        elif evidence <= -DECIDE_LLR or late:
            self._chain = None          # the cuts removed the 429s: load; they stand

    def _restore(self, chain: _Chain, now: float) -> None:
        self._background.n += chain.reference.n + chain.test.n
        self._background.limited += chain.reference.limited + chain.test.limited
        self.limit = max(self.limit, chain.above)
        self._ceiling = None
        self._chain = None
        self.restores += 1
        self._new_epoch(now)

    def _new_epoch(self, now: float) -> None:
        self._epoch = now
        self._window.clear()
        self._window_429 = 0
