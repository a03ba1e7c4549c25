"""Row-level vs equal-interaction confusion, F1 and balanced accuracy, by hand."""

from __future__ import annotations

import pytest

from guardeval.estimators.accuracy import evaluation_units, interaction_weights

pytestmark = pytest.mark.fast


def test_equal_interaction_units_by_hand():
    # g1: (y0,p0) (y1,p1) (y1,p0) (y0,p1); g2: (y1,p1)
    out = evaluation_units([0, 1, 1, 1, 0], [0, 1, 0, 1, 1], ["g1", "g1", "g1", "g2", "g1"])
    assert out["row_confusion"] == {"tp": 2.0, "fp": 1.0, "tn": 1.0, "fn": 1.0}
    assert out["row_f1"] == pytest.approx(2 / 3)
    assert out["row_balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    # weights 1/4 in g1, 1 in g2: TP 1/4 + 1, FN 1/4, FP 1/4, TN 1/4
    assert out["interaction_confusion"] == pytest.approx({"tp": 1.25, "fp": 0.25, "tn": 0.25, "fn": 0.25})
    assert out["interaction_f1"] == pytest.approx(5 / 6)
    assert out["interaction_balanced_accuracy"] == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert out["n_rows"] == 5 and out["n_interactions"] == 2


def test_missing_class_gives_null_recall_not_a_number():
    out = evaluation_units([0, 0, 0], [0, 1, 0], ["a", "b", "b"])
    assert out["row_recall_unsafe"] is None
    assert out["row_balanced_accuracy"] is None and out["interaction_balanced_accuracy"] is None
    assert out["row_recall_safe"] == pytest.approx(2 / 3)
    assert out["row_f1"] == 0.0  # one false positive, no true positive
    none = evaluation_units([0, 0], [0, 0], ["a", "a"])
    assert none["row_f1"] is None  # 2TP+FP+FN = 0


def test_weights_sum_to_interactions():
    w = interaction_weights(["a", "a", "b", "c", "c", "c"])
    assert list(w) == pytest.approx([0.5, 0.5, 1.0, 1 / 3, 1 / 3, 1 / 3])
    assert w.sum() == pytest.approx(3)
