"""A hostile chat-completions provider on 127.0.0.1, for tests (docs/design.md §7, §11).

One aiohttp server serves every misbehaviour; the mode is chosen by the path, so a guard's
`base_url` picks it: `http://127.0.0.1:PORT/<mode>/<arg>/.../v1` and the client POSTs to
`…/v1/chat/completions`. Modes:

  ok                          a valid answer (`usage.cost` 0.001, 1000 + 20 tokens)
  cost/<value>                a valid answer whose usage.cost is the JSON literal <value>
                              (`-1000`, `0`, `"abc"`, `1e308`; `NaN`, `Infinity` written
                              unquoted though JSON has no such literal), or no cost at all for `none`
  endless                     HTTP 200, a chunked body that never ends
  big-length                  HTTP 200 announcing Content-Length 2,000,000,000, then sending
                              bytes until the client goes away
  gzip-bomb                   HTTP 200, Content-Encoding gzip: 4 MiB that inflate to 4 GiB
  deflate-bomb                the same as a zlib-wrapped deflate stream
  gzip-ok                     a valid answer, gzip-compressed in two members
  encoding/<name>             a valid answer labelled `Content-Encoding: <name>`
  bad-length                  a hand-written response with `Content-Length: -1`
  retry-after/<status>/<value>/<n>
                              the first <n> attempts of each call (by X-Call-Id) get <status>
                              with `Retry-After: <value>` (`far-date`: a date in year 9999),
                              later ones a valid answer
  ansi-error/<status>[/raw]   an error whose message carries ANSI/OSC escape sequences,
                              JSON-escaped (`\\u001b`), or with `raw` as the bytes themselves
  ansi-content                a valid HTTP 200 whose message content carries them
  markup                      HTML markup and ANSI in an extra field of every answer, and as the
                              content of every call whose id ends in an even hex digit (an
                              `unparseable` decision); the others get a verdict (report.html tests)
  key/<form>/<status>         echoes the caller's Bearer key in the error message (status
                              4xx/5xx) or in the content and X-Call-Id header (200); forms:
                              plain, json (every character \\uXXXX), json-mixed (every other
                              character escaped), percent (%XX), partial (a 20-character run),
                              or `all`: each request the next of those five in turn; and upper,
                              mixed-case, reversed, hex, hex-upper, b64-0, b64-1, b64-2 (base64
                              of the key after 0-2 bytes), b64-bearer (of `Bearer KEY`), b64-url
  key-encoding                a valid answer labelled with the caller's Bearer key as its
                              `Content-Encoding` (an encoding the client cannot read, named by a header)
  status/<code>               that status with an OpenRouter-style error body (413, ...)
  unusable/<kind>             HTTP 200 with nothing a chat completion can be read from: `empty`
                              (no body), `object` (`{}`), `no-choices` (`{"choices": []}`)
  cut/<kind>                  HTTP 200 and its headers, then: `close` (the connection closed before
                              any of the announced body), `half` (half the announced body, then
                              closed), `trickle` (a valid answer, one byte every 0.2 s)
  traceback/<status>          that status with a FastAPI validation error naming
                              `body.response_format`, followed by a Python traceback (as
                              llama-cpp-python's server writes it)

Run by hand: `python tests/hostile_server.py [--port N]` prints `listening on http://HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import re
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from aiohttp import web

from app_server import in_thread, start

VERDICT = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
ANSI = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[32mall good\x1b[0m"
MARKUP = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
CHUNK = b"x" * (64 << 10)
BOMB_UNPACKED = 4 << 30     # bytes a bomb inflates to
_SHORT = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def answer(*, content: str = VERDICT, cost: Any = 0.001, call_id: str = "") -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
    if cost is not None:
        usage["cost"] = cost
    return {"id": f"gen-{call_id}", "object": "chat.completion", "model": "hostile", "provider": "sim",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage}


KEY_FORMS = ("plain", "json", "json-mixed", "percent", "partial")


def key_form(key: str, form: str) -> str:
    if form == "plain":
        return key
    if form == "json":
        return "".join(f"\\u{ord(c):04x}" for c in key)
    if form == "json-mixed":
        return "".join(f"\\u{ord(c):04X}" if i % 2 else c for i, c in enumerate(key))
    if form == "percent":
        return "".join(f"%{ord(c):02X}" for c in key)
    if form == "partial":
        return key[len(key) // 3:len(key) // 3 + 20]
    if form == "upper":
        return key.upper()
    if form == "mixed-case":
        return "".join(c.upper() if i % 3 == 0 else c for i, c in enumerate(key))
    if form == "reversed":
        return key[::-1]
    if form == "hex":
        return key.encode().hex()
    if form == "hex-upper":
        return key.encode().hex().upper()
    if form.startswith("b64-"):
        # b64-0, b64-1, b64-2: the key after 0-2 other bytes; b64-bearer: the Authorization value;
        # b64-url: URL-safe alphabet.
        what = {"b64-0": key.encode(), "b64-1": b"x" + key.encode(), "b64-2": b"xy" + key.encode(),
                "b64-bearer": b"Bearer " + key.encode(), "b64-url": b"?" + key.encode()}[form]
        encode = base64.urlsafe_b64encode if form == "b64-url" else base64.b64encode
        return encode(what).decode()
    raise ValueError(form)


def leaked(text: str, key: str, run: int = 12) -> str | None:
    """A run of `run` characters of `key` found in `text` plain, after undoing JSON escapes
    (once or twice, as a JSON string inside a JSON file holds them), or after undoing percent
    encoding, in any case, reversed, or in a stretch of hex or base64 decoded; None when there
    is none. Written apart from harness/guardeval/backends/redact.py on purpose."""
    def unjson(t: str) -> str:
        # One left-to-right pass, as a JSON reader does: `\\u0073` is a backslash, then text.
        return re.sub(r'\\(u[0-9a-fA-F]{4}|[/"\\bfnrt])',
                      lambda m: chr(int(m[1][1:], 16)) if m[1][0] == "u" else _SHORT.get(m[1], m[1]), t)

    views = [text, unjson(text), unjson(unjson(text))]
    views += [urllib.parse.unquote(v) for v in views]
    # Encodings: every stretch of hex digits (both pairings) and of base64 characters (all four
    # starting offsets, both alphabets) decoded, as text.
    decoded: list[str] = []
    for view in views:
        for m in re.finditer(r"[0-9a-fA-F]{%d,}" % (2 * run), view):
            for skip in (0, 1):
                digits = m[0][skip:]
                decoded.append(bytes.fromhex(digits[:len(digits) // 2 * 2]).decode("latin-1"))
        for m in re.finditer(r"[A-Za-z0-9+/_-]{%d,}" % (run * 4 // 3), view):
            for skip in range(4):
                chars = m[0][skip:]
                chars = chars[:len(chars) // 4 * 4]
                for alt in (b"+/", b"-_"):
                    try:
                        decoded.append(base64.b64decode(chars.encode(), altchars=alt).decode("latin-1"))
                    except ValueError:
                        pass
    for view in views + decoded:
        low = view.lower()
        for i in range(len(key) - run + 1):
            piece = key[i:i + run].lower()
            if piece in low or piece[::-1] in low:
                return key[i:i + run]
    return None


def _crc32_zeros(n: int) -> int:
    """CRC-32 of n zero bytes (n = 1 MiB x a power of two) without a pass over them: doubling."""
    length, crc = 1 << 20, zlib.crc32(bytes(1 << 20))
    while length < n:
        crc = _crc32_combine(crc, crc, length)
        length *= 2
    assert length == n
    return crc


def _crc32_combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """crc32(A + B) from crc32(A), crc32(B) and len(B): zlib's crc32_combine, by GF(2) matrices."""
    op = [0xEDB88320] + [1 << i for i in range(31)]      # the register after one zero bit
    for _ in range(3):
        op = _square(op)                                  # ... after one zero byte
    while len_b:                                          # ... after len_b zero bytes, by squaring
        if len_b & 1:
            crc_a = _times(op, crc_a)
        len_b >>= 1
        if len_b:
            op = _square(op)
    return crc_a ^ crc_b


def _times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: list[int]) -> list[int]:
    return [_times(mat, mat[n]) for n in range(32)]


def _bombs() -> tuple[bytes, bytes]:
    """(gzip, zlib) streams of 4 GiB of zeros, about 4 MiB each, built without 4 GiB of work:
    1 MiB of zeros compressed once and closed with a full flush (which resets the compressor, so
    the block does not refer back), repeated 4,096 times, then the real trailers."""
    zeros = bytes(1 << 20)
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = raw.compress(zeros) + raw.flush(zlib.Z_FULL_FLUSH)
    end = raw.flush(zlib.Z_FINISH)
    n = BOMB_UNPACKED >> 20
    body = block * n + end
    crc = _crc32_zeros(BOMB_UNPACKED)
    gz = (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body + crc.to_bytes(4, "little")
          + (BOMB_UNPACKED & 0xFFFFFFFF).to_bytes(4, "little"))
    # Adler-32 of zeros(n) = (1, n mod 65521): a = 1 + sum(bytes) = 1, b = sum of a after each byte = n.
    adler = ((BOMB_UNPACKED % 65521) << 16) | 1
    zl = b"\x78\xda" + body + adler.to_bytes(4, "big")
    return gz, zl


class Hostile:
    def __init__(self) -> None:
        self.attempts: Counter[tuple[str, str]] = Counter()   # (mode path, call id) -> attempts seen
        self.requests = 0
        self._bomb: tuple[bytes, bytes] | None = None

    def bombs(self) -> tuple[bytes, bytes]:
        if self._bomb is None:
            self._bomb = _bombs()
        return self._bomb

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        await request.read()
        parts = request.match_info["mode"].strip("/").split("/")
        mode, args = parts[0], parts[1:]
        call_id = request.headers.get("X-Call-Id", "")
        auth = request.headers.get("Authorization", "")
        key = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        if mode == "ok":
            return web.json_response(answer(call_id=call_id))
        if mode == "cost":
            if args[0] in ("NaN", "Infinity", "-Infinity"):
                # Not JSON, but what a careless encoder writes: the literal, unquoted.
                text = orjson.dumps(answer(cost="COST", call_id=call_id)).decode().replace('"COST"', args[0])
                return web.Response(text=text, content_type="application/json")
            cost = None if args[0] == "none" else orjson.loads(args[0])
            return web.json_response(answer(cost=cost, call_id=call_id))
        if mode in ("endless", "big-length"):
            return await self._flood(request, mode == "big-length")
        if mode in ("gzip-bomb", "deflate-bomb"):
            gz, zl = self.bombs()
            body = gz if mode == "gzip-bomb" else zl
            return web.Response(body=body, status=200, headers={
                "Content-Type": "application/json", "Content-Encoding": "gzip" if mode == "gzip-bomb" else "deflate"})
        if mode == "gzip-ok":
            text = orjson.dumps(answer(call_id=call_id))
            half = len(text) // 2
            body = gzip.compress(text[:half], mtime=0) + gzip.compress(text[half:], mtime=0)
            return web.Response(body=body, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        if mode == "encoding":
            return web.Response(body=orjson.dumps(answer(call_id=call_id)),
                                headers={"Content-Type": "application/json", "Content-Encoding": args[0]})
        if mode == "bad-length":
            # Bytes no well-behaved server would write: aiohttp's client parser refuses them.
            assert request.transport is not None
            request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}")
            request.transport.close()
            raise asyncio.CancelledError
        if mode == "retry-after":
            status, value, n = int(args[0]), args[1], int(args[2])
            self.attempts[(request.path, call_id)] += 1
            if self.attempts[(request.path, call_id)] <= n:
                if value == "far-date":
                    value = "Fri, 31 Dec 9999 23:59:59 GMT"
                return web.json_response({"error": {"code": status, "message": "slow down"}}, status=status,
                                         headers={"Retry-After": value})
            return web.json_response(answer(call_id=call_id))
        if mode == "ansi-error":
            status = int(args[0])
            if args[1:] == ["raw"]:
                return web.Response(text='{"error": {"code": %d, "message": "upstream said %s"}}' % (status, ANSI),
                                    status=status, content_type="application/json")
            return web.json_response({"error": {"code": status, "message": f"upstream said {ANSI}"}}, status=status)
        if mode == "ansi-content":
            return web.json_response(answer(content=VERDICT + ANSI, call_id=call_id))
        if mode == "markup":
            content = f"{MARKUP}{ANSI} not a verdict" if call_id[-1:] in tuple("02468ace") else VERDICT
            return web.json_response({**answer(content=content, call_id=call_id), "note": MARKUP + ANSI})
        if mode == "key":
            form, status = args[0], int(args[1])
            if form == "all":
                form = KEY_FORMS[self.attempts[(request.path, "")] % len(KEY_FORMS)]
                self.attempts[(request.path, "")] += 1
            echo = key_form(key, form)
            if status == 200:
                # The echo goes in raw: json forms must reach the client as escapes, not re-escaped.
                text = orjson.dumps(answer(content="KEYMARK", call_id=call_id)).decode().replace("KEYMARK", f"echo {echo}")
                return web.Response(text=text, status=200, content_type="application/json",
                                    headers={"X-Call-Id": key_form(key, "plain" if form.startswith("json") else form)})
            text = '{"error": {"code": %d, "message": "invalid key: %s"}}' % (status, echo)
            return web.Response(text=text, status=status, content_type="application/json")
        if mode == "key-encoding":
            return web.Response(body=orjson.dumps(answer(call_id=call_id)),
                                headers={"Content-Type": "application/json", "Content-Encoding": key})
        if mode == "unusable":
            body = {"empty": b"", "object": b"{}", "no-choices": b'{"choices": []}'}[args[0]]
            return web.Response(body=body, status=200, content_type="application/json")
        if mode == "cut":
            return await self._cut(request, args[0], call_id)
        if mode == "traceback":
            item = {"loc": ["body", "response_format", "type"], "msg": "Value error, expected 'text' or 'json_object'",
                    "type": "value_error"}
            detail = orjson.dumps({"detail": [item]}).decode()
            text = (detail + "\n\nTraceback (most recent call last):\n  File \"server/app.py\", line 412, in "
                    "create_chat_completion\n    body = CreateChatCompletionRequest(**data)\n"
                    "pydantic_core._pydantic_core.ValidationError: 1 validation error\n")
            return web.Response(text=text, status=int(args[0]), content_type="application/json")
        if mode == "status":
            code = int(args[0])
            return web.json_response({"error": {"code": code, "message": f"status {code}"}}, status=code)
        return web.json_response({"error": {"code": 404, "message": "no such mode"}}, status=404)

    async def _cut(self, request: web.Request, kind: str, call_id: str) -> web.StreamResponse:
        body = orjson.dumps(answer(call_id=call_id))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.content_length = len(body)
        await resp.prepare(request)
        try:
            if kind == "trickle":
                for i in range(len(body)):
                    await resp.write(body[i:i + 1])
                    await asyncio.sleep(0.2)
                return resp
            if kind == "half":
                await resp.write(body[:len(body) // 2])
        except (ConnectionError, asyncio.CancelledError):
            return resp
        assert request.transport is not None
        request.transport.close()       # the status line and headers were sent: then nothing more
        raise asyncio.CancelledError

    async def _flood(self, request: web.Request, announce: bool) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        if announce:
            resp.content_length = 2_000_000_000
        await resp.prepare(request)
        try:
            while True:          # until the client hangs up
                await resp.write(CHUNK)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp


def build_app(state: Hostile) -> web.Application:
    app = web.Application()
    app.router.add_post("/{mode:.*}/v1/chat/completions", state.handle)
    return app


@contextmanager
def serving(host: str = "127.0.0.1") -> Iterator[tuple[str, Hostile]]:
    """Serve on a free port from a background thread; yields (`http://HOST:PORT`, state)."""
    state = Hostile()
    with in_thread(build_app(state), host) as url:
        yield url, state


def main() -> int:
    ap = argparse.ArgumentParser(description="a hostile chat-completions provider for tests")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    state = Hostile()

    async def serve() -> None:
        _, url = await start(build_app(state), args.host, args.port)
        print(f"listening on {url}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
