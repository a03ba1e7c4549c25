"""The simulated provider's router layer (docs/sim-server.md, "Router"): what OpenRouter does
around the model call, as its documentation describes it.

- A response cache (https://openrouter.ai/docs/guides/features/response-caching): on when a
  request says `X-OpenRouter-Cache: true`, or when the account's preset enables it
  (`--preset-cache on`), and then off for a request that says `X-OpenRouter-Cache: false`;
  `--preset-cache forced` caches whatever the request says (a router that does not honour the
  header: what guardeval's quarantine is for). The key is the API key, the model, the stream
  flag and the body; a hit is the stored answer under a new generation id, usage zeroed, with
  `X-OpenRouter-Cache-Status: HIT` and `X-OpenRouter-Cache-Source-Id`.
- Router metadata (`X-OpenRouter-Metadata: enabled`): `openrouter_metadata` in the shape of the
  OpenAPI spec's `OpenRouterMetadata`, with pipeline stages and fallback attempts drawn as faults.
- Availability errors: `error.availability` with the documented codes, drawn as `avail_CODE` faults.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from guardeval.backends.sim.router_faults import AVAILABILITY, FALLBACK_PROVIDER
from guardeval.backends.sim.wire import Attempt, Availability, ChatReply, RouterMetadata, Stage
from guardeval.canon import canonical_bytes, sha256_hex

__all__ = ["AVAILABILITY", "FALLBACK_PROVIDER", "ResponseCache", "availability_error", "cache_key", "cache_wanted",
           "guardrails_answer", "metadata"]

CACHE_MEMORY = 20_000

_STAGES: dict[str, Stage] = {
    "compression_stage": {"type": "context_compression", "name": "middle-out",
                          "summary": "Removed 1 middle message to fit the context (simulated)",
                          "data": {"messages_removed": 1}},
    "guardrail_stage": {"type": "guardrail", "name": "pii_redaction", "guardrail_id": "grd_sim",
                        "guardrail_scope": "api-key", "summary": "Redacted 1 email address (simulated)",
                        "data": {"action": "redacted", "detected": True}},
}


def cache_wanted(preset: str | None, header: str | None) -> bool:
    """Does this request go through the response cache?"""
    said = (header or "").strip().lower()
    if preset == "forced":
        return True
    if said in ("true", "1"):
        return True
    if said in ("false", "0"):
        return False
    return preset == "on"


def cache_key(api_key: str, body: dict[str, Any]) -> str:
    """The documented key: API key, model, stream flag and request body (the body holds the other two)."""
    return sha256_hex(api_key.encode() + b"\0" + canonical_bytes(body))


class ResponseCache:
    """Stored answers by cache key (bounded: the oldest go first)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, ChatReply] = OrderedDict()
        self.hits = 0

    def get(self, key: str) -> ChatReply | None:
        return self.entries.get(key)

    def put(self, key: str, reply: ChatReply) -> None:
        self.entries[key] = reply
        if len(self.entries) > CACHE_MEMORY:
            self.entries.popitem(last=False)

    def replay(self, stored: ChatReply, new_id: str, now: int) -> ChatReply:
        """A hit: the stored answer verbatim, a new id and time, every billable count 0."""
        self.hits += 1
        reply: ChatReply = orjson.loads(orjson.dumps(stored))   # a deep copy
        reply.update({"id": new_id, "created": now})
        reply["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cost": 0,
                          "is_byok": False, "cost_details": {"upstream_inference_cost": None,
                                                             "upstream_inference_prompt_cost": 0,
                                                             "upstream_inference_completions_cost": 0}}
        return reply


def metadata(model: str, provider: str, fault: str | None, listed: tuple[str, ...]) -> RouterMetadata:
    """`openrouter_metadata` of an answer served by `provider` (a display name), as the spec's
    `OpenRouterMetadata`: the endpoints (the serving one `selected`), the attempts, the pipeline."""
    served = FALLBACK_PROVIDER if fault == "metadata_drift" else provider
    names = list(dict.fromkeys([served, *listed]))
    tried: list[Attempt] = []
    if fault == "fallback_attempt":
        # The router tried a provider outside the pin first (it failed), then the pinned one answered.
        names.append(FALLBACK_PROVIDER)
        tried.append({"provider": FALLBACK_PROVIDER, "model": model, "status": 503})
    tried.append({"provider": served, "model": model, "status": 200})
    meta: RouterMetadata = {
        "requested": model, "strategy": "direct", "region": "sim", "summary": f"available={len(names)}",
        "attempt": len(tried), "is_byok": False,
        "endpoints": {"total": len(names), "available": [{"provider": n, "model": model, "selected": n == served}
                                                         for n in names]},
        "attempts": tried,
    }
    if fault in _STAGES:
        meta["pipeline"] = [_STAGES[fault].copy()]
    return meta


def availability_error(fault: str, model: str, provider: str, retry_after: str) -> tuple[int, bytes]:
    """(status, body) of an `avail_CODE` fault: the documented error envelope with `error.availability`."""
    code = fault.removeprefix("avail_")
    status, retryable = AVAILABILITY[code]
    av: Availability = {"code": code if code != "unknown" else "sim_unlisted_code",
                          "requested_models": [model], "affected_providers": [provider],
                          "excluded_by": ["provider.only"] if code == "constraint_filtered" else [],
                          "fallback_models": [], "constraint": "provider.only" if code == "constraint_filtered" else None,
                          "docs_url": f"https://openrouter.ai/docs/api-reference/errors#{code}"}
    if code != "unknown":
        av["retryable"] = retryable
        av["retry_after"] = float(retry_after) if retryable else None
    err = {"code": status, "message": f"Model availability: {code} (simulated)", "availability": av,
           "metadata": {"previous_errors": [{"provider": provider, "code": status, "status": status}]}}
    return status, orjson.dumps({"error": err})


def guardrails_answer(filters: bool) -> tuple[int, bytes]:
    """GET /guardrails: a management-key listing (`--guardrail-filters`: one guardrail with a
    content filter), else the 403 an inference key gets."""
    if not filters:
        return 403, orjson.dumps({"error": {"code": 403, "message": "Only management keys can perform this "
                                                                   "operation (simulated)"}})
    guardrail = {"id": "00000000-0000-4000-8000-000000000001", "name": "sim-pii", "include_byok_in_budgets": False,
                 "created_at": "2026-08-01T00:00:00Z", "content_filter_builtins": [{"slug": "pii", "action": "redact"}],
                 "content_filters": None, "description": "simulated guardrail that redacts PII"}
    return 200, orjson.dumps({"data": [guardrail], "total_count": 1})
