"""Audits on labeled rows that call no guard (docs/design.md §10, seed 001).

lookup: can a tool name alone predict the label? Per training fold, each tool's majority
label (ties -> unsafe); a tool unseen in the fold -> the fold's overall majority (ties ->
unsafe). Leave-one-domain-out once, pooled F1 over every held-out row (unsafe positive), and
the share of held-out rows whose tool was seen in the other domains; interaction-grouped
k-fold per seed (seeds only re-randomise the folds).

units: row-level vs equal-interaction F1 and balanced accuracy for frozen predictions with
the strict mapping 0 -> safe, 0.5 and 1 -> unsafe.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import InputError
from guardeval.estimators.accuracy import Units, confusion, evaluation_units, metrics
from guardeval.estimators.table import read_jsonl


class LookupRow(TypedDict):
    """A row of `audit lookup`'s input: an interaction's tool call in a domain, and its label."""

    interaction_id: str
    domain: str
    tool: str
    label: int


class DomainScore(TypedDict):
    n_rows: int
    f1: float | None
    seen_fraction: float


class LookupAudit(TypedDict):
    """`audit lookup`: how far a tool-name lookup table predicts the labels, held out by domain
    and by interaction."""

    lodo_f1: float | None
    lodo_seen_fraction: float | None
    lodo_by_domain: dict[str, DomainScore]
    cv_f1: dict[str, float | None]
    cv_seen_fraction: dict[str, float]
    folds: int
    seeds: list[int]
    n_rows: int
    n_domains: int
    n_interactions: int
    positive_class: str


class UnitsAudit(Units):
    """`audit units`: the same rows' metrics per row and per interaction, and the label mapping."""

    mapping: str

def _need_str(row: Mapping[str, Any], key: str, path: object, line: int) -> str:
    if key not in row:
        raise InputError("required field is missing", path=path, line=line, field=key)
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
        raise InputError(f"must be a non-empty string, got {v!r}", path=path, line=line, field=key)
    return str(v)


# ----------------------------------------------------------------------------- lookup

def fit_lookup(tools: Sequence[str], labels: Sequence[int]) -> tuple[dict[str, int], int]:
    """(tool -> majority label, overall majority); every tie goes to unsafe (1)."""
    ones: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for t, y in zip(tools, labels):
        total[t] += 1
        ones[t] += y
    table = {t: int(2 * ones[t] >= total[t]) for t in total}
    n1 = sum(labels)
    overall = int(2 * n1 >= len(labels))
    return table, overall


def predict_lookup(model: tuple[dict[str, int], int], tools: Sequence[str]) -> list[int]:
    table, overall = model
    return [table.get(t, overall) for t in tools]


def f1_unsafe(y_true: Sequence[int], y_pred: Sequence[int]) -> float | None:
    return metrics(confusion(np.asarray(y_true), np.asarray(y_pred)))["f1"]


def validate_lookup_rows(objs: Sequence[Any], lines: Sequence[int], path: object) -> list[LookupRow]:
    out: list[LookupRow] = []
    for obj, line in zip(objs, lines):
        if not isinstance(obj, Mapping):
            raise InputError("a row must be a JSON object", path=path, line=line)
        interaction_id, domain, tool = (_need_str(obj, k, path, line) for k in ("interaction_id", "domain", "tool"))
        if "label" not in obj:
            raise InputError("required field is missing", path=path, line=line, field="label")
        lab = obj["label"]
        if isinstance(lab, bool) or lab not in (0, 1) or not isinstance(lab, int):
            raise InputError(f"must be 0 or 1, got {lab!r}", path=path, line=line, field="label")
        out.append({"interaction_id": interaction_id, "domain": domain, "tool": tool, "label": int(lab)})
    if not out:
        raise InputError("no rows", path=path)
    return out


def _held_out(rows: list[LookupRow], test_mask: np.ndarray) -> tuple[list[int], list[int], list[bool]]:
    train = [r for r, t in zip(rows, test_mask) if not t]
    test = [r for r, t in zip(rows, test_mask) if t]
    model = fit_lookup([r["tool"] for r in train], [r["label"] for r in train])
    pred = predict_lookup(model, [r["tool"] for r in test])
    seen = [r["tool"] in model[0] for r in test]
    return [r["label"] for r in test], pred, seen


def lookup_audit(rows: list[LookupRow], *, seeds: Sequence[int] = (42, 43, 44), folds: int = 5) -> LookupAudit:
    domains = sorted({r["domain"] for r in rows})
    interactions = sorted({r["interaction_id"] for r in rows})
    if folds < 2:
        raise InputError("need at least 2 folds", field="folds")
    if any(s < 0 for s in seeds):
        raise InputError("seeds must be >= 0", field="seeds")
    if folds > len(interactions):
        raise InputError(f"{folds} folds but only {len(interactions)} interactions", field="folds")
    dom_arr = np.array([r["domain"] for r in rows], dtype=object)
    lodo_f1 = lodo_seen = None
    by_domain: dict[str, DomainScore] = {}
    if len(domains) >= 2:  # a single domain leaves nothing to train on
        yt_all: list[int] = []
        yp_all: list[int] = []
        seen_all: list[bool] = []
        for d in domains:
            yt, yp, seen = _held_out(rows, dom_arr == d)
            by_domain[d] = {"n_rows": len(yt), "f1": f1_unsafe(yt, yp), "seen_fraction": sum(seen) / len(seen)}
            yt_all += yt
            yp_all += yp
            seen_all += seen
        lodo_f1 = f1_unsafe(yt_all, yp_all)
        lodo_seen = sum(seen_all) / len(seen_all)
    inter_arr = np.array([r["interaction_id"] for r in rows], dtype=object)
    inter_index = {g: i for i, g in enumerate(interactions)}
    row_inter = np.array([inter_index[g] for g in inter_arr], dtype=np.int64)
    cv_f1: dict[str, float | None] = {}
    cv_seen: dict[str, float] = {}
    for seed in seeds:
        perm = np.random.default_rng(seed).permutation(len(interactions))
        fold_of = np.empty(len(interactions), dtype=np.int64)
        fold_of[perm] = np.arange(len(interactions)) % folds
        row_fold = fold_of[row_inter]
        yt_all, yp_all, seen_all = [], [], []
        for f in range(folds):
            yt, yp, seen = _held_out(rows, row_fold == f)
            yt_all += yt
            yp_all += yp
            seen_all += seen
        cv_f1[str(seed)] = f1_unsafe(yt_all, yp_all)
        cv_seen[str(seed)] = sum(seen_all) / len(seen_all)
    return {
        "lodo_f1": lodo_f1,
        "lodo_seen_fraction": lodo_seen,
        "lodo_by_domain": by_domain,
        "cv_f1": cv_f1,
        "cv_seen_fraction": cv_seen,
        "folds": folds,
        "seeds": list(seeds),
        "n_rows": len(rows),
        "n_domains": len(domains),
        "n_interactions": len(interactions),
        "positive_class": "unsafe (label 1)",
    }


def lookup_audit_file(path: str | Path, *, seeds: Sequence[int] = (42, 43, 44), folds: int = 5,
                      limits: RowLimits = DEFAULT_ROW_LIMITS) -> LookupAudit:
    objs, lines = read_jsonl(path, limits)
    return lookup_audit(validate_lookup_rows(objs, lines, Path(path)), seeds=seeds, folds=folds)


# ----------------------------------------------------------------------------- units

STRICT_MAP = {0.0: 0, 0.5: 1, 1.0: 1}


def strict_unsafe(value: Any, *, path: object, line: int, field: str) -> int:
    """0 -> 0 (safe); 0.5 and 1 -> 1 (unsafe); anything else is an error naming the row."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"score must be 0, 0.5 or 1, got {value!r}", path=path, line=line, field=field)
    if not math.isfinite(value) or float(value) not in STRICT_MAP:
        raise InputError(f"score must be 0, 0.5 or 1, got {value!r}", path=path, line=line, field=field)
    return STRICT_MAP[float(value)]


def units_audit_rows(objs: Sequence[Any], lines: Sequence[int], path: object) -> UnitsAudit:
    """Rows `interaction_id, label_score, pred_score` in source order. An optional `index`
    field, when present, must run 0, 1, 2, ... so a reordered file is refused."""
    if not objs:
        raise InputError("no rows", path=path)
    inters, y_true, y_pred = [], [], []
    for pos, (obj, line) in enumerate(zip(objs, lines)):
        if not isinstance(obj, Mapping):
            raise InputError("a row must be a JSON object", path=path, line=line)
        inters.append(_need_str(obj, "interaction_id", path, line))
        for key in ("label_score", "pred_score"):
            if key not in obj or obj[key] is None:
                raise InputError("score is missing", path=path, line=line, field=key)
        y_true.append(strict_unsafe(obj["label_score"], path=path, line=line, field="label_score"))
        y_pred.append(strict_unsafe(obj["pred_score"], path=path, line=line, field="pred_score"))
        if "index" in obj and obj["index"] != pos:
            raise InputError(f"rows out of source order: index {obj['index']!r} at position {pos}",
                             path=path, line=line, field="index")
    return {**evaluation_units(y_true, y_pred, inters), "mapping": "0 -> safe; 0.5, 1 -> unsafe (positive)"}


def units_audit_file(path: str | Path, limits: RowLimits = DEFAULT_ROW_LIMITS) -> UnitsAudit:
    objs, lines = read_jsonl(path, limits)
    return units_audit_rows(objs, lines, Path(path))
