"""A bad decision-table row is refused naming the file, line and field; nothing is dropped."""

from __future__ import annotations

import json

import pytest

from harness.errors import InputError
from harness.estimators.table import load_table, validate_rows

GOOD = {"base_id": "b1", "interaction_id": "g1", "domain": "D", "condition": "original", "repetition": 0,
        "decision": 1, "status": "ok"}


def write(tmp_path, rows, raw_extra: str = ""):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + raw_extra)
    return p


@pytest.mark.parametrize("change, field", [
    ({"decision": 2}, "decision"),
    ({"decision": True}, "decision"),
    ({"status": "weird"}, "status"),
    ({"repetition": -1}, "repetition"),
    ({"repetition": "0"}, "repetition"),
    ({"base_id": ""}, "base_id"),
    ({"label": 0.5}, "label"),
    ({"quarantine_reason": "cosmic_rays"}, "quarantine_reason"),
    ({"components": {"x": "yes"}}, "components"),
    ({"status": "ok", "decision": None}, "decision"),
    ({"status": "unparseable", "decision": 1}, "decision"),
    ({"status": "missing", "decision": None, "quarantine_reason": "provider_drift"}, "quarantine_reason"),
    ({"tool": ""}, "tool"),
    ({"tool": 3}, "tool"),
    ({"score": True}, "score"),
    ({"score": "0.5"}, "score"),
    ({"started": "soon"}, "started"),
    ({"started": 1700000000}, "started"),
])
def test_bad_field_names_file_line_field(tmp_path, change, field):
    p = write(tmp_path, [GOOD, {**GOOD, "repetition": 1, **change}])
    with pytest.raises(InputError) as ei:
        load_table(p)
    assert ei.value.line == 2 and ei.value.field == field and ei.value.path == p
    assert str(p) in str(ei.value) and "line 2" in str(ei.value)


def test_missing_field_and_bad_json(tmp_path):
    row = dict(GOOD)
    del row["status"]
    with pytest.raises(InputError) as ei:
        load_table(write(tmp_path, [GOOD, row]))
    assert (ei.value.line, ei.value.field) == (2, "status")
    with pytest.raises(InputError) as ei:
        load_table(write(tmp_path, [GOOD], "\n{not json\n"))
    assert ei.value.line == 3  # the blank line keeps its number


def test_cross_row_consistency():
    with pytest.raises(InputError, match="duplicate call") as ei:
        validate_rows([GOOD, dict(GOOD)])
    assert ei.value.line == 2
    with pytest.raises(InputError, match="interaction_id") as ei:
        validate_rows([GOOD, {**GOOD, "repetition": 1, "interaction_id": "g2"}])
    with pytest.raises(InputError, match="domain"):
        validate_rows([GOOD, {**GOOD, "base_id": "b2", "domain": "E"}])  # g1 already in D
    with pytest.raises(InputError, match="label"):
        validate_rows([{**GOOD, "label": 1}, {**GOOD, "repetition": 1, "label": 0}])
    with pytest.raises(InputError, match="no rows"):
        validate_rows([])


def test_valid_rows_pass_through(tmp_path):
    rows = [GOOD, {**GOOD, "repetition": 1, "decision": None, "status": "truncated",
                   "quarantine_reason": "length_truncation"},
            {**GOOD, "repetition": 2, "decision": None, "status": "missing", "extra": "ignored"}]
    out = load_table(write(tmp_path, rows))
    assert [r["status"] for r in out] == ["ok", "truncated", "missing"]
    assert out[1]["quarantine_reason"] == "length_truncation"


def test_quarantine_codes_match_the_decision_stage():
    from harness.estimators.quarantine import QUARANTINE_CODES
    from harness.run.decide import QUARANTINE_CODES as DECIDE_CODES

    assert tuple(QUARANTINE_CODES) == tuple(DECIDE_CODES)


def test_optional_columns_are_normalised(tmp_path):
    rows = [{**GOOD, "tool": "send_email", "score": 0.8, "started": "2026-01-01T00:00:01.500Z"},
            {**GOOD, "repetition": 1, "tool": "send_email", "started": "2026-01-01T01:00:00+01:00"},
            {**GOOD, "repetition": 2, "tool": "send_email", "started": "2026-01-01T00:00:02"}]
    out = load_table(write(tmp_path, rows))
    assert [r["tool"] for r in out] == ["send_email"] * 3
    assert out[0]["score"] == 0.8 and out[1]["score"] is None
    # seconds since the epoch, UTC; an offset is honoured, a time without one is read as UTC
    assert out[1]["started"] == out[0]["started"] - 1.5
    assert out[2]["started"] == out[0]["started"] + 0.5


def test_non_finite_score_is_refused():
    # JSON cannot carry one (orjson refuses Infinity), but a caller's rows can
    with pytest.raises(InputError) as ei:
        validate_rows([{**GOOD, "score": float("inf")}])
    assert ei.value.field == "score" and ei.value.line == 1
