"""A `.eval` log's zip, inflated under hard caps before inspect_ai reads it (docs/inspect.md).

A zip's directory says how large each member is, and an outsider writes the directory: a
100 KB `.eval` can claim 100 bytes for a zstd member that inflates to gigabytes, and the reader
inspect_ai uses (zipfile with `zipfile_zstd`) inflates a member whole, with no output limit.
So each member is inflated here, by a reader that stops one byte past the size the directory
claims for it (deflate: zlib's `max_length`; zstd: a stream reader read in bounded pieces, its
window capped), its CRC-32 checked, and the members are handed to inspect_ai re-stored without
compression: inspect_ai then copies bytes, never inflates. What a log may claim is bounded
before anything is inflated: its member count (read from the end-of-directory record, before
zipfile builds an object per member) and the sum of its claimed sizes.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from guardeval.errors import InputError

ZIP_ZSTANDARD = 93      # the method number zstd members carry (inspect_ai writes them)
# A zstd frame names the window its decoder must allocate: a hostile one names gigabytes.
# Writers at inspect_ai's level (3) use a few MiB.
MAX_ZSTD_WINDOW = 1 << 24
_PIECE = 1 << 20        # zstd output read per step


class UnpackedTooLarge(InputError):
    """A `.eval` zip claiming more unpacked bytes than the cap it is read under (exit 2); the
    reader of logs says which option raises the cap."""

    def __init__(self, path: Path, claimed: int, cap: int, how: str = "") -> None:
        self.claimed, self.cap = claimed, cap
        super().__init__(f"the .eval zip unpacks to {_mib(claimed)} (all members together), past guardeval's limit "
                         f"of {_mib(cap)} on what it inflates in memory{how}", path=path)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB ({n:,} bytes)"


def member_count(data: bytes) -> int | None:
    """The entries the end-of-central-directory record (or its zip64 form) claims; None when
    there is no such record (zipfile then refuses the file)."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - (22 + 0xFFFF)))
    if at < 0 or at + 22 > len(data):
        return None
    count = struct.unpack_from("<H", data, at + 10)[0]
    loc = at - 20
    if count == 0xFFFF and loc >= 0 and data[loc:loc + 4] == b"PK\x06\x07":
        end64 = struct.unpack_from("<Q", data, loc + 8)[0]
        if end64 + 56 <= len(data) and data[end64:end64 + 4] == b"PK\x06\x06":
            return int(struct.unpack_from("<Q", data, end64 + 32)[0])
    return int(count)


def restored(path: Path, data: bytes, *, max_members: int, max_unpacked: int, how_to_raise: str = "") -> bytes:
    """`data` (a `.eval` zip) as a zip of the same members stored uncompressed, each inflated
    here under its claimed size. InputError naming `path` and the member for anything that does
    not hold: too many members, too much claimed, a member that inflates past (or short of) its
    claim or fails its CRC, a method or an encryption inspect_ai logs never use. Past
    `max_unpacked`: `UnpackedTooLarge`, its message ending with `how_to_raise`."""
    count = member_count(data)
    if count is not None and count > max_members:
        raise InputError(f"the .eval zip claims {count} members, more than {max_members}", path=path)
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, EOFError, ValueError, struct.error) as exc:
        raise InputError(f"a truncated or damaged .eval file (its zip directory cannot be read: {exc})",
                         path=path) from None
    if len(infos) > max_members:
        raise InputError(f"the .eval zip holds {len(infos)} members, more than {max_members}", path=path)
    claimed = sum(i.file_size for i in infos)
    if claimed > max_unpacked:
        raise UnpackedTooLarge(path, claimed, max_unpacked, how_to_raise)
    out = io.BytesIO()
    seen: set[str] = set()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zout:
        for info in infos:
            if info.filename in seen:
                raise InputError(f"the .eval zip holds member {info.filename!r} twice", path=path)
            seen.add(info.filename)
            zout.writestr(info.filename, _member(path, data, info))
    return out.getvalue()


def _member(path: Path, data: bytes, info: zipfile.ZipInfo) -> bytes:
    name = info.filename

    def bad(why: str) -> InputError:
        return InputError(f"a truncated or damaged .eval file (member {name!r}: {why})", path=path)

    if info.flag_bits & 0x1:
        raise bad("encrypted")
    head = info.header_offset
    if head < 0 or head + 30 > len(data) or data[head:head + 4] != b"PK\x03\x04":
        raise bad("no local header where the directory points")
    name_len, extra_len = struct.unpack_from("<HH", data, head + 26)
    start = head + 30 + name_len + extra_len
    if start + info.compress_size > len(data):
        raise bad("its data runs past the end of the file")
    raw = memoryview(data)[start:start + info.compress_size]
    got = _inflate(raw, info.compress_type, info.file_size, bad)
    if len(got) > info.file_size:
        raise bad(f"it inflates to more than the {info.file_size} bytes the zip directory claims")
    if len(got) < info.file_size:
        raise bad(f"it inflates to {len(got)} bytes, not the {info.file_size} the zip directory claims")
    if zlib.crc32(got) != info.CRC:
        raise bad("its CRC-32 does not match")
    return got


def _inflate(raw: memoryview, method: int, claimed: int, bad: Callable[[str], InputError]) -> bytes:
    """At most `claimed + 1` bytes of the member inflated: one past the claim tells it lied."""
    cap = claimed + 1
    if method == zipfile.ZIP_STORED:
        return bytes(raw[:cap])
    if method == zipfile.ZIP_DEFLATED:
        try:
            return zlib.decompressobj(-15).decompress(raw, cap)
        except zlib.error as exc:
            raise bad(f"deflate: {exc}") from None
    if method == ZIP_ZSTANDARD:
        return _inflate_zstd(raw, cap, bad)
    raise bad(f"compression method {method}, which Inspect logs do not use")


def _inflate_zstd(raw: memoryview, cap: int, bad: Callable[[str], InputError]) -> bytes:
    try:
        import zstandard
    except ModuleNotFoundError:
        raise bad("zstd, and zstandard (which inspect_ai reads it with) is not installed") from None
    parts: list[bytes] = []
    n = 0
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW).stream_reader(raw)
        with reader:
            while n < cap:
                piece = reader.read(min(_PIECE, cap - n))
                if not piece:
                    break
                parts.append(piece)
                n += len(piece)
    except zstandard.ZstdError as exc:
        raise bad(f"zstd: {exc}") from None
    return b"".join(parts)
