"""OpenRouter's router end to end (issue 21): launches against the simulated provider with its
response cache, router metadata and availability errors (harness/guardeval/backends/sim/router.py), and the
preflight's router and guardrail checks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from guardeval.backends.openrouter.availability import CODES
from guardeval.backends.sim.router import AVAILABILITY

from app_server import in_thread
from conftest import run_cli, write_guard

pytestmark = pytest.mark.slow


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _launch(tmp_path: Path, cohort: Path, base_url: str, name: str, *extra: str, reps: int = 1,
            **guard_fields: Any) -> tuple[Any, Path]:
    guard = write_guard(tmp_path / f"{name}.toml", base_url, **guard_fields)
    run = tmp_path / name
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", str(reps), "--run-dir", str(run),
                "--no-progress", *extra)
    return r, run


def _stats(base_url: str) -> dict[str, Any]:
    return httpx.get(base_url + "/stats", timeout=5).json()


# ------------------------------------------------------------------------- response caching

def test_an_account_cache_preset_is_turned_off_by_the_header(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "4", "--preset-cache")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "preset", "--concurrency", "4", reps=3)
    assert r.code == 0, r.err
    stats = _stats(sim.base_url)
    assert stats["cache_hits"] == 0 and stats["cache_entries"] == 0     # X-OpenRouter-Cache: false won
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 240 and not any(d["quarantine_reason"] == "response_cache_hit" for d in decisions)


def test_a_cache_that_ignores_the_header_is_quarantined_and_reported(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "4", "--preset-cache", "forced")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "forced", "--concurrency", "1", reps=3)
    assert r.code == 0, r.err
    raw = {rec["call_id"]: rec for rec in _jsonl(run / "raw.jsonl") if rec["final"]}
    decisions = _jsonl(run / "decisions.jsonl")
    hits = [d for d in decisions if d["quarantine_reason"] == "response_cache_hit"]
    # One call per distinct body reached the model (repetitions share a body, and so do conditions
    # whose transform leaves an instance unchanged); every other call was a replay.
    distinct = len({rec["request_sha256"] for rec in raw.values()})
    assert len(raw) == 240 and distinct <= 80
    assert len(hits) == 240 - distinct == _stats(sim.base_url)["cache_hits"]
    generations = {rec["generation_id"] for rec in raw.values()}
    for d in hits:
        rec = raw[d["call_id"]]
        assert rec["response_headers"]["x-openrouter-cache-status"] == "HIT"
        source = rec["response_headers"]["x-openrouter-cache-source-id"]
        assert source in d["detail"] and source in generations and source != rec["generation_id"]
        assert not d["attributable"] and rec["usage"]["prompt_tokens"] == 0
    # The replays carry new generation ids: the generation-id check alone would not have seen them.
    assert len(generations) == 240
    st = run_cli("status", str(run))
    assert st.code == 0 and f"response_cache_hit {len(hits)}" in st.out, st.out
    est = run_cli("estimate", str(run), "--json", "--allow-unpublishable")
    assert est.code == 0, est.err
    assert json.loads(est.out)["quarantine"]["by_reason"]["response_cache_hit"] == len(hits), est.out[:500]


# ------------------------------------------------------------------------- router metadata

def test_pipeline_stages_are_quarantined_and_named(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "6", "--faults", "compression_stage=0.2,guardrail_stage=0.2")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "stages", "--concurrency", "8")
    assert r.code == 0, r.err
    raw = {rec["call_id"]: rec for rec in _jsonl(run / "raw.jsonl") if rec["final"]}
    named = Counter()
    for d in _jsonl(run / "decisions.jsonl"):
        stages = raw[d["call_id"]].get("openrouter_metadata", {}).get("pipeline")
        assert (d["quarantine_reason"] == "stimulus_mutated") == bool(stages), d
        if stages:
            named[d["detail"].split(" may ")[0]] += 1
    assert named["router pipeline stage context_compression middle-out"] > 0
    assert named["router pipeline stage guardrail pii_redaction"] > 0


def test_drift_is_read_from_router_metadata(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "8", "--faults", "metadata_drift=0.25,fallback_attempt=0.25")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "meta-drift", "--concurrency", "8")
    assert r.code == 0, r.err
    raw = {rec["call_id"]: rec for rec in _jsonl(run / "raw.jsonl") if rec["final"]}
    seen = Counter()
    for d in _jsonl(run / "decisions.jsonl"):
        rec = raw[d["call_id"]]
        body = json.loads(rec["response"])
        meta = rec["openrouter_metadata"]
        selected = [e["provider"] for e in meta["endpoints"]["available"] if e["selected"]]
        assert body["provider"] == "Sim"                    # the top-level field always names the pin
        if selected == ["Fallbackco"]:                      # metadata says otherwise: drift, from metadata
            assert rec["provider"] == "Fallbackco" and d["quarantine_reason"] == "provider_drift", d
            seen["selected"] += 1
        elif len(meta["attempts"]) > 1:                     # a try outside the pin before Sim answered
            assert rec["provider"] == "Sim" and d["quarantine_reason"] == "provider_drift", d
            assert "tried 'Fallbackco'" in d["detail"]
            seen["fallback"] += 1
        else:
            assert d["quarantine_reason"] in (None, "length_truncation"), d
            seen["clean"] += 1
    assert seen["selected"] and seen["fallback"] and seen["clean"]


# ------------------------------------------------------------------------- availability errors

@pytest.mark.parametrize("code", [*CODES, "unknown"])
def test_each_availability_code_ends_as_documented(tmp_path, small_cohort, sim_factory, code):
    sim = sim_factory("--faults", f"avail_{code}=1", "--retry-after", "0.01")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, f"avail-{code}", "--concurrency", "1", "--max-calls", "2")
    raw = _jsonl(run / "raw.jsonl")
    cls = f"availability_{code}"
    assert raw and all(rec["error_class"] == cls for rec in raw)
    assert all(rec["previous_errors"] == [{"provider": "Sim", "code": AVAILABILITY[code][0],
                                           "status": AVAILABILITY[code][0]}] for rec in raw)
    if AVAILABILITY[code][1]:
        # Retryable: every attempt of both calls was made (write_guard: 8), then the calls were exhausted.
        assert r.code == 0, r.err
        assert Counter(rec["call_id"] for rec in raw) == Counter({cid: 8 for cid in {x["call_id"] for x in raw}})
        assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"exhausted"}
    else:
        # Not retryable (an unknown code included): one attempt, the run stops resumably, and says why.
        assert r.code == 1 and "resume" in r.err, r.err
        assert len(raw) == 1 and _jsonl(run / "decisions.jsonl") == []
        shown = "sim_unlisted_code" if code == "unknown" else code
        assert shown in r.err and "not retryable" in r.err and "https://openrouter.ai/docs/api-reference/errors#" in r.err
        if code == "constraint_filtered":
            assert "constraint provider.only" in r.err and "excluded_by provider.only" in r.err


def test_a_retryable_availability_error_is_retried_and_answered(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "2", "--faults", "avail_capacity_exhausted=0.4", "--retry-after", "0.01")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "capacity", "--concurrency", "4")
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    failed = {rec["call_id"] for rec in raw if rec["error_class"] == "availability_capacity_exhausted"}
    answered = {rec["call_id"] for rec in raw if rec["outcome"] == "reply"}
    assert failed and failed & answered


# ------------------------------------------------------------------------- preflight

def _preflight(base_url: str) -> dict[str, Any]:
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", base_url, "--json")
    return {"code": r.code, **json.loads(r.out)}


def test_preflight_reports_the_router_and_the_guardrails(sim_factory):
    plain = _preflight(sim_factory().base_url)
    checks = {c["name"]: c for c in plain["checks"]}
    assert plain["code"] == 0 and checks["router"]["status"] == "ok"
    assert "X-OpenRouter-Cache: false" in checks["router"]["detail"]
    assert checks["guardrails"]["status"] == "skip" and "management key" in checks["guardrails"]["detail"]
    listed = _preflight(sim_factory("--guardrail-filters").base_url)
    checks = {c["name"]: c for c in listed["checks"]}
    assert listed["code"] == 0 and checks["guardrails"]["status"] == "warn"
    assert "sim-pii" in checks["guardrails"]["detail"] and "stimulus_mutated" in checks["guardrails"]["detail"]


def test_preflight_reports_an_availability_error():
    async def endpoints(request: web.Request) -> web.Response:
        return web.json_response(status=404, data={"error": {"code": 404, "message": "No such model \x1b[2J", "availability": {
            "code": "model_deprecated", "retryable": False, "docs_url": "https://openrouter.ai/docs/x"}}})

    app = web.Application()
    app.router.add_get("/models/{a}/{s}/endpoints", endpoints)
    with in_thread(app) as url:
        r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", url)
    assert r.code == 2 and "model availability model_deprecated (not retryable)" in r.out, r.out
    assert "see https://openrouter.ai/docs/x" in r.out and "\x1b" not in r.out + r.err


# ------------------------------------------------------------------------- hostile metadata

async def test_oversized_router_metadata_is_kept_slim_and_still_judged(tmp_path):
    from guardeval.backends.config import GuardConfig
    from guardeval.backends.openrouter.guard import OpenRouterGuard
    from guardeval.backends.parsers import get_parser
    from guardeval.backends.prompts import load_prompt
    from guardeval.run.dispatch.decide import decide

    from app_server import start

    stages = [{"type": "context_compression", "name": "middle-out", "data": {"pad": "x" * 2000}} for _ in range(100)]
    meta = {"requested": "m", "strategy": "direct", "region": None, "summary": "s", "attempt": 1, "is_byok": False,
            "endpoints": {"total": 1, "available": [{"provider": "Sim", "model": "m", "selected": True}]},
            "pipeline": stages}
    body = {"id": "gen-big", "object": "chat.completion", "created": 1, "model": "m", "system_fingerprint": None,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{}"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "openrouter_metadata": meta}

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/chat/completions", handler)
    runner, url = await start(app)
    prompt = load_prompt("guardeval-json-v1")
    guard = OpenRouterGuard(GuardConfig(name="big", backend="openrouter", model="m", prompt=prompt.id, base_url=url,
                                        api_key_env=None, timeout_s=5, provider={"only": ["sim"]}), prompt)
    try:
        reply = await guard.send({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "0" * 32)
    finally:
        await guard.aclose()
        await runner.cleanup()
    kept = reply.router_metadata
    assert kept is not None and kept["guardeval_slimmed_from_bytes"] > 200_000 and len(json.dumps(kept)) < 10_000
    assert kept["endpoints"]["available"] == [{"provider": "Sim", "selected": True}] and len(kept["pipeline"]) == 32
    raw = {"call_id": "0" * 32, "seq": 1, "request_sha256": "r", "outcome": "reply", "final": True, "content": "{}",
           "finish_reason": "stop", "provider": reply.provider, "answers_call_id": None, "usage": reply.usage,
           "response_headers": reply.response_headers, "openrouter_metadata": kept, "error_class": None, "error": None}
    d = decide(raw, "sha", expected_request_sha256="r", parser=get_parser(prompt.parser), backend=guard.config.backend,
               allowed_providers=("sim",))
    assert d["quarantine_reason"] == "stimulus_mutated" and "context_compression middle-out" in d["detail"]
