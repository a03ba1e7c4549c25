"""The chat-completions transport against the hostile provider (tests/hostile_server.py), one
attempt at a time: bounded bodies, every escape form of the key, untrusted usage numbers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from guardeval.backends.base import valid_cost
from guardeval.backends.chat_http import OpenAICompatibleGuard, parse_retry_after
from guardeval.backends.config import DEFAULT_MAX_RESPONSE_BYTES, GuardConfig
from guardeval.backends.errors import AttemptError, FatalError, TransientError
from guardeval.backends.openrouter.guard import OpenRouterGuard
from guardeval.backends.prompts import load_prompt
from guardeval.run.dispatch.dispatch import _Wait

from hostile_server import Hostile, leaked, serving

pytestmark = pytest.mark.fast

KEY_ENV = "GUARDEVAL_HOSTILE_TEST_KEY"
CANARY = "sk-or-v1-" + "5f3a9c0d7e21b48a6c93f1e0d2b7a45c8e6f1d09b3a27c4e5d81f6a0b9c3e7d2"


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, Hostile]]:
    with serving() as served:
        yield served


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, CANARY)
    return CANARY


def _guard(url: str, **fields: object) -> OpenRouterGuard:
    cfg = GuardConfig(name="h", backend="openrouter", model="m", prompt="guardeval-json-v1", base_url=url,
                      api_key_env=KEY_ENV, **{"timeout_s": 20, **fields})  # type: ignore[arg-type]
    return OpenRouterGuard(cfg, load_prompt("guardeval-json-v1"))


async def _send(url: str, **fields: object) -> AttemptError | object:
    guard = _guard(url, **fields)
    try:
        return await guard.send({"model": "m", "messages": []}, "c" * 32)
    except AttemptError as exc:
        return exc
    finally:
        await guard.aclose()


@pytest.mark.parametrize("mode", ["endless", "big-length", "gzip-bomb", "deflate-bomb"])
async def test_an_oversized_body_is_a_recorded_failure_with_its_first_bytes(hostile, mode):
    base, _ = hostile
    out = await _send(f"{base}/{mode}/v1", max_response_bytes=1 << 20)
    assert isinstance(out, TransientError) and out.error_class == "response_too_large", out
    assert out.reply is not None and out.reply.status == 200
    # The first bytes are kept for diagnosis, no more.
    assert 0 < len(out.reply.raw) <= 2048
    assert out.reply.raw[0] in "x\x00"
    assert "max_response_bytes" in str(out)


async def test_the_default_cap_is_a_few_mib_and_holds(hostile):
    base, _ = hostile
    assert DEFAULT_MAX_RESPONSE_BYTES == 4 << 20
    out = await _send(f"{base}/gzip-bomb/v1")
    assert isinstance(out, TransientError) and out.error_class == "response_too_large"


async def test_compressed_and_plain_answers_still_read(hostile):
    base, _ = hostile
    for mode in ("ok", "gzip-ok"):
        reply = await _send(f"{base}/{mode}/v1")
        assert not isinstance(reply, AttemptError), reply
        assert reply.content.startswith('{"malicious_user_request"')   # type: ignore[attr-defined]
    # An answer just under a small cap reads; the cap counts decoded bytes.
    reply = await _send(f"{base}/gzip-ok/v1", max_response_bytes=400)
    assert not isinstance(reply, AttemptError), reply
    out = await _send(f"{base}/gzip-ok/v1", max_response_bytes=100)
    assert isinstance(out, TransientError) and out.error_class == "response_too_large"


@pytest.mark.parametrize("mode, error_class", [("encoding/br", "malformed"), ("encoding/zstd", "malformed"),
                                               ("bad-length", "connection")])
async def test_an_unreadable_answer_is_a_transient_failure_not_a_crash(hostile, mode, error_class):
    base, _ = hostile
    out = await _send(f"{base}/{mode}/v1")
    assert isinstance(out, TransientError) and out.error_class == error_class, out


@pytest.mark.parametrize("form", ["plain", "json", "json-mixed", "percent", "partial"])
@pytest.mark.parametrize("status", [401, 503, 200])
async def test_the_key_is_redacted_in_every_form(hostile, canary, form, status):
    base, _ = hostile
    out = await _send(f"{base}/key/{form}/{status}/v1")
    reply = out.reply if isinstance(out, AttemptError) else out
    assert reply is not None
    texts = [reply.raw, reply.content or "", reply.answers_call_id or "", str(out) if isinstance(out, AttemptError) else ""]
    for text in texts:
        assert leaked(text, canary) is None, text
    assert reply.redacted and "[redacted]" in reply.raw
    if status == 401:
        assert isinstance(out, FatalError) and out.redacted and "[redacted]" in str(out)


async def test_the_key_is_redacted_from_a_header_quoted_in_an_error(hostile, canary):
    # An encoding the client cannot read is named in the error, and the name is the server's text.
    base, _ = hostile
    out = await _send(f"{base}/key-encoding/v1")
    assert isinstance(out, TransientError) and out.error_class == "malformed", out
    assert leaked(str(out), canary) is None, str(out)
    assert out.redacted and "[redacted]" in str(out)


async def test_no_key_and_a_clean_answer_are_left_as_received(hostile, monkeypatch):
    base, _ = hostile
    monkeypatch.delenv(KEY_ENV, raising=False)
    reply = await _send(f"{base}/ok/v1")
    assert not isinstance(reply, AttemptError) and not reply.redacted   # type: ignore[union-attr]


@pytest.mark.parametrize("value, valid", [("-1000", False), ("0", True), ('"abc"', False), ("1e308", False),
                                          ("1000", True), ("1000.5", False), ("NaN", False), ("Infinity", False),
                                          ("none", None), ("true", False), ("[1]", False), ("0.25", True)])
async def test_usage_cost_is_kept_only_when_it_is_a_plausible_non_negative_number(hostile, value, valid):
    # A cost above MAX_CALL_COST_USD (1e308) is implausible, and NaN or Infinity (not JSON at
    # all) keep the answer: the body is read, only the cost is invalid.
    base, _ = hostile
    reply = await _send(f"{base}/cost/{value}/v1")
    assert not isinstance(reply, AttemptError), reply
    usage = reply.usage   # type: ignore[attr-defined]
    assert usage["prompt_tokens"] == 1000 and usage["completion_tokens"] == 20
    if valid is None:
        assert "cost" not in usage and "cost_invalid" not in usage
    elif valid:
        assert valid_cost(usage["cost"]) and "cost_invalid" not in usage
    else:
        assert "cost" not in usage and usage["cost_invalid"] is True


@pytest.mark.parametrize("value", ["1e9", "inf", "1e308", "far-date", "-5", "nan"])
@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_of_any_size_is_parsed_and_every_wait_is_capped(hostile, value, status):
    base, _ = hostile
    out = await _send(f"{base}/retry-after/{status}/{value}/1000/v1")
    assert isinstance(out, TransientError) and out.error_class == f"http_{status}"
    ra = out.retry_after
    # The header reached the error, read as seconds (a negative one as 0, NaN as none at all).
    if value == "far-date":
        assert ra is not None and ra > 1e11, ra
    else:
        assert ra == {"1e9": 1e9, "inf": float("inf"), "1e308": 1e308, "-5": 0.0, "nan": None}[value], ra
    for paced in (False, True):
        wait = _Wait(initial=0.5, maximum=2.0, offset=1, paced=paced)
        for attempt in (1, 2, 10, 1000, 10**6):
            delay = wait.delay(attempt, out)
            assert 0 <= delay <= 2.0
            if ra is not None and ra >= 2.0:
                assert delay == 2.0, (attempt, delay)   # the server's wait, capped


def test_parse_retry_after_bounds():
    assert parse_retry_after("inf") == float("inf") and parse_retry_after("-5") == 0.0
    assert parse_retry_after("nan") is None
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT") > 1e11   # type: ignore[operator]
    assert parse_retry_after("Mon, 99 Foo 99999 99:99:99 GMT") is None


def test_the_canary_is_not_in_the_environment_of_other_tests():
    assert os.environ.get(KEY_ENV) is None


def test_the_bombs_are_real():
    import zlib

    from hostile_server import BOMB_UNPACKED, _bombs, _crc32_combine, _crc32_zeros

    a, b = b"hello" * 1000, b"world" * 777
    assert _crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    assert _crc32_zeros(8 << 20) == zlib.crc32(bytes(8 << 20))
    gz, zl = _bombs()
    assert len(gz) < 5 << 20 and len(zl) < 5 << 20 and BOMB_UNPACKED == 4 << 30
    # The trailers carry the CRC-32 / Adler-32 and size of 4 GiB of zeros (checked whole, once,
    # by inflating both to the end: 15 s each, too slow to repeat here).
    assert gz[-8:] == _crc32_zeros(BOMB_UNPACKED).to_bytes(4, "little") + bytes(4)
    for data, wbits in ((gz, 31), (zl, 15)):
        out = zlib.decompressobj(wbits).decompress(data[:100_000], 64 << 20)
        assert out == bytes(64 << 20)


async def test_escape_sequences_from_the_provider_stay_exact_in_the_record(hostile):
    # raw.jsonl is data, not terminal output: what the provider sent is kept byte for byte
    # (showing it safely on a terminal is the printer's job).
    from hostile_server import ANSI

    base, _ = hostile
    out = await _send(f"{base}/ansi-error/500/v1")            # JSON-escaped: decoded into the message
    assert isinstance(out, TransientError) and out.reply is not None and ANSI in str(out)
    out = await _send(f"{base}/ansi-error/500/raw/v1")        # the bytes themselves, kept as sent
    assert isinstance(out, TransientError) and out.reply is not None and ANSI in out.reply.raw
    reply = await _send(f"{base}/ansi-content/v1")
    assert not isinstance(reply, AttemptError) and reply.content.endswith(ANSI)   # type: ignore[attr-defined]


@pytest.mark.parametrize("mode, error_class", [("cut/close", "body_cut"), ("cut/half", "body_cut"),
                                               ("cut/trickle", "body_timeout")])
async def test_a_body_that_breaks_off_after_its_status_line_is_an_answer_not_an_outage(hostile, mode, error_class):
    """Issue 27 item 12: the server answered (the status is kept in the record), then its body
    closed, stopped half-way or trickled past timeout_s: not `connection`/`timeout`."""
    base, _ = hostile
    out = await _send(f"{base}/{mode}/v1", timeout_s=1)
    assert isinstance(out, TransientError) and out.error_class == error_class, out
    assert out.reply is not None and out.reply.status == 200 and "HTTP 200 answered" in str(out), out


@pytest.mark.parametrize("kind", ["empty", "object", "no-choices"])
async def test_a_200_with_nothing_to_read_is_malformed(hostile, kind):
    base, _ = hostile
    out = await _send(f"{base}/unusable/{kind}/v1")
    assert isinstance(out, TransientError) and out.error_class == "malformed", out


async def test_a_400_naming_response_format_followed_by_a_traceback_is_an_invalid_request(hostile):
    """Issue 27 item 15: the JSON error comes first and a traceback after it, so the body is
    not JSON as a whole; its `detail[0].loc` still names body.response_format."""
    base, _ = hostile
    cfg = GuardConfig(name="h", backend="openai-compatible", model="m", prompt="guardeval-json-v1",
                      base_url=f"{base}/traceback/400/v1", timeout_s=20)
    guard = OpenAICompatibleGuard(cfg, load_prompt("guardeval-json-v1"))
    try:
        with pytest.raises(FatalError) as info:
            await guard.send({"model": "m", "messages": []}, "c" * 32)
    finally:
        await guard.aclose()
    assert info.value.error_class == "invalid_request", info.value
    assert "body.response_format.type" in str(info.value) and "guardeval preflight" in str(info.value)
    assert "Traceback" not in str(info.value)
