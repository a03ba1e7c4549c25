"""Chat back-ends over HTTP: one client for every back-end that POSTs a JSON body and reads a
JSON answer (the chat-completions servers, and any server whose answer its record maps onto
that shape).

`send` reads an answer (the transport: bounded, the key redacted); `judge` decides what it
amounts to. What differs between back-ends is their record's (guardeval.backends.backend): the
path after the base URL (`chat_path`), the headers that carry the key (`auth_headers`) and those
sent on every request (`request_headers`), the body (`make_renderer`), an answer in another shape
mapped onto the chat-completions one (`to_chat_shape`), what it adds to the finish reason and
usage (`normalise_reply`) and to the raw line (`raw_fields`). A back-end with its own error
shapes subclasses the guard and overrides the judging hooks (`_status_error`, `_check_choice`,
`_read_extras`). The client itself reads only what every OpenAI-compatible server returns
(content, `finish_reason`, token counts, a valid `usage.cost`). The HTTP client is httpx over
the aiohttp transport (httpx's own pool is CPU-bound at high concurrency, docs/design.md §11).
"""

from __future__ import annotations

import email.utils
import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import anyio
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from guardeval.backends.base import Guard, Reply, Usage, valid_cost
from guardeval.backends.body import ACCEPT_ENCODING, BodyTooLarge, BodyUnreadable, read_capped
from guardeval.backends.chat_body import chat_body
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import (
    CONTEXT_RE,
    RESET,
    TRANSIENT_STATUS,
    AttemptError,
    CallFailed,
    FatalError,
    TransientError,
    connection_reset,
    message_of,
)
from guardeval.backends.invalid_request import invalid_request
from guardeval.backends.prompts import Prompt
from guardeval.backends.redact import Redactor
from guardeval.lru import LRU


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date; never negative, possibly infinite
    (`inf`, 1e308, a far-future date): the dispatcher caps every wait at `retry_max_s`."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return None if math.isnan(seconds) else max(0.0, seconds)


class ChatCompletionsGuard(Guard):
    """A chat back-end over HTTP, its wire read from its record; subclasses judge their own errors."""

    def __init__(self, config: GuardConfig, prompt: Prompt, *, max_connections: int = 256) -> None:
        super().__init__(config, prompt)
        entry = config.backend_entry
        # Parsed once: httpx re-parses a string URL on every request.
        self._url = httpx.URL((config.effective_base_url or "").rstrip("/") + entry.chat_path)
        self._auth_headers = entry.auth_headers
        self._request_headers = dict(entry.request_headers)
        self._to_chat_shape = entry.to_chat_shape
        self._render = entry.make_renderer(config, prompt) if entry.make_renderer is not None \
            else functools.partial(chat_body, config, prompt)
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
        self._redact = Redactor(None)
        self._normalise = config.backend_entry.normalise_reply

    # -- stimulus -------------------------------------------------------------------------
    def render(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        return self._render(instance)

    # -- transport ------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        name = self.config.api_key_env
        return os.environ.get(name) or None if name else None

    def _redactor(self, key: str | None) -> Redactor:
        # Built once per key (the key is read from the environment at each send).
        if self._redact.secret != key:
            self._redact = Redactor(key)
        return self._redact

    async def send(self, body: Mapping[str, Any], call_id: str) -> Reply:
        key = self._api_key()
        redact = self._redactor(key)
        headers = {"Content-Type": "application/json", "X-Call-Id": call_id, "Accept-Encoding": ACCEPT_ENCODING,
                   **self._request_headers}
        if key:
            headers.update(self._auth_headers(key))
        payload = self._payload(body)
        too_large: BodyTooLarge | None = None
        resp: httpx.Response | None = None
        try:
            # Overall deadline as well as httpx's per-phase timeouts: a stalled body counts too.
            with anyio.fail_after(self.config.timeout_s):
                request = httpx.Request("POST", self._url, content=payload, headers=headers,
                                        extensions={"timeout": self._timeout})
                resp = await self._transport.handle_async_request(request)
                try:
                    received = await read_capped(resp, self.config.max_response_bytes)
                except BodyTooLarge as exc:
                    too_large, received = exc, exc.head
                finally:
                    await resp.aclose()
        except TimeoutError:
            if resp is not None:
                raise self._body_failed(resp, "body_timeout", f"its body did not arrive in full within "
                                        f"{self.config.timeout_s:g} s") from None
            raise TransientError("timeout", f"no complete answer within {self.config.timeout_s:g} s") from None
        except httpx.TimeoutException as exc:
            # httpx-aiohttp reports a refused connection as ConnectTimeout; its cause says what it was.
            if _refused(exc):
                raise TransientError("connection", f"connection refused at {self._url}") from None
            if resp is None and connection_reset(exc):
                raise TransientError("connection", f"the server at {self._url} {RESET}") from None
            if resp is not None:
                raise self._body_failed(resp, "body_timeout", f"its body stalled ({type(exc).__name__})") from None
            raise TransientError("timeout", f"timeout: {type(exc).__name__}") from None
        except BodyUnreadable as exc:
            # The message may quote the server's Content-Encoding header: its text, redacted like any other.
            message = f"HTTP {resp.status_code if resp is not None else '?'} with a body that cannot be read: {exc}"
            safe = redact(message)
            raise TransientError("malformed", safe, redacted=safe is not message) from None
        except (httpx.TransportError, aiohttp.ClientError, OSError) as exc:
            # aiohttp's own errors (a response it cannot parse) as well as httpx's mapped ones.
            if _refused(exc):
                raise TransientError("connection", f"connection refused at {self._url}") from None
            if resp is None and connection_reset(exc):
                raise TransientError("connection", f"the server at {self._url} {RESET}") from None
            message = f"{type(exc).__name__}: {str(exc)[:300]}"
            safe = redact(message)
            if resp is not None:
                # The status line came: the server answered, then the body broke off.
                raise self._body_failed(resp, "body_cut", f"the connection closed before its body was complete "
                                        f"({safe})", redacted=safe is not message) from None
            raise TransientError("connection", safe, redacted=safe is not message) from None
        raw = received.decode("utf-8", errors="replace")
        reply = Reply(status=resp.status_code, raw=redact(raw))
        reply.redacted = reply.raw is not raw
        if too_large is not None:
            # The first bytes are kept (redacted) for diagnosis; the attempt failed, the call may retry.
            raise TransientError("response_too_large", f"HTTP {resp.status_code}: {too_large}; the first "
                                 f"{len(received)} bytes are kept", reply)
        return self.judge(reply, resp.headers, redact)

    @staticmethod
    def _body_failed(resp: httpx.Response, error_class: str, what: str, *, redacted: bool = False) -> TransientError:
        """An answer whose status line came and whose body did not: not an unreachable server
        (the stall rules count it as an unusable answer). The raw line keeps the status."""
        return TransientError(error_class, f"HTTP {resp.status_code} answered, but {what}",
                              Reply(status=resp.status_code, raw=""), redacted=redacted)

    # -- judging an answer (the transport above only reads it) ---------------------------------
    def judge(self, reply: Reply, headers: Mapping[str, str], redact: Callable[[str], str]) -> Reply:
        """What an answer read in full (`reply.raw`, the key already redacted) amounts to: the
        reply, with the fields taken from it, or the error to raise."""

        def clean(value: str) -> str:
            # Decoded text is checked again: cheap when clean, and a leak that no escape form
            # in the raw text spelled would show up here.
            safe = redact(value)
            reply.redacted = reply.redacted or safe is not value
            return safe

        echoed = headers.get("x-call-id")
        reply.answers_call_id = clean(echoed) if echoed is not None else None
        text = reply.raw
        if reply.status != 200:
            status = int(reply.status)
            raise _cleaned(self._status_error(status, parse_retry_after(headers.get("retry-after")), text, reply),
                           clean)
        try:
            data = _loads(text)
        except ValueError:
            raise TransientError("malformed", "HTTP 200 with a body that is not JSON", reply) from None
        if not isinstance(data, dict):
            raise TransientError("malformed", "HTTP 200 with a JSON body that is not an object", reply)
        if "error" in data:
            raise TransientError("error200", clean(f"HTTP 200 carrying an error: {message_of(text)}"), reply)
        if self._to_chat_shape is not None:
            # An answer in the back-end's own shape, read as a chat-completions one (its record's);
            # a shape the hook cannot read is a malformed answer, like any other.
            try:
                data = self._to_chat_shape(data)
            except (KeyError, IndexError, TypeError, AttributeError, ValueError):
                raise TransientError("malformed", "HTTP 200 with an answer of an unreadable shape", reply) from None
        try:
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            content = msg.get("content")
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise TransientError("malformed", "HTTP 200 without choices[0]", reply) from None
        try:
            self._check_choice(choice, reply)
        except AttemptError as exc:
            raise _cleaned(exc, clean) from None
        if content is not None and not isinstance(content, str):
            raise TransientError("malformed", "message content is not a string", reply)
        reply.content = clean(content) if content is not None else None
        reply.finish_reason = clean(finish) if isinstance(finish, str) else None
        reply.usage = _usage(data.get("usage"))
        # What the back-end adds to the finish reason and usage (its record's hook).
        self._normalise(choice, data, reply, clean)
        self._read_extras(data, headers, reply, clean)
        return reply

    def _status_error(self, status: int, retry_after: float | None, text: str, reply: Reply) -> AttemptError:
        """A non-200 answer of a self-hosted server (vLLM, llama.cpp, mlx_lm.server)."""
        message = f"HTTP {status}: {message_of(text)}"
        if status == 413:
            return CallFailed("request_too_large", message, reply)
        if status == 400 and CONTEXT_RE.search(text[:4096]):
            # vLLM and llama.cpp answer 400 for a prompt longer than the context: a failure of
            # this call (as with the mlx back-end), not a configuration error.
            return CallFailed("context_overflow", message, reply)
        if status not in (408, 409, 425, 429) and (reason := invalid_request(text, server_error=status >= 500)):
            # The server read the request and says it is invalid: the same body gets the same
            # answer, so this is a configuration error, not an outage (stop, resumable).
            hint = (" (the server does not take this structured-output shape: `guardeval preflight --guard FILE` "
                    "names one it does; structured_output = \"auto\" lets the preflight choose)"
                    if "response_format" in reason else "")
            return FatalError("invalid_request", f"the server rejected the request as invalid (HTTP {status}): "
                              f"{reason}{hint}", reply)
        if status in TRANSIENT_STATUS or status >= 500:
            return TransientError(f"http_{status}", message, reply, retry_after=retry_after)
        return FatalError(f"http_{status}", message, reply)

    def _check_choice(self, choice: Mapping[str, Any], reply: Reply) -> None:
        """Dialect hook: raise for a choice that is not an answer."""

    def _read_extras(self, data: Mapping[str, Any], headers: Mapping[str, str], reply: Reply,
                     clean: Callable[[str], str]) -> None:
        """Dialect hook: fields beyond the OpenAI shape (OpenRouter's provider, generation id, router
        metadata); the finish reason and usage beyond it are the back-end record's `normalise_reply`."""

    def _payload(self, body: Mapping[str, Any]) -> bytes:
        """Serialised body, once per body object (repetitions and retries reuse one body)."""
        hit = self._payloads.get(id(body))
        if hit is None or hit[0] is not body:
            hit = self._payloads.put(id(body), (body, orjson.dumps(body)))
        return hit[1]

    async def aclose(self) -> None:
        await self._transport.aclose()


class OpenAICompatibleGuard(ChatCompletionsGuard):
    """vLLM, llama.cpp server, mlx_lm.server: no key required, no routing table."""


def _refused(exc: BaseException) -> bool:
    """Whether a ConnectionRefusedError is in the exception's chain of causes."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, ConnectionRefusedError):
            return True
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return False


_CONSTANTS = ("NaN", "Infinity")


def _loads(text: str) -> Any:
    """The body as JSON. A body that is JSON but for `NaN` or `Infinity` as a number (a
    provider's `"cost": NaN`) is read with those as floats: the answer was given and paid for,
    and the number is then invalid where it is read (`cost_invalid`), rather than the whole
    body being discarded as malformed. ValueError when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        if not any(c in text for c in _CONSTANTS):
            raise
    import json

    try:
        return json.loads(text)   # reads NaN, Infinity and -Infinity as floats
    except RecursionError:        # nesting orjson refuses past 1024 levels: not an answer either
        raise ValueError("nested too deeply") from None


def _usage(usage: Any) -> Usage:
    """The provider's usage numbers that can be trusted: token counts that are non-negative
    integers, a cost that is a finite non-negative number. A cost that is not is recorded as
    `cost_invalid` and counts as unknown (docs/design.md §7); nothing else is kept, so no text
    from the provider travels in this field."""
    if not isinstance(usage, dict):
        return {}
    out: Usage = {}
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if type(usage.get(k)) is int and usage[k] >= 0:
            out[k] = usage[k]
    if "cost" in usage:
        if valid_cost(usage["cost"]):
            out["cost"] = usage["cost"]
        else:
            out["cost_invalid"] = True
    return out


def _cleaned(exc: AttemptError, clean: Callable[[str], str]) -> AttemptError:
    """The error with its message passed through `clean` (the key, in any spelling, removed)."""
    message = str(exc)
    safe = clean(message)
    if safe is not message:
        exc.args = (safe,)
        exc.redacted = True
    return exc
