"""Providers, disks and spend (issue 19, section 3): a provider that answers nothing but 429s,
`resume` on a disk with no room, implausible and NaN costs, the key in other spellings, and a
SIGTERM before any call is sent. Real servers on 127.0.0.1, real subprocesses and signals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_env, run_cli, write_guard
from hostile_server import Hostile, serving

KEY_ENV = "GUARDEVAL_TEST_KEY"     # write_guard's api_key_env


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, Hostile]]:
    with serving() as served:
        yield served


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _launch(tmp: Path, cohort: Path, base_url: str, *extra: str, calls: int = 8, env: dict[str, str] | None = None,
            timeout: float = 120, **guard: object) -> tuple[subprocess.CompletedProcess[str], Path]:
    run = tmp / "run"
    cfg = write_guard(tmp / "g.toml", base_url, **{"timeout_s": 10, "max_attempts": 2, **guard})
    proc = subprocess.run([sys.executable, "-m", "harness", "launch", "--cohort", str(cohort), "--guard", str(cfg),
                           "--reps", "1", "--run-dir", str(run), "--max-calls", str(calls), "--concurrency", "4",
                           "--no-progress", "--no-preflight", *extra],
                          capture_output=True, text=True, env=cli_env(env), timeout=timeout)
    return proc, run


# -- spend -----------------------------------------------------------------------------------------

def test_an_implausible_cost_is_invalid_and_spend_stays_finite(tmp_path, small_cohort, hostile):
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/cost/1e308/v1")
    assert proc.returncode == 0, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 8 and all(r["usage"].get("cost_invalid") is True and "cost" not in r["usage"] for r in raw)
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert isinstance(st["spend_usd"], float) and math.isfinite(st["spend_usd"]), st["spend_usd"]
    text = run_cli("status", str(run)).out
    assert "inf" not in text.split("spend")[1].split("\n")[0], text


def test_a_nan_cost_keeps_the_answer(tmp_path, small_cohort, hostile):
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/cost/NaN/v1")
    assert proc.returncode == 0, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    # One attempt per call: the answer was read, not retried as malformed.
    assert len(raw) == 8 and all(r["outcome"] == "reply" and r["error_class"] is None for r in raw), raw[0]
    assert all(r["usage"].get("cost_invalid") is True and r["usage"]["prompt_tokens"] == 1000 for r in raw)
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"ok"}
    assert run_cli("verify", str(run)).code == 0


# -- the key in other spellings ------------------------------------------------------------------

# Built here, so that no tracked file holds a key-shaped literal.
CANARY = "sk-or-v1-" + "".join(f"{(i * 7919) % 251:02x}" for i in range(32))


# Every spelling at the unit level: tests/test_redact.py.
@pytest.mark.parametrize("form, status", [("mixed-case", 200), ("reversed", 200), ("hex-upper", 401),
                                          ("b64-1", 200), ("b64-bearer", 401)])
def test_the_key_in_other_spellings_reaches_no_file_and_no_output(tmp_path, small_cohort, hostile, form, status):
    from hostile_server import key_form, leaked

    assert leaked(key_form(CANARY, form), CANARY) is not None      # the detector sees this spelling
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/key/{form}/{status}/v1", calls=3, env={KEY_ENV: CANARY})
    assert proc.returncode == (1 if status == 401 else 0), proc.stderr
    assert "Traceback" not in proc.stderr
    for text in (proc.stdout, proc.stderr):
        assert leaked(text, CANARY) is None, text
    files = [p for p in run.rglob("*") if p.is_file()]
    assert {"raw.jsonl", "events.jsonl"} <= {p.name for p in files}
    for p in files:
        assert leaked(p.read_text("utf-8", errors="replace"), CANARY) is None, p
    raw = _jsonl(run / "raw.jsonl")
    assert raw and all(r.get("redacted") is True and "[redacted]" in r["response"] for r in raw), raw
    if status == 401:
        assert "[redacted]" in proc.stderr
        assert any("[redacted]" in (e.get("fatal") or "") for e in _jsonl(run / "events.jsonl"))
    assert run_cli("verify", str(run)).code == 0
