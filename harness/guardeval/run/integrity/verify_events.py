"""`verify`'s check of events.jsonl (issue 27): the sessions' log is read by `status` (the last
stop and its reason, retry sessions) and `resume` (the chain head a session recorded), so it is
checked like the other logs, and pinned by the fingerprint (`guardeval.run.integrity.fingerprint`).

Every complete line must be a JSON object a session writes: `at` and an `event` of start, stop,
note or retry. A stop event that records the chain head (`last_seq`, `last_raw_sha256`) must
name a line of the raw chain as it is now, by its seq and SHA-256, no earlier than the stop
before it; the last one against the log's end is `check_chain_head`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from guardeval.run.folder.folder import LineTooLong, RunFolder
from guardeval.run.folder.layout import EVENTS
from guardeval.run.integrity.verify_state import Report

KINDS = ("start", "stop", "note", "retry")


def check_events(folder: RunFolder, rep: Report, sha_at: Callable[[int], str | None], last_seq: int) -> int:
    """Problems of events.jsonl into `rep`; `sha_at(seq)` is the SHA-256 of raw line `seq` (None:
    no such line). Returns the number of complete lines."""
    n, head = 0, 0
    try:
        for lineno, line in folder.lines(EVENTS):
            if not line.endswith(b"\n"):
                rep.add_torn(EVENTS, lineno)
                break
            n += 1
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                rep.add(EVENTS, lineno, f"not valid JSON ({exc})")
                continue
            if not isinstance(ev, dict) or ev.get("event") not in KINDS or not isinstance(ev.get("at"), str):
                rep.add(EVENTS, lineno, "not an event a session writes (an object with `at` and an `event` of "
                                        f"{', '.join(KINDS)})")
                continue
            if ev["event"] != "stop" or "last_seq" not in ev:
                continue
            seq, sha = ev.get("last_seq"), ev.get("last_raw_sha256")
            if type(seq) is not int or seq < head:
                rep.add(EVENTS, lineno, f"the stop records chain head seq {seq!r}, not a seq at or after the "
                                        f"previous stop's ({head})")
                continue
            head = seq
            if 0 < seq <= last_seq and sha_at(seq) != sha:
                rep.add(EVENTS, lineno, f"the stop's last_raw_sha256 is not the SHA-256 of raw line seq {seq} "
                                        "(the event or that line changed)")
    except LineTooLong:
        pass   # reported by `check_chain_head`, which reads the file too
    return n
