"""OpenRouter readiness end to end (issue 15): runs against the simulated provider speaking
OpenRouter's dialect, and against plain servers of our own on 127.0.0.1.

Every new simulator fault kind runs through a real launch here; the preflight is run against
the simulator, a closed port and servers that cannot serve the run; the provider audit reads
the simulator's generation-stats endpoint."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from guardeval.backends.checks import EMPTY_INSTANCE, Workload
from guardeval.backends.config import load_guard_config
from guardeval.backends.openrouter.preflight import run_preflight
from guardeval.backends.prompts import load_prompt
from guardeval.backends.registry import make_renderer
from guardeval.backends.sim import SimServerProcess
from guardeval.run.planning import plan_launch
from guardeval.run.runtable import load_run_table

from app_server import in_thread
from conftest import DEMO_COHORT, REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow

KEY_ENV = {"GUARDEVAL_TEST_KEY": "sk-or-" + "v1-test-key-for-the-simulator"}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _launch(tmp_path: Path, cohort: Path, base_url: str, name: str, *extra: str, env: dict[str, str] | None = None,
            **guard_fields: Any):
    guard = write_guard(tmp_path / f"{name}.toml", base_url, **guard_fields)
    run = tmp_path / name
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--no-progress", *extra, env=env)
    return r, run


# ------------------------------------------------------------------- fault kinds in runs

def test_mixed_openrouter_faults_end_per_call(tmp_path, small_cohort, sim_factory):
    mix = ("choice_error=0.08,moderation403=0.08,refusal400=0.08,credits402_retry=0.08,no_provider_field=0.08,"
           "empty_content=0.08,byok_cost=0.08")
    sim = sim_factory("--seed", "11", "--faults", mix, "--retry-after", "0.02")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "mixed", "--concurrency", "8")
    assert r.code == 0, r.err                      # refusals and provider errors do not stop the run
    raw, decisions = _jsonl(run / "raw.jsonl"), _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 80
    by_class = Counter(rec["error_class"] for rec in raw)
    statuses = Counter(d["status"] for d in decisions)
    reasons = Counter(d["quarantine_reason"] for d in decisions)
    # Refusals are recorded per call (refused, with the reason), never attributed, never a stop.
    refused = [d for d in decisions if d["status"] == "refused"]
    assert refused and by_class["refused_moderation"] and by_class["refused_refusal"]
    assert all(not d["attributable"] and d["detail"] for d in refused)
    # Errors inside a 200 and the in-flight budget 402 were retried, and a later attempt answered.
    assert by_class["choice_error"] and by_class["http_402"] and by_class["empty_content"]
    for rec in raw:
        if rec["error_class"] in ("choice_error", "http_402", "empty_content"):
            assert rec["final"] is False
    # An answer without the provider field is its own quarantine reason, not drift.
    assert reasons["provider_unknown"] > 0 and reasons["provider_drift"] == 0
    assert statuses["ok"] + statuses["unparseable"] + statuses["refused"] + statuses["provider_error"] == 80
    # native_finish_reason and the generation id are kept in the raw line.
    answered = [rec for rec in raw if rec["outcome"] == "reply"]
    assert all(rec["native_finish_reason"] == "stop" and rec["generation_id"].startswith("gen-") for rec in answered)
    # BYOK spend counts the upstream's charge: status sums it.
    byok = [rec for rec in raw if rec["usage"].get("is_byok")]
    assert byok
    expected = sum(rec["usage"].get("cost") or 0 for rec in raw) + sum(rec["usage"]["upstream_inference_cost"]
                                                                       for rec in byok)
    st = run_cli("status", str(run), "--json")
    assert json.loads(st.out)["spend_usd"] == pytest.approx(expected, abs=2e-6)
    assert run_cli("verify", str(run)).code == 0


def test_choice_errors_that_persist_are_provider_errors(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--faults", "choice_error=1")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "choice", "--max-calls", "4", max_attempts=2)
    assert r.code == 0, r.err
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 4
    # The content of each answer parses, but it came with an error: never scored, never attributed.
    assert all(d["status"] == "provider_error" and d["decision"] is None and not d["attributable"]
               for d in decisions)
    assert Counter(rec["error_class"] for rec in _jsonl(run / "raw.jsonl")) == {"choice_error": 8}


def test_empty_content_is_retried_once_then_scored(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--faults", "empty_content=1")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "empty", "--max-calls", "4")
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    attempts = Counter(rec["call_id"] for rec in raw)
    assert set(attempts.values()) == {2}           # one retry, not max_attempts
    assert [rec["error_class"] for rec in raw if not rec["final"]] == ["empty_content"] * 4
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"unparseable"}


def test_insufficient_credits_stop_the_run_resumably(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--faults", "credits402=1")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "credits", "--concurrency", "2")
    assert r.code == 1 and "402" in r.err and "resume" in r.err, r.err
    assert _jsonl(run / "decisions.jsonl") == []    # nothing written off: every call stays pending
    ok = sim_factory("--seed", "3")
    r = run_cli("resume", str(run), "--base-url", ok.base_url, "--no-progress", "--max-calls", "10")
    assert r.code == 0, r.err
    assert len(_jsonl(run / "decisions.jsonl")) == 10


def test_drift_and_unknown_provider_are_told_apart(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "5", "--faults", "drift=0.2,no_provider_field=0.2")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "drift", "--concurrency", "8",
                     provider={"order": ["sim", "google-vertex"], "allow_fallbacks": False})
    assert r.code == 0, r.err
    raw = {rec["call_id"]: rec for rec in _jsonl(run / "raw.jsonl") if rec["final"]}
    for d in _jsonl(run / "decisions.jsonl"):
        provider = raw[d["call_id"]]["provider"]
        want = {None: "provider_unknown", "Driftco": "provider_drift", "Sim": None}[provider]
        assert d["quarantine_reason"] == want or d["status"] == "truncated", (provider, d)


# ------------------------------------------------------------------------- preflight

def test_preflight_against_the_simulator(sim_factory):
    sim = sim_factory("--key-limit", "50")
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", sim.base_url,
                "--cohort", "cohorts/demo", "--json")
    assert r.code == 0, r.err
    res = json.loads(r.out)
    assert res["ok"] and res["endpoints"][0]["provider_name"] == "Anthropic"
    checks = {c["name"]: c for c in res["checks"]}
    assert {"request", "provider", "parameters", "context", "prices", "credit"} <= set(checks)
    assert "structured_outputs" in checks["parameters"]["detail"]
    assert 0 < res["projected_cost_usd"] < res["credit_left_usd"] == 50


PREFLIGHT_SIMS: dict[str, list[str]] = {
    "not_listed": ["--endpoint-providers", "google-vertex"],
    "no_structured_outputs": ["--unsupported-params", "structured_outputs"],
    "small_context": ["--context-length", "300"],
    "low_credit": ["--key-limit", "0.01"],
    "needs_key": ["--require-key"],
}


@pytest.fixture(scope="module")
def preflight_sims() -> Iterator[dict[str, SimServerProcess]]:
    procs = {k: SimServerProcess(a, env=cli_env()).launch() for k, a in PREFLIGHT_SIMS.items()}
    try:
        yield {k: p.wait_ready() for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.stop()


@pytest.mark.parametrize("sim, with_cohort, words", [
    ("not_listed", False, "no pinned provider (anthropic) serves anthropic/claude-haiku-4.5"),
    ("no_structured_outputs", False, "does not support structured_outputs"),
    ("small_context", True, "exceeds its context length 300"),
    ("low_credit", True, "$0.0100 left on the key, the run may cost up to"),
    ("needs_key", False, "is $OPENROUTER_API_KEY set to a valid key?"),
])
def test_preflight_refuses_what_cannot_be_served(preflight_sims, monkeypatch, sim, with_cohort, words):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    config = load_guard_config(REPO / "guards/haiku-4.5.toml").with_base_url(preflight_sims[sim].base_url)
    if with_cohort:
        work = plan_launch(cohort_dir=DEMO_COHORT, guard_path=REPO / "guards/haiku-4.5.toml", reps=3, seed=0,
                           order="rounds", base_url=config.base_url).workload()
    else:
        work = Workload(body=make_renderer(config, load_prompt(config.prompt))(EMPTY_INSTANCE))
    result = run_preflight(config, work)
    assert not result.ok
    assert any(words in c.detail for c in result.failures()), result.checks


def test_preflight_cli_exit_codes(preflight_sims):
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url",
                preflight_sims["no_structured_outputs"].base_url)
    assert r.code == 2 and "fail  endpoint anthropic: does not support structured_outputs" in r.out
    assert "preflight failed" in r.err and "Traceback" not in r.err


def test_preflight_without_network_fails_fast(tmp_path, small_cohort):
    t0 = time.monotonic()
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", "http://127.0.0.1:9")
    assert r.code == 2 and "cannot reach 127.0.0.1" in r.out and "Traceback" not in r.err
    # A launch is refused before its run folder exists.
    r2, run = _launch(tmp_path, small_cohort, "http://127.0.0.1:9", "offline")
    assert r2.code == 2 and "--no-preflight" in r2.err and not run.exists()
    assert time.monotonic() - t0 < 30


def test_launch_runs_the_preflight_and_dry_run_reports_it(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--endpoint-providers", "anthropic")     # the guard pins `sim`: not served
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "refused")
    assert r.code == 2 and "no pinned provider (sim)" in r.err and not run.exists()
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "dry", "--dry-run")
    assert r.code == 2 and "fail  provider" in r.out and "launch would refuse" in r.out and not run.exists()
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "skipped", "--no-preflight", "--max-calls", "3")
    assert r.code == 0 and "skipped (--no-preflight)" in r.err and len(_jsonl(run / "decisions.jsonl")) == 3


class _Server:
    """A plain aiohttp server of our own on 127.0.0.1 (in a thread); `routes` maps a path to its handler."""

    def __init__(self, url: str) -> None:
        self.url = url


@pytest.fixture
def plain_server() -> Iterator[Any]:
    with ExitStack() as stack:
        def make(routes: dict[str, Any]) -> _Server:
            app = web.Application()
            for path, fn in routes.items():
                app.router.add_route("*", path, fn)
            return _Server(stack.enter_context(in_thread(app)))
        yield make


def test_preflight_refuses_a_provider_name_it_cannot_match(plain_server):
    async def endpoints(request: web.Request) -> web.Response:
        listing = {"data": {"id": "anthropic/claude-haiku-4.5", "endpoints": [{
            "tag": "anthropic", "provider_name": "Anthropic PBC \x1b[2J", "context_length": 200000,
            "max_completion_tokens": 64000, "pricing": {"prompt": "0.000001", "completion": "0.000005"},
            "supported_parameters": ["temperature", "max_tokens", "response_format", "structured_outputs"]}]}}
        return web.json_response(listing)

    async def key(request: web.Request) -> web.Response:
        return web.json_response({"data": {"limit": None, "limit_remaining": None}})

    srv = plain_server({"/models/{a}/{s}/endpoints": endpoints, "/key": key})
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", srv.url)
    assert r.code == 2 and "a name guardeval does not match" in r.out
    assert "\x1b" not in r.out + r.err                   # provider text is shown escaped
    assert "skip  credit" in r.out                       # a key without a limit is not a failure


# ---------------------------------------------------------------- audit providers

def test_audit_providers_confirms_from_generation_stats(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "9", "--faults", "no_provider_field=0.3")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "audited", "--concurrency", "8")
    assert r.code == 0, r.err
    # The simulated provider needs no key for its generation stats (none made a sim run's spend):
    # audit providers asks it without one (issue 30's trip-up); OpenRouter's address needs one.
    keyless = run_cli("audit", "providers", str(run), "--base-url", sim.base_url)
    assert keyless.code == 0 and "audit providers: OK" in keyless.out, keyless.err
    remote = run_cli("audit", "providers", str(run), "--base-url", "https://openrouter.ai/api/v1")
    assert remote.code == 2 and "GUARDEVAL_TEST_KEY is not set" in remote.err
    r = run_cli("audit", "providers", str(run), "--base-url", sim.base_url, "--json", env=KEY_ENV)
    assert r.code == 0, r.err + r.out
    res = json.loads(r.out)
    # Calls quarantined live as provider_unknown are confirmed afterwards from the stats.
    assert res["answers"] == res["confirmed"] == 80 and res["drift"] == res["unconfirmed"] == 0
    assert res["served_by"] == {"Sim": 80}
    assert res["spend_logged_usd"] == pytest.approx(res["total_cost_usd"]) and res["cost_differs"] == 0


def test_audit_providers_finds_drift_and_what_it_cannot_confirm(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "4", "--faults", "drift=0.25")
    r, run = _launch(tmp_path, small_cohort, sim.base_url, "drifting", "--concurrency", "8", "--max-calls", "40")
    assert r.code == 0, r.err
    drifted = sum(d["quarantine_reason"] == "provider_drift" for d in _jsonl(run / "decisions.jsonl"))
    assert drifted > 0
    r = run_cli("audit", "providers", str(run), "--base-url", sim.base_url, env=KEY_ENV)
    assert r.code == 1 and f"(drift): {drifted}" in r.out and "audit providers: FAILED" in r.out
    # A fresh simulator has never seen these generations: nothing can be confirmed.
    fresh = sim_factory("--seed", "4")
    res = json.loads(run_cli("audit", "providers", str(run), "--base-url", fresh.base_url, "--json",
                             env=KEY_ENV).out)
    assert res["unconfirmed"] == res["answers"] == 40 and "404" in res["unconfirmed_calls"][0]["why"]


# ------------------------------------------------- replay by generation id; 413 per call

def _completion(gen: str) -> dict[str, Any]:
    content = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
    return {"id": gen, "object": "chat.completion", "created": 1, "model": "m", "provider": "Sim",
            "choices": [{"index": 0, "finish_reason": "stop", "native_finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20, "cost": 0.00001}}


@pytest.fixture
def replayed_run(tmp_path, small_cohort, plain_server) -> Path:
    """Six calls, one at a time; calls 2 and 4 get the generation id of call 1: a replayed answer."""
    served = Counter()

    async def chat(request: web.Request) -> web.Response:
        served["n"] += 1
        gen = "gen-replayed" if served["n"] in (1, 2, 4) else f"gen-{served['n']}"
        return web.json_response(_completion(gen))

    srv = plain_server({"/chat/completions": chat})
    r, run = _launch(tmp_path, small_cohort, srv.url, "replay", "--no-preflight", "--max-calls", "6",
                     "--concurrency", "1")
    assert r.code == 0, r.err
    return run


def test_a_generation_id_seen_for_two_calls_quarantines_both(replayed_run):
    run = replayed_run
    decisions = _jsonl(run / "decisions.jsonl")
    assert all(d["quarantine_reason"] is None for d in decisions)   # each line alone looks fine
    replayed = {rec["call_id"] for rec in _jsonl(run / "raw.jsonl") if rec["generation_id"] == "gen-replayed"}
    assert len(replayed) == 3
    rows = {row["call_id"]: row for row in load_run_table(run).rows}
    assert {cid for cid, row in rows.items() if row["quarantine_reason"] == "replay_mismatch"} == replayed
    assert json.loads(run_cli("status", str(run), "--json").out)["generation_replays"] == 3
    assert run_cli("verify", str(run)).code == 0        # decisions.jsonl is still line-for-line re-derivable


def test_the_call_rows_quarantine_a_replayed_generation_as_the_estimates_do(replayed_run):
    # `export` (and the report's call browser, which reads the same rows) agree with `estimate`.
    run = replayed_run
    table = {row["call_id"]: row["quarantine_reason"] for row in load_run_table(run).rows}
    r = run_cli("export", str(run), "--format", "jsonl", "--out", "-")
    assert r.code == 0, r.err
    exported = {row["call_id"]: row["quarantine_reason"] for row in map(json.loads, r.out.splitlines())}
    assert exported == table and list(exported.values()).count("replay_mismatch") == 3


@pytest.mark.parametrize("backend", ["openrouter", "openai-compatible"])
def test_request_too_large_fails_that_call_only(tmp_path, small_cohort, plain_server, backend):
    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        if len(body) > 5600:     # about half the requests of this cohort are bigger
            return web.json_response({"error": {"code": 413, "message": "Request entity too large"}}, status=413)
        return web.json_response(_completion(f"gen-{len(body)}-{time.monotonic_ns()}"))

    srv = plain_server({"/chat/completions": chat})
    fields: dict[str, Any] = {"backend": backend}
    if backend != "openrouter":
        fields["provider"] = None
    r, run = _launch(tmp_path, small_cohort, srv.url, f"big-{backend}", "--no-preflight", "--max-calls", "30", **fields)
    assert r.code == 0, r.err                              # not a run-fatal stop
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 30
    too_large = [d for d in decisions if d["status"] == "provider_error"]
    assert too_large and all("413" in d["detail"] for d in too_large)
    assert any(d["status"] == "ok" for d in decisions)
    raw = _jsonl(run / "raw.jsonl")
    assert {rec["error_class"] for rec in raw if rec["outcome"] == "call_failed"} == {"request_too_large"}
    assert len(raw) == 30                                  # one attempt each: nothing retried or re-sent


def test_preflight_never_shows_the_key(plain_server):
    secret = "sk-or-v1-" + "a1B2c3" * 8

    async def endpoints(request: web.Request) -> web.Response:
        # A careless server echoes the bearer token, JSON-escaped, in its refusal.
        token = request.headers.get("Authorization", "")[7:]
        escaped = "".join(f"\\u{ord(c):04x}" for c in token)
        return web.Response(status=401, text='{"error": {"code": 401, "message": "bad key ' + escaped + '"}}',
                            content_type="application/json")

    srv = plain_server({"/models/{a}/{s}/endpoints": endpoints})
    r = run_cli("preflight", "--guard", "guards/haiku-4.5.toml", "--base-url", srv.url,
                env={"OPENROUTER_API_KEY": secret})
    assert r.code == 2 and "HTTP 401" in r.out and "[redacted]" in r.out
    assert secret not in r.out + r.err and secret[9:21] not in r.out + r.err
