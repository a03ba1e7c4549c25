"""Conformance: OpenRouter's documented answer shapes, replayed by a plain server on 127.0.0.1,
each judged by the `openrouter` back-end and decided as a run would decide it.

The cases live in tests/fixtures/openrouter/conformance.json (bodies written here, field names
and structure from OpenRouter's documentation, cited per case)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import CallFailed, FatalError, TransientError
from guardeval.backends.openrouter.guard import OpenRouterGuard
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import load_prompt
from guardeval.run.dispatch.decide import decide
from guardeval.run.folder.spend import reported_cost

from app_server import start

pytestmark = pytest.mark.fast

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "fixtures" / "openrouter" / "conformance.json").read_text("utf-8"))["cases"]
PROMPT = load_prompt("guardeval-json-v1")
PARSER = get_parser(PROMPT.parser)
OUTCOME = {TransientError: "transient", CallFailed: "call_failed", FatalError: "fatal"}


SEEN: dict[str, dict[str, str]] = {}     # case -> the request headers the replay server received


@pytest.fixture
async def replay() -> AsyncIterator[str]:
    """One server: POST /<case>/chat/completions answers with that case's status, headers, body."""
    by_name = {c["name"]: c for c in CASES}

    async def handler(request: web.Request) -> web.Response:
        case = by_name[request.match_info["case"]]
        SEEN[case["name"]] = {k.lower(): v for k, v in request.headers.items()}
        text = case["body_text"] if "body_text" in case else json.dumps(case["body"])
        return web.Response(status=case["status"], text=text, content_type="application/json",
                            headers=case.get("headers") or {})

    app = web.Application()
    app.router.add_post("/{case}/chat/completions", handler)
    runner, url = await start(app)
    try:
        yield url
    finally:
        await runner.cleanup()


def _config(case: dict[str, Any], base_url: str) -> GuardConfig:
    table = case.get("provider_table") or {"only": case.get("pinned", ["anthropic"]), "allow_fallbacks": False}
    return GuardConfig(name="conformance", backend="openrouter", model="anthropic/claude-haiku-4.5",
                       prompt=PROMPT.id, base_url=f"{base_url}/{case['name']}", api_key_env=None, timeout_s=5,
                       provider=table)


def test_the_fixture_covers_every_documented_status() -> None:
    statuses = {c["status"] for c in CASES}
    assert {200, 400, 401, 402, 403, 404, 408, 413, 429, 502, 503} <= statuses
    assert len({c["name"] for c in CASES}) == len(CASES)
    assert all(c["source"].startswith("https://openrouter.ai/docs/") for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
async def test_case(case: dict[str, Any], replay: str) -> None:
    expect = case["expect"]
    config = _config(case, replay)
    guard = OpenRouterGuard(config, PROMPT)
    body = guard.render({"user_request": "Summarise my inbox.", "history": [], "current_action": {"name": "read"},
                         "tool_descriptions": []})
    assert "usage" not in body        # `usage: {include: true}` is deprecated: not sent
    try:
        reply = await guard.send(body, "0" * 32)
        outcome, exc = "reply", None
    except (TransientError, CallFailed, FatalError) as err:
        outcome, exc, reply = OUTCOME[type(err)], err, err.reply
    finally:
        await guard.aclose()
    assert outcome == expect["outcome"], (exc, reply)
    # Every request asks for no response caching and for router metadata (issue 21).
    assert SEEN[case["name"]].get("x-openrouter-cache") == "false"
    assert SEEN[case["name"]].get("x-openrouter-metadata") == "enabled"
    for text in expect.get("message_contains", []):
        assert exc is not None and text in str(exc), (text, str(exc))
    for text in expect.get("message_free_of", []):
        assert exc is not None and text not in str(exc), str(exc)
    if "error_class" in expect:
        assert exc is not None and exc.error_class == expect["error_class"]
    if "retry_after" in expect:
        assert exc is not None and exc.retry_after == expect["retry_after"]
    assert reply is not None and reply.raw == (case.get("body_text") or json.dumps(case["body"]))  # kept exactly
    for field in ("native_finish_reason", "generation_id", "provider", "response_headers", "previous_errors"):
        if field in expect:
            assert getattr(reply, field) == expect[field]
    if "spend" in expect:
        assert reported_cost(reply.usage) == pytest.approx(expect["spend"])
    if "empty" in expect:
        assert reply.content == "" and reply.finish_reason == "stop"
    if outcome == "fatal":
        return        # the run stops before deciding; the call stays pending for `resume`
    raw = {"call_id": "0" * 32, "seq": 1, "request_sha256": "r", "outcome": outcome, "final": True,
           "content": reply.content, "finish_reason": reply.finish_reason, "provider": reply.provider,
           "answers_call_id": reply.answers_call_id, "usage": reply.usage,
           "response_headers": reply.response_headers, "openrouter_metadata": reply.router_metadata,
           "error_class": exc.error_class if exc else None, "error": str(exc) if exc else None}
    d = decide(raw, "sha", expected_request_sha256="r", parser=PARSER, backend=config.backend,
               allowed_providers=config.allowed_providers)
    for field, key in (("status", "status"), ("attributable", "attributable"), ("quarantine", "quarantine_reason"),
                       ("decision", "decision")):
        if field in expect:
            assert d[key] == expect[field], d
    if "detail_contains" in expect:
        assert expect["detail_contains"] in (d["detail"] or ""), d
