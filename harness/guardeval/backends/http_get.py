"""A bounded JSON GET for a server's metadata endpoints (its models, its key, generation stats).

Bounded on every side the provider controls: the whole exchange has a deadline, the body is
read in chunks and refused past a size cap (counted after decompression), and the key is
redacted (`guardeval.backends.redact`, every spelling) from anything kept. Never raises anything but
`FetchError` for a failed exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from guardeval.backends.errors import RESET, connection_reset
from guardeval.backends.redact import Redactor
from guardeval.terminal import safe

MAX_BODY = 8 << 20   # bytes: a model's endpoint list is a few KB; anything near this is not an answer


class FetchError(Exception):
    """The endpoint could not be asked or did not answer in time (the message says which)."""


@dataclass
class Answer:
    status: int
    data: Any          # parsed JSON, or None when the body is not JSON
    text: str          # the body, key redacted, for messages


def client(connections: int = 8) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AiohttpTransport(limits=httpx.Limits(max_connections=connections)),
                             follow_redirects=False)


def url(base_url: str, *segments: str) -> str:
    """`base_url` + path segments, each percent-encoded (a model name is config text)."""
    return base_url.rstrip("/") + "".join("/" + quote(seg, safe=":") for seg in segments)


async def get_json(http: httpx.AsyncClient, target: str, *, key: str | None, timeout_s: float,
                   params: Mapping[str, str] | None = None, limit: int = MAX_BODY) -> Answer:
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    host = httpx.URL(target).host or target
    try:
        with anyio.fail_after(timeout_s):
            async with http.stream("GET", target, params=params, headers=headers,
                                   timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))) as resp:
                chunks, size = [], 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise FetchError(f"{host} answered with more than {limit} bytes")
                    chunks.append(chunk)
    except TimeoutError:
        raise FetchError(f"no answer from {host} within {timeout_s:g} s") from None
    except (httpx.HTTPError, OSError) as exc:
        if connection_reset(exc):
            raise FetchError(f"{host} {RESET} without answering") from None
        detail = Redactor(key)(str(exc))
        # The message, not the class: the aiohttp transport reports a refused connection as a timeout.
        raise FetchError(f"cannot reach {host} ({shown(detail, 200) or type(exc).__name__})") from None
    text = Redactor(key)(b"".join(chunks).decode("utf-8", errors="replace"))
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        data = None
    return Answer(resp.status_code, data, text)


def shown(value: Any, limit: int = 120) -> str:
    """Provider text in a message: bounded, control characters escaped (it may be hostile). A
    text past `limit` is cut at the last space before it and marked "…", never mid-word (a cut
    config line such as `structured_output = "au` reads as a typo)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        cut = text[:limit]
        space = cut.rfind(" ")
        text = (cut[:space] if space > limit // 2 else cut).rstrip() + " …"
    return safe(text)
