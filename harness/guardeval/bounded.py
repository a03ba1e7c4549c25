"""Reading a small file whose size an outsider controls (a config, a pin list, a manifest, a
report): never more than a stated bound is read, so a huge or endless file is refused, not
loaded. Only regular files are read: a file is opened non-blocking and checked after the open
(`open_regular`), so a FIFO or a device renamed into its place is refused, never waited on."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Any

import orjson

from guardeval.errors import InputError

NOT_REGULAR = "is not a regular file (a FIFO, a device or a folder stands in its place)"
LINK = "is a symbolic link; it is not followed here"


def open_regular(name: str | Path, *, path: Path, dir_fd: int | None = None, follow: bool = True) -> int:
    """A read descriptor of the regular file `name` (relative to `dir_fd` when given; without
    `follow`, a symbolic link there is refused). Opened `O_NONBLOCK` and checked with `fstat`
    after the open, so whatever was renamed into its place meanwhile is what is checked, and a
    FIFO is never waited on; blocking again once checked. InputError naming `path` for anything
    but a regular file; FileNotFoundError passes to the caller."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise InputError(LINK, path=path) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise InputError(NOT_REGULAR, path=path) from None
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(NOT_REGULAR, path=path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def read_fd(fd: int, limit: int, *, path: Path, what: str) -> bytes:
    """At most `limit` bytes of an open regular file from its start; InputError when larger."""
    parts, n = [], 0
    while n <= limit and (chunk := os.pread(fd, min(1 << 20, limit + 1 - n), n)):
        parts.append(chunk)
        n += len(chunk)
    if n > limit:
        raise InputError(f"larger than {limit} bytes: not {what}", path=path)
    return b"".join(parts)


def read_bounded(path: Path, limit: int, *, what: str, dir_fd: int | None = None, follow: bool = True) -> bytes:
    """The bytes of `path` (its name relative to `dir_fd` when given), at most `limit` of them;
    InputError naming the path when it cannot be read, is not a regular file or is larger
    (`what` says what the file should have been: "a guard config")."""
    try:
        fd = open_regular(path.name if dir_fd is not None else path, path=path, dir_fd=dir_fd, follow=follow)
    except FileNotFoundError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    try:
        return read_fd(fd, limit, path=path, what=what)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    finally:
        os.close(fd)


def read_json(path: Path, limit: int, *, what: str) -> Any:
    """`read_bounded`, parsed as JSON; InputError naming the path when it is not valid JSON."""
    try:
        return orjson.loads(read_bounded(path, limit, what=what))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
