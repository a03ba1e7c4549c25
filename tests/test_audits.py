"""Audits that call no guard: tool-name lookup predictability and evaluation units."""

from __future__ import annotations

import json

import pytest

from guardeval.errors import InputError
from guardeval.estimators.audits import fit_lookup, lookup_audit_file, predict_lookup, units_audit_file

from conftest import run_cli

pytestmark = pytest.mark.fast

# D1: g1 (x 1, y 0), g2 (x 0, z 1); D2: g3 (x 1, y 1), g4 (w 0, y 0)
LOOKUP_ROWS = [
    ("g1", "D1", "x", 1), ("g1", "D1", "y", 0), ("g2", "D1", "x", 0), ("g2", "D1", "z", 1),
    ("g3", "D2", "x", 1), ("g3", "D2", "y", 1), ("g4", "D2", "w", 0), ("g4", "D2", "y", 0),
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def lookup_file(tmp_path):
    return write_jsonl(tmp_path / "rows.jsonl", [
        {"interaction_id": g, "domain": d, "tool": t, "label": y} for g, d, t, y in LOOKUP_ROWS])


def test_lookup_majority_ties_and_unseen_tools():
    model = fit_lookup(["a", "a", "a", "b", "b"], [0, 0, 1, 1, 0])
    assert model == ({"a": 0, "b": 1}, 0)  # b is a tie -> unsafe; overall 2/5 -> safe
    assert predict_lookup(model, ["a", "b", "c"]) == [0, 1, 0]  # unseen c -> fold majority (safe)
    assert fit_lookup(["a", "b"], [0, 1])[1] == 1  # overall tie -> unsafe


def test_lookup_lodo_and_grouped_cv_by_hand(lookup_file):
    res = lookup_audit_file(lookup_file, seeds=[1, 2], folds=4)
    # Hold out D1 (train D2: x->1, y tie->1, w->0, overall tie->1): predict 1,1,1,1 (z unseen)
    #   truth 1,0,0,1 -> TP 2, FP 2.  Hold out D2 (train D1: x tie->1, y->0, z->1, overall tie->1):
    #   predict 1,0,1(w unseen),0 vs truth 1,1,0,0 -> TP 1, FN 1, FP 1, TN 1.
    # Pooled TP 3, FP 3, FN 1: F1 = 6/10.  Seen: 3 of 4 in each domain.
    assert res["lodo_f1"] == pytest.approx(0.6)
    assert res["lodo_seen_fraction"] == pytest.approx(0.75)
    assert res["lodo_by_domain"]["D1"]["f1"] == pytest.approx(4 / 6)
    # 4 folds over 4 interactions = leave-one-interaction-out, whatever the seed:
    # TP 3, FP 4, FN 1 -> F1 = 6/11.
    assert res["cv_f1"] == {"1": pytest.approx(6 / 11), "2": pytest.approx(6 / 11)}
    assert (res["n_rows"], res["n_domains"], res["n_interactions"]) == (8, 2, 4)


def test_lookup_cv_groups_by_interaction(tmp_path, lookup_file):
    # Each interaction uses its own tool on both of its rows: if folds split an interaction,
    # some held-out tool would have been seen in training. Grouped folds never do that.
    rows = [{"interaction_id": f"g{i}", "domain": "D" + str(i % 2), "tool": f"t{i}", "label": int(i < 3)}
            for i in range(6) for _ in range(2)]
    res = lookup_audit_file(write_jsonl(tmp_path / "grp.jsonl", rows), seeds=[42, 43, 44], folds=3)
    assert res["cv_seen_fraction"] == {"42": 0.0, "43": 0.0, "44": 0.0}
    with pytest.raises(InputError, match="folds"):
        lookup_audit_file(lookup_file, folds=5)  # 5 folds, 4 interactions


def test_lookup_bad_rows(tmp_path):
    p = write_jsonl(tmp_path / "r.jsonl", [{"interaction_id": "g", "domain": "D", "tool": "t", "label": 1},
                                           {"interaction_id": "g", "domain": "D", "tool": "t", "label": None}])
    with pytest.raises(InputError) as ei:
        lookup_audit_file(p)
    assert (ei.value.line, ei.value.field) == (2, "label")


UNITS = [("g1", 0, 0), ("g1", 0.5, 1), ("g1", 1, 0), ("g2", 1, 0.5), ("g1", 0, 1)]


@pytest.fixture
def units_file(tmp_path):
    return write_jsonl(tmp_path / "preds.jsonl", [
        {"interaction_id": g, "label_score": y, "pred_score": p} for g, y, p in UNITS])


def test_units_strict_mapping_by_hand(units_file):
    res = units_audit_file(units_file)
    # y = 0,1,1,1,0; pred = 0,1,0,1,1. Rows: TP 2, FN 1, FP 1, TN 1.
    assert res["row_f1"] == pytest.approx(2 / 3)
    assert res["row_balanced_accuracy"] == pytest.approx(7 / 12)
    # g1 weighs 1/4 per row, g2 1: TP 1.25, FN .25, FP .25, TN .25
    assert res["interaction_f1"] == pytest.approx(5 / 6)
    assert res["interaction_balanced_accuracy"] == pytest.approx(2 / 3)
    assert (res["n_rows"], res["n_interactions"]) == (5, 2)


@pytest.mark.parametrize("bad", [0.3, "1", None, True, 2, "NaN"])
def test_units_unknown_score_is_an_error_naming_the_row(tmp_path, bad):
    rows = [{"interaction_id": "g", "label_score": 1, "pred_score": 1},
            {"interaction_id": "g", "label_score": 0, "pred_score": bad}]
    p = write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(InputError) as ei:
        units_audit_file(p)
    assert (ei.value.line, ei.value.field) == (2, "pred_score")


def test_units_missing_score_and_non_finite_and_order(tmp_path):
    p = write_jsonl(tmp_path / "p.jsonl", [{"interaction_id": "g", "label_score": 1}])
    with pytest.raises(InputError) as ei:
        units_audit_file(p)
    assert (ei.value.line, ei.value.field) == (1, "pred_score")
    p.write_text('{"interaction_id": "g", "label_score": 1, "pred_score": 1}\n'
                 '{"interaction_id": "g", "label_score": Infinity, "pred_score": 1}\n')
    with pytest.raises(InputError) as ei:
        units_audit_file(p)
    assert ei.value.line == 2
    p = write_jsonl(tmp_path / "o.jsonl", [{"index": 1, "interaction_id": "g", "label_score": 1, "pred_score": 1},
                                           {"index": 0, "interaction_id": "g", "label_score": 0, "pred_score": 0}])
    with pytest.raises(InputError, match="order") as ei:
        units_audit_file(p)
    assert ei.value.line == 1


@pytest.mark.slow
def test_audit_cli_json_and_exit_codes(lookup_file, units_file, tmp_path):
    r = run_cli("audit", "lookup", str(lookup_file), "--json", "--seeds", "7", "--folds", "4")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert {"lodo_f1", "lodo_seen_fraction", "cv_f1", "n_rows", "n_domains"} <= set(out)
    assert out["cv_f1"] == {"7": pytest.approx(6 / 11)}
    r = run_cli("audit", "units", str(units_file), "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert {"row_f1", "interaction_f1", "row_balanced_accuracy", "interaction_balanced_accuracy",
            "n_rows", "n_interactions"} <= set(out)
    r = run_cli("audit", "units", str(units_file))
    assert r.code == 0 and "equal-interaction" in r.out
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"interaction_id": "g", "label_score": 0.7, "pred_score": 1}])
    r = run_cli("audit", "units", str(bad), "--json")
    assert r.code == 2 and r.out == "" and "line 1" in r.err and "label_score" in r.err
    assert "Traceback" not in r.err
