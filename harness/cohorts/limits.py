"""Bounds on a cohort row (`--max-row-bytes`, `--max-row-depth`), kept apart from the cohort
model so that the command line can state its defaults without importing jsonschema."""

from __future__ import annotations

from dataclasses import dataclass

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
