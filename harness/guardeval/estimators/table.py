"""Decision tables: load and validate the rows the estimators read (docs/design.md §10).

A row is one scheduled call: `base_id, interaction_id, domain, condition, repetition,
decision (1/0/null), status`, optional `label`, `tool` (the base's tool), `score` (the guard's
continuous score), `started` (ISO 8601 start of the call's final attempt), `components`,
`quarantine_reason`, `retry_round` (0 or absent: the call's first decision; k: the decision of
its k-th retry, `resume --retry-failed`). A bad row is refused with the file, line and field named; nothing is
silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import orjson

from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, DUPLICATE_KEY, RowLimits, bounded_lines, has_duplicate_keys
from guardeval.errors import InputError
from guardeval.estimators.quarantine import QUARANTINE_CODES

OK = "ok"
MISSING = "missing"
FAILURE_STATUSES = ("unparseable", "truncated", "exhausted", "provider_error", "refused", "guard_error")
STATUSES = (OK, *FAILURE_STATUSES, MISSING)
REQUIRED = ("base_id", "interaction_id", "domain", "condition", "repetition", "decision", "status")


Components = dict[str, bool | int | float | None]   # a composite guard's parts: booleans, finite numbers, None


class TableRow(TypedDict):
    """One validated row of a decision table (`validate_row`'s normalised copy)."""

    base_id: str
    interaction_id: str
    domain: str
    condition: str
    repetition: int
    decision: int | None            # 1 block, 0 allow, None
    status: str                     # one of STATUSES
    label: int | None
    tool: str | None
    score: float | None
    started: float | None           # seconds since the epoch
    components: Components | None
    quarantine_reason: str | None
    retry_round: int
    _line: int                      # the row's line, for messages


class ValidatedRows(list[TableRow]):
    """Rows that passed `validate_rows`, so later stages need not check them again."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def _shown(v: Any) -> str:
    """A hostile value in a message: repr (control characters escaped), bounded."""
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _epoch_seconds(v: Any, *, path: object, line: int) -> float | None:
    """`started` as seconds since the epoch (UTC; a time without an offset is read as UTC)."""
    if v is None:
        return None
    # 64 characters bound the parse; any ISO 8601 timestamp fits.
    if not isinstance(v, str) or len(v) > 64:
        raise InputError(f"must be an ISO 8601 timestamp or null, got {_shown(v)}", path=path, line=line,
                         field="started")
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        raise InputError(f"must be an ISO 8601 timestamp or null, got {_shown(v)}", path=path, line=line,
                         field="started") from None
    return (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp()


def validate_row(row: Any, *, path: object, line: int) -> TableRow:
    """One row, checked field by field; returns a normalised copy."""
    if not isinstance(row, dict) and not isinstance(row, Mapping):  # dict first: the fast common case
        raise InputError("a row must be a JSON object", path=path, line=line)
    for key in REQUIRED:
        if key not in row:
            raise InputError("required field is missing", path=path, line=line, field=key)
    for key in ("base_id", "interaction_id", "domain", "condition"):
        if not _nonempty_str(row[key]):
            raise InputError(f"must be a non-empty string, got {row[key]!r}", path=path, line=line, field=key)
    rep = row["repetition"]
    if not _is_int(rep) or rep < 0:
        raise InputError(f"must be an integer >= 0, got {rep!r}", path=path, line=line, field="repetition")
    status = row["status"]
    if status not in STATUSES:
        raise InputError(f"must be one of {', '.join(STATUSES)}, got {status!r}", path=path, line=line,
                         field="status")
    decision = row["decision"]
    if decision is not None and not (_is_int(decision) and decision in (0, 1)):
        raise InputError(f"must be 1, 0 or null, got {decision!r}", path=path, line=line, field="decision")
    q = row.get("quarantine_reason")
    if q is not None and q not in QUARANTINE_CODES:
        raise InputError(f"unknown quarantine code {q!r} (known: {', '.join(QUARANTINE_CODES)})",
                         path=path, line=line, field="quarantine_reason")
    # A decision must agree with its status: an ok call has one, a failed or missing call none.
    if status == OK and q is None and decision is None:
        raise InputError("status ok needs a decision of 1 or 0", path=path, line=line, field="decision")
    if status != OK and decision is not None:
        raise InputError(f"status {status} cannot carry a decision", path=path, line=line, field="decision")
    if status == MISSING and q is not None:
        raise InputError("a missing call cannot be quarantined", path=path, line=line, field="quarantine_reason")
    label = row.get("label")
    if label is not None and not (_is_int(label) and label in (0, 1)):
        raise InputError(f"must be 1, 0 or null, got {label!r}", path=path, line=line, field="label")
    comps = row.get("components")
    if comps is not None:
        if not isinstance(comps, Mapping):
            raise InputError("must be an object or null", path=path, line=line, field="components")
        for name, value in comps.items():
            ok_value = value is None or isinstance(value, bool) or (
                isinstance(value, (int, float)) and math.isfinite(value))
            if not ok_value:
                raise InputError(f"component {name!r} must be a boolean, a finite number or null, got {value!r}",
                                 path=path, line=line, field="components")
    tool = row.get("tool")
    if tool is not None and not _nonempty_str(tool):
        raise InputError(f"must be a non-empty string or null, got {_shown(tool)}", path=path, line=line,
                         field="tool")
    score = row.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score)):
        raise InputError(f"must be a finite number or null, got {_shown(score)}", path=path, line=line,
                         field="score")
    retry_round = row.get("retry_round")
    if retry_round is None:
        retry_round = 0
    elif not _is_int(retry_round) or retry_round < 0:
        raise InputError(f"must be an integer >= 0 or null, got {_shown(retry_round)}", path=path, line=line,
                         field="retry_round")
    return {
        "base_id": row["base_id"], "interaction_id": row["interaction_id"], "domain": row["domain"],
        "condition": row["condition"], "repetition": rep, "decision": decision, "status": status,
        "label": label, "tool": tool, "score": None if score is None else float(score),
        "started": _epoch_seconds(row.get("started"), path=path, line=line),
        "components": dict(comps) if comps else None, "quarantine_reason": q, "retry_round": retry_round,
        "_line": line,
    }


def validate_rows(rows: Iterable[Any], *, path: object = None,
                  lines: Iterable[int] | None = None) -> ValidatedRows:
    """Validate every row and the links between rows (one interaction, domain, label and tool
    per base, one domain per interaction, no duplicate call)."""
    out: list[TableRow] = []
    line_iter = iter(lines) if lines is not None else None
    base_info: dict[str, tuple[str, str, Any, Any]] = {}
    inter_domain: dict[str, str] = {}
    seen: set[tuple[str, str, int]] = set()
    for pos, row in enumerate(rows, start=1):
        line = next(line_iter) if line_iter is not None else pos
        r = validate_row(row, path=path, line=line)
        key = (r["base_id"], r["condition"], r["repetition"])
        if key in seen:
            raise InputError(f"duplicate call: base {key[0]!r}, condition {key[1]!r}, repetition {key[2]}",
                             path=path, line=line, field="repetition")
        seen.add(key)
        info = (r["interaction_id"], r["domain"], r["label"], r["tool"])
        prev = base_info.setdefault(r["base_id"], info)
        for i, name in enumerate(("interaction_id", "domain", "label", "tool")):
            if prev[i] != info[i]:
                raise InputError(f"base {_shown(r['base_id'])} has {name} {_shown(prev[i])} on an earlier row",
                                 path=path, line=line, field=name)
        dom = inter_domain.setdefault(r["interaction_id"], r["domain"])
        if dom != r["domain"]:
            raise InputError(f"interaction {r['interaction_id']!r} is in domain {dom!r} on an earlier row",
                             path=path, line=line, field="domain")
        out.append(r)
    if not out:
        raise InputError("the table has no rows", path=path)
    return ValidatedRows(out)


def read_jsonl(path: str | Path, limits: RowLimits = DEFAULT_ROW_LIMITS) -> tuple[list[Any], list[int]]:
    """Parsed objects and their 1-based line numbers; blank lines skipped, bad JSON refused, each
    line bounded by `limits` before it is parsed."""
    p = Path(path)
    objs: list[Any] = []
    lines: list[int] = []
    for n, raw in bounded_lines(p, limits):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc}", path=p, line=n) from None
        if has_duplicate_keys(raw, obj):
            raise InputError(DUPLICATE_KEY, path=p, line=n)
        objs.append(obj)
        lines.append(n)
    return objs, lines


def load_table(path: str | Path, limits: RowLimits = DEFAULT_ROW_LIMITS) -> ValidatedRows:
    """Read and validate a JSONL decision table (line numbers are the file's)."""
    rows, lines = read_jsonl(path, limits)
    return validate_rows(rows, path=Path(path), lines=lines)
