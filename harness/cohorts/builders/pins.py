"""Source pinning: byte count + SHA-256 checked before any parsing; symbolic links refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.canon import file_sha256
from harness.errors import InputError


def parse_pin_lines(path: Path) -> dict[str, tuple[int, str]]:
    """`BYTES SHA256 NAME` lines (comments `#` and blanks skipped) -> {name: (bytes, sha256)}."""
    if path.is_symlink():
        raise InputError("symbolic links are refused", path=path)
    if not path.is_file():
        raise InputError("pin file not found", path=path)
    pins: dict[str, tuple[int, str]] = {}
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split()
        if len(parts) != 3 or not parts[0].isdigit() or len(parts[1]) != 64:
            raise InputError("expected 'BYTES SHA256 NAME'", path=path, line=lineno)
        pins[parts[2]] = (int(parts[0]), parts[1].lower())
    return pins


def verify_file(path: Path, size: int, sha256: str) -> dict[str, object]:
    """Check one file against its pin (symlink, size, then hash); return its provenance entry."""
    if path.is_symlink():
        raise InputError("symbolic links are refused", path=path)
    if not path.is_file():
        raise InputError("pinned source file not found", path=path)
    actual = path.stat().st_size
    if actual != size:
        raise InputError(f"size {actual} does not match the pinned {size} bytes", path=path, field="bytes")
    digest = file_sha256(path)
    if digest != sha256:
        raise InputError(f"SHA-256 {digest} does not match the pinned {sha256}", path=path, field="sha256")
    return {"path": path.name, "bytes": size, "sha256": sha256}


def read_json_array(path: Path) -> list[Any]:
    """A source file that must hold one JSON array (TS-Bench records, ToolSafe logs)."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if not isinstance(data, list):
        raise InputError("expected a JSON array", path=path)
    return data
