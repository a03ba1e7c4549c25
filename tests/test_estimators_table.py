"""A bad decision-table row is refused naming the file, line and field; nothing is dropped."""

from __future__ import annotations

import json

import pytest

from guardeval.errors import InputError
from guardeval.estimators.table import load_table, validate_rows

pytestmark = pytest.mark.fast

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
    from guardeval.estimators.quarantine import QUARANTINE_CODES
    from guardeval.run.dispatch.decide import QUARANTINE_CODES as DECIDE_CODES

    assert tuple(QUARANTINE_CODES) == tuple(DECIDE_CODES)


def test_the_documents_list_the_same_quarantine_codes():
    """docs/design.md §10, the run-folder reference and docs/estimators.md name exactly the codes decide writes."""
    import re
    from pathlib import Path

    from guardeval.run.dispatch.decide import QUARANTINE_CODES

    root = Path(__file__).resolve().parents[1]
    for doc, start, end in (("docs/design.md", "Quarantine codes", "**Estimates**"),
                            ("docs/reference/run-folder.md", "Quarantine codes on decisions", "\n\n"),
                            ("docs/estimators.md", "Codes (written by", "Quarantined calls are excluded")):
        text = (root / doc).read_text()
        at = text.index(start)
        stop = text.find(end, at)
        section = text[at:stop if stop >= 0 else None]
        named = set(re.findall(r"`([a-z]+(?:_[a-z]+)*_(?:truncation|mismatch|drift|unknown|hit|mutated))`", section))
        assert named == set(QUARANTINE_CODES), doc


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


def test_table_lines_are_bounded_before_they_are_parsed(tmp_path):
    from guardeval.cohorts.limits import RowLimits
    from guardeval.estimators.audits import lookup_audit_file

    big = {**GOOD, "base_id": "b2", "note": "x" * 2_000_000}
    p = write(tmp_path, [GOOD, big])
    with pytest.raises(InputError) as exc:
        load_table(p)
    assert exc.value.line == 2 and "longer than 1048576 bytes" in str(exc.value) and "--max-row-bytes" in str(exc.value)
    # Raised, the row is read (its extra field is allowed).
    assert len(load_table(p, RowLimits(max_bytes=3_000_000))) == 2
    deep = write(tmp_path, [GOOD], raw_extra='{"base_id": ' + "[" * 100 + "]" * 100 + "}\n")
    with pytest.raises(InputError) as exc:
        load_table(deep)
    assert exc.value.line == 2 and "nested more than 64" in str(exc.value)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"interaction_id": "i", "domain": "d", "tool": "t", "label": 1}) + "\n"
                    + "[" * 70 + "]" * 70 + "\n")
    with pytest.raises(InputError) as exc:
        lookup_audit_file(rows)
    assert exc.value.line == 2


@pytest.mark.slow
def test_estimate_table_cli_names_the_long_line(tmp_path):
    from conftest import run_cli

    p = write(tmp_path, [GOOD, {**GOOD, "base_id": "b2", "note": "x" * 300}])
    r = run_cli("estimate", "--table", str(p), "--max-row-bytes", "200", "--out", str(tmp_path / "out"))
    assert r.code == 2 and "line 2" in r.err and "longer than 200 bytes" in r.err and "Traceback" not in r.err
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"interaction_id": {"deeper": 1}}\n')
    r = run_cli("audit", "lookup", str(nested), "--max-row-depth", "1")
    assert r.code == 2 and "line 1" in r.err and "nested more than 1 levels" in r.err
