"""Read a GGUF file: header, metadata key/values, tensor table, tensor data (numpy, memory-mapped).

Layout (little-endian; versions 2 and 3): the magic `GGUF`, a uint32 version, uint64 tensor and
metadata counts; the metadata (key string, uint32 value type, value); the tensor table (name,
uint32 dimension count, uint64 dimensions innermost first, uint32 ggml type, uint64 offset);
then, from the next multiple of `general.alignment` (default 32), the tensor data, each
tensor's offset relative to that point and itself aligned. Strings are a uint64 length and
UTF-8 bytes; arrays a uint32 element type, a uint64 count and the elements.

The file is hostile until checked: every length and count is bounded by the bytes left in the
file, every tensor must lie inside the data section, and names from the file reach messages
only through `repr` (control characters escaped). A violation is an InputError naming the
file and the key or tensor (exit 2).
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardeval.backends.gguf import quants
from guardeval.errors import InputError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_COUNT = 1 << 24          # metadata keys / tensors: far above any real model
MAX_NESTING = 2              # arrays of arrays (rare) at most this deep

# Metadata value types: code -> (struct format, numpy dtype) for the fixed-size ones.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"), 1: ("<b", "<i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"), 4: ("<I", "<u4"),
    5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "<u1"), 10: ("<Q", "<u8"), 11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7


def shown(text: str, limit: int = 80) -> str:
    """Text from the file as it may appear in a message: quoted, escaped, bounded."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def shown_value(value: object, limit: int = 80) -> str:
    """A metadata value from the file as it may appear in a message: its repr, bounded."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]   # ggml order: innermost (contiguous) dimension first
    type_code: int
    offset: int             # absolute offset in the file

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy (row-major) shape: the ggml dimensions reversed."""
        return tuple(reversed(self.dims))

    @property
    def n_values(self) -> int:
        return math.prod(self.dims)

    @property
    def type_name(self) -> str:
        return quants.type_name(self.type_code)


class _Cursor:
    """Sequential reads over the header with every length checked against the file's end."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.path, self.pos, self.end = buf, path, 0, len(buf)

    def fail(self, message: str, field: str | None = None) -> InputError:
        if field is not None and len(field) > 80:  # a key or name from the file: bound what a message repeats
            field = field[:80] + "…"
        return InputError(f"not a valid GGUF file: {message} (at byte {self.pos})", path=self.path, field=field)

    def take(self, n: int, what: str, field: str | None = None) -> bytes:
        if n < 0 or n > self.end - self.pos:
            raise self.fail(f"{what} of {n} bytes runs past the end of the file", field)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str, field: str | None = None) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what, field))[0]

    def string(self, what: str, field: str | None = None) -> str:
        n = self.scalar("<Q", what, field)
        raw = self.take(n, what, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8", field) from None


def _read_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        value = cur.scalar(_SCALARS[vtype][0], "value", key)
        return bool(value) if vtype == _BOOL else value
    if vtype == _STRING:
        return cur.string("string value", key)
    if vtype != _ARRAY:
        raise cur.fail(f"unknown metadata value type {vtype}", key)
    if depth >= MAX_NESTING:
        raise cur.fail("arrays nested too deeply", key)
    etype = cur.scalar("<I", "array type", key)
    count = cur.scalar("<Q", "array length", key)
    if etype in _SCALARS:
        dtype = np.dtype(_SCALARS[etype][1])
        raw = cur.take(count * dtype.itemsize, "array", key)
        arr = np.frombuffer(raw, dtype=dtype)
        return arr.astype(bool) if etype == _BOOL else arr
    if count > (cur.end - cur.pos) // 8:  # each string or array element takes >= 8 bytes
        raise cur.fail(f"array of {count} elements cannot fit in the file", key)
    if etype == _STRING:
        return [cur.string("string element", key) for _ in range(count)]
    if etype == _ARRAY:
        return [_read_value(cur, _ARRAY, key, depth + 1) for _ in range(count)]
    raise cur.fail(f"unknown array element type {etype}", key)


class GgufFile:
    """A parsed GGUF file. Tensor bytes stay on disk (memory-mapped) until `tensor()` reads one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                size = self.size = _file_size(fh, self.path)
                if size < 24:
                    raise InputError("not a GGUF file (too short)", path=self.path)
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise InputError("file not found", path=self.path) from None
        except IsADirectoryError:
            raise InputError("is a folder, not a GGUF file", path=self.path) from None
        except PermissionError:
            raise InputError("cannot read (permission denied)", path=self.path) from None
        try:
            self._parse()
        except BaseException:
            self._map.close()
            raise

    def _parse(self) -> None:
        cur = _Cursor(self._map, self.path)
        if cur.take(4, "magic") != MAGIC:
            raise InputError("not a GGUF file (no GGUF magic)", path=self.path)
        self.version = cur.scalar("<I", "version")
        if self.version not in VERSIONS:
            raise InputError(f"GGUF version {self.version} is not supported (expected 2 or 3; a "
                             "byte-swapped number means a big-endian file)", path=self.path)
        n_tensors = cur.scalar("<Q", "tensor count")
        n_kv = cur.scalar("<Q", "metadata count")
        if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
            raise cur.fail(f"implausible counts ({n_tensors} tensors, {n_kv} metadata keys)")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string("metadata key")
            if key in self.metadata:
                raise cur.fail("duplicate metadata key", key)
            self.metadata[key] = _read_value(cur, cur.scalar("<I", "value type", key), key)
        infos: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name = cur.string("tensor name")
            n_dims = cur.scalar("<I", "dimension count", name)
            if not 1 <= n_dims <= MAX_DIMS:
                raise cur.fail(f"tensor {shown(name)} has {n_dims} dimensions")
            dims = tuple(cur.scalar("<Q", "dimension", name) for _ in range(n_dims))
            infos.append((name, dims, cur.scalar("<I", "tensor type", name), cur.scalar("<Q", "offset", name)))
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
            raise InputError(f"general.alignment must be a power of two, got {alignment!r}", path=self.path,
                             field="general.alignment")
        self.alignment = alignment
        self.data_offset = -(-cur.pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, code, rel in infos:
            self.tensors[name] = self._check_tensor(name, dims, code, rel)

    def _check_tensor(self, name: str, dims: tuple[int, ...], code: int, rel: int) -> TensorInfo:
        def bad(message: str) -> InputError:
            return InputError(f"tensor {shown(name)}: {message}", path=self.path)

        if name in self.tensors:
            raise bad("listed twice")
        if any(d < 1 for d in dims) or math.prod(dims) > self.size * 8:
            raise bad(f"implausible dimensions {list(dims)}")
        info = TensorInfo(name, dims, code, self.data_offset + rel)
        if code not in quants.SUPPORTED:
            return info  # refused only if used (`tensor()`), so the error names the tensor and type
        block = quants.SUPPORTED[code].block
        if dims[0] % block:
            raise bad(f"rows of {dims[0]} values are not whole {info.type_name} blocks of {block}")
        if rel % self.alignment:
            raise bad(f"offset {rel} is not aligned to {self.alignment}")
        if info.offset + quants.byte_size(code, info.n_values) > self.size:
            raise bad("data runs past the end of the file")
        return info

    # -- access ------------------------------------------------------------------------------
    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantised to float32, in numpy shape (ggml dimensions reversed)."""
        info = self.tensors[name]
        if info.type_code not in quants.SUPPORTED:
            supported = ", ".join(t.name for t in quants.SUPPORTED.values())
            raise InputError(f"tensor {shown(name)} is {info.type_name}, which cannot be converted "
                             f"(supported: {supported})", path=self.path)
        n = quants.byte_size(info.type_code, info.n_values)
        raw = np.frombuffer(self._map, dtype=np.uint8, count=n, offset=info.offset)
        return quants.dequantize(info.type_code, raw, info.n_values).reshape(info.shape)

    def raw_bytes(self, name: str) -> bytes:
        """A tensor's bytes exactly as stored (for tests and diagnostics)."""
        info = self.tensors[name]
        return self._map[info.offset:info.offset + quants.byte_size(info.type_code, info.n_values)]

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> GgufFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_size(fh: Any, path: Path) -> int:
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path=path)
    return st.st_size
