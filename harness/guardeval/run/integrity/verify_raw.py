"""The context-free half of checking raw.jsonl, for `guardeval verify`.

Everything here depends on one raw line alone: its SHA-256, whether it is in canonical form,
the SHA-256 of its logged request and response, and the digest of the decision it re-derives
(both ways: with the stimulus verdict "matches" and "differs", since which applies depends on
stimuli.jsonl). `verify` then walks these facts in line order with the context (the chain, the
seq, the schedule, the stimuli), repeating the old per-line check sequence exactly.

A run of a million calls has half a million raw lines of several KB each: this is most of
verify's work. With a second CPU it runs in a forked worker from the start, while the main
process checks the cohort, schedule and stimuli. Facts travel through an anonymous temporary
file as fixed-size records (no back-pressure while the main process is busy elsewhere, and no
memory held for them); a line with anything unusual travels pickled, whole.
"""

from __future__ import annotations

import hashlib
import re
import struct
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NamedTuple

import orjson

from guardeval.canon import canonical_sha256, dumps_line, sha256_hex
from guardeval.run.dispatch.decide import decide
from guardeval.run.folder.folder import LineTooLong, RunFolder
from guardeval.run.folder.layout import RAW
from guardeval.run.folder.workers import Worker, log_pays
from guardeval.run.integrity.verify_render import Pin

MISSING: Any = ...              # a field the line does not have (never a JSON value)
_DIFFERS = "\x00stimulus differs"   # an expected request hash no line carries
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


class Line(NamedTuple):
    """One raw line's facts. `request` is the recomputed request hash, or the exception that
    computing it raised; `response_differs` likewise (True when response_sha256 is wrong);
    `derived` / `derived_differs`: 16-byte digest of the decision re-derived with the stimulus
    matching / differing (or the exception decide raised; None without a parser)."""

    lineno: int
    canonical: bool
    digest: bytes
    prev: Any
    seq: Any
    call_id: Any
    request: Any
    request_sha: Any
    outcome: Any
    response_differs: Any
    derived: Any
    derived_differs: Any
    final: bool = False         # the line says it ends its call (a decision must point at it)


class Bad(NamedTuple):
    lineno: int
    message: str


class Torn(NamedTuple):
    lineno: int


Fact = Line | Bad | Torn


def digest16(canonical_line: bytes) -> bytes:
    return hashlib.blake2b(canonical_line, digest_size=16).digest()


def line_facts(folder: RunFolder | None, parser: Callable[..., Any] | None, pinned: Pin
               ) -> Iterator[Fact]:
    """Facts of every line of raw.jsonl, in order (the file is streamed; None: a raw log that
    was refused, no facts). A line past the run's `line_cap` is a Bad fact and ends the stream."""
    if folder is None:
        return
    try:
        for lineno, line in folder.lines(RAW):
            if not line.endswith(b"\n"):
                yield Torn(lineno)
                return
            body = line[:-1]
            try:
                rec = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                yield Bad(lineno, f"not valid JSON ({exc})")
                continue
            if not isinstance(rec, dict):
                yield Bad(lineno, "not a JSON object")
                continue
            yield _line(lineno, body, rec, parser, pinned)
    except LineTooLong as exc:
        yield Bad(exc.lineno, f"longer than {exc.cap} bytes, far past any line guardeval writes; the rest of the "
                              "file is not read")


def _line(lineno: int, body: bytes, rec: dict[str, Any], parser: Callable[..., Any] | None,
          pinned: Pin) -> Line:
    digest = hashlib.sha256(body).digest()
    try:
        request: Any = canonical_sha256(rec["request"])
    except (KeyError, TypeError) as exc:
        request = exc
    try:
        resp = rec["response"]
        want = sha256_hex(resp.encode("utf-8")) if resp is not None else None
        response_differs: Any = rec["response_sha256"] != want
    except (KeyError, TypeError, AttributeError) as exc:
        response_differs = exc
    derived = derived_differs = None
    if parser is not None:
        line_sha = digest.hex()
        derived = _derive(rec, line_sha, None, parser, pinned)
        # The stimulus verdict only matters for an answered call (decide's fingerprint check).
        derived_differs = (_derive(rec, line_sha, _DIFFERS, parser, pinned) if rec.get("outcome") == "reply"
                           else derived)
    return Line(lineno, dumps_line(rec)[:-1] == body, digest, rec.get("prev_sha256", MISSING),
                rec.get("seq", MISSING), rec.get("call_id", MISSING), request, rec.get("request_sha256", MISSING),
                rec.get("outcome"), response_differs, derived, derived_differs, rec.get("final") is True)


def _derive(rec: dict[str, Any], line_sha: str, expected: str | None, parser: Callable[..., Any],
            pinned: Pin) -> Any:
    try:
        again = decide(rec, line_sha, expected_request_sha256=expected, parser=parser, backend=pinned[0],
                       allowed_providers=pinned[1])
        return digest16(dumps_line(again))
    except (KeyError, TypeError, ValueError) as exc:
        return exc


# -- fixed-size records ----------------------------------------------------------------------------
# lineno, seq, line digest, prev_sha256, call_id, request_sha256, the two decision digests, flags
_RECORD = struct.Struct("<IQ32s32s16s32s16s16sB")
_CANONICAL, _REQUEST_OK, _RESPONSE_DIFFERS, _NOT_SENT, _DERIVED, _FINAL = 1, 2, 4, 8, 16, 32


def _pack(f: Line) -> bytes | None:
    """The usual line as a 157-byte record; None for anything else (sent pickled)."""
    if not (type(f.prev) is str and _HEX64.fullmatch(f.prev) and type(f.seq) is int and 0 <= f.seq < 1 << 63
            and type(f.call_id) is str and _HEX32.fullmatch(f.call_id) and type(f.request_sha) is str
            and _HEX64.fullmatch(f.request_sha) and type(f.request) is str and type(f.response_differs) is bool
            and f.lineno < 1 << 32):
        return None
    if f.derived is not None and not (type(f.derived) is bytes and type(f.derived_differs) is bytes):
        return None
    flags = (_CANONICAL * f.canonical | _REQUEST_OK * (f.request == f.request_sha)
             | _RESPONSE_DIFFERS * f.response_differs | _NOT_SENT * (f.outcome == "not_sent")
             | _DERIVED * (f.derived is not None) | _FINAL * f.final)
    return _RECORD.pack(f.lineno, f.seq, f.digest, bytes.fromhex(f.prev), bytes.fromhex(f.call_id),
                        bytes.fromhex(f.request_sha), f.derived or bytes(16), f.derived_differs or bytes(16), flags)


def _unpack(fields: tuple[Any, ...]) -> Line:
    lineno, seq, digest, prev, cid, req, dm, dd, flags = fields
    request_sha = req.hex()
    derived = flags & _DERIVED
    return Line(lineno, bool(flags & _CANONICAL), digest, prev.hex(), seq, cid.hex(),
                request_sha if flags & _REQUEST_OK else None, request_sha,
                "not_sent" if flags & _NOT_SENT else "reply", bool(flags & _RESPONSE_DIFFERS),
                dm if derived else None, dd if derived else None, bool(flags & _FINAL))


def _write_facts(folder: RunFolder, parser: Any, pinned: Pin, out: BinaryIO) -> list[Fact]:
    """In the worker: the usual lines' facts as records into `out`; returns the others."""
    odd: list[Fact] = []
    with open(out.fileno(), "wb", buffering=1 << 20, closefd=False) as fh:
        for f in line_facts(folder, parser, pinned):
            packed = _pack(f) if isinstance(f, Line) else None
            if packed is None:
                odd.append(f)
            else:
                fh.write(packed)
    return odd


class RawFacts:
    """`line_facts`, computed by a forked worker started now (when it pays), read in order later."""

    def __init__(self, folder: RunFolder | None, parser: Any, pinned: Pin) -> None:
        self.folder, self.parser, self.pinned = folder, parser, pinned
        self._worker: Worker | None = None
        self._file: BinaryIO | None = None
        if folder is not None and log_pays(folder.size(RAW)):
            self._file = tempfile.TemporaryFile()
            self._worker = Worker(_write_facts, folder, parser, pinned, self._file)

    def __iter__(self) -> Iterator[Fact]:
        odd = self._collect()
        if odd is None:
            yield from line_facts(self.folder, self.parser, self.pinned)
            return
        # Merge the records and the pickled odd facts by line number.
        odd.reverse()
        records = self._file
        assert records is not None   # written by the worker that answered
        records.seek(0)
        size = _RECORD.size
        while chunk := records.read(size * 8192):
            for fields in _RECORD.iter_unpack(chunk):
                while odd and odd[-1].lineno < fields[0]:
                    yield odd.pop()
                yield _unpack(fields)
        while odd:
            yield odd.pop()

    def _collect(self) -> list[Fact] | None:
        if self._worker is None:
            return None
        odd: list[Fact] | None = self._worker.result()   # None: the worker failed; work the file here
        self._worker = None
        return odd

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._file is not None:
            self._file.close()
            self._file = None
