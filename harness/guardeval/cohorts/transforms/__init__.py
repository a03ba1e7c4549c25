"""Condition transforms: pure, deterministic changes to an instance's content (docs/design.md §4).

Each transform is a `Transform` declaring what it keeps byte-identical; builders call
`apply_checked` so a variant that breaks its invariants is refused, naming base and condition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from guardeval.cohorts.transforms.alias import make_tool_alias, rename_tools, tool_names, validate_table, visible_names
from guardeval.cohorts.transforms.arguments import arg_alias, arg_matched, arg_threat, argument_keys, rename_arguments
from guardeval.cohorts.transforms.base import (
    BASE_KEEPS,
    CONTENT_KEYS,
    Content,
    Transform,
    Variant,
    check_row,
    check_variant,
    compose,
    identity,
    violations,
)
from guardeval.cohorts.transforms.lexicon import THREAT_WORDS, has_threat_word, split_components, threat_words
from guardeval.cohorts.transforms.markers import MARKER_TABLE, count_markers, make_marker_rewrite
from guardeval.cohorts.transforms.placebo import format_placebo
from guardeval.cohorts.transforms.schemas import schema_placebo

__all__ = [
    "arg_alias", "arg_matched", "arg_threat", "argument_keys", "rename_arguments", "schema_placebo",
    "BASE_KEEPS", "CONTENT_KEYS", "Content", "MARKER_TABLE", "THREAT_WORDS", "Transform", "Variant",
    "apply_checked", "check_row", "check_variant", "combined", "compose", "content_of", "count_markers",
    "format_placebo", "has_threat_word", "identity", "make_marker_rewrite", "make_tool_alias", "name_family",
    "rename_tools", "split_components", "tool_names", "threat_words", "validate_table", "violations", "visible_names",
]


def combined(alias_table: Mapping[str, str], name: str = "combined") -> Transform:
    """Marker rewrite, then tool alias."""
    return compose(name, "marker rewrite + tool alias", make_marker_rewrite(), make_tool_alias(alias_table))


def name_family(family: str, names: Iterable[str], *, select: Callable[[str], bool] | None = None,
                token_count: Callable[[str], int] | None = None, name: str | None = None) -> Transform:
    """A representation family (`orthographic`, `semantic_neutral`, `cue_altering` (remove),
    `cue_adding`, `form_matched_neutral`) as a tool-alias transform over a cohort's tool names."""
    from guardeval.cohorts.transforms.names import family_table

    table = family_table(family, names, select=select, token_count=token_count)
    return make_tool_alias(table, name=name or family, description=f"tool names: {family.replace('_', '-')} rename")


def content_of(base: Mapping[str, Any]) -> Content:
    """The transformable content of a base (the row's `tool` travels with it)."""
    return {k: base[k] for k in CONTENT_KEYS}


def apply_checked(transform: Transform, base: Mapping[str, Any], condition: str | None = None) -> Variant:
    """Apply `transform` to a base's content and refuse the variant if an invariant breaks."""
    original = content_of(base)
    variant = transform(original)
    check_variant(transform, str(base["base_id"]), condition or transform.name, original, variant)
    return variant
