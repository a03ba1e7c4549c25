"""`guardeval sim-server`: the simulated provider (docs/design.md §9) — an OpenRouter-style
chat-completions server on aiohttp with a shortcut-prone guard (`guardeval.backends.sim.guard`) and
seeded fault injection.

Usage:  guardeval sim-server [--host 127.0.0.1] [--port 0] [--latency-ms SPEC] [--faults SPEC]
                             [--seed N] [--profile NAME|FILE] [--retry-after S] [--stall-s S] [--require-key]
                             [--expect-key-env VAR] [--price-in USD] [--price-out USD]
                             [--rps-cap R [--rps-burst B]] [--max-in-flight N] [--echo-call-id]
                             [--endpoint-providers SLUGS] [--unsupported-params NAMES]
                             [--context-length N] [--key-limit USD]
        python -m guardeval.backends.sim ...        (same options)

The first stdout line is exactly `listening on http://HOST:PORT` (flushed); that URL is a
`base_url` as is: POST `{base_url}/chat/completions`, GET `{base_url}/models/AUTHOR/SLUG/endpoints`,
`{base_url}/key` and `{base_url}/generation?id=` (each also under `/v1` and `/api/v1`).
Nothing else is printed per request. SIGTERM / SIGINT stop it cleanly (exit 0).

Requests are checked against OpenRouter's documented request schema
(harness/guardeval/backends/openrouter/chat_request.schema.json); a body that does not match gets a 400.

Latency SPEC (milliseconds, added to every response): `N` fixed, `LO:HI` uniform, `exp:MEAN`
exponential. Faults SPEC: comma-separated `KIND=PROB`; KIND is an HTTP status 400-599 or a named
kind (guardeval.backends.sim.config.NAMED_FAULTS); probabilities in [0, 1] summing to ≤ 1. Per request at
most one fault, drawn from (seed, body hash, call id, attempt number of that call id), so a
retry of a failed call can succeed while the guard's answer stays the same.
See docs/sim-server.md for the wire behaviour of each fault.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import os
import random
import signal
import sys
import time
from collections import OrderedDict
from typing import Any

import orjson
from aiohttp import web

from guardeval.backends.openrouter import providers
from guardeval.backends.openrouter.request_schema import problem as request_problem
from guardeval.backends.sim import guard as sim_guard
from guardeval.backends.sim import router
from guardeval.backends.sim.config import (
    ASSESS_MEMORY,
    ATTEMPT_MEMORY,
    CHAT_PATHS,
    DRIFT_PROVIDER,
    GENERATION_MEMORY,
    ServerConfig,
)
from guardeval.backends.sim.info import InfoRoutes, listed_slugs, shown_name
from guardeval.backends.sim.wire import ChatReply, Choice, Generation, Stats, Usage
from guardeval.canon import canonical_bytes, sha256_hex

API_PREFIXES = ("", "/v1", "/api/v1")


def _error_body(code: int, message: str, provider: str | None = None, **metadata: Any) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if provider is not None:
        metadata = {"provider_name": provider, "raw": "simulated fault", **metadata}
    if metadata:
        err["metadata"] = metadata
    return orjson.dumps({"error": err})


def _pinned_slug(body: dict[str, Any]) -> str:
    prov = body.get("provider")
    if isinstance(prov, dict):
        for key in ("only", "order"):
            names = prov.get(key)
            if isinstance(names, list) and names and isinstance(names[0], str):
                return names[0]
    return "sim"


def _wants_metadata(request: web.Request) -> bool:
    """Router metadata is opt-in: `X-OpenRouter-Metadata: enabled` (or the legacy experimental header)."""
    return any(request.headers.get(h, "").strip().lower() == "enabled"
               for h in ("X-OpenRouter-Metadata", "X-OpenRouter-Experimental-Metadata"))


class TokenBucket:
    """A provider's hard rate limit: `rate` requests per second, at most `burst` at once.

    A request that finds no token is refused (not queued), and the refusal costs no token, as
    with hosted APIs. `take` returns 0.0 when admitted, else the seconds until a token is free.
    """

    def __init__(self, rate: float, burst: float, clock: Any = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = burst
        self._at = clock()

    def take(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0 - 1e-9:    # float refills must not starve a due token
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self.rate


class SimProvider(InfoRoutes):
    """Request handling state: config, a latency RNG, per-call-id attempt counters, a request
    count, and a cache of per-body features."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.attempts: OrderedDict[str, int] = OrderedDict()
        self.assessed: OrderedDict[str, tuple[sim_guard.Features, float, int]] = OrderedDict()
        self.generations: OrderedDict[str, Generation] = OrderedDict()   # for GET /generation
        self.validated: OrderedDict[str, None] = OrderedDict()    # body hashes that matched the schema
        self.spent = 0.0           # sum of the costs of the generations served (GET /key usage)
        self.served = 0
        self.ok = 0                # 200 chat completions sent (not malformed, not error200)
        self.rate_limited = 0      # 429s sent by the --rps-cap bucket or the --max-in-flight cap
        self.in_flight = 0         # requests being handled now (for --max-in-flight)
        self.faulted: dict[str, int] = {}   # faults injected by --faults, by kind
        self.cache = router.ResponseCache()
        self.bucket = (TokenBucket(config.rps_cap, config.rps_burst or max(1.0, config.rps_cap / 10))
                       if config.rps_cap else None)

    def _next_attempt(self, key: str) -> int:
        n = self.attempts.pop(key, 0) + 1
        self.attempts[key] = n   # re-insert: most recent last, so eviction drops the oldest
        if len(self.attempts) > ATTEMPT_MEMORY:
            self.attempts.popitem(last=False)
        return n

    def _assess(self, body_sha: str, messages: list[dict[str, Any]]) -> tuple[sim_guard.Features, float, int]:
        """Features, block probability and prompt size of a body; cached by body hash because
        repetitions and retries of a call send the same body (only the call id differs)."""
        hit = self.assessed.get(body_sha)
        if hit is not None:
            self.assessed.move_to_end(body_sha)
            return hit
        feats = sim_guard.features(sim_guard.judged_text(messages))
        chars = sum(len(sim_guard.message_text(m.get("content"))) for m in messages)
        hit = (feats, sim_guard.probability_from(feats, self.config.profile.weights), chars)
        self.assessed[body_sha] = hit
        if len(self.assessed) > ASSESS_MEMORY:
            self.assessed.popitem(last=False)
        return hit

    def _json(self, status: int, body: bytes, headers: dict[str, str]) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json", headers=headers)

    @staticmethod
    def _key_of(request: web.Request) -> str:
        auth = request.headers.get("Authorization", "")
        return auth[7:].strip() if auth[:7].lower() == "bearer " else ""

    def _auth_error(self, request: web.Request, headers: dict[str, str]) -> web.Response | None:
        cfg = self.config
        if not (cfg.require_key or cfg.expected_key is not None):
            return None
        key = self._key_of(request)
        if not key:
            return self._json(401, _error_body(401, "No auth credentials found"), headers)
        if cfg.expected_key is not None and not hmac.compare_digest(key.encode(), cfg.expected_key.encode()):
            # Never echo the key, not even partially.
            return self._json(401, _error_body(401, "Invalid credentials"), headers)
        return None

    def _valid(self, body_sha: str, body: Any) -> str | None:
        """Why the body does not match the documented request schema (checked once per body)."""
        if body_sha in self.validated:
            return None
        problem = request_problem(body)
        if problem is None:
            self.validated[body_sha] = None
            if len(self.validated) > ASSESS_MEMORY:
                self.validated.popitem(last=False)
        return problem

    async def handle_chat(self, request: web.Request) -> web.StreamResponse:
        cfg = self.config
        self.served += 1
        call_id = request.headers.get("X-Call-Id", "")
        headers = {"X-Call-Id": call_id} if call_id and cfg.echo_call_id else {}

        refused = self._auth_error(request, headers)
        if refused is not None:
            return refused

        if self.bucket is not None:
            wait = self.bucket.take()
            if wait > 0:
                # Refused at once, before any work: the caller learns when a token frees up.
                self.rate_limited += 1
                headers["Retry-After"] = f"{wait:.3f}"
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                return self._json(429, _error_body(429, "Rate limit exceeded: requests per second cap "
                                                        "(simulated)"), headers)

        cap = cfg.max_in_flight
        if cap is not None and self.in_flight >= cap:
            # Refused at once: more requests than the server handles at a time.
            self.rate_limited += 1
            headers["Retry-After"] = cfg.retry_after
            return self._json(429, _error_body(429, "Too many requests in flight (simulated)"), headers)
        self.in_flight += 1
        try:
            return await self._answer(request, headers, call_id)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request, headers: dict[str, str], call_id: str) -> web.StreamResponse:
        """A request admitted by the caps: parse, inject a fault or guard it, after the latency."""
        cfg = self.config
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self._json(400, _error_body(400, "request body is not valid JSON"), headers)
        if not isinstance(body, dict):
            return self._json(400, _error_body(400, "request body must be a JSON object"), headers)
        body_sha = sha256_hex(canonical_bytes(body))
        problem = self._valid(body_sha, body)
        if problem:
            return self._json(400, _error_body(400, f"invalid request: {problem}"), headers)

        attempt = self._next_attempt(call_id or body_sha)
        cache_key = router.cache_key(self._key_of(request), body) \
            if router.cache_wanted(cfg.preset_cache, request.headers.get("X-OpenRouter-Cache")) else None
        stored = self.cache.get(cache_key) if cache_key is not None else None
        if stored is not None:
            # A hit never reaches the provider: the stored answer, a new generation id, billed 0.
            gen_id = "gen-" + sha256_hex(f"{cfg.seed}|{body_sha}|{call_id}|{attempt}|hit".encode())[:24]
            hit = self.cache.replay(stored, gen_id, int(time.time()))
            headers.update({"X-Generation-Id": gen_id, "X-OpenRouter-Cache-Status": "HIT",
                            "X-OpenRouter-Cache-Source-Id": stored["id"]})
            if not _wants_metadata(request):
                hit.pop("openrouter_metadata", None)
            self._remember(gen_id, str(hit.get("provider", "")), body, hit["usage"], 0.0, "stop")
            self.ok += 1
            return self._json(200, orjson.dumps(hit), headers)
        fault = cfg.faults.pick(sim_guard.unit_draw("fault", cfg.seed, body_sha, call_id, attempt)) \
            if cfg.faults.kinds else None
        slug = _pinned_slug(body)
        provider = shown_name(slug)
        if fault is not None:
            self.faulted[fault] = self.faulted.get(fault, 0) + 1

        delay = cfg.latency.sample_s(self.rng)
        if fault == "stall":
            delay += cfg.stall_s
        if delay > 0:
            await asyncio.sleep(delay)

        failed = self._fault_answer(fault, provider, headers, str(body.get("model", "sim-guard")))
        if failed is not None:
            return failed
        if fault == "drift":
            provider = shown_name(DRIFT_PROVIDER if providers.base_slug(slug) != DRIFT_PROVIDER else DRIFT_PROVIDER + "-b")

        feats, p, prompt_chars = self._assess(body_sha, body["messages"])
        answer = sim_guard.verdict(feats, p, sim_guard.unit_draw("decide", cfg.seed, body_sha, call_id))
        content = sim_guard.verdict_text(answer)
        finish = "stop"
        prompt_tokens = max(1, (prompt_chars + 3) // 4)
        completion_tokens = max(1, (len(content) + 3) // 4)
        max_tokens = body.get("max_tokens")
        if fault == "length":
            content, finish = content[: len(content) // 2], "length"
            completion_tokens = max(1, (len(content) + 3) // 4)
        elif fault == "empty_content":
            content, completion_tokens = "", 0
        elif max_tokens is not None and completion_tokens > max_tokens:
            # A real model stops at max_tokens: same wire shape as the `length` fault.
            content, finish, completion_tokens = content[: max_tokens * 4], "length", max_tokens
        cost = round((prompt_tokens * cfg.price_in + completion_tokens * cfg.price_out) / 1e6, 10)
        gen_id = "gen-" + sha256_hex(f"{cfg.seed}|{body_sha}|{call_id}|{attempt}".encode())[:24]
        usage: Usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens, "cost": cost,
                                 "is_byok": False, "cost_details": {"upstream_inference_cost": None,
                                                                    "upstream_inference_prompt_cost": 0,
                                                                    "upstream_inference_completions_cost": 0}}
        if fault == "byok_cost":
            # The caller's own provider key: OpenRouter charges a fee, the upstream the rest.
            fee = round(cost * 0.05, 10)
            usage.update({"cost": fee, "is_byok": True, "cost_details": {
                "upstream_inference_cost": cost,
                "upstream_inference_prompt_cost": round(prompt_tokens * cfg.price_in / 1e6, 10),
                "upstream_inference_completions_cost": round(completion_tokens * cfg.price_out / 1e6, 10)}})
            cost = round(fee + cost, 10)
        choice: Choice = {"index": 0, "finish_reason": finish, "native_finish_reason": finish,
                                  "message": {"role": "assistant", "content": content}}
        if fault == "choice_error":
            # Documented: an error during generation comes back as HTTP 200, the choice carrying
            # `error` and finish_reason `error`, with whatever content was produced (here all of
            # it, so a client that ignores the error would score an answer that does not count).
            choice.update({"finish_reason": "error", "native_finish_reason": "error",
                           "error": {"code": 502, "message": "Provider returned error (simulated)",
                                     "metadata": {"provider_name": provider, "raw": "simulated fault"}}})
        model = str(body.get("model", "sim-guard"))
        reply: ChatReply = {"id": gen_id, "object": "chat.completion", "created": int(time.time()),
                                 "model": model, "provider": provider,
                                 # Which guard answered: the profile's name and hash (a run's raw log keeps it).
                                 "system_fingerprint": cfg.profile.fingerprint,
                                 "choices": [choice], "usage": usage}
        if fault == "no_provider_field":
            del reply["provider"]      # and no router metadata: the answer says nothing of who served it
        elif _wants_metadata(request):
            reply["openrouter_metadata"] = router.metadata(model, provider, fault, tuple(
                shown_name(s) for s in listed_slugs(cfg)[:3]))
        data = orjson.dumps(reply)
        headers["X-Generation-Id"] = gen_id
        if cache_key is not None:
            headers["X-OpenRouter-Cache-Status"] = "MISS"
            if fault not in ("malformed", "choice_error"):
                self.cache.put(cache_key, reply)
        self._remember(gen_id, provider, body, usage, cost, finish)
        if fault == "malformed":
            data = data[: len(data) // 2]   # HTTP 200, JSON cut in the middle
        elif fault != "choice_error":
            self.ok += 1
        return self._json(200, data, headers)

    def _fault_answer(self, fault: str | None, provider: str, headers: dict[str, str],
                      model: str) -> web.Response | None:
        """The answer of a fault that answers instead of the guard, or None."""
        cfg = self.config
        if fault is None:
            return None
        if fault.startswith("avail_"):
            status, err_body = router.availability_error(fault, model, provider, cfg.retry_after)
            return self._json(status, err_body, headers)
        if fault.isdigit():
            code = int(fault)
            if code == 429:
                headers["Retry-After"] = cfg.retry_after
                msg = "Rate limit exceeded (simulated)"
            else:
                msg = f"Simulated upstream error {code}"
            return self._json(code, _error_body(code, msg, provider), headers)
        if fault == "error200":
            return self._json(200, _error_body(502, "Provider returned error (simulated)", provider), headers)
        if fault == "moderation403":
            return self._json(403, _error_body(
                403, "Your chosen model requires moderation and your input was flagged (simulated)",
                reasons=["violence", "illicit"], flagged_input="…a simulated excerpt of the flagged input…",
                provider_name=provider, model_slug="sim/guard"), headers)
        if fault == "refusal400":
            return self._json(400, _error_body(400, "The provider declined to answer this request (simulated)",
                                               provider, error_type="refusal"), headers)
        if fault == "credits402":
            return self._json(402, _error_body(402, "Insufficient credits: add more and retry (simulated)"), headers)
        if fault == "credits402_retry":
            headers["Retry-After"] = cfg.retry_after
            return self._json(402, _error_body(402, "In-flight spending budget reached (simulated)",
                                               limit_source="openrouter_in_flight_budget"), headers)
        return None

    def _remember(self, gen_id: str, provider: str, body: dict[str, Any], usage: Usage, cost: float,
                  finish: str) -> None:
        """Keep what GET /generation reports: the provider that served, and the total cost."""
        self.spent += cost
        self.generations[gen_id] = {
            "id": gen_id, "model": body.get("model", "sim-guard"), "provider_name": provider,
            "total_cost": cost, "is_byok": usage["is_byok"],
            "upstream_inference_cost": usage["cost_details"]["upstream_inference_cost"],
            "tokens_prompt": usage["prompt_tokens"], "tokens_completion": usage["completion_tokens"],
            "finish_reason": finish, "native_finish_reason": finish, "streamed": False, "cancelled": False,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        }
        if len(self.generations) > GENERATION_MEMORY:
            self.generations.popitem(last=False)

    async def handle_health(self, request: web.Request) -> web.Response:
        return self._json(200, b'{"status":"ok"}', {})

    async def handle_stats(self, request: web.Request) -> web.Response:
        """Counts for tests: chat requests received, and attempts seen for `?call_id=`."""
        stats: Stats = {"requests": self.served, "ok": self.ok, "rate_limited": self.rate_limited,
                                 "cache_hits": self.cache.hits, "cache_entries": len(self.cache.entries),
                                 "faults": self.faulted, "call_ids": len(self.attempts),
                                 "profile": self.config.profile.record()}
        cid = request.query.get("call_id")
        if cid is not None:
            stats["call_id"] = cid
            stats["attempts"] = self.attempts.get(cid, 0)
        return self._json(200, orjson.dumps(stats), {})

    async def handle_unknown(self, request: web.Request) -> web.Response:
        return self._json(404, _error_body(404, f"no route for {request.method} {request.path}"), {})


def build_app(config: ServerConfig) -> web.Application:
    sim = SimProvider(config)
    # Trajectories can be long; OpenRouter accepts large bodies, so should we.
    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in CHAT_PATHS:
        app.router.add_post(path, sim.handle_chat)
    for prefix in API_PREFIXES:
        app.router.add_get(prefix + "/models/{author}/{slug}/endpoints", sim.handle_endpoints)
        app.router.add_get(prefix + "/key", sim.handle_key)
        app.router.add_get(prefix + "/generation", sim.handle_generation)
        app.router.add_get(prefix + "/guardrails", sim.handle_guardrails)
    app.router.add_get("/health", sim.handle_health)
    app.router.add_get("/stats", sim.handle_stats)
    app.router.add_route("*", "/{tail:.*}", sim.handle_unknown)
    app["sim"] = sim
    return app


async def serve(config: ServerConfig, *, stop: asyncio.Event | None = None, announce: bool = True) -> None:
    """Run until `stop` is set (or SIGTERM/SIGINT when serving from the main thread).

    Prints `listening on http://HOST:PORT` once bound (the real port when port is 0).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread
            pass
    # access_log=None: no per-request logging (throughput). handler_cancellation: a client that
    # gives up on a stalled request frees its handler. Short shutdown: stalls must not delay exit.
    runner = web.AppRunner(build_app(config), access_log=None, handler_cancellation=True,
                           shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.host, config.port, backlog=1024)
        await site.start()
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        if announce:
            sys.stdout.write(f"listening on http://{shown}:{port}\n")
            sys.stdout.flush()
        await stop.wait()
    finally:
        await runner.cleanup()
        for sig in installed:
            loop.remove_signal_handler(sig)


def _loop_factory() -> Any:
    """uvloop when installed (about twice the throughput of the stdlib loop), else None."""
    if os.environ.get("GUARDEVAL_SIM_NO_UVLOOP"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_server(config: ServerConfig) -> int:
    """Blocking entry: serve until SIGTERM/SIGINT; exit code 0."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(config))
    except OSError as exc:   # e.g. the port is taken
        print(f"sim-server: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
