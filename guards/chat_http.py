"""Chat-completions back-ends over HTTP: `openrouter` and `openai-compatible`.

One wire format, two flavours: OpenRouter adds the `provider` routing table, usage
accounting and a resolved upstream provider in the reply. The HTTP client is httpx over the
aiohttp transport (httpx's own pool is CPU-bound at high concurrency, docs/design.md §11).
"""

from __future__ import annotations

import email.utils
import os
import re
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
from guards.errors import CallFailed, FatalError, TransientError
from guards.prompts import Prompt
from harness.lru import LRU

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 524, 529})
_CONTEXT_RE = re.compile(r"maximum context length|context length exceeded|exceeds the context|context_length_exceeded",
                         re.IGNORECASE)


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

    send_usage_flag = False

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
        text = _redact(text, key)
        echoed = resp.headers.get("x-call-id")
        reply = Reply(status=resp.status_code, raw=text, answers_call_id=echoed)
        if resp.status_code != 200:
            message = f"HTTP {resp.status_code}: {_error_message(text)}"
            if resp.status_code in TRANSIENT_STATUS or resp.status_code >= 500:
                raise TransientError(f"http_{resp.status_code}", message, reply,
                                     retry_after=parse_retry_after(resp.headers.get("retry-after")))
            if resp.status_code == 400 and _CONTEXT_RE.search(text):
                # vLLM and llama.cpp answer 400 for a prompt longer than the context: a failure of
                # this call (as with the mlx back-end), not a configuration error.
                raise CallFailed("context_overflow", message, reply)
            raise FatalError(f"http_{resp.status_code}", message, reply)
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise TransientError("malformed", "HTTP 200 with a body that is not JSON", reply) from None
        if not isinstance(data, dict):
            raise TransientError("malformed", "HTTP 200 with a JSON body that is not an object", reply)
        if "error" in data:
            raise TransientError("error200", f"HTTP 200 carrying an error: {_error_message(text)}", reply)
        try:
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            content = msg.get("content")
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise TransientError("malformed", "HTTP 200 without choices[0]", reply) from None
        if content is not None and not isinstance(content, str):
            raise TransientError("malformed", "message content is not a string", reply)
        usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
        reply.content = content
        reply.finish_reason = finish if isinstance(finish, str) else None
        reply.usage = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens", "cost")
                       if k in usage}
        prov = data.get("provider")
        reply.provider = prov if isinstance(prov, str) else None
        return reply

    def _payload(self, body: Mapping[str, Any]) -> bytes:
        """Serialised body, once per body object (repetitions and retries reuse one body)."""
        hit = self._payloads.get(id(body))
        if hit is None or hit[0] is not body:
            hit = self._payloads.put(id(body), (body, orjson.dumps(body)))
        return hit[1]

    async def aclose(self) -> None:
        await self._transport.aclose()


class OpenRouterGuard(ChatCompletionsGuard):
    """The body adds OpenRouter's routing table and usage accounting (`chat_body`)."""

    @property
    def pinned_provider(self) -> str | None:
        return self.config.pinned_provider


class OpenAICompatibleGuard(ChatCompletionsGuard):
    """vLLM, llama.cpp server, mlx_lm.server: no key required, no routing table."""


def _redact(text: str, key: str | None) -> str:
    return text.replace(key, "[redacted]") if key else text


def _error_message(text: str, limit: int = 300) -> str:
    try:
        data = orjson.loads(text)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:limit]
        if isinstance(err, str):
            return err[:limit]
    except orjson.JSONDecodeError:
        pass
    return text[:limit].replace("\n", " ")
