"""Retried calls: a later decision that supersedes an earlier one (docs/design.md §6, "Retries").

`resume --retry-failed` gives calls whose decision has a failure status new attempts. The new
attempts are appended to raw.jsonl like any other (attempt numbers go on from the call's last);
the new decision is appended to decisions.jsonl, derived from its final raw line by `decide` as
always, with two more fields:

* `retry_round`: 1 for the first retry of that call, 2 for the next, ...
* `supersedes`: the decision it replaces, by the SHA-256 of that decision's line (without its
  newline), with that decision's `raw_seq`, `status` and `quarantine_reason` (so that a reader
  counting statuses in one pass can take the old one back without looking it up).

Nothing is rewritten: both decisions stay in the file. A call's *live* decision is the one no
later decision supersedes; readers count that one. `verify` checks the chain (`Checker`).

Crash safety is the resume rule applied to retries: a retry's final raw line whose decision was
lost is found on the next open (a final line of the call newer than its live decision) and its
decision re-derived, superseding the live one (`recover`), never paid for again.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guardeval.canon import dumps_line, sha256_hex
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import DECISIONS, EVENTS, RAW
from guardeval.run.folder.lines import checked_decision_fields, damaged, decision_fields, iter_lines, iter_raw_fields, parse_line
from guardeval.run.folder.records import Decision, Supersedes

# A decision's statuses other than `ok` (decide.py): the guard did not give a counted answer.
# `unparseable` and `truncated` are the guard's own answers: retrying them samples the guard again.
FAILURE_STATUSES = ("exhausted", "provider_error", "refused", "truncated", "unparseable", "guard_error")
DEFAULT_STATUSES = ("exhausted", "provider_error")
# What `decide` does not write: removed before a superseding decision is compared with its re-derivation.
FIELDS = ("retry_round", "supersedes")
_HEX64 = frozenset("0123456789abcdef")


def parse_statuses(text: str) -> tuple[str, ...]:
    """`--retry-failed`'s STATUS,... list: failure statuses only (ValueError naming the bad one)."""
    names = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in names):
        raise ValueError(f"give failure statuses separated by commas (of {', '.join(FAILURE_STATUSES)})")
    for s in names:
        if s == "ok":
            raise ValueError("'ok' is a counted answer: it is never retried")
        if s not in FAILURE_STATUSES:
            shown = s if len(s) <= 40 else s[:37] + "..."
            raise ValueError(f"{shown!r} is not a failure status (one of {', '.join(FAILURE_STATUSES)}); "
                             "the run folder goes before --retry-failed, or after its list")
    return tuple(dict.fromkeys(names))


@dataclass
class Live:
    """A call's live decision, as far as a retry needs it."""

    sha256: str                   # of its line, without the newline
    raw_seq: int
    status: str
    quarantine_reason: str | None
    round: int                    # 0: the call's first decision

    def ref(self) -> Supersedes:
        return {"decision_sha256": self.sha256, "raw_seq": self.raw_seq, "status": self.status,
                "quarantine_reason": self.quarantine_reason}


def mark(decision: Decision, old: Live) -> Decision:
    """`decision` (from `decide`) as the one that supersedes `old`."""
    return {**decision, "retry_round": old.round + 1, "supersedes": old.ref()}


def live_of(decision: Mapping[str, Any]) -> Live:
    """The `Live` entry of a decision as it will be written (dumps_line)."""
    return Live(sha256_hex(dumps_line(decision)[:-1]), int(decision["raw_seq"]), str(decision["status"]),
                decision.get("quarantine_reason"), int(decision.get("retry_round") or 0))


def base_record(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A decision less the supersession fields: what `decide` re-derives from its raw line."""
    return {k: v for k, v in rec.items() if k not in FIELDS}


# -- reading --------------------------------------------------------------------------------------

def _supersedes(rec: Mapping[str, Any], path: Path, lineno: int) -> tuple[dict[str, Any] | None, int]:
    """(the `supersedes` object, retry_round) of a parsed decision; (None, 0) for a first decision."""
    sup, rnd = rec.get("supersedes"), rec.get("retry_round")
    if sup is None and rnd is None:
        return None, 0
    if not isinstance(sup, dict) or type(rnd) is not int or rnd < 1:
        raise damaged(path, lineno, "malformed fields 'supersedes' / 'retry_round'")
    if not isinstance(sup.get("status"), str) or not isinstance(sup.get("quarantine_reason"), (str, type(None))):
        raise damaged(path, lineno, "malformed field 'supersedes'")
    return sup, rnd


def decision_line(line: bytes, path: Path,
                  lineno: int) -> tuple[str, str, str | None, dict[str, Any] | None, int]:
    """(call_id, status, quarantine_reason, supersedes or None, retry_round) of one decision
    line: the writer's shape of a first decision read without a parse, anything else parsed and
    checked (CheckFailed naming the line)."""
    fast = decision_fields(line)
    if fast is not None:
        return fast[0], fast[1], fast[2], None, 0
    rec = parse_line(line.rstrip(b"\n"), path, lineno)
    cid, status, reason = checked_decision_fields(rec, path, lineno)
    sup, rnd = _supersedes(rec, path, lineno)
    return cid, status, reason, sup, rnd


class LiveCounts:
    """Counts of live decisions (`status`), fed every decision line in file order, the retry
    chain checked on the way as far as counting needs it: a superseding decision must name an
    earlier failed decision of its call that nothing superseded yet, with that decision's status
    and reason; a second decision without `supersedes` is a call decided twice. A line that
    breaks a rule is a problem, and is not counted (so no status goes below 0 and the counts
    never pass the calls decided). `verify` checks the rest (`Checker`). Memory: the open
    (failed, not yet superseded) decisions only."""

    def __init__(self) -> None:
        self.statuses: dict[str, int] = {}
        self.quarantine: dict[str, int] = {}
        self._open: dict[str, tuple[str, str, str | None]] = {}   # line sha256 -> (call id, status, reason)

    def add(self, line: bytes, cid: str, status: str, reason: str | None, sup: Mapping[str, Any] | None,
            decided_before: bool) -> str | None:
        """Count one line; the problem with it, if any."""
        if sup is None:
            if decided_before:
                return "a second decision for a call already decided, superseding nothing (decided twice)"
        else:
            sha = sup.get("decision_sha256")
            old = self._open.get(sha) if isinstance(sha, str) else None
            if not isinstance(sha, str) or old is None or old != (cid, sup["status"], sup["quarantine_reason"]):
                return ("supersedes no earlier failed decision of its call that is still live (the retry chain is "
                        "damaged)")
            del self._open[sha]
            _count(self.statuses, old[1], -1)
            if old[2]:
                _count(self.quarantine, old[2], -1)
        _count(self.statuses, status, 1)
        if reason:
            _count(self.quarantine, reason, 1)
        if status in FAILURE_STATUSES:
            self._open[sha256_hex(line.rstrip(b"\n"))] = (cid, status, reason)
        return None


def _count(counts: dict[str, int], key: str, by: int) -> None:
    counts[key] = counts.get(key, 0) + by
    if not counts[key]:
        del counts[key]


@dataclass
class Ledger:
    """What decisions.jsonl says about retries: each call whose live decision failed, and how
    many calls were retried in each round."""

    failed: dict[str, Live] = field(default_factory=dict)
    rounds: dict[int, int] = field(default_factory=dict)   # retry round -> superseding decisions


def read_ledger(folder: RunFolder) -> Ledger:
    """One pass over decisions.jsonl. Only calls whose latest decision failed are kept (a few per
    cent of a run): an `ok` call is never retried and needs nothing here."""
    led, path = Ledger(), folder.file(DECISIONS)
    for lineno, line in iter_lines(folder, DECISIONS):
        fast = decision_fields(line)
        if fast is not None and fast[1] not in FAILURE_STATUSES:
            led.failed.pop(fast[0], None)
            continue
        rec = parse_line(line[:-1], path, lineno)
        cid, status, raw_seq = rec.get("call_id"), rec.get("status"), rec.get("raw_seq")
        if not isinstance(cid, str) or not isinstance(status, str) or type(raw_seq) is not int:
            raise damaged(path, lineno, "missing or malformed field 'call_id', 'status' or 'raw_seq'")
        _, rnd = _supersedes(rec, path, lineno)
        if rnd:
            led.rounds[rnd] = led.rounds.get(rnd, 0) + 1
        if status in FAILURE_STATUSES:
            led.failed[cid] = Live(sha256_hex(line[:-1]), raw_seq, status, rec.get("quarantine_reason"), rnd)
        else:
            led.failed.pop(cid, None)
    return led


def retried_before(folder: RunFolder) -> bool:
    """Whether any session of this run retried calls (its `retry` event): only then can a plain
    `resume` find a retry's answer whose decision was lost."""
    if not folder.has(EVENTS):
        return False
    return any(b'"event":"retry"' in line for _, line in iter_lines(folder, EVENTS))


@dataclass
class History:
    attempts: int = 0
    finals: list[tuple[int, int]] = field(default_factory=list)   # (offset, line number) of final lines


def histories(folder: RunFolder, calls: Iterable[str]) -> dict[str, History]:
    """Attempts and final raw lines of `calls`, from one pass over raw.jsonl (the few fields
    before each line's request, `lines.raw_fields`)."""
    out = {cid: History() for cid in calls}
    if not out:
        return out
    for lineno, offset, _, f in iter_raw_fields(folder):
        h = out.get(f.call_id) if isinstance(f.call_id, str) else None
        if h is not None:
            h.attempts += 1
            if f.final is True:
                h.finals.append((offset, lineno))
    return out


def _final_lines(folder: RunFolder, where: list[tuple[int, int]]) -> Iterator[tuple[dict[str, Any], str]]:
    path = folder.file(RAW)
    for offset, lineno in where:
        body = folder.line_at(RAW, offset)
        yield parse_line(body, path, lineno), sha256_hex(body)


def recover(folder: RunFolder, led: Ledger, hist: Mapping[str, History],
            derive: Callable[[dict[str, Any], str], Decision], append: Callable[[Decision], None]) -> int:
    """Decisions for retries' final raw lines that have none (a crash between the raw line and
    its decision): each derived from its line and superseding the call's live decision, in log
    order. `led.failed` is brought up to date. Returns how many were written."""
    written = 0
    for cid in list(led.failed):
        h = hist.get(cid)
        live = led.failed[cid]
        # A line's number is its seq in a sound log; the seq itself is checked once parsed.
        later = [w for w in (h.finals if h is not None else []) if w[1] > live.raw_seq]
        if not later:
            continue
        for rec, line_sha in _final_lines(folder, later):
            if type(rec.get("seq")) is not int or rec["seq"] <= live.raw_seq or live.status not in FAILURE_STATUSES:
                continue
            decision = mark(derive(rec, line_sha), live)
            append(decision)
            written += 1
            live = live_of(decision)
            led.rounds[live.round] = led.rounds.get(live.round, 0) + 1
        if live.status in FAILURE_STATUSES:
            led.failed[cid] = live
        else:
            del led.failed[cid]
    return written


@dataclass
class Targets:
    """The calls one retry session sends again: call id -> its live decision."""

    statuses: tuple[str, ...]
    calls: dict[str, Live]

    def by_round(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for live in self.calls.values():
            out[live.round + 1] = out.get(live.round + 1, 0) + 1
        return dict(sorted(out.items()))


def targets(led: Ledger, statuses: tuple[str, ...]) -> Targets:
    return Targets(statuses, {cid: live for cid, live in led.failed.items() if live.status in statuses})


class NotTargeted:
    """The container `PendingRows` skips: every call but the retry targets."""

    def __init__(self, t: Targets) -> None:
        self._t = t

    def __contains__(self, cid: object) -> bool:
        return cid not in self._t.calls


# -- verify ---------------------------------------------------------------------------------------

class Checker:
    """`verify`'s view of supersession, fed every decision line in file order.

    Rules: a decision with `supersedes` names, by line SHA-256, an earlier decision of the same
    call that has a failure status and that nothing superseded yet, and repeats its raw_seq,
    status and quarantine reason; its `retry_round` is one more than that decision's; its own raw
    line comes later in raw.jsonl. Then every call has exactly one live decision (a second
    decision without `supersedes` is "decided twice", as before). Memory: the open (failed,
    not yet superseded) decisions only."""

    def __init__(self, n_slots: int = 0) -> None:
        self._open: dict[str, tuple[Any, Live]] = {}   # line sha256 -> (call id, decision)
        self._closed: set[str] = set()                 # superseded line sha256s
        self.retried = 0
        # Per schedule line: the raw position of the call's last final line, and of its live
        # decision's line (-1: none), to find a retry's answer whose decision was lost.
        self._last_final = array("i", [-1]) * n_slots
        self._live_at = array("i", [-1]) * n_slots

    def final_at(self, slot: int, pos: int) -> None:
        self._last_final[slot] = pos

    def decided_at(self, slot: int, pos: int) -> None:
        self._live_at[slot] = pos      # the last decision of a call is its live one

    def stale_finals(self) -> int:
        """Decided calls with a final raw line after their live decision's: a retry's answer
        whose decision line is gone."""
        last = np.frombuffer(self._last_final, dtype=np.int32)
        live = np.frombuffer(self._live_at, dtype=np.int32)
        return int(np.count_nonzero((live >= 0) & (last > live)))

    def see(self, body: bytes, d: Mapping[str, Any]) -> tuple[bool, list[str]]:
        """(whether `d` validly supersedes an earlier decision, problems of this line)."""
        problems: list[str] = []
        sup, rnd = d.get("supersedes"), d.get("retry_round")
        valid = False
        if sup is not None or rnd is not None:
            valid = self._check(d, sup, rnd, problems)
            self.retried += valid
        status, raw_seq = d.get("status"), d.get("raw_seq")
        if status in FAILURE_STATUSES and type(raw_seq) is int:
            reason = d.get("quarantine_reason")
            own = rnd if type(rnd) is int and rnd >= 1 and valid else 0
            try:
                self._open[sha256_hex(body)] = (d.get("call_id"), Live(sha256_hex(body), raw_seq, status,
                                                                       reason if isinstance(reason, str) else None,
                                                                       own))
            except TypeError:
                pass
        return valid, problems

    def _check(self, d: Mapping[str, Any], sup: Any, rnd: Any, problems: list[str]) -> bool:
        if not isinstance(sup, dict) or type(rnd) is not int or rnd < 1:
            problems.append("malformed fields 'supersedes' / 'retry_round' (an object, and a whole number >= 1)")
            return False
        sha = sup.get("decision_sha256")
        if not (isinstance(sha, str) and len(sha) == 64 and set(sha) <= _HEX64):
            problems.append("supersedes.decision_sha256 is not a SHA-256")
            return False
        if sha in self._closed:
            problems.append("supersedes a decision that an earlier decision already superseded "
                            "(two live decisions for one call)")
            return False
        found = self._open.get(sha)
        if found is None:
            problems.append("supersedes no earlier decision with a failure status (decision_sha256 names none)")
            return False
        cid, old = found
        ok = True
        if cid != d.get("call_id"):
            problems.append("supersedes a decision of another call")
            ok = False
        for name, want in (("raw_seq", old.raw_seq), ("status", old.status),
                           ("quarantine_reason", old.quarantine_reason)):
            if sup.get(name, ...) != want:
                problems.append(f"supersedes.{name} differs from the decision it supersedes")
                ok = False
        if rnd != old.round + 1:
            problems.append(f"retry_round {rnd} does not follow the superseded decision's round {old.round}")
            ok = False
        raw_seq = d.get("raw_seq")
        if type(raw_seq) is int and raw_seq <= old.raw_seq:
            problems.append("a superseding decision's raw line must come after the superseded one's")
            ok = False
        if ok:
            del self._open[sha]
            self._closed.add(sha)
        return ok

