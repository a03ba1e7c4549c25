"""Point estimates on a decision table (docs/design.md §10): per-base block rates under a failure
rule, paired base-equal effects, direction counts, repeated-original disagreement, the
leave-one-tool-out range. Everything is arrays; no loop over rows in Python after `build_design`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardeval.errors import InputError
from guardeval.estimators.table import FAILURE_STATUSES, MISSING, OK, Components, TableRow
from guardeval.estimators.types import LeaveOneOut

RULES = ("drop", "fail-closed", "fail-open")
MISSING_MODES = ("exclude", "as-failure")
KIND_OK, KIND_FAIL, KIND_MISSING, KIND_QUARANTINED = 0, 1, 2, 3


@dataclass
class Design:
    """The table as index arrays. Bases, clusters (interactions) and domains come from every
    scheduled row, valid or not, so two runs of one schedule get identical indices."""

    base_ids: list[str]
    conditions: list[str]
    cluster_ids: list[str]
    domains: list[str]
    base_cluster: np.ndarray      # (n_bases,) cluster index of each base
    cluster_domain: np.ndarray    # (n_clusters,) domain index of each cluster
    base_label: np.ndarray        # (n_bases,) 0.0 / 1.0 / nan
    row_base: np.ndarray
    row_cond: np.ndarray
    row_rep: np.ndarray
    row_dec: np.ndarray           # 1.0 / 0.0 / nan
    row_kind: np.ndarray          # KIND_*
    row_status: np.ndarray        # status strings (object array)
    row_components: list[Components | None]
    base_tool: np.ndarray         # (n_bases,) index into tools, -1 where the base has no tool
    tools: list[str]
    row_score: np.ndarray         # the guard's score, nan where none
    row_time: np.ndarray          # final attempt start, seconds since the epoch; nan where unknown
    row_retry: np.ndarray         # retry round of the row's decision: 0 first, k its k-th retry
    missing_as_failure: bool = False  # --missing as-failure: a missing call counts as a failure

    @property
    def n_bases(self) -> int:
        return len(self.base_ids)

    @property
    def n_clusters(self) -> int:
        return len(self.cluster_ids)

    def cond_index(self, name: str) -> int:
        return self.conditions.index(name)


def build_design(rows: Sequence[TableRow], condition_order: Sequence[str] = (),
                 missing: str = "exclude") -> Design:
    """Index validated rows. Conditions follow `condition_order` (e.g. the cohort's), then sorted.
    `missing`: "exclude" (a missing call counts nowhere) or "as-failure" (it counts as a failed
    call under each failure rule)."""
    if missing not in MISSING_MODES:
        raise InputError(f"unknown --missing mode {missing!r} (use {', '.join(MISSING_MODES)})", field="missing")
    base_info: dict[str, tuple[str, str, Any, Any]] = {}
    for r in rows:
        base_info.setdefault(r["base_id"], (r["interaction_id"], r["domain"], r["label"], r.get("tool")))
    base_ids = sorted(base_info)
    present = {r["condition"] for r in rows}
    conditions = [c for c in dict.fromkeys(condition_order) if c in present]
    conditions += sorted(present - set(conditions))
    clusters = sorted({(dom, inter) for inter, dom, _, _ in base_info.values()})
    domains = sorted({d for d, _ in clusters})
    cluster_pos = {inter: i for i, (_, inter) in enumerate(clusters)}
    dom_pos = {d: i for i, d in enumerate(domains)}
    base_pos = {b: i for i, b in enumerate(base_ids)}
    cond_pos = {c: i for i, c in enumerate(conditions)}
    base_cluster = np.array([cluster_pos[base_info[b][0]] for b in base_ids], dtype=np.int64)
    cluster_domain = np.array([dom_pos[d] for d, _ in clusters], dtype=np.int64)
    base_label = np.array([np.nan if base_info[b][2] is None else float(base_info[b][2]) for b in base_ids])
    n = len(rows)
    row_base = np.fromiter((base_pos[r["base_id"]] for r in rows), dtype=np.int64, count=n)
    row_cond = np.fromiter((cond_pos[r["condition"]] for r in rows), dtype=np.int64, count=n)
    row_rep = np.fromiter((r["repetition"] for r in rows), dtype=np.int64, count=n)
    row_dec = np.fromiter((np.nan if r["decision"] is None else float(r["decision"]) for r in rows),
                          dtype=np.float64, count=n)
    kind_of = {OK: KIND_OK, MISSING: KIND_MISSING, **{s: KIND_FAIL for s in FAILURE_STATUSES}}
    row_kind = np.fromiter((KIND_QUARANTINED if r.get("quarantine_reason") is not None else kind_of[r["status"]]
                            for r in rows), dtype=np.int64, count=n)
    row_status = np.array([r["status"] for r in rows], dtype=object)
    tools = sorted({t for _, _, _, t in base_info.values() if t is not None})
    tool_pos = {t: i for i, t in enumerate(tools)}
    base_tool = np.array([tool_pos.get(base_info[b][3], -1) for b in base_ids], dtype=np.int64)
    row_score = np.fromiter((np.nan if r.get("score") is None else r["score"] for r in rows), dtype=np.float64, count=n)
    row_time = np.fromiter((np.nan if r.get("started") is None else r["started"] for r in rows),
                           dtype=np.float64, count=n)
    row_retry = np.fromiter((r.get("retry_round") or 0 for r in rows), dtype=np.int64, count=n)
    return Design(base_ids, conditions, [inter for _, inter in clusters], domains, base_cluster,
                  cluster_domain, base_label, row_base, row_cond, row_rep, row_dec, row_kind, row_status,
                  [r.get("components") for r in rows], base_tool, tools, row_score, row_time, row_retry,
                  missing == "as-failure")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise InputError(f"unknown failure rule {rule!r} (use {', '.join(RULES)})", field="failures")
    return rule


def row_values(d: Design, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(value, counted) per row under a failure rule. drop: only ok calls count; fail-closed:
    a failure counts as a block (1); fail-open: as an allow (0). Quarantined calls never count;
    missing calls count only with --missing as-failure, and then as failures."""
    check_rule(rule)
    ok = d.row_kind == KIND_OK
    fail = d.row_kind == KIND_FAIL
    if d.missing_as_failure:
        fail = fail | (d.row_kind == KIND_MISSING)
    if rule == "drop":
        return np.where(ok, d.row_dec, 0.0), ok
    fill = 1.0 if rule == "fail-closed" else 0.0
    return np.where(fail, fill, np.where(ok, d.row_dec, 0.0)), ok | fail


def base_counts(d: Design, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(S, N): blocks and counted calls per base × condition, integer-valued arrays."""
    return base_counts_where(d, rule, None)


def base_counts_where(d: Design, rule: str, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(S, N) from the rows selected by the boolean mask `rows` (every row when None)."""
    v, m = row_values(d, rule)
    if rows is not None:
        m = m & rows
    size = d.n_bases * len(d.conditions)
    idx = d.row_base * len(d.conditions) + d.row_cond
    s = np.bincount(idx[m], weights=v[m], minlength=size).reshape(d.n_bases, -1)
    n = np.bincount(idx[m], minlength=size).reshape(d.n_bases, -1).astype(np.float64)
    return s, n


def base_rates(s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """p(i,c) = S/N, nan where no call counted."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.where(n > 0, n, 1.0), np.nan)


def block_rate(p: np.ndarray, c: int) -> float | None:
    """Base-equal block rate of one condition: mean of p(i,c) over bases with a counted call."""
    col = p[:, c]
    ok = ~np.isnan(col)
    return float(col[ok].mean()) if ok.any() else None


def direction_counts(s: np.ndarray, n: np.ndarray, c: int, b: int, paired: np.ndarray) -> dict[str, int]:
    """Sign of p(i,c) − p(i,b) on paired bases, compared exactly as S_c·N_b vs S_b·N_c."""
    lhs = s[paired, c] * n[paired, b]
    rhs = s[paired, b] * n[paired, c]
    return {"increase": int((lhs > rhs).sum()), "decrease": int((lhs < rhs).sum()),
            "tie": int((lhs == rhs).sum())}


def leave_one_out_range(values: np.ndarray, mask: np.ndarray, group: np.ndarray,
                        n_groups: int) -> LeaveOneOut | None:
    """The base-equal mean of `values` over `mask`, recomputed with each group's bases left out
    in turn (group -1: never left out): {min, max, n_tools} over the groups present, min and max
    None when no left-out mean is defined; None when no selected base has a group."""
    has_group = mask & (group >= 0)
    if not has_group.any():
        return None
    num_g = np.bincount(group[has_group], weights=values[has_group], minlength=n_groups)
    den_g = np.bincount(group[has_group], minlength=n_groups).astype(np.float64)
    present = den_g > 0
    rest = mask.sum() - den_g[present]
    rest_num = values[mask].sum() - num_g[present]
    defined = rest > 0
    loo = rest_num[defined] / rest[defined]
    return {"min": float(loo.min()) if len(loo) else None, "max": float(loo.max()) if len(loo) else None,
            "n_tools": int(present.sum())}


def component_rates(d: Design, c: int) -> dict[str, dict[str, float | int]]:
    """Per component of a composite guard: mean value (booleans as 0/1) over valid ok calls."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    rows = np.nonzero((d.row_cond == c) & (d.row_kind == KIND_OK))[0]
    for i in rows:
        comps = d.row_components[i]
        if not comps:
            continue
        for name, value in comps.items():
            if value is None:
                continue
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1
    return {name: {"rate": sums[name] / counts[name], "n": counts[name]} for name in sorted(sums)}
