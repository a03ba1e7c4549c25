"""The `openai-compatible` back-end declared: any OpenAI-compatible chat-completions server (vLLM,
llama.cpp's server, mlx_lm.server). No key required, no routing table; its preflight probes which
structured-output dialect the server accepts (`structured_output = "auto"`, the default)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.backend import Backend, register

NAME = "openai-compatible"


def _make_guard(config: Any, prompt: Any, max_connections: int) -> Any:
    from guardeval.backends.chat_http import OpenAICompatibleGuard

    return OpenAICompatibleGuard(config, prompt, max_connections=max_connections)


def _renderer(config: Any, prompt: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    from guardeval.backends.chat_body import chat_body

    return functools.partial(chat_body, config, prompt)


def keep_native_finish_reason(choice: Mapping[str, Any], data: Mapping[str, Any], reply: Any,
                     clean: Callable[[str], str]) -> None:
    # An upstream's own finish reason, when the server reports one (a proxy in OpenRouter's
    # shape does): kept as text, redacted, at most 200 characters. Usage is the generic
    # client's alone: token counts and a valid `cost` (no BYOK parts; those are OpenRouter's).
    native = choice.get("native_finish_reason")
    reply.native_finish_reason = clean(native[:200]) if isinstance(native, str) else None


def _preflight(config: Any, prompt: Any, work: Any) -> Any:
    from guardeval.backends.local_preflight import run_local_preflight

    return run_local_preflight(config, prompt, work)


BACKEND = register(Backend(
    name=NAME, make_guard=_make_guard, make_renderer=_renderer, default_base_url="http://127.0.0.1:8000/v1",
    # Servers differ: the preflight finds out which shape this one accepts.
    default_dialect="auto", dialects=frozenset({"json_schema", "json_object", "none", "auto"}),
    preflight=_preflight, normalise_reply=keep_native_finish_reason,
))
