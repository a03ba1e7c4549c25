"""Decision tables: load and validate the rows the estimators read (docs/design.md §10).

A row is one scheduled call: `base_id, interaction_id, domain, condition, repetition,
decision (1/0/null), status`, optional `label`, `components`, `quarantine_reason`. A bad row is
refused with the file, line and field named; nothing is silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from harness.errors import InputError
from harness.estimators.quarantine import QUARANTINE_CODES

OK = "ok"
MISSING = "missing"
FAILURE_STATUSES = ("unparseable", "truncated", "exhausted", "provider_error", "refused")
STATUSES = (OK, *FAILURE_STATUSES, MISSING)
REQUIRED = ("base_id", "interaction_id", "domain", "condition", "repetition", "decision", "status")


class ValidatedRows(list):
    """Rows that passed `validate_rows`, so later stages need not check them again."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def validate_row(row: Any, *, path: object, line: int) -> dict[str, Any]:
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
    return {
        "base_id": row["base_id"], "interaction_id": row["interaction_id"], "domain": row["domain"],
        "condition": row["condition"], "repetition": rep, "decision": decision, "status": status,
        "label": label, "components": dict(comps) if comps else None, "quarantine_reason": q,
        "_line": line,
    }


def validate_rows(rows: Iterable[Any], *, path: object = None,
                  lines: Iterable[int] | None = None) -> ValidatedRows:
    """Validate every row and the links between rows (one interaction and domain per base,
    one domain per interaction, one label per base, no duplicate call)."""
    out: list[dict[str, Any]] = []
    line_iter = iter(lines) if lines is not None else None
    base_info: dict[str, tuple[str, str, Any]] = {}
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
        info = (r["interaction_id"], r["domain"], r["label"])
        prev = base_info.setdefault(r["base_id"], info)
        for i, name in enumerate(("interaction_id", "domain", "label")):
            if prev[i] != info[i]:
                raise InputError(f"base {r['base_id']!r} has {name} {prev[i]!r} on an earlier row",
                                 path=path, line=line, field=name)
        dom = inter_domain.setdefault(r["interaction_id"], r["domain"])
        if dom != r["domain"]:
            raise InputError(f"interaction {r['interaction_id']!r} is in domain {dom!r} on an earlier row",
                             path=path, line=line, field="domain")
        out.append(r)
    if not out:
        raise InputError("the table has no rows", path=path)
    return ValidatedRows(out)


def read_jsonl(path: str | Path) -> tuple[list[Any], list[int]]:
    """Parsed objects and their 1-based line numbers; blank lines skipped, bad JSON refused."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=p) from None
    objs: list[Any] = []
    lines: list[int] = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            objs.append(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc}", path=p, line=n) from None
        lines.append(n)
    return objs, lines


def load_table(path: str | Path) -> ValidatedRows:
    """Read and validate a JSONL decision table (line numbers are the file's)."""
    rows, lines = read_jsonl(path)
    return validate_rows(rows, path=Path(path), lines=lines)
