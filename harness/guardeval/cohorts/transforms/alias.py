"""`tool_alias`: rename tools consistently everywhere the guard sees them, from a fixed table.

Places renamed: `tool_descriptions[].name`, assistant `tool_calls[].name` and tool-message
`name` in the history, `current_action.name`, the row's `tool`, and every whole-word mention
of a tool name inside text (observations, descriptions, call arguments). The user request is
kept byte-identical (it is the task, not a tool listing). Tables must be bijective and may
not map onto another original name, so renaming is one simultaneous pass with no chains.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guardeval.cohorts.transforms.base import Content, Transform, Variant, iter_strings, map_strings, shape
from guardeval.errors import InputError

# A mention is the name not glued to other identifier characters.
_LEFT, _RIGHT = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"


def validate_table(table: Mapping[str, str], where: str = "alias table") -> dict[str, str]:
    """Refuse a table that is not a bijection onto fresh names."""
    table = {k: v for k, v in table.items() if k != v}
    values = list(table.values())
    if len(set(values)) != len(values):
        dup = sorted({v for v in values if values.count(v) > 1})
        raise InputError(f"{where}: aliases are not distinct ({', '.join(dup)})", field="alias")
    clash = sorted(set(values) & set(table))
    if clash:
        raise InputError(f"{where}: alias equals another original name ({', '.join(clash)})", field="alias")
    for k, v in table.items():
        if not k or not v:
            raise InputError(f"{where}: empty name", field="alias")
    return table


def _pattern(names: list[str]) -> re.Pattern[str] | None:
    if not names:
        return None
    ordered = sorted(names, key=lambda n: (-len(n), n))  # longest first: no partial overlaps
    return re.compile(_LEFT + "(" + "|".join(re.escape(n) for n in ordered) + ")" + _RIGHT)


def rename_tools(content: Content, table: Mapping[str, str]) -> Content:
    """Apply a validated rename table to every guard-visible place except the user request."""
    pattern = _pattern(list(table))
    if pattern is None:
        return content

    def text(s: str) -> str:
        return pattern.sub(lambda m: table[m.group(1)], s)

    def name(n: Any) -> Any:
        return table.get(n, text(n)) if isinstance(n, str) else n

    def message(m: Any) -> Any:
        if not isinstance(m, dict):
            return map_strings(m, text)
        out = {}
        for k, v in m.items():
            if k == "name" and m.get("role") == "tool":
                out[k] = name(v)
            elif k == "tool_calls" and isinstance(v, list):
                out[k] = [call(c) for c in v]
            else:
                out[k] = map_strings(v, text)
        return out

    def call(c: Any) -> Any:
        if not isinstance(c, dict):
            return map_strings(c, text)
        return {k: (name(v) if k == "name" else map_strings(v, text)) for k, v in c.items()}

    def description(d: Any) -> Any:
        if not isinstance(d, dict):
            return map_strings(d, text)
        return {k: (name(v) if k == "name" else map_strings(v, text)) for k, v in d.items()}

    out = dict(content)
    h = content.get("history")
    out["history"] = [message(m) for m in h] if isinstance(h, list) else map_strings(h, text)
    out["current_action"] = call(content.get("current_action"))
    td = content.get("tool_descriptions")
    out["tool_descriptions"] = [description(d) for d in td] if isinstance(td, list) else map_strings(td, text)
    if isinstance(content.get("tool"), str):
        out["tool"] = name(content["tool"])
    return out


def visible_names(content: Content, names: list[str]) -> list[str]:
    """Which of `names` are still visible to the guard (user request excepted)."""
    pattern = _pattern(names)
    if pattern is None:
        return []
    found: set[str] = set()
    for field in ("history", "current_action", "tool_descriptions", "tool"):
        for s in iter_strings(content.get(field)):
            found.update(m.group(1) for m in pattern.finditer(s))
            if s in names:
                found.add(s)
    return sorted(found)


def tool_names(content: Content) -> set[str]:
    """Names the content uses as tools: descriptions, history calls and results, the call."""
    names: set[str] = set()
    td = content.get("tool_descriptions")
    for d in td if isinstance(td, list) else []:
        if isinstance(d, dict) and isinstance(d.get("name"), str):
            names.add(d["name"])
    h = content.get("history")
    for m in h if isinstance(h, list) else []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" and isinstance(m.get("name"), str):
            names.add(m["name"])
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                names.add(c["name"])
    ca = content.get("current_action")
    if isinstance(ca, dict) and isinstance(ca.get("name"), str):
        names.add(ca["name"])
    if isinstance(content.get("tool"), str):
        names.add(content["tool"])
    return names


def make_tool_alias(table: Mapping[str, str], name: str = "tool_alias",
                    description: str = "tools renamed consistently from a fixed alias table") -> Transform:
    """Rename the instance's own tools (those it lists or calls) found in `table`.

    Restricting to the instance's tools matters when a cohort-wide table holds names that are
    also plain words (ASB's `Treatment`): another base's prose is then left alone.
    """
    table = validate_table(table, f"{name} alias table")

    def scoped(content: Content) -> dict[str, str]:
        present = tool_names(content)
        return {k: v for k, v in table.items() if k in present}

    def apply(content: Content) -> Variant:
        return Variant(rename_tools(content, scoped(content)))

    def check(original: Content, variant: Variant) -> str | None:
        left = visible_names(variant.content, list(scoped(original)))
        if left:
            return f"original tool name(s) still visible: {', '.join(left)}"
        for f in ("history", "current_action", "tool_descriptions"):
            if shape(original.get(f)) != shape(variant.content.get(f)):
                return f"'{f}' changed structure, not only names"
        return None

    return Transform(name=name, description=description, apply=apply,
                     keeps=("user_request",), check=check)
