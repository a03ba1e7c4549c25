"""Why calls failed, counted by cause with one example message each: what launch's last lines,
`status` and `study status` list (docs/how-to/reliability.md).

A cause is read from a live decision alone (its status and `detail`): a guard's own error
(`guard_error`, whose detail is `error_class: message`) by the exception's type or the error
class, any other failure by its status (`exhausted` is the transport's: the provider, the
network, a timeout). The dispatcher's stop on a streak of identical guard errors uses the same
words (`guard_cause`), so what stops a run is what `status` then counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import orjson

from guardeval.run.folder.supersede import FAILURE_STATUSES


class FailureCause(TypedDict):
    """One row of `status`'s failure causes: how many live failed calls share a cause."""

    status: str                 # a failure status, or "other" for the causes past MAX_CAUSES
    cause: str
    calls: int
    example: str | None         # one such call's detail, cut to MAX_EXAMPLE_CHARS


GUARD_ERROR = "guard_error"
MAX_EXAMPLE_CHARS = 300     # of the example message shown with a cause
MAX_CAUSES = 20             # listed; the rest are summed into one "other causes" row
# A status in words, where its name is not already words.
STATUS_WORDS = {GUARD_ERROR: "guard error"}


def guard_cause(error_class: str, message: str) -> str:
    """A guard error's cause: the exception's type for an exception (`ValueError`, from the
    `Type: message` that describe_exception writes), else the error class
    (`python_return_type`, `python_worker_died`, `response_too_large`)."""
    if error_class == "python_exception":
        return message.split(": ", 1)[0][:200] or error_class
    return error_class[:100]


def decision_cause(status: str, detail: str | None) -> str:
    """The cause of a failed decision (its status for any but a guard error)."""
    if status == GUARD_ERROR and detail:
        error_class, _, message = detail.partition(": ")
        return guard_cause(error_class, message)
    return status


class Causes:
    """Live failed decisions by cause, fed every decision line in file order (a later decision
    of a call, `resume --retry-failed`'s, replaces the earlier one). Memory: the failed calls."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[str, str | None]] = {}   # call id -> (status, detail)

    def add(self, line: bytes, call_id: str, status: str) -> None:
        if status not in FAILURE_STATUSES:
            self._live.pop(call_id, None)
            return
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            rec = None
        detail = rec.get("detail") if isinstance(rec, dict) else None
        self._live[call_id] = (status, detail if isinstance(detail, str) else None)

    def result(self) -> list[FailureCause]:
        """[{status, cause, calls, example}], most calls first (ties by status and cause)."""
        counts: dict[tuple[str, str], list[Any]] = {}
        for status, detail in self._live.values():
            key = (status, decision_cause(status, detail))
            if key in counts:
                counts[key][0] += 1
            else:
                counts[key] = [1, detail]
        rows: list[FailureCause] = [{"status": s, "cause": c, "calls": n, "example": _example(ex)}
                for (s, c), (n, ex) in sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))]
        if len(rows) > MAX_CAUSES:
            rest = rows[MAX_CAUSES - 1:]
            rows = [*rows[:MAX_CAUSES - 1], {"status": "other", "cause": f"{len(rest)} other causes",
                                             "calls": sum(r["calls"] for r in rest), "example": None}]
        return rows


def _example(detail: str | None) -> str | None:
    if detail is None:
        return None
    return detail if len(detail) <= MAX_EXAMPLE_CHARS else detail[:MAX_EXAMPLE_CHARS] + "…"


def cause_lines(causes: Sequence[FailureCause]) -> list[str]:
    """One line per cause: `guard error ValueError: 331 calls, e.g. ValueError: unknown tool`."""
    out = []
    for c in causes:
        if c["status"] == "other":
            what = c["cause"]
        else:
            what = STATUS_WORDS.get(c["status"], c["status"])
            if c["cause"] != c["status"]:
                what += f" {c['cause']}"
        line = f"{what}: {c['calls']} call{'s' if c['calls'] != 1 else ''}"
        if c["example"]:
            line += f", e.g. {c['example']}"
        out.append(line)
    return out
