"""Preflight: refuse to spend when OpenRouter cannot serve the run as configured.

Before a paid run (and on its own: `guardeval preflight`), ask OpenRouter:

- `GET /models/{author}/{slug}/endpoints` (https://openrouter.ai/docs/api/api-reference/endpoints/list-endpoints):
  `data.endpoints[]` with `provider_name`, `tag` (the routing slug), `context_length`,
  `max_completion_tokens`, `pricing.{prompt, completion, request}` (USD per token, as strings) and
  `supported_parameters`. Is every pinned provider listed; does it answer under a name
  guardeval recognises (`guardeval.backends.openrouter.providers`); does it support every parameter the
  body sends (`response_format` with a json_schema needs `structured_outputs`); does the
  longest prompt plus `max_tokens` fit its context; what does the run cost at its prices?
- `GET /key` (https://openrouter.ai/docs/api/api-reference/api-keys/get-current-key):
  `data.limit_remaining` (null: the key has no limit) against the projected cost (capped by
  `--max-cost`). The account balance itself (`GET /credits`) needs a management key, so a key
  without a limit is reported as unchecked, not as a failure.
- The router (docs/design.md §7, "The router"): every request sends `X-OpenRouter-Cache: false`
  (no response caching, even where an account preset enables it) and `X-OpenRouter-Metadata:
  enabled`, and the body carries no `plugins` or `transforms`. `GET /guardrails`
  (https://openrouter.ai/docs/api-reference/guardrails/list-guardrails) lists the account's
  guardrails with a management key only: with one, a guardrail with content filters (they may
  redact or flag the stimulus) is a warning; with an inference key the check is skipped, said
  why. Whatever the account does, an answer that is a cache hit or whose router metadata shows
  a pipeline stage is quarantined (`response_cache_hit`, `stimulus_mutated`).
- A model-availability error (`error.availability`) on the endpoint list is reported with its
  code, whether it is retryable, what excluded the endpoints and the docs link.

Each check ends `ok`, `warn`, `skip` (could not be checked, said why) or `fail`; any `fail`
means the run would not be served as configured (`guardeval` exits 2). Network problems end
fast as a `fail` naming the host (a bounded deadline per request), never a hang.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from guardeval.backends import http_get as http
from guardeval.backends.checks import Check, CheckList, Workload
from guardeval.backends.config import GuardConfig
from guardeval.backends.http_get import shown
from guardeval.backends.openrouter import availability, providers, routing
from guardeval.backends.openrouter.errors import error_object, message_of
from guardeval.backends.openrouter.request_schema import problem as request_problem

TIMEOUT_S = 20.0
# Body keys whose support an endpoint lists in `supported_parameters` (same names).
_PLAIN_PARAMETERS = ("temperature", "max_tokens", "seed", "top_p", "top_k", "stop", "frequency_penalty",
                     "presence_penalty", "repetition_penalty", "min_p", "top_a", "logit_bias", "logprobs",
                     "top_logprobs", "tools", "tool_choice")


@dataclass
class Preflight(CheckList):
    base_url: str
    model: str
    checks: list[Check] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)   # the endpoints that can serve the run
    projected_cost_usd: float | None = None
    credit_left_usd: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "base_url": self.base_url, "model": self.model,
                "checks": [c.__dict__ for c in self.checks], "endpoints": self.endpoints,
                "projected_cost_usd": self.projected_cost_usd, "credit_left_usd": self.credit_left_usd}


def parameters_sent(body: Mapping[str, Any]) -> list[str]:
    """The `supported_parameters` names a body needs."""
    needed = [k for k in _PLAIN_PARAMETERS if k in body]
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping):
        needed.append("response_format")
        if fmt.get("type") == "json_schema":
            needed.append("structured_outputs")
    return needed


def run_preflight(config: GuardConfig, work: Workload, *, timeout_s: float = TIMEOUT_S) -> Preflight:
    """Blocking entry point (its own event loop)."""
    return anyio.run(preflight, config, work, timeout_s)


async def preflight(config: GuardConfig, work: Workload, timeout_s: float = TIMEOUT_S) -> Preflight:
    base = config.effective_base_url or ""
    result = Preflight(base_url=base, model=config.model)
    problem = request_problem(work.body)
    result.add("request", "fail" if problem else "ok",
               f"the rendered body does not match OpenRouter's documented request schema: {problem}" if problem
               else "the rendered body matches OpenRouter's documented request schema")
    author, _, slug = config.model.partition("/")
    if not author or not slug:
        result.add("model", "fail", f"model {config.model!r} is not AUTHOR/SLUG")
        return result
    key = os.environ.get(config.api_key_env) or None if config.api_key_env else None
    async with http.client() as client:
        try:
            listing = await http.get_json(client, http.url(base, "models", author, slug, "endpoints"), key=key,
                                          timeout_s=timeout_s)
        except http.FetchError as exc:
            result.add("reach", "fail", f"{exc}; check the network (or skip the preflight with --no-preflight)")
            return result
        _judge_endpoints(result, config, work, listing, key_env=config.api_key_env)
        try:
            key_info = await http.get_json(client, http.url(base, "key"), key=key, timeout_s=timeout_s)
        except http.FetchError as exc:
            result.add("credit", "fail", str(exc))
            return result
        _judge_credit(result, work, key_info, key_env=config.api_key_env)
        _judge_router(result, work)
        try:
            guardrails = await http.get_json(client, http.url(base, "guardrails"), key=key, timeout_s=timeout_s)
        except http.FetchError as exc:
            result.add("guardrails", "skip", f"the account's guardrails could not be listed: {exc}")
        else:
            _judge_guardrails(result, guardrails)
    return result


def _judge_router(result: Preflight, work: Workload) -> None:
    stages = sorted({"plugins", "transforms"} & set(work.body))
    if stages:
        result.add("router", "fail", f"the body sends {', '.join(stages)}: pipeline stages that may rewrite the "
                                     "stimulus or the answer (every answer would be quarantined as stimulus_mutated)")
        return
    sent = ", ".join(f"{k}: {v}" for k, v in routing.REQUEST_HEADERS.items())
    result.add("router", "ok", f"every request sends {sent} (response caching off even where a preset enables it; "
                               "router metadata in every answer); a cache hit is quarantined as response_cache_hit, "
                               "a pipeline stage in the metadata as stimulus_mutated")


def _judge_guardrails(result: Preflight, answer: http.Answer) -> None:
    data = answer.data.get("data") if isinstance(answer.data, dict) else None
    if answer.status != 200 or not isinstance(data, list):
        why = "needs a management key" if answer.status in (401, 403) else f"answered HTTP {answer.status}"
        result.add("guardrails", "skip", f"listing the account's guardrails {why}: a guardrail that redacts or flags "
                                         "content would show as a pipeline stage, quarantined as stimulus_mutated "
                                         "(check the guardrails assigned to this key in OpenRouter's settings)")
        return
    filtering = [g for g in data if isinstance(g, dict) and (g.get("content_filters") or g.get("content_filter_builtins"))]
    if filtering:
        names = ", ".join(shown(g.get("name"), 60) for g in filtering[:8])
        result.add("guardrails", "warn", f"{len(filtering)} guardrail(s) with content filters ({names}): what they "
                                         "redact or flag is quarantined as stimulus_mutated; unassign them from this key")
    else:
        result.add("guardrails", "ok", f"{len(data)} guardrail(s), none with content filters")


def _refused(answer: http.Answer, what: str, key_env: str | None) -> str:
    av = availability.read(error_object(answer.text))
    if av is not None:
        return f"{what}: {availability.message(answer.status, av, message_of(answer.text))}"
    hint = ""
    if answer.status == 401:
        hint = f" (is ${key_env} set to a valid key?)" if key_env else " (a key is needed)"
    return f"{what}: HTTP {answer.status}: {shown(message_of(answer.text), 300)}{hint}"


def _judge_endpoints(result: Preflight, config: GuardConfig, work: Workload, listing: http.Answer,
                     key_env: str | None) -> None:
    data = listing.data.get("data") if isinstance(listing.data, dict) else None
    endpoints = data.get("endpoints") if isinstance(data, dict) else None
    if listing.status != 200 or not isinstance(endpoints, list):
        what = f"listing the endpoints of {config.model}"
        result.add("endpoints", "fail", _refused(listing, what, key_env) if listing.status != 200
                   else f"{what}: the answer has no data.endpoints list")
        return
    endpoints = [e for e in endpoints if isinstance(e, dict)]
    allowed = config.allowed_providers
    listed = ", ".join(f"{shown(e.get('tag'))} ({shown(e.get('provider_name'))})" for e in endpoints) or "none"
    if allowed:
        chosen = [e for e in endpoints if _serves_as(e, allowed)]
        missing = [s for s in allowed if not any(_serves_as(e, (s,)) for e in endpoints)]
        if not chosen:
            result.add("provider", "fail", f"no pinned provider ({', '.join(allowed)}) serves {config.model}; "
                                           f"listed: {listed}")
            return
        result.add("provider", "warn" if missing else "ok",
                   (f"not listed for {config.model}: {', '.join(missing)}; " if missing else "")
                   + f"serving: {', '.join(shown(e.get('tag')) for e in chosen)}")
    else:
        chosen = endpoints
        if not chosen:
            result.add("provider", "fail", f"no endpoint serves {config.model}")
            return
        result.add("provider", "warn", "no provider is pinned: OpenRouter routes to any of " + listed)
    needed = parameters_sent(work.body)
    usable: list[dict[str, Any]] = []
    for e in chosen:
        why = _endpoint_problems(e, config, work, needed, allowed)
        tag = shown(e.get("tag"))
        if why:
            result.add(f"endpoint {tag}", "fail" if len(chosen) == 1 else "warn", "; ".join(why))
        else:
            usable.append(e)
    if not usable:
        if len(chosen) > 1:
            result.add("endpoints", "fail", "no allowed endpoint can serve the run as configured (see above)")
        return
    prices = [_prices(e) for e in usable]
    known = [p for p in prices if p is not None]
    result.endpoints = [{"tag": shown(e.get("tag")), "provider_name": shown(e.get("provider_name")),
                         "context_length": e.get("context_length"), "usd_per_mtok": _per_mtok(p)}
                        for e, p in zip(usable, prices)]
    contexts = [c for c in (_count(e.get("context_length")) for e in usable) if c is not None]
    if work.longest_prompt_tokens is not None and contexts:
        result.add("context", "ok", f"the longest prompt (~{work.longest_prompt_tokens} tokens, chars / 4) plus "
                                    f"max_tokens {config.max_tokens} fits a context of {min(contexts)}")
    tags = ", ".join(shown(e.get("tag")) for e in usable)
    result.add("parameters", "ok", f"{tags} support{'s' if len(usable) == 1 else ''} {', '.join(needed) or 'nothing'}"
                                    " sent")
    if not known:
        result.add("prices", "skip", "the endpoint list gives no usable prices")
        return
    p_in, p_out, p_req = (max(p[i] for p in known) for i in range(3))
    notes = []
    for name, mine, theirs in (("price_in_per_mtok", config.price_in_per_mtok, p_in * 1e6),
                               ("price_out_per_mtok", config.price_out_per_mtok, p_out * 1e6)):
        if mine is not None and not math.isclose(mine, theirs, rel_tol=1e-6, abs_tol=1e-9):
            notes.append(f"config {name} = {mine:g}, provider {theirs:g}")
    if work.calls is not None and work.prompt_tokens is not None:
        result.projected_cost_usd = (work.prompt_tokens * p_in + work.calls * config.max_tokens * p_out
                                     + work.calls * p_req)
    line = f"USD {p_in * 1e6:g} / {p_out * 1e6:g} per million prompt / completion tokens"
    if result.projected_cost_usd is not None:
        line += f"; {work.calls} calls cost at most ${result.projected_cost_usd:.4f} (prompt chars / 4, full max_tokens)"
    result.add("prices", "warn" if notes else "ok", line + (f" ({'; '.join(notes)}; the projection uses the "
                                                             "provider's)" if notes else ""))


def _endpoint_problems(e: Mapping[str, Any], config: GuardConfig, work: Workload, needed: list[str],
                       allowed: tuple[str, ...]) -> list[str]:
    why: list[str] = []
    name = shown(e.get("provider_name"))
    if allowed and not providers.is_allowed(e.get("provider_name"), allowed):
        why.append(f"it answers as {name!r}, a name guardeval does not match to {', '.join(allowed)} (every "
                   "answer would be quarantined as drift: add the pair to harness/guardeval/backends/openrouter/providers.py)")
    supported = e.get("supported_parameters")
    supported = {str(x) for x in supported} if isinstance(supported, list) else set()
    lacking = [p for p in needed if p not in supported]
    if lacking:
        why.append(f"does not support {', '.join(lacking)}")
    max_out = _count(e.get("max_completion_tokens"))
    if max_out is not None and config.max_tokens > max_out:
        why.append(f"max_tokens {config.max_tokens} exceeds its max_completion_tokens {max_out}")
    context = _count(e.get("context_length"))
    if work.longest_prompt_tokens is not None and context is not None \
            and work.longest_prompt_tokens + config.max_tokens > context:
        why.append(f"the longest prompt (~{work.longest_prompt_tokens} tokens, chars / 4) plus max_tokens "
                   f"{config.max_tokens} exceeds its context length {context}")
    return why


def _judge_credit(result: Preflight, work: Workload, answer: http.Answer, key_env: str | None) -> None:
    data = answer.data.get("data") if isinstance(answer.data, dict) else None
    if answer.status != 200 or not isinstance(data, dict):
        result.add("credit", "fail", _refused(answer, "reading the key", key_env) if answer.status != 200
                   else "reading the key: the answer has no data object")
        return
    left = data.get("limit_remaining")
    needed = result.projected_cost_usd
    if needed is not None and work.max_cost is not None:
        needed = min(needed, work.max_cost)
    if left is None:
        result.add("credit", "skip", "the key has no spending limit; the account balance is not readable with "
                                     "an inference key (GET /credits needs a management key)")
        return
    if not _usd(left):
        result.add("credit", "fail", f"the key's limit_remaining is not a number: {shown(left)}")
        return
    result.credit_left_usd = float(left)
    if needed is None:
        result.add("credit", "skip", f"${float(left):.4f} left on the key; no cost projection to compare "
                                     "(give a cohort and prices)")
    elif float(left) < needed:
        result.add("credit", "fail", f"${float(left):.4f} left on the key, the run may cost up to ${needed:.4f}")
    else:
        result.add("credit", "ok", f"${float(left):.4f} left on the key, the run may cost up to ${needed:.4f}")


def _serves_as(e: Mapping[str, Any], slugs: tuple[str, ...]) -> bool:
    """Is endpoint `e` one of the providers `slugs` name? By its routing tag (a base slug also
    pins its variants: `deepinfra` allows `deepinfra/turbo`), else by its provider name."""
    tag = e.get("tag")
    if isinstance(tag, str) and tag:
        tag = tag.lower()
        return any(tag == s.lower() or ("/" not in s and providers.base_slug(tag) == s.lower()) for s in slugs)
    return providers.is_allowed(e.get("provider_name"), slugs)


def _prices(e: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """(prompt, completion, request) in USD per token / per request; None if not finite numbers ≥ 0."""
    pricing = e.get("pricing")
    if not isinstance(pricing, dict):
        return None
    out = []
    for name in ("prompt", "completion", "request"):
        value = pricing.get(name, "0" if name == "request" else None)
        try:
            number = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else math.nan
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number >= 0):
            return None
        out.append(number)
    return out[0], out[1], out[2]


def _per_mtok(p: tuple[float, float, float] | None) -> dict[str, float] | None:
    return None if p is None else {"prompt": p[0] * 1e6, "completion": p[1] * 1e6}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _usd(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
