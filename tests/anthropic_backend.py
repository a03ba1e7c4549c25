"""A chat back-end whose wire is not chat-completions: Anthropic's Messages API shape (`POST
/v1/messages`, the key in `x-api-key`, the system prompt beside the messages, the answer as
content blocks with `stop_reason` and input/output token counts).

The back-end recipe of docs/explanation/layout.md, followed for real: this one module declares it
(its `Backend` record and `register`), and one line of `DECLARED` (`guardeval.backends.backend`)
registers it; tests/test_backend_recipe.py adds that line and runs a guard of it end to end
against a local server of that shape. Nothing in the package is edited for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.backend import Backend, register

NAME = "anthropic-messages"
VERSION = "2023-06-01"
# Messages API stop reasons -> the chat-completions finish reasons the parsers read.
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "content_filter"}


def messages_body(config: Any, prompt: Any, instance: Mapping[str, Any]) -> dict[str, Any]:
    """The stimulus in the Messages shape: system text apart, the turns, max_tokens required."""
    messages = prompt.render_messages(instance)
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    body: dict[str, Any] = {"model": config.model, "max_tokens": config.max_tokens,
                            "temperature": config.temperature,
                            "messages": [m for m in messages if m["role"] != "system"]}
    if system:
        body["system"] = system
    return body


def _renderer(config: Any, prompt: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    return functools.partial(messages_body, config, prompt)


def _make_guard(config: Any, prompt: Any, max_connections: int) -> Any:
    from guardeval.backends.chat_http import ChatCompletionsGuard

    return ChatCompletionsGuard(config, prompt, max_connections=max_connections)


def to_chat_shape(data: dict[str, Any]) -> dict[str, Any]:
    """A Messages answer read as a chat-completions one (the client checks what it then reads)."""
    blocks = data.get("content")
    if not isinstance(blocks, list):
        return {}   # no choices: the client calls it malformed
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    content = "".join(t for t in texts if isinstance(t, str)) if texts else None
    stop = data.get("stop_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
    if all(type(v) is int for v in tokens.values()):
        tokens["total_tokens"] = tokens["prompt_tokens"] + tokens["completion_tokens"]
    return {"id": data.get("id"),
            "choices": [{"index": 0, "finish_reason": FINISH.get(stop, stop) if isinstance(stop, str) else None,
                         "message": {"role": "assistant", "content": content}}],
            "usage": tokens}


BACKEND = register(Backend(
    name=NAME, make_guard=_make_guard, make_renderer=_renderer,
    default_base_url="https://api.anthropic.com", default_api_key_env="ANTHROPIC_API_KEY",
    # No response_format in this shape: the prompt asks for the JSON and the strict parser checks it.
    default_dialect="none", dialects=frozenset({"none"}),
    chat_path="/v1/messages", auth_headers=lambda key: {"x-api-key": key},
    request_headers={"anthropic-version": VERSION}, to_chat_shape=to_chat_shape,
))
