"""Adaptive concurrency on rate limits (docs/design.md §7) and the simulated provider's caps.

The controller's decision rule is fed synthetic round trips on a made-up clock (429s at random,
above a concurrency, or both). The end-to-end tests run real launches against a real sim-server
with `--rps-cap`, `--max-in-flight` or random `--faults 429=P`, and compare the adaptive
dispatcher with `--fixed-concurrency` where that shows something.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import anyio
import httpx
import pytest

from guardeval.backends.sim.server import TokenBucket
from guardeval.run.dispatch.adaptive import RateController, Tally, WireGate, best_log_likelihood, binomial_tail

from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _stats(sim) -> dict:
    root = sim.base_url.split("/api/")[0].split("/v1")[0]
    return httpx.get(f"{root}/stats").json()


# -- the pieces --------------------------------------------------------------------------------

def test_token_bucket_admits_burst_then_says_when_a_token_frees():
    now = [100.0]
    bucket = TokenBucket(rate=10.0, burst=2.0, clock=lambda: now[0])
    assert bucket.take() == 0.0 and bucket.take() == 0.0
    assert bucket.take() == pytest.approx(0.1)          # empty: one token per 0.1 s
    now[0] += 0.05
    assert bucket.take() == pytest.approx(0.05)         # half a token refilled; refusals cost nothing
    now[0] += 0.05
    assert bucket.take() == 0.0
    now[0] += 10.0                                      # refill stops at the burst size
    assert [bucket.take() for _ in range(3)][:2] == [0.0, 0.0]


async def test_wire_gate_is_fifo_follows_a_changed_limit_and_returns_slots_of_the_cancelled():
    gate = WireGate(2)
    await gate.acquire()
    await gate.acquire()
    order: list[str] = []

    async def waiter(name: str) -> None:
        await gate.acquire()
        order.append(name)

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(waiter, name)
            await anyio.sleep(0.01)
        assert gate.saturated and order == []
        gate.limit = 1.0          # cut: one release no longer frees a slot
        gate.release()
        await anyio.sleep(0.01)
        assert order == [] and gate.active == 1
        gate.limit = 4.0          # grown: wake() lets the queue in, first come first served
        gate.wake()
        await anyio.sleep(0.01)
        assert order == ["a", "b", "c"] and gate.active == 4

    gate = WireGate(1)
    await gate.acquire()
    with anyio.move_on_after(0.05):
        await gate.acquire()      # cancelled while queued: leaves no trace
    gate.release()
    assert gate.active == 0 and not gate.saturated


def test_binomial_tail_matches_scipy():
    from scipy.stats import binom

    for k, n, p in [(0, 10, 0.3), (3, 10, 0.3), (10, 10, 0.5), (29, 128, 0.15), (2, 400, 0.001),
                    (60, 400, 0.1), (1, 50, 0.0), (5, 5, 1.0), (6, 5, 0.5)]:
        assert binomial_tail(k, n, p) == pytest.approx(binom.sf(k - 1, n, p), rel=1e-9, abs=1e-300)


def test_best_log_likelihood_finds_the_maximum():
    from scipy.stats import binom

    ref, test = Tally(n=60, limited=9), Tally(n=40, limited=2)
    # share 1: one fraction for both, the pooled 11/100.
    pooled = binom.logpmf(9, 60, 0.11) + binom.logpmf(2, 40, 0.11) - _log_choose(60, 9) - _log_choose(40, 2)
    assert best_log_likelihood(ref, test, share=1.0, floor=0.0) == pytest.approx(pooled, abs=1e-6)
    # A grid search over the load reading (the test's fraction a third of the reference's).
    grid = max(9 * math.log(p) + 51 * math.log(1 - p) + 2 * math.log(p / 3) + 38 * math.log(1 - p / 3)
               for p in (i / 10000 for i in range(1, 10000)))
    assert best_log_likelihood(ref, test, share=1 / 3, floor=0.0) == pytest.approx(grid, abs=1e-4)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _drive(refuse: Callable[[int, random.Random], bool], *, max_limit: int = 64, rounds: int = 300,
           latency: float = 0.1, seed: int = 0, reach: int | None = None) -> tuple[RateController, list[int]]:
    """Round trips at the controller's own limit on a made-up clock: each round sends `capacity`
    attempts (the gate full), answered one latency later in the order sent; attempt i of a round
    is refused with a 429 when `refuse(i, rng)`. A client that can only keep `reach` attempts in
    flight (a busy machine) sends at most that many a round, and says so (`in_flight`); the gate
    is then not full. Returns the controller and each round's capacity."""
    control, rng, t, caps = RateController(max_limit), random.Random(seed), 0.0, []
    for _ in range(rounds):
        cap = control.capacity
        caps.append(cap)
        sent_now = cap if reach is None else min(cap, reach)
        for i in range(sent_now):
            sent = t + i * 1e-4
            level = {} if reach is None else {"in_flight": i + 1}
            if refuse(i, rng):
                control.rate_limited(sent, sent + latency, **level)
            else:
                control.answered(sent, sent + latency, saturated=sent_now == cap, **level)
        t += latency + cap * 1e-4
    return control, caps


@pytest.mark.parametrize("p", [0.05, 0.15, 0.3])
def test_controller_holds_its_limit_under_random_429s(p):
    """429s at a fixed rate whatever the load: one test cut to half, then back to the full limit
    with the rate learned; no collapse."""
    for seed in range(3):
        control, caps = _drive(lambda i, rng: rng.random() < p, seed=seed)
        assert min(caps) >= 16, (seed, caps)
        assert statistics.median(caps[100:]) >= 0.8 * 64, (seed, caps)
        assert control.restores >= 1 and control.background is not None
        assert abs(control.background - p) < 0.1, (seed, control.background)


@pytest.mark.parametrize("limit", [2, 10, 20, 40])
def test_controller_cuts_to_a_concurrency_cap(limit):
    """429s for every request above `limit` in flight: the limit settles there, nothing is
    taken for background."""
    control, caps = _drive(lambda i, rng: i >= limit)
    tail = caps[100:]
    assert 0.75 * limit <= statistics.median(tail) <= 1.1 * limit, caps
    assert max(tail) <= 1.25 * limit + 1, caps
    assert control.restores == 0 and control.background is None


@pytest.mark.parametrize("reach", [7, 8, 10])
def test_a_client_that_cannot_fill_its_limit_does_not_take_a_cap_for_background(reach):
    """Issue 47 §11 (the flaky end-to-end test below, on a busy machine): a cap of 6 in flight, a
    limit of 16, and a client that only ever has `reach` attempts in flight. Halving the limit to
    8 left the attempts in flight, and their 429s, where they were, so the cut was undone and the
    cap learned as a background rate. The test level is what was in flight, so the cuts go below
    the cap, the 429s stop, and they stand."""
    control, caps = _drive(lambda i, rng: i >= 6, max_limit=16, reach=reach)
    assert control.restores == 0 and control.background is None, (control.background, caps[:20])
    assert 3 <= min(caps) and statistics.median(caps[100:]) <= 6, caps


def test_controller_finds_a_cap_through_background_429s():
    """Both at once (a cap of 20 in flight and 10% at random): near the cap, not collapsed."""
    for seed in range(3):
        control, caps = _drive(lambda i, rng: i >= 20 or rng.random() < 0.1, seed=seed)
        assert 12 <= statistics.median(caps[100:]) <= 26, (seed, caps)
        assert min(caps[100:]) >= 5, (seed, caps)


def test_sim_rate_cap_refuses_over_cap_requests_with_retry_after(sim_factory):
    # One token every 20 s: the bucket cannot refill between six requests however slowly this
    # machine sends them (at 5 tokens/s, a loaded machine used to see a fifth request admitted).
    sim = sim_factory("--rps-cap", "0.05", "--rps-burst", "2")
    url = f"{sim.base_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    replies = [httpx.post(url, json=body, headers={"X-Call-Id": f"c{i}"}) for i in range(6)]
    codes = [r.status_code for r in replies]
    assert codes == [200, 200, 429, 429, 429, 429]
    limited = replies[2]
    wait = float(limited.headers["Retry-After"])
    assert 0 < wait <= 20 and abs(int(limited.headers["retry-after-ms"]) / 1000 - wait) < 0.002
    assert limited.json()["error"]["code"] == 429
    stats = _stats(sim)
    assert stats["requests"] == 6 and stats["rate_limited"] == codes.count(429)
    assert stats["ok"] == codes.count(200)


def test_sim_in_flight_cap_refuses_requests_beyond_it(sim_factory):
    sim = sim_factory("--max-in-flight", "2", "--latency-ms", "300", "--retry-after", "0.25")
    url = f"{sim.base_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def five() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:
            replies: list[httpx.Response] = []

            async def one(i: int) -> None:
                replies.append(await client.post(url, json=body, headers={"X-Call-Id": f"c{i}"}))

            async with anyio.create_task_group() as tg:
                for i in range(5):
                    tg.start_soon(one, i)
                    await anyio.sleep(0.02)   # all five arrive while the first two are still handled
            return replies

    codes = sorted(r.status_code for r in anyio.run(five))
    assert codes == [200, 200, 429, 429, 429]
    stats = _stats(sim)
    assert stats["rate_limited"] == 3 and stats["ok"] == 2
    limited = httpx.post(url, json=body)  # nothing in flight now: served
    assert limited.status_code == 200


@pytest.mark.parametrize("args", [("--rps-cap", "0"), ("--rps-burst", "3"), ("--rps-cap", "5", "--rps-burst", "0.5"),
                                  ("--rps-cap", "fast")])
def test_sim_rate_cap_bad_values_exit_2(args):
    r = run_cli("sim-server", *args)
    assert r.code == 2 and "Traceback" not in r.err and "--rps-" in r.err


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "many"])
def test_sim_in_flight_cap_bad_values_exit_2(value):
    r = run_cli("sim-server", "--max-in-flight", value)
    assert r.code == 2 and "Traceback" not in r.err and "--max-in-flight" in r.err


# -- end to end --------------------------------------------------------------------------------

def _launch(tmp_path: Path, cohort: Path, sim, name: str, *extra: str, progress: bool = False,
            **guard_fields: object) -> Path:
    guard = write_guard(tmp_path / f"{name}.toml", sim.base_url, **{"max_attempts": 20, **guard_fields})
    run = tmp_path / name
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--concurrency", "16", *(() if progress else ("--no-progress",)), *extra)
    assert r.code == 0, r.err
    (tmp_path / f"{name}.stderr").write_text(r.err)
    return run


@pytest.mark.slow
def test_adaptive_limit_finds_the_cap_with_fewer_429s_than_fixed(tmp_path, small_cohort, sim_factory):
    # 40 requests/s at 100 ms latency: 4 in flight suffice, 16 are allowed.
    counts = {}
    for name, extra in (("adaptive", ()), ("fixed", ("--fixed-concurrency",))):
        sim = sim_factory("--rps-cap", "40", "--rps-burst", "4", "--latency-ms", "100")
        run = _launch(tmp_path, small_cohort, sim, name, *extra)
        decisions = _jsonl(run / "decisions.jsonl")
        assert len(decisions) == 80
        if name == "adaptive":  # (with a fixed 16, a call can run out of its 20 attempts)
            assert all(d["status"] == "ok" for d in decisions)
        raw = _jsonl(run / "raw.jsonl")
        limited = sum(1 for rec in raw if rec["status"] == 429)
        stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
        # The run's own count, the raw log and the server agree.
        assert stop["rate_limited"] == limited == _stats(sim)["rate_limited"]
        assert stop["adaptive"] is (name == "adaptive")
        counts[name] = (limited, stop)
    adaptive, fixed = counts["adaptive"], counts["fixed"]
    assert adaptive[1]["limit_cuts"] >= 1 and adaptive[1]["min_concurrency"] < 16
    assert fixed[1]["limit_cuts"] == 0 and fixed[1]["min_concurrency"] == 16
    assert adaptive[0] < fixed[0], counts


@pytest.mark.slow
def test_random_429s_do_not_collapse_the_limit(tmp_path, small_cohort, sim_factory):
    """15% of requests refused at random, whatever the load: the one test cut (to half) is
    undone, the background rate is learned, and every call is answered. Read from the run's own
    `stop` event, so it holds however fast the machine is."""
    # 200 ms a round trip, so that even a busy machine's client has its 32 in flight: the test
    # cut goes to half of what was in flight where the cuts began.
    sim = sim_factory("--faults", "429=0.15", "--latency-ms", "200", "--seed", "3")
    run = _launch(tmp_path, small_cohort, sim, "random", "--reps", "3", "--concurrency", "32")
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 240 and all(d["status"] == "ok" for d in decisions)
    stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
    assert stop["rate_limited"] == _stats(sim)["faults"]["429"] > 0
    assert stop["min_concurrency"] >= 8, stop          # (the old controller fell to 1)
    assert stop["limit_restores"] >= 1 and 0.05 <= stop["background_429"] <= 0.3, stop


@pytest.mark.slow
def test_limit_settles_near_a_concurrency_cap(tmp_path, small_cohort, sim_factory):
    """A provider that refuses anything beyond 6 requests at once: the limit comes down to
    about 6 and stays load (no background learned); far fewer 429s than a fixed 16.

    Issue 47 §11: at 30 ms a round trip, a busy machine's client spent longer on each request
    than the provider did, so it never had 16 (or 8) at the provider at once whatever its limit:
    halving the limit left the 429s where they were and the cap was learned as background. The
    controller now tests its cuts against what was in flight (the unit test above); the provider
    here takes 200 ms, long beside a busy client's own time per request, so that the cap is
    what the client meets, on any machine."""
    counts = {}
    for name, extra in (("adaptive", ()), ("fixed", ("--fixed-concurrency",))):
        sim = sim_factory("--max-in-flight", "6", "--latency-ms", "200", "--retry-after", "0.02")
        run = _launch(tmp_path, small_cohort, sim, name, "--reps", "2", *extra, progress=True)
        stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
        assert stop["rate_limited"] == _stats(sim)["rate_limited"]
        counts[name] = stop
    adaptive = counts["adaptive"]
    assert 3 <= adaptive["min_concurrency"] <= 6 and adaptive["background_429"] is None, adaptive
    assert adaptive["rate_limited"] < counts["fixed"]["rate_limited"], counts
    # The progress line (plain, stderr is not a terminal) shows the wire limit, only when it adapts.
    last = [line for line in (tmp_path / "adaptive.stderr").read_text().splitlines() if line.startswith("progress:")][-1]
    limit = re.search(r" c=(\d+)/16 ", last)
    assert limit and 1 <= int(limit.group(1)) <= 16, last
    fixed = [line for line in (tmp_path / "fixed.stderr").read_text().splitlines() if line.startswith("progress:")]
    assert fixed and "c=" not in fixed[-1]


@pytest.mark.slow
def test_retry_after_pauses_every_new_attempt(tmp_path, small_cohort, sim_factory):
    """After a load-driven 429 saying `Retry-After: 0.4` (a concurrency cap), no attempt starts
    until 0.4 s have passed; with --fixed-concurrency other calls go on (so the check can fail)."""
    violations = {}
    for name, extra in (("adaptive", ()), ("fixed", ("--fixed-concurrency",))):
        sim = sim_factory("--max-in-flight", "8", "--retry-after", "0.4", "--latency-ms", "20")
        # (the test guards cap every wait at retry_max_s, 0.05 s by default)
        run = _launch(tmp_path, small_cohort, sim, name, *extra, retry_max_s=2.0)
        raw = _jsonl(run / "raw.jsonl")
        refusals = [_t(rec["finished"]) for rec in raw if rec["status"] == 429]
        starts = [_t(rec["started"]) for rec in raw]
        assert refusals
        # 30 ms of slack: `finished` is stamped after the answer was handled.
        violations[name] = sum(1 for f in refusals for s in starts if f + 0.03 < s < f + 0.4 - 0.03)
    assert violations["adaptive"] == 0 and violations["fixed"] > 0, violations
