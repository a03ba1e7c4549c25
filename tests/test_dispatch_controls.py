"""Admission controls and failure handling: rpm, budget without prices, outages, changed
prompts, damaged files, provider defaults."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from guardeval.backends.config import load_guard_config

from conftest import run_cli, write_guard

pytestmark = pytest.mark.slow


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_rpm_spaces_attempt_starts(tmp_path, small_cohort, sim):
    # 60 per minute: one slot a second. The k-th attempt starts no earlier than its slot, k seconds
    # after the first slot. A loaded machine can start any attempt late, so two consecutive starts
    # may be close together (one late, the next on time); what the cap guarantees is measured
    # from the first start, which had nothing ahead of it to delay it.
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--rpm", "60", "--max-calls", "4", "--concurrency", "4")
    assert r.code == 0, r.err
    starts = sorted(_t(rec["started"]) for rec in _jsonl(run / "raw.jsonl"))
    assert len(starts) == 4
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(s - starts[0] >= k - 0.5 for k, s in enumerate(starts)), gaps
    assert 2.5 <= starts[-1] - starts[0] < 3 * 1.8, gaps  # the cap's rate, and not half of it


def test_max_cost_zero_admits_nothing_and_unknown_price_goes_one_at_a_time(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url, price_in_per_mtok=None, price_out_per_mtok=None)
    run = tmp_path / "run0"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-cost", "0")
    assert r.code == 1 and "--max-cost" in r.err
    assert _jsonl(run / "raw.jsonl") == []
    run = tmp_path / "run1"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-cost", "0.0005", "--concurrency", "16")
    assert r.code == 1
    raw = _jsonl(run / "raw.jsonl")
    # The first call priced the rest: one sim call costs ~$0.001, so only it was sent.
    assert len(raw) == 1


def test_unreachable_provider_leaves_calls_pending(tmp_path, small_cohort):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9", max_attempts=3)
    run = tmp_path / "run"
    # --no-preflight: the preflight would refuse an unreachable provider before the run exists
    # (tests/test_openrouter_runs.py); here the outage comes during the run.
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--concurrency", "4", "--no-preflight")
    assert r.code == 1 and "unreachable" in r.err and "resume" in r.err
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) <= 1  # at most a call that ran out before the breaker opened
    raw = _jsonl(run / "raw.jsonl")
    assert raw and all(rec["error_class"] in ("connection", "timeout") for rec in raw)
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["pending"] >= 79
    assert run_cli("verify", str(run)).code == 0


def test_damaged_line_is_a_clean_error(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    assert run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                   "--run-dir", str(run), "--max-calls", "5").code == 0
    data = bytearray((run / "decisions.jsonl").read_bytes())
    data[0] = ord("#")
    (run / "decisions.jsonl").write_bytes(bytes(data))
    for args in (("status", str(run)), ("resume", str(run)), ("estimate", str(run), "--allow-partial")):
        r = run_cli(*args)
        assert r.code in (1, 2) and "Traceback" not in r.err, (args, r.err)
        assert "decisions.jsonl" in r.err and "line 1" in r.err, (args, r.err)


def test_provider_table_defaults_pin_without_fallbacks(tmp_path):
    g = tmp_path / "g.toml"
    g.write_text('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                 '[provider]\norder = ["anthropic"]\n')
    cfg = load_guard_config(g)
    assert cfg.provider == {"allow_fallbacks": False, "require_parameters": True, "data_collection": "deny",
                            "order": ["anthropic"]}
    assert cfg.pinned_provider == "anthropic"
    g.write_text('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                 '[provider]\norder = ["a", "b"]\nallow_fallbacks = true\n')
    assert load_guard_config(g).pinned_provider is None


def test_rate_limits_halve_concurrency_and_calls_still_finish(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--faults", "429=0.4", "--retry-after", "0.01", "--latency-ms", "20")
    guard = write_guard(tmp_path / "g.toml", sim.base_url, max_attempts=12)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--concurrency", "16")
    assert r.code == 0, r.err
    stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
    assert stop["min_concurrency"] < 16
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 80 and all(d["status"] == "ok" for d in decisions)


def test_no_rate_limits_keep_full_concurrency(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    assert run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                   "--run-dir", str(run), "--concurrency", "16").code == 0
    stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
    assert stop["min_concurrency"] == 16
