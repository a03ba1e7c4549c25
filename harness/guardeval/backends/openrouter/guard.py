"""OpenRouter's guard: the generic HTTP chat client (guardeval.backends.chat_http) judging answers
by OpenRouter's rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from guardeval.backends.base import Reply
from guardeval.backends.chat_http import ChatCompletionsGuard
from guardeval.backends.errors import AttemptError
from guardeval.backends.openrouter import errors as openrouter_errors
from guardeval.backends.openrouter import routing


class OpenRouterGuard(ChatCompletionsGuard):
    """OpenRouter: its error shapes (guardeval.backends.openrouter.errors), the resolved provider, the
    generation id and BYOK cost (the body, with the routing table, is `chat_body`'s); no response
    caching and router metadata asked for on every request (its record's `request_headers`,
    guardeval.backends.openrouter.routing)."""

    def _status_error(self, status: int, retry_after: float | None, text: str, reply: Reply) -> AttemptError:
        err = openrouter_errors.error_object(text)
        reply.previous_errors = routing.previous_errors(err)
        data = orjson.loads(text) if err is not None else None
        reply.router_metadata = routing.kept_metadata(data.get("openrouter_metadata") if isinstance(data, dict) else None)
        return openrouter_errors.classify_status(status, retry_after, text, reply)

    def _check_choice(self, choice: Mapping[str, Any], reply: Reply) -> None:
        openrouter_errors.check_choice(choice, reply)

    def _read_extras(self, data: Mapping[str, Any], headers: Mapping[str, str], reply: Reply,
                     clean: Callable[[str], str]) -> None:
        reply.response_headers = routing.kept_headers(headers, clean)
        meta = data.get("openrouter_metadata")
        reply.router_metadata = routing.kept_metadata(meta)
        # The documented provider (router metadata) first, the top-level field second.
        prov, _ = routing.served_by(reply.router_metadata, data.get("provider"))
        reply.provider = clean(prov) if prov is not None else None
        gen = data.get("id")
        gen = gen if isinstance(gen, str) and gen else headers.get("x-generation-id")
        reply.generation_id = clean(gen[:200]) if gen else None
