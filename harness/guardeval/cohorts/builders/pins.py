"""Source pinning: byte count + SHA-256 checked before any parsing; symbolic links refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict

import orjson

from guardeval.bounded import read_bounded
from guardeval.canon import file_sha256
from guardeval.cohorts.limits import CONFLICTING_KEY, MAX_DEPTH_CEILING, deeper_than, has_conflicting_keys
from guardeval.errors import InputError

# A pin file lists a few dozen files; anything near this is not one.
MAX_PIN_FILE_BYTES = 1 << 20
_PIN_LINE = re.compile(r"([0-9]{1,15}) ([0-9a-fA-F]{64}) (\S+)")
# A pinned name is joined under the source folder: plain relative parts only (no `..`, `.`,
# empty part, backslash, control or non-ASCII character), so no pin can name a file outside it.
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def parse_pin_lines(path: Path) -> dict[str, tuple[int, str]]:
    """`BYTES SHA256 NAME` lines (comments `#` and blanks skipped) -> {name: (bytes, sha256)}."""
    if path.is_symlink():
        raise InputError("symbolic links are refused", path=path)
    if not path.is_file():
        raise InputError("pin file not found", path=path)
    data = read_bounded(path, MAX_PIN_FILE_BYTES, what="a pin file")
    pins: dict[str, tuple[int, str]] = {}
    for lineno, raw in enumerate(data.splitlines(), start=1):
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InputError("not UTF-8 text", path=path, line=lineno) from None
        if not text or text.startswith("#"):
            continue
        m = _PIN_LINE.fullmatch(" ".join(text.split()))
        if m is None:
            raise InputError("expected 'BYTES SHA256 NAME' (decimal bytes, 64 hex digits)", path=path, line=lineno)
        if not all(_NAME_PART.fullmatch(part) for part in m.group(3).split("/")):
            raise InputError("the name must be a relative path of plain parts (letters, digits, '_.+-'; "
                             "no '..', '.' or empty part)", path=path, line=lineno, field="NAME")
        pins[m.group(3)] = (int(m.group(1)), m.group(2).lower())
    return pins


class SourcePin(TypedDict):
    """One source file a cohort was built from, as its cohort.json `sources` records it."""

    path: str
    bytes: int
    sha256: str


def verify_file(path: Path, size: int, sha256: str) -> SourcePin:
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
    raw = path.read_bytes()
    # Every row built from it is hashed as canonical JSON, which goes no deeper than this.
    if deeper_than(raw, MAX_DEPTH_CEILING):
        raise InputError(f"nested more than {MAX_DEPTH_CEILING} levels deep", path=path)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if has_conflicting_keys(raw, data):
        raise InputError(CONFLICTING_KEY, path=path)
    if not isinstance(data, list):
        raise InputError("expected a JSON array", path=path)
    return data
