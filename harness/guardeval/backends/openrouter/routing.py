"""What OpenRouter's router did with a request, read from the answer (docs/design.md §7, §10).

Three things can make an answer other than a fresh reply of the pinned provider to the recorded
stimulus, and none raises an error:

- **Response caching** (https://openrouter.ai/docs/guides/features/response-caching): a hit is
  the stored answer of an earlier identical request, under a new generation id, with zeroed
  usage and the headers `X-OpenRouter-Cache-Status: HIT` and `X-OpenRouter-Cache-Source-Id`
  (the original generation). guardeval asks for no caching on every request
  (`X-OpenRouter-Cache: false`, which wins over an account preset) and quarantines a hit anyway
  (`cache_hit`).
- **Pipeline stages** (router metadata, https://openrouter.ai/docs/guides/features/router-metadata;
  the OpenAPI spec's `OpenRouterMetadata.pipeline[]`, `PipelineStage`, `PipelineStageType`):
  every type the spec lists may change what the model read or what came back —
  `context_compression` (input cut), `guardrail` (redaction, flagging), `plugin` (web, file
  parser, moderation, healing), `server_tools` (tool results added to the context),
  `response_healing` (output rewritten) — so any stage quarantines (`mutating_stage`); a type
  the spec does not list counts as one too: what it does is not known.
- **Provider identity**: the spec's `ChatResult` has no top-level `provider`; the documented one
  is `openrouter_metadata` — the `selected` entry of `endpoints.available[]`, and `attempts[]`
  (provider, model, HTTP status of each upstream try). `served_by` reads it first and falls back
  to the top-level field.

Everything here takes what the raw line holds (hostile, possibly damaged): any shape is read
without raising.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

# Response headers kept in the raw line (lower case, as aiohttp/httpx give them).
CACHE_STATUS = "x-openrouter-cache-status"
CACHE_SOURCE = "x-openrouter-cache-source-id"
GENERATION_ID = "x-generation-id"
KEPT_HEADERS = (CACHE_STATUS, CACHE_SOURCE, "x-openrouter-cache-ttl", GENERATION_ID)
HEADER_LIMIT = 200      # characters kept of one header value
# Sent on every OpenRouter request: no response caching (wins over an account preset that
# enables it), and router metadata in every answer.
NO_CACHE_HEADERS = {"X-OpenRouter-Cache": "false"}
REQUEST_HEADERS = {**NO_CACHE_HEADERS, "X-OpenRouter-Metadata": "enabled"}
# PipelineStageType of the OpenAPI spec (all of them may alter input or output, see above).
MUTATING_STAGES = ("guardrail", "plugin", "server_tools", "response_healing", "context_compression")
NAME_LIMIT = 80


METADATA_LIMIT = 64 << 10    # bytes of router metadata kept as received; above, a slim copy (`slim_metadata`)


def slim_metadata(meta: Mapping[str, Any], size: int) -> dict[str, Any]:
    """What the checks read from an oversized `openrouter_metadata` (a hostile provider could
    double every raw line): the selected endpoints, the first attempts and pipeline stages, each
    field bounded, and the size it had."""
    endpoints = meta.get("endpoints")
    available = endpoints.get("available") if isinstance(endpoints, Mapping) else None
    selected = [{"provider": _text(e.get("provider")), "selected": True} for e in available[:1024]
                if isinstance(e, Mapping) and e.get("selected") is True][:8] if isinstance(available, list) else []
    tried = [{"provider": p, "status": st} for p, st in attempts(meta)[:32]]
    pipeline = meta.get("pipeline")
    stages = [{"type": _text(st.get("type")), "name": _text(st.get("name"))} if isinstance(st, Mapping) else "not an object"
              for st in pipeline[:32]] if isinstance(pipeline, list) else []
    out: dict[str, Any] = {"guardeval_slimmed_from_bytes": size, "endpoints": {"available": selected},
                           "attempts": tried}
    if stages:
        out["pipeline"] = stages
    return out


def kept_metadata(meta: Any) -> dict[str, Any] | None:
    """`openrouter_metadata` for the raw line: as received up to METADATA_LIMIT bytes, else slim."""
    if not isinstance(meta, dict):
        return None
    size = len(orjson.dumps(meta))
    return meta if size <= METADATA_LIMIT else slim_metadata(meta, size)


def kept_headers(headers: Mapping[str, str], clean: Callable[[str], str]) -> dict[str, str]:
    """The response headers that say what the router did, bounded and cleaned."""
    out: dict[str, str] = {}
    for name in KEPT_HEADERS:
        value = headers.get(name)
        if value is not None:
            out[name] = clean(str(value)[:HEADER_LIMIT])
    return out


def _text(value: Any, limit: int = NAME_LIMIT) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _billed_nothing(usage: Any) -> bool:
    """Usage with every token count present and 0 (a cache hit bills nothing)."""
    if not isinstance(usage, Mapping):
        return False
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens")]
    return all(type(c) is int and c == 0 for c in counts)


def cache_hit(headers: Any, usage: Any) -> tuple[bool, str | None]:
    """(is this answer a response-cache hit, the generation it replays). A hit: the status
    header says HIT, or a cache source is named and the usage is zeroed."""
    if not isinstance(headers, Mapping):
        return False, None
    source = _text(headers.get(CACHE_SOURCE), HEADER_LIMIT)
    status = headers.get(CACHE_STATUS)
    hit = (isinstance(status, str) and status.strip().upper() == "HIT") or (source is not None and _billed_nothing(usage))
    return hit, source if hit else None


def _stages(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pipeline = meta.get("pipeline")
    return [s for s in pipeline if isinstance(s, Mapping)] if isinstance(pipeline, list) else []


def mutating_stage(meta: Any) -> str | None:
    """The first pipeline stage that may have altered input or output, as `type name`, or None."""
    if not isinstance(meta, Mapping):
        return None
    pipeline = meta.get("pipeline")
    if isinstance(pipeline, list):
        for stage in pipeline:
            if not isinstance(stage, Mapping):
                return "a pipeline stage that is not an object"
            kind = _text(stage.get("type")) or "untyped"
            name = _text(stage.get("name"))
            shown = kind if kind in MUTATING_STAGES else f"{kind} (a stage type the spec does not list)"
            return f"{shown} {name}" if name else shown
    return None


def selected_provider(meta: Any) -> str | None:
    """The provider of the `selected` endpoint in router metadata (None: none, or several)."""
    if not isinstance(meta, Mapping):
        return None
    endpoints = meta.get("endpoints")
    available = endpoints.get("available") if isinstance(endpoints, Mapping) else None
    if not isinstance(available, list):
        return None
    chosen = {p for e in available if isinstance(e, Mapping) and e.get("selected") is True
              and (p := _text(e.get("provider"))) is not None}
    return chosen.pop() if len(chosen) == 1 else None


def attempts(meta: Any) -> list[tuple[str | None, int | None]]:
    """(provider, HTTP status) of each upstream attempt the router made, in order."""
    if not isinstance(meta, Mapping) or not isinstance(meta.get("attempts"), list):
        return []
    out: list[tuple[str | None, int | None]] = []
    for a in meta["attempts"]:
        if isinstance(a, Mapping):
            status = a.get("status")
            out.append((_text(a.get("provider")), status if type(status) is int else None))
    return out


def served_by(meta: Any, top_level: Any) -> tuple[str | None, str]:
    """(the provider that answered, where that was read): the selected endpoint of router
    metadata, else its last attempt with a 2xx status, else the top-level `provider` field."""
    chosen = selected_provider(meta)
    if chosen is not None:
        return chosen, "openrouter_metadata.endpoints"
    answered = [p for p, status in attempts(meta) if p is not None and status is not None and 200 <= status < 300]
    if answered:
        return answered[-1], "openrouter_metadata.attempts"
    top = _text(top_level)
    return (top, "provider") if top is not None else (None, "")


def tried_outside(meta: Any, allowed: Callable[[str], bool]) -> str | None:
    """A provider outside the pin that the router sent the request to (an attempt, failed or not),
    or None. The rule (docs/design.md §10): such an attempt is drift even when an allowed provider
    answered in the end — the pin (`only`, fallbacks off) was not honoured, so the routing the
    run is attributed to is not the routing that ran, and the stimulus reached a provider the
    config excludes (data policy)."""
    for provider, _ in attempts(meta):
        if provider is not None and not allowed(provider):
            return provider
    return None


def previous_errors(err: Any) -> list[dict[str, Any]]:
    """`error.metadata.previous_errors`, slim: {provider, code, status} per earlier failed attempt."""
    meta = err.get("metadata") if isinstance(err, Mapping) else None
    items = meta.get("previous_errors") if isinstance(meta, Mapping) else None
    if not isinstance(items, list):
        return []
    out: list[dict[str, Any]] = []
    for item in items[:32]:
        if not isinstance(item, Mapping):
            continue
        provider = _text(item.get("provider")) or _text(item.get("provider_name"))
        code, status = item.get("code"), item.get("status")
        out.append({"provider": provider,
                    "code": code if type(code) is int else _text(code),
                    "status": status if type(status) is int else None})
    return out
