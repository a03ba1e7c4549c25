"""`schema_placebo`: the tool schemas re-serialised, their JSON content unchanged (the placebo of
the schemas family).

Inside every tool's `parameters` each object's keys are written in reverse order (so
`properties` lists its arguments last-first, `type` moves after them) and `required` lists its
names in reverse; a tool listing given as JSON text is re-serialised the same way with other
whitespace. As JSON the schema says what it said (object key order and the order of `required`
carry no meaning), so a guard that reads the schema's meaning cannot move; one that reads its
surface might. Only `tool_descriptions` changes; everything else is kept byte-identical.
"""

from __future__ import annotations

import json
from typing import Any

from guardeval.canon import canonical_sha256
from guardeval.cohorts.transforms.base import Content, Transform, Variant

# A tool listing given as text is re-read only when it is this small (bounded work per row).
MAX_TEXT_SCHEMA = 1 << 20


def _reverse(obj: Any, in_required: bool = False) -> Any:
    if isinstance(obj, dict):
        return {k: (_reverse(v, k == "required") if k != "properties" or not isinstance(v, dict)
                    else {pk: _reverse(pv) for pk, pv in reversed(list(v.items()))})
                for k, v in reversed(list(obj.items()))}
    if isinstance(obj, list):
        items = [_reverse(v) for v in obj]
        return items[::-1] if in_required and all(isinstance(v, str) for v in obj) else items
    return obj


def _tool(d: Any) -> Any:
    if isinstance(d, dict) and isinstance(d.get("parameters"), dict):
        return {**d, "parameters": _reverse(d["parameters"])}
    return d


def _text_schema(text: str) -> Any:
    """A tool listing given as JSON text, parsed (None when it is not JSON or too large)."""
    if len(text) > MAX_TEXT_SCHEMA:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def reserialise(td: Any) -> Any:
    if isinstance(td, list):
        return [_tool(d) for d in td]
    if isinstance(td, str) and (parsed := _text_schema(td)) is not None:
        inner = [_tool(d) for d in parsed] if isinstance(parsed, list) else _reverse(parsed)
        return json.dumps(inner, ensure_ascii=False, indent=1, separators=(",", ": "))
    return td


def schema_meaning(td: Any) -> str:
    """What the placebo keeps: the listing's JSON content, `required` read as a set."""
    if isinstance(td, str):
        parsed = _text_schema(td)
        td = parsed if parsed is not None else td
    return canonical_sha256(_sorted_required(td))


def _sorted_required(obj: Any, key: str = "") -> Any:
    if isinstance(obj, dict):
        return {k: _sorted_required(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [_sorted_required(v) for v in obj]
        return sorted(items) if key == "required" and all(isinstance(v, str) for v in items) else items
    return obj


def _apply(content: Content) -> Variant:
    content["tool_descriptions"] = reserialise(content.get("tool_descriptions"))
    return Variant(content)


def _check(original: Content, variant: Variant) -> str | None:
    if schema_meaning(original.get("tool_descriptions")) != schema_meaning(variant.content.get("tool_descriptions")):
        return "the tool schemas' JSON content changed (a placebo re-serialises them only)"
    return None


def schema_placebo() -> Transform:
    return Transform(
        name="schema_placebo",
        description="tool schemas re-serialised (key order, required order, whitespace), same JSON content (placebo)",
        apply=_apply, keeps=("user_request", "history", "current_action", "tool"), check=_check)
