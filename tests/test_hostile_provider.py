"""Whole runs against the hostile provider (tests/hostile_server.py): `guardeval launch` in a
child process, its peak memory read through `resource` (wait4), its wall time bounded by a
subprocess deadline, its files and output searched for the key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from conftest import cli_env, run_cli, write_guard
from hostile_server import Hostile, leaked, serving

pytestmark = pytest.mark.slow

KEY_ENV = "GUARDEVAL_TEST_KEY"     # write_guard's api_key_env
CANARY = "sk-or-v1-" + "9e4d2c71b0a85f36d1e7c9a4b2f08e5d3c6a1b7f9e0d4c2a8b5f3e1d7c9a0b6e"
PEAK_RSS_LIMIT_MIB = 300
# Spawns the command, waits for it with wait4 and writes its peak RSS (KiB) to argv[1]. A
# process started straight from pytest would carry pytest's own high-water mark through exec;
# this small one does not.
_MEASURE = ("import os, sys\n"
            "pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)\n"
            "_, status, usage = os.wait4(pid, 0)\n"
            "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, Hostile]]:
    with serving() as served:
        yield served


def _launch(tmp: Path, cohort: Path, base_url: str, *extra: str, calls: int = 16, key: str | None = None,
            timeout: float = 180, **guard: object) -> tuple[subprocess.CompletedProcess[str], float, Path]:
    """16 calls at concurrency 16; returns (process, peak RSS in MiB, run folder)."""
    run = tmp / "run"
    cfg = write_guard(tmp / "g.toml", base_url, **{"timeout_s": 20, "max_attempts": 2, **guard})
    rss = tmp / "maxrss"
    env = cli_env({KEY_ENV: key} if key else None)
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(rss), sys.executable, "-m", "guardeval", "launch",
                           "--cohort", str(cohort), "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                           "--max-calls", str(calls), "--concurrency", "16", "--no-progress",
                           "--no-preflight", *extra],   # the hostile server is no OpenRouter
                          capture_output=True, text=True, env=env, timeout=timeout)
    return proc, int(rss.read_text()) / 1024, run


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# A big Content-Length and a deflate bomb: tests/test_hostile_transport.py.
@pytest.mark.parametrize("mode", ["endless", "gzip-bomb"])
def test_oversized_answers_keep_a_16_call_run_small(tmp_path, small_cohort, hostile, mode):
    base, _ = hostile
    proc, peak_mib, run = _launch(tmp_path, small_cohort, f"{base}/{mode}/v1")
    assert proc.returncode == 0, proc.stderr       # a pilot with recorded failures, no crash
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert peak_mib < PEAK_RSS_LIMIT_MIB, f"peak RSS {peak_mib:.0f} MiB"
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 32 and all(r["error_class"] == "response_too_large" for r in raw)
    assert all(0 < len(r["response"]) <= 2048 for r in raw)
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 16 and {d["status"] for d in decisions} == {"exhausted"}
    assert run_cli("verify", str(run)).code == 0


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# Every value against the wait itself: tests/test_hostile_transport.py; whole runs here.
@pytest.mark.parametrize("status, value, fixed", [(503, "1e9", False), (429, "far-date", True)])
def test_a_huge_retry_after_waits_retry_max_s_at_most(tmp_path, small_cohort, hostile, status, value, fixed):
    base, _ = hostile
    retry_max_s = 0.3
    # Deadline: a run that slept on the provider's word would be killed here and fail.
    # 503s: one per call (16 in a row stays under the outage breaker's 32); 429s: two per call.
    refusals = 1 if status == 503 else 2
    proc, _, run = _launch(tmp_path, small_cohort, f"{base}/retry-after/{status}/{value}/{refusals}/v1",
                           *(["--fixed-concurrency"] if fixed else []), timeout=120, max_attempts=4,
                           retry_initial_s=0.01, retry_max_s=retry_max_s)
    assert proc.returncode == 0, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 16 * (refusals + 1) and sum(r["outcome"] == "reply" for r in raw) == 16
    by_call: dict[str, list[dict]] = {}
    for r in raw:
        by_call.setdefault(r["call_id"], []).append(r)
    for attempts in by_call.values():
        attempts.sort(key=lambda r: r["attempt"])
        for a, b in zip(attempts, attempts[1:]):
            # Each wait is capped at retry_max_s; the slack is for a busy machine, and is
            # eight orders of magnitude below what the provider asked for.
            assert _t(b["started"]) - _t(a["finished"]) < retry_max_s + 5
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"ok"}


# A 503 (retried, then exhausted) echoing the key: tests/test_hostile_transport.py.
@pytest.mark.parametrize("status", [200, 401])
def test_the_key_reaches_no_file_and_no_output(tmp_path, small_cohort, hostile, status):
    base, _ = hostile
    # Each request echoes the key in the next form: plain, JSON-escaped, half-escaped,
    # percent-encoded, a 20-character run.
    proc, _, run = _launch(tmp_path, small_cohort, f"{base}/key/all/{status}/v1", calls=5, key=CANARY)
    assert proc.returncode == (1 if status == 401 else 0), proc.stderr
    assert "Traceback" not in proc.stderr
    for text in (proc.stdout, proc.stderr):
        assert leaked(text, CANARY) is None, text
    files = [p for p in run.rglob("*") if p.is_file()]
    assert {"raw.jsonl", "events.jsonl", "manifest.json"} <= {p.name for p in files}
    for p in files:
        assert leaked(p.read_text("utf-8", errors="replace"), CANARY) is None, p
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) >= (1 if status == 401 else 5)
    assert all(r.get("redacted") is True and "[redacted]" in r["response"] for r in raw), raw
    if status == 401:
        assert "[redacted]" in proc.stderr
    # The marked lines still verify: the stored text is what the hashes cover.
    assert run_cli("verify", str(run)).code == 0


def test_a_negative_cost_is_unknown_and_the_budget_holds_on_config_prices(tmp_path, small_cohort, hostile):
    base, _ = hostile
    # 1000 prompt + 20 completion tokens at $1 / $5 per million: $0.0011 an answer, so $0.02
    # buys 18 answers at most (19 attempts with the one that passes the line).
    proc, _, run = _launch(tmp_path, small_cohort, f"{base}/cost/-1000/v1", "--max-cost", "0.02", calls=80)
    assert proc.returncode == 1 and "--max-cost reached" in proc.stderr, proc.stderr
    assert proc.stderr.count("the provider reports no cost") == 1
    raw = _jsonl(run / "raw.jsonl")
    assert all(r["usage"].get("cost_invalid") is True and "cost" not in r["usage"] for r in raw)
    assert 1 <= len(raw) <= 19
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["spend_usd"] == 0       # nothing valid was reported; never negative
    # Resumed, the estimate is rebuilt from the log: the budget is still spent.
    r = run_cli("resume", str(run), "--max-cost", "0.02", "--no-progress")
    assert r.code == 1 and "--max-cost reached" in r.err
    assert len(_jsonl(run / "raw.jsonl")) <= 19


def test_max_cost_without_any_price_says_so_once_and_keeps_concurrency(tmp_path, small_cohort, hostile):
    base, _ = hostile
    # A free local server: cost 0 on every answer (none and invalid: tests/test_budget.py).
    proc, _, run = _launch(tmp_path, small_cohort, f"{base}/cost/0/v1", "--max-cost", "0.05", calls=80,
                           price_in_per_mtok=None, price_out_per_mtok=None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot be enforced") == 1
    assert len(_jsonl(run / "decisions.jsonl")) == 80
    notes = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "note"]
    assert len(notes) == 1 and "cannot be enforced" in notes[0]["message"]
    # Not one at a time: some attempts overlapped.
    spans = sorted((_t(r["started"]), _t(r["finished"])) for r in _jsonl(run / "raw.jsonl"))
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("mode, said", [("unusable/empty", "nothing a chat completion can be read from"),
                                        ("unusable/object", "nothing a chat completion can be read from"),
                                        ("unusable/no-choices", "nothing a chat completion can be read from"),
                                        ("cut/close", "HTTP 200 answered, but the connection closed"),
                                        ("cut/half", "HTTP 200 answered, but the connection closed"),
                                        ("cut/trickle", "HTTP 200 answered, but its body did not arrive")])
def test_a_server_that_answers_with_nothing_usable_stops_the_run(tmp_path, small_cohort, hostile, mode, said):
    """Issue 27 items 11-12: an OpenAI-compatible server whose every 200 is empty, `{}`, without
    choices, or whose body breaks off after the status line. A streak of them stops the run
    (resumable, calls left pending) as a 5xx streak does, and says the server answered: it is
    not retried to exhaustion call after call, nor called unreachable."""
    base, _ = hostile
    proc, _, run = _launch(tmp_path, small_cohort, f"{base}/{mode}/v1", calls=80, backend="openai-compatible",
                           api_key_env=None, provider={}, max_attempts=8, timeout_s=1, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "the server answered, but with nothing usable" in proc.stderr and said in proc.stderr, proc.stderr
    assert "unreachable" not in proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    # The streak is 2 x concurrency = 32 attempts; those in flight then end too.
    assert 32 <= len(raw) <= 32 + 2 * 16, len(raw)
    assert {r["status"] for r in raw} == {200}
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["last_stop"]["reason"] == "unusable_answers" and st["decided"] == 0 and st["pending"] == 80
    assert "exhausted" not in st["statuses"], st["statuses"]
