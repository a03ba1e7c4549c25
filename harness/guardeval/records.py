"""The base of the typed records guardeval returns (frozen dataclasses): `to_dict()` gives their
JSON shape. One base, so a record the estimators build (an effects-table row) is the record the
Python API returns, not a copy mapped by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


def plain(value: Any) -> Any:
    """A value as JSON-ready data: paths as strings, records and dataclasses as objects, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Record):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(x) for x in value]
    return value


class Record:
    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-ready data (paths as strings); fields named `_…` are private."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if not f.name.startswith("_")}
