"""Records that travel are declared once and typed (issue 49, item 4).

report.json's per-contrast shape (`estimators/types.Contrast`) is the one declaration of a
contrast; the effects table's row (`EffectRow`, the API's `Effect`) is read from it by a
mypy-checked `EffectRow.of(c: Contrast)`, and every field the row shares with the contrast has
the contrast's type here (intervals as tuples), so the two cannot drift. And `dict[str, Any]`
in the package is held at its ceiling: records get their own types, not an untyped dict."""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from guardeval.api import Effect
from guardeval.estimators.report.rows import EffectRow
from guardeval.estimators.types import Contrast

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parent.parent / "harness" / "guardeval"

# The fields of a row that are not report.json keys of the same meaning: decisions and flags read
# from the contrast's records (verdicts/record.Decision), and `bounds` (the contrast's record)
# read down to the headline's range.
DERIVED = {"verdict", "verdict_minus_placebo", "starred", "is_placebo", "headline_quantity", "bounds", "robust"}

# The most `dict[str, Any]` the package may hold: lower it when you type a record, never raise it.
CEILING = 253


def _row_type(t: Any) -> Any:
    """A contrast field's type as the row holds it: an interval [lo, hi] is a tuple there."""
    if t == list[float]:
        return tuple[float, float]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, map(_row_type, args))
    return origin[tuple(map(_row_type, args))] if origin is not None and args else t


def test_effect_row_fields_are_contrast_fields_of_the_same_type() -> None:
    contrast = typing.get_type_hints(Contrast)
    row = typing.get_type_hints(EffectRow)
    fields = {f.name: f for f in dataclasses.fields(EffectRow)}
    shared = [name for name in fields if name not in DERIVED]
    assert shared, "EffectRow has no field read from the contrast"
    for name in shared:
        assert name in contrast, f"EffectRow.{name} is not a field of report.json's Contrast"
        want = _row_type(contrast[name])
        # A field a report.json from before it lacks is None in the row (its default), nothing else.
        allowed = {want, want | None} if fields[name].default is None else {want}
        assert row[name] in allowed, f"EffectRow.{name} is {row[name]} but Contrast.{name} is {contrast[name]}"
    # Every derived field is a field of the row (the list cannot hide a renamed one).
    assert DERIVED <= set(fields), "DERIVED names a field EffectRow lacks"


def test_effect_row_is_read_from_the_typed_contrast() -> None:
    # mypy checks every key `of` reads against the one declaration because `c` is a Contrast.
    # (rows.py imports Contrast for mypy only: estimators/types loads numpy, the record's readers must not.)
    assert typing.get_type_hints(EffectRow.of, localns={"Contrast": Contrast})["c"] is Contrast
    assert Effect is EffectRow


def test_untyped_dicts_stay_at_or_below_the_ceiling() -> None:
    # Lines that hold one, as `grep -rn "dict\[str, Any\]" harness/guardeval | wc -l` counts them.
    count = sum(1 for p in PACKAGE.rglob("*.py") for line in p.read_text(encoding="utf-8").splitlines()
                if "dict[str, Any]" in line)
    assert count <= CEILING, (
        f"{count} `dict[str, Any]` in harness/guardeval (ceiling {CEILING}): give the new record a "
        "TypedDict or a dataclass instead")


def test_the_apis_status_and_call_records_are_the_run_records_fields() -> None:
    """`RunStatus` is `status --json` (`run.status.RunStatusRecord`) plus the API's `extra`, and
    `CallRecord` is the export's columns of a call row (`view.calls.CallRow`, in the export's
    order): a field added to the record reaches the API or fails here."""
    from guardeval.api.types import CallRecord, RunStatus
    from guardeval.run.status import RunStatusRecord
    from guardeval.view.calls import EXPORT_COLUMNS, CallRow

    status = [f.name for f in dataclasses.fields(RunStatus)]
    assert set(status) == {*RunStatusRecord.__annotations__, "extra"} and len(status) == len(set(status))
    calls = [f.name for f in dataclasses.fields(CallRecord)]
    assert calls == list(EXPORT_COLUMNS) and set(calls) <= set(CallRow.__annotations__)
    for name in calls:      # the row's type, or that type's None-able form in the API
        row, api = _written(CallRow.__annotations__[name]), _written(CallRecord.__annotations__[name])
        assert api in (row, f"{row} | None"), (name, api, row)


def _written(annotation: Any) -> str:
    """An annotation as written in the source (a TypedDict keeps it as a ForwardRef, a dataclass as text)."""
    return annotation.__forward_arg__ if isinstance(annotation, typing.ForwardRef) else str(annotation)
