"""Chat-completions back-ends over HTTP: `openrouter` and `openai-compatible`.

One wire format, two flavours: OpenRouter adds the `provider` routing table, its own error
shapes (judged by `guards.openrouter.errors`), the resolved upstream provider, the generation id
and BYOK cost in the reply. `send` reads an answer (the transport); `judge` decides what it
amounts to, through hooks the flavours override. The HTTP client is httpx over the aiohttp
transport (httpx's own pool is CPU-bound at high concurrency, docs/design.md §11).
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from guards.base import Guard, Reply
from guards.chat_body import chat_body
from guards.config import GuardConfig
from guards.errors import AttemptError, CallFailed, FatalError, TransientError
from guards.openrouter import errors as openrouter_errors
from guards.openrouter.errors import CONTEXT_RE, TRANSIENT_STATUS, message_of
from guards.prompts import Prompt
from harness.lru import LRU


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ChatCompletionsGuard(Guard):
    """OpenAI-style `/chat/completions`; subclasses choose the extras."""

    def __init__(self, config: GuardConfig, prompt: Prompt, *, max_connections: int = 256) -> None:
        super().__init__(config, prompt)
        # Parsed once: httpx re-parses a string URL on every request.
        self._url = httpx.URL((config.effective_base_url or "").rstrip("/") + "/chat/completions")
        # httpx Request/Response over the aiohttp transport, called directly: the client layer
        # (cookies, auth flows, redirects) costs CPU per call and does nothing for this API.
        self._transport = AiohttpTransport(limits=httpx.Limits(max_connections=max_connections,
                                                               max_keepalive_connections=max_connections))
        # Connection timeouts here; the whole-attempt deadline is `fail_after` in `send` (a per-read
        # timeout as well would only re-arm a timer on every chunk).
        t = config.timeout_s
        self._timeout = {"connect": t, "pool": t}
        # Serialised bodies by body object, bounded like the dispatcher's body cache (a large run
        # has ~100,000 distinct bodies; only those of calls in flight are needed).
        self._payloads: LRU[int, tuple[Mapping[str, Any], bytes]] = LRU(1024)

    # -- stimulus -------------------------------------------------------------------------
    def render(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        return chat_body(self.config, self.prompt, instance)

    # -- transport ------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        name = self.config.api_key_env
        return os.environ.get(name) or None if name else None

    async def send(self, body: Mapping[str, Any], call_id: str) -> Reply:
        key = self._api_key()
        headers = {"Content-Type": "application/json", "X-Call-Id": call_id}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = self._payload(body)
        try:
            # Overall deadline as well as httpx's per-phase timeouts: a stalled body counts too.
            with anyio.fail_after(self.config.timeout_s):
                request = httpx.Request("POST", self._url, content=payload, headers=headers,
                                        extensions={"timeout": self._timeout})
                resp = await self._transport.handle_async_request(request)
                try:
                    text = (await resp.aread()).decode("utf-8", errors="replace")
                finally:
                    await resp.aclose()
        except TimeoutError:
            raise TransientError("timeout", f"no complete answer within {self.config.timeout_s:g} s") from None
        except httpx.TimeoutException as exc:
            raise TransientError("timeout", f"timeout: {type(exc).__name__}") from None
        except (httpx.TransportError, OSError) as exc:
            raise TransientError("connection", f"{type(exc).__name__}: {_redact(str(exc), key)}") from None
        return self.judge(resp.status_code, resp.headers, _redact(text, key))

    # -- judging an answer (the transport above only reads it) ---------------------------------
    def judge(self, status: int, headers: Mapping[str, str], text: str) -> Reply:
        """The reply of an answer that was read in full, or the error it amounts to."""
        reply = Reply(status=status, raw=text, answers_call_id=headers.get("x-call-id"))
        if status != 200:
            raise self._status_error(status, parse_retry_after(headers.get("retry-after")), text, reply)
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise TransientError("malformed", "HTTP 200 with a body that is not JSON", reply) from None
        if not isinstance(data, dict):
            raise TransientError("malformed", "HTTP 200 with a JSON body that is not an object", reply)
        if "error" in data:
            raise TransientError("error200", f"HTTP 200 carrying an error: {message_of(text)}", reply)
        try:
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            content = msg.get("content")
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise TransientError("malformed", "HTTP 200 without choices[0]", reply) from None
        self._check_choice(choice, reply)
        if content is not None and not isinstance(content, str):
            raise TransientError("malformed", "message content is not a string", reply)
        usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
        reply.content = content
        reply.finish_reason = finish if isinstance(finish, str) else None
        native = choice.get("native_finish_reason")
        reply.native_finish_reason = native if isinstance(native, str) else None
        reply.usage = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens", "cost")
                       if k in usage}
        self._read_extras(data, headers, usage, reply)
        return reply

    def _status_error(self, status: int, retry_after: float | None, text: str, reply: Reply) -> AttemptError:
        """A non-200 answer of a self-hosted server (vLLM, llama.cpp, mlx_lm.server)."""
        message = f"HTTP {status}: {message_of(text)}"
        if status == 413:
            return CallFailed("request_too_large", message, reply)
        if status in TRANSIENT_STATUS or status >= 500:
            return TransientError(f"http_{status}", message, reply, retry_after=retry_after)
        if status == 400 and CONTEXT_RE.search(text[:4096]):
            # vLLM and llama.cpp answer 400 for a prompt longer than the context: a failure of
            # this call (as with the mlx back-end), not a configuration error.
            return CallFailed("context_overflow", message, reply)
        return FatalError(f"http_{status}", message, reply)

    def _check_choice(self, choice: Mapping[str, Any], reply: Reply) -> None:
        """Dialect hook: raise for a choice that is not an answer."""

    def _read_extras(self, data: Mapping[str, Any], headers: Mapping[str, str], usage: Mapping[str, Any],
                     reply: Reply) -> None:
        """Dialect hook: fields beyond the OpenAI shape (OpenRouter's provider, generation id, BYOK cost)."""

    def _payload(self, body: Mapping[str, Any]) -> bytes:
        """Serialised body, once per body object (repetitions and retries reuse one body)."""
        hit = self._payloads.get(id(body))
        if hit is None or hit[0] is not body:
            hit = self._payloads.put(id(body), (body, orjson.dumps(body)))
        return hit[1]

    async def aclose(self) -> None:
        await self._transport.aclose()


class OpenRouterGuard(ChatCompletionsGuard):
    """OpenRouter: its error shapes (guards.openrouter.errors), the resolved provider, the
    generation id and BYOK cost (the body, with the routing table, is `chat_body`'s)."""

    def _status_error(self, status: int, retry_after: float | None, text: str, reply: Reply) -> AttemptError:
        return openrouter_errors.classify_status(status, retry_after, text, reply)

    def _check_choice(self, choice: Mapping[str, Any], reply: Reply) -> None:
        openrouter_errors.check_choice(choice, reply)

    def _read_extras(self, data: Mapping[str, Any], headers: Mapping[str, str], usage: Mapping[str, Any],
                     reply: Reply) -> None:
        prov = data.get("provider")
        reply.provider = prov if isinstance(prov, str) else None
        gen = data.get("id")
        gen = gen if isinstance(gen, str) and gen else headers.get("x-generation-id")
        reply.generation_id = gen[:200] if gen else None
        if usage.get("is_byok") is True:
            details = usage.get("cost_details")
            upstream = details.get("upstream_inference_cost") if isinstance(details, dict) else None
            reply.usage["is_byok"] = True
            reply.usage["upstream_inference_cost"] = upstream

    @property
    def allowed_providers(self) -> tuple[str, ...]:
        return self.config.allowed_providers


class OpenAICompatibleGuard(ChatCompletionsGuard):
    """vLLM, llama.cpp server, mlx_lm.server: no key required, no routing table."""


def _redact(text: str, key: str | None) -> str:
    return text.replace(key, "[redacted]") if key else text
