"""Appending to a live run: the hash-chained raw log, the decisions and the events (docs/design.md §6).

Write discipline: `raw.jsonl` and `decisions.jsonl` are append-only; a raw line is written
(and flushed) before the decision that points at it, so a crash can leave at most a torn last
line (moved aside on the next open) or a raw line without its decision (re-derived, not
re-sent).
"""

from __future__ import annotations

import os
import time
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardeval.backends.base import valid_cost
from guardeval.canon import dumps_line, sha256_hex
from guardeval.errors import CheckFailed, WriteFailed
from guardeval.run.folder.answered import identity
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.head import head_problems
from guardeval.run.folder.layout import DECISIONS, EVENTS, GENESIS, RAW, RESUME_HINT, utcnow
from guardeval.run.folder.lines import damaged, decision_call_id, iter_lines, iter_raw_fields, parse_line, parsed_decision_fields
from guardeval.run.folder.records import Attempt, Decision
from guardeval.run.folder.spend import Unpriced, priced_cost
from guardeval.run.folder.workers import halves


@dataclass
class RunState:
    """What the files say has happened; rebuilt by one scan of each log on open.

    Per-call state is kept only where a run cannot go on without it: the set of decided call
    ids (to skip them), and attempt counts and final raw lines of the calls *not* yet decided
    (a decided call is never sent again, so its history is not needed here).
    """

    last_seq: int = 0
    last_raw_sha: str = GENESIS
    attempts: dict[str, int] = field(default_factory=dict)        # call_id -> attempts logged (undecided calls)
    decided: set[str] = field(default_factory=set)
    final_raw: dict[str, tuple[int, int]] = field(default_factory=dict)  # undecided call -> (offset, line) of its final raw line
    spent: float = 0.0                                            # reported cost summed over every attempt
    unpriced: Unpriced = field(default_factory=Unpriced)          # answers the provider did not price
    torn: list[Path] = field(default_factory=list)



class AppendLog:
    """One append-only log file: whole writes or nothing.

    A write the disk does not take in full (ENOSPC, EDQUOT, EFBIG, an I/O error) is cut back to
    where it began, so no torn line is left behind by a full disk, and every later write or sync
    raises the same WriteFailed: after a failure, nothing more is appended to this run.
    """

    def __init__(self, folder: RunFolder, name: str, hint: str) -> None:
        self.path, self._hint = folder.file(name), hint
        self._fd: int | None = folder.open_append(name)   # never through a link (RunFolder)
        self.size = os.fstat(self._fd).st_size
        self.failed: WriteFailed | None = None

    def write(self, data: bytes) -> None:
        fd = self._usable()
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.write(fd, view[done:])
        except OSError as exc:
            if done:
                try:
                    os.ftruncate(fd, self.size)   # frees space: succeeds on a full disk
                except OSError:
                    pass
            raise self._fail(exc) from None
        self.size += len(data)

    def sync(self) -> None:
        # Allowed after a failed write: what is in the file is whole lines (cut back).
        fd = self._fd
        assert fd is not None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self._fail(exc) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _usable(self) -> int:
        if self.failed is not None:
            raise self.failed
        assert self._fd is not None
        return self._fd

    def _fail(self, exc: OSError) -> WriteFailed:
        self.failed = WriteFailed(self.path, exc, self._hint)
        return self.failed


class RunWriter:
    """Appends attempts and decisions; owns the open log files of a live run."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self.state = RunState()
        self._raw: AppendLog | None = None
        self._dec: AppendLog | None = None
        self._events: AppendLog | None = None
        self._pending: list[bytes] = []
        self._scan: _RawScan | None = None
        self._last_decision_raw_seq: Any = None
        self._hint = RESUME_HINT.format(run=folder.path)
        # This session's answers by who gave them (`guardeval.run.folder.answered`): the stop records it.
        self.answered: Counter[str] = Counter()

    # -- opening and recovery ----------------------------------------------------------------
    def scan(self) -> None:
        """Start reading the logs: the decisions here, then the raw log in workers when it is
        large (`open` collects them), so that the caller can load the cohort meanwhile.
        Complete lines only: a torn last line is moved aside by `open`, after the scan."""
        if self._scan is not None:
            return
        st = self.state
        # Decisions first, so that the raw scan keeps history only for undecided calls.
        path = self.folder.file(DECISIONS)
        last: tuple[int, bytes] | None = None
        for lineno, line in iter_lines(self.folder, DECISIONS):
            cid = decision_call_id(line)
            st.decided.add(cid if cid is not None else parsed_decision_fields(line, path, lineno)[0])
            last = (lineno, line)
        if last is not None:
            self._last_decision_raw_seq = parse_line(last[1], path, last[0]).get("raw_seq")
        self._scan = _RawScan(self.folder, st.decided)

    def abandon_scan(self) -> None:
        if self._scan is not None:
            self._scan.stop()

    def open(self) -> RunState:
        self.scan()
        assert self._scan is not None
        self._merge_raw(self._scan.parts())
        # A raw log shorter than the run says it was (cut, or a bad copy) is refused before
        # anything is sent or moved: otherwise every call still looks decided and the run "complete".
        problems = head_problems(self.folder, self.state.last_seq, self.state.last_raw_sha, self._last_decision_raw_seq)
        if problems:
            raise CheckFailed(f"{self.folder.file(RAW)}: {problems[0]}; `guardeval verify {self.folder.path}` names the "
                              "damage (nothing was sent)")
        # events.jsonl too: an event appended after a torn one would make one damaged line of both.
        for name in (RAW, DECISIONS, EVENTS):
            moved = recover_torn(self.folder, name, self._hint)
            if moved:
                self.state.torn.append(moved)
        st = self.state
        try:
            self._raw = AppendLog(self.folder, RAW, self._hint)
            self._dec = AppendLog(self.folder, DECISIONS, self._hint)
            self._events = AppendLog(self.folder, EVENTS, self._hint)
        except OSError as exc:
            self.close_files()
            raise WriteFailed(exc.filename, exc, self._hint) from None
        except BaseException:
            self.close_files()   # a link or a FIFO in a log's place (InputError): nothing written
            raise
        return st

    def _merge_raw(self, parts: list[RawPart]) -> None:
        """Spend, attempts and final lines of undecided calls, chain head: the parts of the raw
        log merged in log order, so the state is that of one sequential pass."""
        st, path = self.state, self.folder.file(RAW)
        lines_before = 0
        for part in parts:
            for cost in part.costs:    # one at a time, in log order, as the attempts were written
                st.spent += cost
            st.unpriced.merge(part.unpriced)
            for cid, n in part.attempts.items():
                st.attempts[cid] = st.attempts.get(cid, 0) + n
            for cid, where in part.finals.items():
                if where is None:
                    st.final_raw.pop(cid, None)
                else:
                    st.final_raw[cid] = (where[0], where[1] + lines_before)
            lines_before += part.n_lines
        last = next((part.last for part in reversed(parts) if part.last is not None), None)
        if last is not None:
            offset, length = last
            body = self.folder.pread(RAW, length, offset)[:-1]
            st.last_seq = parse_line(body, path, lines_before)["seq"]
            st.last_raw_sha = sha256_hex(body)

    def undecided_finals(self) -> Iterator[tuple[dict[str, Any], str]]:
        """(record, line sha256) of each final raw line whose decision is missing, in log order."""
        path = self.folder.file(RAW)
        for offset, lineno in sorted(self.state.final_raw.values()):
            body = self.folder.line_at(RAW, offset)
            yield parse_line(body, path, lineno), sha256_hex(body)

    def close(self) -> None:
        """Write the held decisions and sync every log; the files are closed even when that
        fails (WriteFailed is raised after)."""
        try:
            self.flush()
            for log in (self._raw, self._dec, self._events):
                if log is not None:
                    log.sync()
        finally:
            self.close_files()

    def close_files(self) -> None:
        for log in (self._raw, self._dec, self._events):
            if log is not None:
                log.close()
        self._raw = self._dec = self._events = None

    # -- appends -----------------------------------------------------------------------------
    def append_raw(self, record: Attempt, *, request_json: bytes | None = None) -> tuple[int, str]:
        """Add seq and prev_sha256, write one line; return (seq, sha256 of the line).

        `request_json` is the request body already in canonical JSON: it is spliced in as the
        `request` field (the same bytes `dumps_line` would produce, without re-sorting the body
        on every attempt).
        """
        assert self._raw is not None
        st = self.state
        seq = st.last_seq + 1
        line = dumps_line({**record, "seq": seq, "prev_sha256": st.last_raw_sha})
        if request_json is not None:
            # Keys are sorted, so "request" goes right before "request_sha256"; inside string
            # values a quote is escaped, so this pattern can only be that key.
            at = line.index(b',"request_sha256":')
            line = line[:at] + b',"request":' + request_json + line[at:]
        self._raw.write(line)   # whole or not at all (WriteFailed): the state moves only after
        st.last_seq = seq
        st.last_raw_sha = sha256_hex(line[:-1])
        cid = record["call_id"]
        st.attempts[cid] = st.attempts.get(cid, 0) + 1
        if record["outcome"] == "reply" and (who := identity(record["response"])) is not None:
            self.answered[who] += 1
        return st.last_seq, st.last_raw_sha

    def append_decision(self, record: Decision) -> None:
        # Held back until `flush()` (the dispatcher's ticker, and close): a decision lost in a
        # crash is re-derived from its final raw line on the next open, never re-sent.
        self._pending.append(dumps_line(record))
        self.state.decided.add(record["call_id"])
        if len(self._pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        """fsync the raw log, then write the held decisions: on disk, a decision never points
        at a raw line that a power loss could take away."""
        if not self._pending or self._raw is None or self._dec is None:
            return
        self._raw.sync()
        self._dec.write(b"".join(self._pending))
        self._pending.clear()

    def event(self, kind: str, **fields: Any) -> None:
        assert self._events is not None
        self._events.write(dumps_line({"at": utcnow(), "event": kind, "pid": os.getpid(), **fields}))


@dataclass
class RawPart:
    """What a scan of some of raw.jsonl's lines (bytes [start, end)) learned; see `_scan_raw`."""

    n_lines: int = 0
    costs: array = field(default_factory=lambda: array("d"))   # reported costs, in log order
    unpriced: Unpriced = field(default_factory=Unpriced)        # answers without a positive cost
    attempts: dict[Any, int] = field(default_factory=dict)     # undecided call -> attempts here
    finals: dict[Any, tuple[int, int] | None] = field(default_factory=dict)  # last line here: final (offset, line) or not (None)
    last: tuple[int, int] | None = None                         # (offset, length) of the last line


def scan_raw_part(folder: RunFolder, start: int, end: int | None, decided: set[str]) -> RawPart:
    part, path = RawPart(), folder.file(RAW)
    for lineno, offset, length, f in iter_raw_fields(folder, start, end):
        if valid_cost(f.cost):
            part.costs.append(f.cost)
        if f.outcome == "reply" and priced_cost(f.usage) is None:
            part.unpriced.add(f.usage)
        cid = f.call_id
        if not isinstance(cid, str):
            raise damaged(path, lineno, "missing or malformed field 'call_id'")
        if cid not in decided:
            part.attempts[cid] = part.attempts.get(cid, 0) + 1
            part.finals[cid] = (offset, lineno) if f.final else None
        part.n_lines = lineno
        part.last = (offset, length)
    return part


class _RawScan:
    """`scan_raw_part` over raw.jsonl: each half of a large log in a forked worker (they
    inherit the set of decided calls), started now and collected by `parts`; a small log, one
    CPU, or a failed worker: read here (a damaged line then raises, named by its number)."""

    def __init__(self, folder: RunFolder, decided: set[str]) -> None:
        self.folder, self.decided = folder, decided
        self._workers = halves(folder, RAW, scan_raw_part, decided)

    def parts(self) -> list[RawPart]:
        parts = [w.result() for w in self._workers]
        complete = bool(parts) and all(p is not None for p in parts)
        self._workers = []
        return parts if complete else [scan_raw_part(self.folder, 0, None, self.decided)]

    def stop(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []


def recover_torn(folder: RunFolder, name: str, hint: str = "") -> Path | None:
    """If the file ends without a newline, move the torn tail to `<name>.torn-<stamp>`.
    The copy is written and synced before the file is cut; if the disk cannot take it, the
    copy is removed and nothing changes (WriteFailed). Neither file is opened through a link."""
    fd = folder.open_update(name)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return None
        # Find the last newline by scanning backwards in blocks.
        pos, cut = size, 0
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            idx = os.pread(fd, step, pos).rfind(b"\n")
            if idx >= 0:
                cut = pos + idx + 1
                break
        aside = f"{name}.torn-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        try:
            out = folder.create_new(aside)
            try:
                # The tail is copied a block at a time: a torn line may be as long as the file.
                at = cut
                while at < size:
                    block = os.pread(fd, min(1 << 20, size - at), at)
                    if not block:
                        break
                    view = memoryview(block)
                    while view:
                        view = view[os.write(out, view):]
                    at += len(block)
                os.fsync(out)
            finally:
                os.close(out)
        except OSError as exc:
            folder.unlink(aside)
            raise WriteFailed(folder.file(aside), exc, hint) from None
        os.ftruncate(fd, cut)
        os.fsync(fd)
    finally:
        os.close(fd)
    return folder.file(aside)
