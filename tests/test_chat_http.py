"""The chat-completions back-end's error taxonomy against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pytest
from aiohttp import web

from guardeval.backends.chat_http import OpenAICompatibleGuard, parse_retry_after
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import CallFailed, FatalError, TransientError
from guardeval.backends.prompts import load_prompt

from app_server import start

pytestmark = pytest.mark.fast


async def _serve(status: int, body: str, headers: dict[str, str] | None = None) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="application/json", headers=headers)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner, url = await start(app)
    return runner, f"{url}/v1"


@pytest.mark.parametrize("status, body, error", [
    (400, '{"object":"error","message":"This model\'s maximum context length is 32768 tokens. However, you '
          'requested 40000 tokens","code":400}', CallFailed),
    (400, '{"object":"error","message":"unknown field: sampler","code":400}', FatalError),
    (404, '{"error":{"message":"model not found"}}', FatalError),
    (503, '{"error":{"message":"overloaded"}}', TransientError),
    (200, '{"choices": [', TransientError),
    (200, '{"error": {"message": "upstream failed", "code": 502}}', TransientError),
])
async def test_status_taxonomy(status, body, error):
    runner, url = await _serve(status, body)
    try:
        cfg = GuardConfig(name="l", backend="openai-compatible", model="m", prompt="guardeval-json-v1",
                          base_url=url, timeout_s=5)
        guard = OpenAICompatibleGuard(cfg, load_prompt("guardeval-json-v1"))
        with pytest.raises(error) as info:
            await guard.send({"model": "m", "messages": []}, "call-1")
        if error is CallFailed:
            assert info.value.error_class == "context_overflow"
        assert info.value.reply is not None and info.value.reply.raw == body
        await guard.aclose()
    finally:
        await runner.cleanup()


def test_retry_after_forms():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.05") == 0.05
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
