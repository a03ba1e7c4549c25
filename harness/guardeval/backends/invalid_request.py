"""Is an error answer about the request itself? (docs/design.md §7, "An answer is not an outage")

A server that answers 4xx or 5xx with a validation error naming a field of the request has
read the request and refused it: the same body gets the same answer, so retrying it (or calling
it an outage) is wrong. llama-cpp-python's server, for instance, answers a `response_format` it
does not know with HTTP 500 and pydantic's validation message; FastAPI answers 422 with a
`detail` list whose `loc` starts with `body`; vLLM and OpenAI answer 400 with
`error.type = "invalid_request_error"` (or `BadRequestError`) and `param`.

`invalid_request(text)` returns the server's reason (its own words, bounded; the caller redacts
and escapes) or None when the body does not say the request is invalid.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# Top-level fields of an OpenAI-style chat-completions request (and the extras guardeval or a
# local server reads): a validation error must name one of these to count.
REQUEST_FIELDS = frozenset((
    "model", "messages", "response_format", "temperature", "max_tokens", "max_completion_tokens", "seed",
    "stop", "top_p", "top_k", "min_p", "n", "stream", "tools", "tool_choice", "logit_bias", "logprobs",
    "top_logprobs", "frequency_penalty", "presence_penalty", "repeat_penalty", "repetition_penalty",
    "provider", "user", "grammar", "json_schema", "schema"))
MAX_SCAN = 8192
MAX_REASON = 400
# Validation wording (pydantic, FastAPI, vLLM, OpenAI). A 5xx needs the first, strong group: a
# server error that merely mentions "unsupported" may be the server's own fault.
_STRONG = re.compile(r"\bvalidation errors?\b|\bInput should be\b|\bextra (fields|inputs) (are )?not permitted\b|"
                     r"\bfield required\b", re.I)
_WEAK = re.compile(r"\binvalid (request|value|type|parameter)\b|\bunsupported\b|\bnot supported\b|"
                   r"\bunknown (field|parameter)\b|\bnot (one of|a valid)\b", re.I)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INVALID_TYPES = ("invalid_request_error", "badrequesterror", "validationerror", "invalid_request")


def _bounded(text: str) -> str:
    # llama-cpp-python appends a traceback after a blank line: the reason is what comes before.
    text = " ".join(text.split("\n\n", 1)[0].split())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"


def _names_field(text: str) -> bool:
    return any(w in REQUEST_FIELDS for w in _WORD.findall(text))


def _first_json(head: str) -> Any:
    """The JSON value the body starts with, whatever follows it (llama-cpp-python's server
    writes a traceback after its JSON error); None when it does not start with one."""
    try:
        return orjson.loads(head)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.JSONDecoder().raw_decode(head.lstrip())[0]
    except (ValueError, RecursionError):
        return None


def invalid_request(text: str, *, server_error: bool = False) -> str | None:
    """The server's reason when the body says the request is invalid, else None. With
    `server_error` (a 5xx) only strong evidence counts: a structured validation error, or
    validation wording that names a request field."""
    head = text[:MAX_SCAN]

    def says_invalid(message: str) -> bool:
        worded = _STRONG.search(message) or (not server_error and _WEAK.search(message))
        return bool(worded) and _names_field(message)

    data = _first_json(head)
    if isinstance(data, dict):
        # FastAPI / pydantic: {"detail": [{"loc": ["body", "response_format", "type"], "msg": ...}]}
        detail = data.get("detail")
        if isinstance(detail, list):
            for item in detail[:8]:
                if isinstance(item, dict) and isinstance(item.get("loc"), list):
                    loc = [str(p) for p in item["loc"][:8]]
                    if loc and loc[0] == "body" and (len(loc) == 1 or loc[1] in REQUEST_FIELDS):
                        return _bounded(f"{'.'.join(loc)}: {item.get('msg', '')}")
        err = data.get("error")
        message = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
        if message is None and isinstance(data.get("message"), str):
            message, err = data["message"], data
        if isinstance(message, str):
            kind = str(err.get("type", "")).lower() if isinstance(err, dict) else ""
            param = err.get("param") if isinstance(err, dict) else None
            if kind in _INVALID_TYPES and (isinstance(param, str) and param.split(".")[0] in REQUEST_FIELDS
                                           or _names_field(message)):
                return _bounded(message)
            if says_invalid(message):
                return _bounded(message)
        return None
    if says_invalid(head):
        return _bounded(head)
    return None
