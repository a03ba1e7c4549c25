"""Bounds on a JSONL row (`--max-row-bytes`, `--max-row-depth`): cohort rows, decision tables
and audit inputs. Kept apart from the cohort model so that the command line can state its
defaults without importing jsonschema."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from guardeval.errors import InputError

# orjson (canonical JSON, every hash) serialises at most 254 levels of nesting: a deeper row
# could never be hashed, so no limit may go past this.
MAX_DEPTH_CEILING = 200


@dataclass(frozen=True)
class RowLimits:
    """Bounds on one `instances.jsonl` row, checked before it is parsed: its size in bytes
    (the line is never read past it) and its nesting depth (the row object itself is level 1).
    A guard prompt near the size limit is already past any model's context; `--max-row-bytes`
    and `--max-row-depth` raise them for the rare real case."""

    max_bytes: int = 1 << 20
    max_depth: int = 64


DEFAULT_ROW_LIMITS = RowLimits()


def widest(a: RowLimits, b: RowLimits) -> RowLimits:
    """Each bound at the larger of the two."""
    return RowLimits(max_bytes=max(a.max_bytes, b.max_bytes), max_depth=max(a.max_depth, b.max_depth))


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")


def deeper_than(raw: bytes, limit: int) -> bool:
    """Is the JSON text `raw` nested more than `limit` levels deep? Strings are cut out (a
    bracket inside one is text), then innermost bracket pairs are removed one level per pass:
    C-speed passes, at most `limit` of them, and none for a row with few brackets."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    rest = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not rest:
            return False
        rest = _INNERMOST.sub(b"", rest)
    return bool(rest)


def bounded_lines(path: Path, limits: RowLimits = DEFAULT_ROW_LIMITS) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline) of a JSONL file, each line checked against
    `limits` before anyone parses it: a line is never read past the size limit, and one nested
    too deep is refused (InputError naming the line and the flag that raises the limit)."""
    try:
        fh = open(path, "rb", buffering=1 << 20)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    with fh:
        for lineno, raw in enumerate(iter(functools.partial(fh.readline, limits.max_bytes + 2), b""), start=1):
            if len(raw) > limits.max_bytes + (raw[-1:] == b"\n"):
                raise InputError(f"line is longer than {limits.max_bytes} bytes (raise the limit with "
                                 "--max-row-bytes)", path=path, line=lineno)
            if deeper_than(raw, limits.max_depth):
                raise InputError(f"line is nested more than {limits.max_depth} levels deep (raise the limit with "
                                 "--max-row-depth)", path=path, line=lineno)
            yield lineno, raw.rstrip(b"\n")


DUPLICATE_KEY = "an object repeats a key (which of the two counts would depend on the reader)"
CONFLICTING_KEY = "an object repeats a key with another value (which of the two counts would depend on the reader)"
_WHITESPACE = re.compile(rb"[ \t\r\n]+")


def _parsed_keys(value: object) -> int:
    n, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            n += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def has_duplicate_keys(raw: bytes, parsed: object) -> bool:
    """Did the JSON text `raw` repeat a key inside one object? orjson keeps the last of two equal
    keys without a word, so a row could say one thing to a reader that takes the first and
    another to guardeval. Every string is cut to a bare quote (between strings of valid JSON
    there is no quote, so a left-to-right match finds them all), whitespace outside strings is
    dropped, and each `":` left is one key in the text: more keys in the text than in the
    parsed value means a repeat."""
    if b":" not in raw:
        return False
    text_keys = _WHITESPACE.sub(b"", _JSON_STRING.sub(b'"', raw)).count(b'":')
    return text_keys != _parsed_keys(parsed)


def has_conflicting_keys(raw: bytes, parsed: object) -> bool:
    """Does `raw` repeat a key inside one object *with a different value*? The rule for pinned
    third-party source files: their bytes are what their pins fix (ASB's
    all_attack_tools.jsonl repeats "Attack Type" with the same value on one line), so only a
    repeat that two readers could read differently is refused. Parsed again only when
    `has_duplicate_keys` says there is a repeat (rare)."""
    if not has_duplicate_keys(raw, parsed):
        return False
    conflict = False

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal conflict
        seen: dict[str, object] = {}
        for k, v in items:
            if k in seen and seen[k] != v:
                conflict = True
            seen[k] = v
        return seen

    json.loads(raw, object_pairs_hook=pairs)
    return conflict
