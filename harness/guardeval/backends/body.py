"""Read an HTTP response body under a cap on its decoded size.

A provider's body is hostile until read: it can be endless, announce gigabytes, or be a gzip
bomb (megabytes that inflate to gigabytes). The body is streamed and decompressed here (the
aiohttp transport is called with its own decompression off, so these are the bytes on the
wire), the inflater is never asked for more than the room left under the cap, and reading
stops the moment the decoded size would pass it. Memory per call is then at most the cap plus
one chunk, whatever the server sends.
"""

from __future__ import annotations

import zlib

import httpx

# Only what `_Decoder` can inflate is offered; a server that answers in another encoding
# anyway gets a malformed-body error, not a guess.
ACCEPT_ENCODING = "gzip, deflate"
_GZIP_MAGIC = b"\x1f\x8b"


class BodyTooLarge(Exception):
    """The decoded body passed the cap; `head` holds its first bytes for the record."""

    def __init__(self, head: bytes, cap: int) -> None:
        super().__init__(f"response body larger than max_response_bytes ({cap} bytes)")
        self.head = head


class BodyUnreadable(Exception):
    """An encoding this client did not offer, or compressed data that does not inflate."""


class _Decoder:
    """gzip (members one after another, as RFC 1952 allows) or deflate (zlib-wrapped, or raw
    as some servers send it), inflated at most `limit` bytes at a time."""

    def __init__(self, encoding: str) -> None:
        self.gzip = encoding in ("gzip", "x-gzip")
        self._z: zlib._Decompress | None = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None

    def feed(self, data: bytes, limit: int) -> bytes:
        if self._z is None:   # deflate: the first two bytes say whether a zlib header is there
            zlib_header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        out: list[bytes] = []
        n = 0
        try:
            while data and n < limit:
                piece = self._z.decompress(data, limit - n)
                out.append(piece)
                n += len(piece)
                if not self._z.eof:
                    data = self._z.unconsumed_tail
                elif self.gzip and self._z.unused_data.startswith(_GZIP_MAGIC):
                    data = self._z.unused_data
                    self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                else:
                    break     # the end of the stream; trailing bytes are ignored, as browsers do
        except zlib.error as exc:
            raise BodyUnreadable(f"compressed body does not inflate ({exc})") from None
        return b"".join(out)


def _decoder(headers: httpx.Headers) -> _Decoder | None:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Decoder(encoding)
    raise BodyUnreadable(f"unsupported Content-Encoding {encoding[:40]!r}")


async def read_capped(resp: httpx.Response, cap: int, keep: int = 2048) -> bytes:
    """The whole decoded body, or BodyTooLarge (with its first `keep` bytes) as soon as it
    passes `cap` bytes; BodyUnreadable for an encoding that cannot be decoded."""
    decoder = _decoder(resp.headers)
    declared = resp.headers.get("content-length", "")
    # A body announced larger than the cap is refused after its first chunk, not read to the cap.
    announced_too_large = decoder is None and declared.isdigit() and int(declared) > cap
    chunks: list[bytes] = []
    size = 0
    async for raw in resp.aiter_raw():
        data = raw if decoder is None else decoder.feed(raw, cap - size + 1)
        size += len(data)
        if size > cap or announced_too_large:
            raise BodyTooLarge(_head(chunks, data, keep), cap)
        if data:
            chunks.append(data)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _head(chunks: list[bytes], last: bytes, keep: int) -> bytes:
    head = bytearray()
    for c in (*chunks, last):
        head += c[:keep - len(head)]
        if len(head) >= keep:
            break
    return bytes(head)
