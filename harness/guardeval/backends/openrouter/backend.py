"""The `openrouter` back-end declared: OpenRouter's chat-completions API, with its routing table
(`provider`), its key, its preflight, its generation stats, and what it adds to an answer's
finish reason and usage (guardeval.backends.openrouter.normalise). On a loopback address it is the
simulated provider (guardeval.backends.sim)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guardeval.backends.backend import AuditFindings, Backend, FinalAnswer, register
from guardeval.backends.config_fields import Field
from guardeval.backends.openrouter.routing import NO_CACHE_HEADERS, REQUEST_HEADERS
from guardeval.backends.quarantine import Verdict

NAME = "openrouter"


# The `[provider]` table's keys: type and meaning (the parser and the reference page read them).
PROVIDER_FIELDS: tuple[Field, ...] = (
    Field("only", (list,), "the providers an answer may come from (an answer from another is quarantined as "
          "provider_drift)"),
    Field("order", (list,), "the providers to try in order (with fallbacks off, also the allowed ones)"),
    Field("allow_fallbacks", (bool,), "let OpenRouter route elsewhere when these fail (default false)"),
    Field("require_parameters", (bool,), "only providers that support every parameter sent (default true)"),
    Field("data_collection", (str,), "deny (default) or allow", choices=("deny", "allow")),
    Field("quantizations", (list,), "the quantizations a provider may serve"),
)


def _make_guard(config: Any, prompt: Any, max_connections: int) -> Any:
    from guardeval.backends.openrouter.guard import OpenRouterGuard

    return OpenRouterGuard(config, prompt, max_connections=max_connections)


def _renderer(config: Any, prompt: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    from guardeval.backends.chat_body import chat_body

    return functools.partial(chat_body, config, prompt)


def _complete(data: dict[str, Any]) -> None:
    if "provider" in data:
        # docs/design.md §8 defaults: a pinned provider means no silent fallback, no parameter
        # dropping, no data collection unless the config says otherwise.
        data["provider"] = {"allow_fallbacks": False, "require_parameters": True, "data_collection": "deny",
                            **data["provider"]}


def _quarantine(raw: Mapping[str, Any], allowed: Sequence[str]) -> Verdict | None:
    from guardeval.backends.openrouter.quarantine import checks

    return checks(raw, allowed)


def _normalise_reply(choice: Mapping[str, Any], data: Mapping[str, Any], reply: Any,
                     clean: Callable[[str], str]) -> None:
    from guardeval.backends.openrouter.normalise import normalise_reply

    normalise_reply(choice, data, reply, clean)


def _audit(config: Any, key: str | None, answers: list[FinalAnswer], concurrency: int) -> tuple[AuditFindings, bool]:
    from guardeval.backends.openrouter.audit import audit

    return audit(config, key, answers, concurrency)


def _raw_fields(reply: Any) -> dict[str, Any]:
    """What the router did (guardeval.backends.openrouter.routing), on the raw line: read by `decide`."""
    out: dict[str, Any] = {}
    if reply.response_headers:
        out["response_headers"] = reply.response_headers
    if reply.router_metadata is not None:
        out["openrouter_metadata"] = reply.router_metadata
    if reply.previous_errors:
        out["previous_errors"] = reply.previous_errors
    return out


def _preflight(config: Any, prompt: Any, work: Any) -> Any:
    from guardeval.backends.openrouter.preflight import run_preflight

    return run_preflight(config, work)


def allowed_providers(config: Any) -> tuple[str, ...]:
    """Every slug of `provider.only`, else every slug of `provider.order` when fallbacks are off;
    () when routing is left to OpenRouter."""
    p = config.provider or {}
    if p.get("only"):
        return tuple(str(s) for s in p["only"])
    if p.get("order") and p.get("allow_fallbacks") is False:
        return tuple(str(s) for s in p["order"])
    return ()


BACKEND = register(Backend(
    name=NAME, make_guard=_make_guard, make_renderer=_renderer,
    default_base_url="https://openrouter.ai/api/v1", default_api_key_env="OPENROUTER_API_KEY",
    fields=frozenset({"provider"}), provider_fields=PROVIDER_FIELDS, complete=_complete, simulated_when_local=True,
    preflight=_preflight, server="OpenRouter", allowed_providers=allowed_providers, audit_providers=_audit,
    quarantine=_quarantine, normalise_reply=_normalise_reply,
    # No response caching (wins over an account preset), router metadata in every answer.
    request_headers=REQUEST_HEADERS, no_cache_headers=NO_CACHE_HEADERS, raw_fields=_raw_fields,
))
