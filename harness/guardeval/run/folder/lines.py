"""Reading a run's JSONL logs line by line: whole lines only, a damaged one named by its number,
and the few fields a scan needs read without parsing the line where it is in the writer's shape."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from guardeval.errors import CheckFailed
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import RAW
from guardeval.run.folder.spend import reported_cost


def iter_jsonl(folder: RunFolder, name: str) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(line number, line bytes without newline, parsed object) for every complete line of
    `name` in the run folder (a torn last line is left out: `RunWriter.open` moves it aside)."""
    path = folder.file(name)
    for lineno, line in folder.lines(name):
        if not line.endswith(b"\n"):
            return
        body = line[:-1]
        yield lineno, body, parse_line(body, path, lineno)


class RawFields(NamedTuple):
    call_id: Any
    final: Any
    outcome: Any
    cost: Any                   # what the provider says the attempt cost (`budget.reported_cost`)
    usage: Mapping[str, object]     # as the line has it (read, never trusted: `budget` checks each field)
    generation_id: Any = None   # the provider's generation id, when recorded


def raw_head(buf: Any, start: int = 0, end: int | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(every field before `request`, the `usage` object) of the raw line `buf[start:end]` (no
    newline), without parsing its request.

    A raw line is canonical JSON (sorted keys, no spaces) of a record whose fields before
    `request` are scalars and whose last field is `usage`; inside a JSON string every `"` is
    escaped, so `,"request":` can only be that key and `,"usage":` (from the end) only the
    top-level usage. The head and the usage object are parsed on their own: ~5x cheaper than
    parsing a line whose request carries the whole trajectory. Anything unexpected (a line not
    in that shape) returns None and the caller parses the whole line: the answer is exact.
    `buf` may be bytes or an mmap.
    """
    end = len(buf) if end is None else end
    cut = buf.find(b',"request":', start, end)
    at = buf.rfind(b',"usage":', start, end)
    if cut < 0 or at < cut or buf[end - 1] != 0x7D:   # "}"
        return None
    try:
        # One parse of `[head, usage]`: the two fragments, each a whole JSON object.
        head, usage = orjson.loads(b"".join((b"[", buf[start:cut], b"},", buf[at + 9:end - 1], b"]")))
    except (orjson.JSONDecodeError, ValueError):
        return None
    if type(head) is not dict or type(usage) is not dict or "call_id" not in head or "final" not in head \
            or "outcome" not in head:
        return None
    return head, usage


def raw_fields(buf: Any, start: int = 0, end: int | None = None) -> RawFields | None:
    """call_id, final, outcome, reported cost (`budget.reported_cost`), usage and generation id
    of the raw line `buf[start:end]` (see `raw_head`; None: parse the whole line)."""
    parts = raw_head(buf, start, end)
    if parts is None:
        return None
    head, usage = parts
    return RawFields(head["call_id"], head["final"], head["outcome"], reported_cost(usage), usage,
                     head.get("generation_id"))


def full_raw_fields(body: bytes, path: Path, lineno: int) -> RawFields:
    """The same fields from a full parse (CheckFailed, as iter_jsonl, if not a JSON object)."""
    rec = parse_line(body, path, lineno)
    usage = rec.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return RawFields(rec.get("call_id"), rec.get("final"), rec.get("outcome"), reported_cost(usage), usage,
                     rec.get("generation_id"))


def iter_raw_fields(folder: RunFolder, start: int = 0, end: int | None = None,
                    window: int = 64 << 20) -> Iterator[tuple[int, int, int, RawFields]]:
    """(line number, offset, length with newline, fields) of every complete line of raw.jsonl
    (see `RunFolder.mapped_lines`); each line's few fields come from `raw_fields`."""
    path = folder.file(RAW)
    for lineno, buf, pos, nl, offset in folder.mapped_lines(RAW, start, end, window):
        fields = raw_fields(buf, pos, nl)
        if fields is None:
            fields = full_raw_fields(buf[pos:nl], path, lineno)
        yield lineno, offset + pos, nl + 1 - pos, fields


def parse_line(body: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        raise damaged(path, lineno, "not a JSON object")
    return obj


# Lines exactly as the writers write them (canonical JSON, lower-case hex ids): a match proves
# the shape, so the few fields a scan needs are read without parsing the line.
STIMULUS_LINE = re.compile(rb'\{"call_id":"([0-9a-f]{32})","request_sha256":"([0-9a-f]{64})"\}\n')
_DECISION_HEAD = re.compile(rb'\{"attributable":(?:true|false),"call_id":"([0-9a-f]{32})","components":')
# The last five fields of a decision line, all scalars (nothing nested from here on).
_DECISION_TAIL = re.compile(rb',"quarantine_reason":(?:null|"([a-z_]+)"),"raw_line_sha256":"[0-9a-f]{64}",'
                            rb'"raw_seq":[0-9]+,"score":(?:null|-?[0-9][0-9.eE+-]*),"status":"([a-z_]+)"\}\n')


def decision_call_id(line: bytes) -> str | None:
    """The call id of a decision line in the writer's shape (None: parse the line)."""
    m = _DECISION_HEAD.match(line)
    return m[1].decode() if m is not None else None


def decision_fields(line: bytes) -> tuple[str, Any, Any] | None:
    """(call_id, status, quarantine_reason) of a decision line in the writer's shape, read
    from its head and its last five fields; None: parse the line."""
    m = _DECISION_HEAD.match(line)
    at = line.rfind(b',"quarantine_reason":')
    tail = _DECISION_TAIL.fullmatch(line, at) if at >= 0 else None
    if m is None or tail is None:
        return None
    reason = tail[1].decode() if tail[1] is not None else None
    return m[1].decode(), tail[2].decode(), reason


def parsed_decision_fields(line: bytes, path: Path, lineno: int) -> tuple[str, str, str | None]:
    """`decision_fields` of a line not in the writer's shape: parsed, each field checked
    (CheckFailed names the line, as a line that is not a JSON object does)."""
    return checked_decision_fields(parse_line(line.rstrip(b"\n"), path, lineno), path, lineno)


def checked_decision_fields(rec: dict[str, Any], path: Path, lineno: int) -> tuple[str, str, str | None]:
    """(call_id, status, quarantine_reason) of a parsed decision line, each checked."""
    cid, status, reason = rec.get("call_id"), rec.get("status"), rec.get("quarantine_reason")
    if not isinstance(cid, str):
        raise damaged(path, lineno, "missing or malformed field 'call_id'")
    if not isinstance(status, str):
        raise damaged(path, lineno, "missing or malformed field 'status'")
    if reason is not None and not isinstance(reason, str):
        raise damaged(path, lineno, "malformed field 'quarantine_reason'")
    return cid, status, reason


def damaged(path: Path, lineno: int, what: str) -> CheckFailed:
    return CheckFailed(f"{path}: line {lineno}: {what} (the file is damaged; `guardeval verify {path.parent}` "
                       "lists every problem)")


def iter_lines(folder: RunFolder, name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line with its newline) of every complete line; a torn last line is left
    out, as `iter_jsonl` does."""
    for lineno, line in folder.lines(name):
        if not line.endswith(b"\n"):
            return
        yield lineno, line
