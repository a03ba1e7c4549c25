"""Agreement with labels in two statistical units (docs/design.md §10, seed 001).

Row level: every row weighs 1. Equal-interaction: row i of interaction g weighs 1/n_g (n_g
rows of g in the evaluated set), added into TP/TN/FP/FN before F1, so every interaction has
total weight 1 — not F1 per interaction averaged. Unsafe (1) is the positive class. A class
absent from the labels gives recall null and balanced accuracy null, never a made-up number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np


def interaction_weights(interaction_ids: Sequence[Any]) -> np.ndarray:
    """w_i = 1/n_g(i); the weights sum to the number of distinct interactions."""
    _, inverse, counts = np.unique(np.asarray(interaction_ids, dtype=object).astype(str),
                                   return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse]


class Units(TypedDict):
    """F1, balanced accuracy and recalls on the same rows, counted per row and per interaction
    (each interaction weighing one in total)."""

    row_f1: float | None
    interaction_f1: float | None
    row_balanced_accuracy: float | None
    interaction_balanced_accuracy: float | None
    row_recall_unsafe: float | None
    row_recall_safe: float | None
    interaction_recall_unsafe: float | None
    interaction_recall_safe: float | None
    row_confusion: dict[str, float]         # tp, fp, tn, fn
    interaction_confusion: dict[str, float]
    n_rows: int
    n_interactions: int


def confusion(y_true: np.ndarray, y_pred: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    w = np.ones(len(y_true)) if weights is None else np.asarray(weights, dtype=np.float64)
    return {
        "tp": float(w[(y_true == 1) & (y_pred == 1)].sum()),
        "fp": float(w[(y_true == 0) & (y_pred == 1)].sum()),
        "tn": float(w[(y_true == 0) & (y_pred == 0)].sum()),
        "fn": float(w[(y_true == 1) & (y_pred == 0)].sum()),
    }


def _div(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def metrics(conf: dict[str, float]) -> dict[str, float | None]:
    """F1 = 2TP/(2TP+FP+FN); recall of each class; balanced accuracy = mean of the two recalls."""
    tp, fp, tn, fn = conf["tp"], conf["fp"], conf["tn"], conf["fn"]
    recall_unsafe = _div(tp, tp + fn)
    recall_safe = _div(tn, tn + fp)
    bal = None if recall_unsafe is None or recall_safe is None else (recall_unsafe + recall_safe) / 2
    return {
        "f1": _div(2 * tp, 2 * tp + fp + fn),
        "precision": _div(tp, tp + fp),
        "recall_unsafe": recall_unsafe,
        "recall_safe": recall_safe,
        "balanced_accuracy": bal,
    }


def evaluation_units(y_true: Sequence[int], y_pred: Sequence[int],
                     interaction_ids: Sequence[Any]) -> Units:
    """Row-level and equal-interaction confusion, F1 and balanced accuracy on the same rows."""
    yt = np.asarray(y_true, dtype=np.int64)
    yp = np.asarray(y_pred, dtype=np.int64)
    if len(yt) == 0:
        empty = {"tp": 0.0, "fp": 0.0, "tn": 0.0, "fn": 0.0}
        row_m = inter_m = metrics(empty)
        row_c = inter_c = empty
        n_inter = 0
    else:
        w = interaction_weights(interaction_ids)
        row_c, inter_c = confusion(yt, yp), confusion(yt, yp, w)
        row_m, inter_m = metrics(row_c), metrics(inter_c)
        n_inter = len(set(map(str, interaction_ids)))
    return {
        "row_f1": row_m["f1"],
        "interaction_f1": inter_m["f1"],
        "row_balanced_accuracy": row_m["balanced_accuracy"],
        "interaction_balanced_accuracy": inter_m["balanced_accuracy"],
        "row_recall_unsafe": row_m["recall_unsafe"],
        "row_recall_safe": row_m["recall_safe"],
        "interaction_recall_unsafe": inter_m["recall_unsafe"],
        "interaction_recall_safe": inter_m["recall_safe"],
        "row_confusion": row_c,
        "interaction_confusion": inter_c,
        "n_rows": int(len(yt)),
        "n_interactions": n_inter,
    }
