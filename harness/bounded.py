"""Reading a small file whose size an outsider controls (a config, a pin list, a manifest, a
report): never more than a stated bound is read, so a huge or endless file is refused, not
loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.errors import InputError


def read_bounded(path: Path, limit: int, *, what: str) -> bytes:
    """The bytes of `path`, at most `limit` of them; InputError naming the path when it cannot be
    read or is larger (`what` says what the file should have been: "a guard config")."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    if len(data) > limit:
        raise InputError(f"larger than {limit} bytes: not {what}", path=path)
    return data


def read_json(path: Path, limit: int, *, what: str) -> Any:
    """`read_bounded`, parsed as JSON; InputError naming the path when it is not valid JSON."""
    try:
        return orjson.loads(read_bounded(path, limit, what=what))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
