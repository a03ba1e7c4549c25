"""Canonical JSON and SHA-256 helpers shared by every stage.

Canonical JSON = sorted keys, no spaces, UTF-8 (docs/design.md §3). orjson gives sorted keys and
compact output; it escapes nothing beyond JSON's requirements, so bytes are stable.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson


def canonical_bytes(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(obj: Any) -> str:
    return sha256_hex(canonical_bytes(obj))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dumps_line(obj: Any) -> bytes:
    """One JSONL line (canonical, newline-terminated)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)
