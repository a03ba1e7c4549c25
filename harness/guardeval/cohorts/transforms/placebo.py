"""`format_placebo`: re-render the JSON envelope with indentation; content untouched.

It acts on rendering only (`render: {"indent": 2}`), so the parsed payload the guard receives
is identical to the original's; any effect it shows is formatting noise, the yardstick for
the interventions.
"""

from __future__ import annotations

from guardeval.cohorts.transforms.base import CONTENT_KEYS, Content, Transform, Variant

PLACEBO_INDENT = 2


def _apply(content: Content) -> Variant:
    return Variant(content, {"indent": PLACEBO_INDENT})


def _check(original: Content, variant: Variant) -> str | None:
    if variant.render != {"indent": PLACEBO_INDENT}:
        return f"placebo render options must be exactly {{'indent': {PLACEBO_INDENT}}}"
    return None


def format_placebo() -> Transform:
    return Transform(
        name="format_placebo",
        description=f"same content, JSON placeholders rendered with indent={PLACEBO_INDENT} (placebo)",
        apply=_apply, keeps=CONTENT_KEYS, acts_on=("render",), check=_check)
