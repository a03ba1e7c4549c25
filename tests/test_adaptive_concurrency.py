"""Adaptive concurrency on rate limits (docs/design.md §7) and the simulated provider's hard rate cap.

The end-to-end tests run real launches against a real sim-server with `--rps-cap`, and compare
the adaptive dispatcher with `--fixed-concurrency` on the same cap.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import anyio
import httpx
import pytest

from guards.sim.server import TokenBucket
from harness.run.dispatch import _WireGate

from conftest import run_cli, write_guard


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
    gate = _WireGate(2)
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

    gate = _WireGate(1)
    await gate.acquire()
    with anyio.move_on_after(0.05):
        await gate.acquire()      # cancelled while queued: leaves no trace
    gate.release()
    assert gate.active == 0 and not gate.saturated


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


@pytest.mark.parametrize("args", [("--rps-cap", "0"), ("--rps-burst", "3"), ("--rps-cap", "5", "--rps-burst", "0.5"),
                                  ("--rps-cap", "fast")])
def test_sim_rate_cap_bad_values_exit_2(args):
    r = run_cli("sim-server", *args)
    assert r.code == 2 and "Traceback" not in r.err and "--rps-" in r.err


# -- end to end --------------------------------------------------------------------------------

def _launch(tmp_path: Path, cohort: Path, sim, name: str, *extra: str, **guard_fields: object) -> Path:
    guard = write_guard(tmp_path / f"{name}.toml", sim.base_url, **{"max_attempts": 20, **guard_fields})
    run = tmp_path / name
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--concurrency", "16", "--no-progress", *extra)
    assert r.code == 0, r.err
    return run


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


def test_retry_after_pauses_every_new_attempt(tmp_path, small_cohort, sim_factory):
    """After a 429 saying `Retry-After: 0.4`, no attempt starts until 0.4 s have passed; with
    --fixed-concurrency other calls go on (so the check below can fail)."""
    violations = {}
    for name, extra in (("adaptive", ()), ("fixed", ("--fixed-concurrency",))):
        sim = sim_factory("--faults", "429=0.1", "--retry-after", "0.4", "--latency-ms", "20", "--seed", "5")
        # (the test guards cap every wait at retry_max_s, 0.05 s by default)
        run = _launch(tmp_path, small_cohort, sim, name, *extra, retry_max_s=2.0)
        raw = _jsonl(run / "raw.jsonl")
        refusals = [_t(rec["finished"]) for rec in raw if rec["status"] == 429]
        starts = [_t(rec["started"]) for rec in raw]
        assert refusals
        # 30 ms of slack: `finished` is stamped after the answer was handled.
        violations[name] = sum(1 for f in refusals for s in starts if f + 0.03 < s < f + 0.4 - 0.03)
    assert violations["adaptive"] == 0 and violations["fixed"] > 0, violations
