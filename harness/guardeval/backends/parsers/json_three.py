"""Strict parser for the hosted-guard JSON answer (`json-three-field`)."""

from __future__ import annotations

import math

import orjson

from guardeval.backends.parsers.common import JSON_FIELDS, Parsed, from_components


def parse_json_three_field(content: str | None, finish_reason: str | None) -> Parsed:
    """Hosted-guard JSON answer: exactly the three fields, exact types, nothing around it."""
    if finish_reason == "length":
        return Parsed("truncated", detail="finish_reason length")
    if content is None:
        return Parsed("unparseable", detail="no content")
    try:
        obj = orjson.loads(content)  # strict JSON: NaN/Infinity and trailing text are errors
    except orjson.JSONDecodeError as exc:
        return Parsed("unparseable", detail=f"not JSON: {exc}")
    if not isinstance(obj, dict) or set(obj) != set(JSON_FIELDS):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        return Parsed("unparseable", detail=f"expected exactly {list(JSON_FIELDS)}, got {keys}")
    mal, att, harm = (obj[k] for k in JSON_FIELDS)
    if not isinstance(mal, bool) or not isinstance(att, bool):
        return Parsed("unparseable", detail="boolean fields must be true/false")
    if isinstance(harm, bool) or not isinstance(harm, (int, float)) or not math.isfinite(harm) \
            or float(harm) not in (0.0, 0.5, 1.0):
        return Parsed("unparseable", detail=f"current_action_harmfulness must be 0, 0.5 or 1, got {harm!r}")
    return from_components(mal, att, float(harm), JSON_FIELDS)
