"""Is the raw log as long as the run says it was? (docs/design.md §6)

A raw log cut short (a bad copy, a truncating edit) can look like a whole run to anything that
only counts decisions: every call still has its decision line, so `resume` would find nothing
to do and report the run complete. Two cheap facts say otherwise: the chain head the last
session recorded when it stopped, and the raw line the last decision points at. `resume`
refuses a log shorter than either (before sending anything), `status` reports it, and `verify`
reports it with the rest of the chain.
"""

from __future__ import annotations

from typing import Any

import orjson

from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import EVENTS


def recorded_head(folder: RunFolder) -> dict[str, Any] | None:
    """The last `stop` event that recorded the raw chain's head (`last_seq`, `last_raw_sha256`)."""
    head = None
    for _, raw in folder.lines(EVENTS):
        line = raw.rstrip(b"\n")
        try:
            ev = orjson.loads(line) if line else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "stop" and type(ev.get("last_seq")) is int:
            head = ev
    return head


def head_problems(folder: RunFolder, last_seq: int, last_sha: str, last_decision_raw_seq: Any = None) -> list[str]:
    """What is wrong with a raw log that ends at `last_seq` (its last line hashing to `last_sha`)."""
    out: list[str] = []
    head = recorded_head(folder)
    if head is not None:
        if head["last_seq"] > last_seq:
            out.append(f"raw log ends at seq {last_seq}, but seq {head['last_seq']} was written")
        elif head["last_seq"] == last_seq and head.get("last_raw_sha256") != last_sha:
            out.append("last line differs from the chain head recorded when the run stopped")
    if type(last_decision_raw_seq) is int and last_decision_raw_seq > last_seq and not out:
        out.append(f"raw log ends at seq {last_seq}, but the last decision points at seq {last_decision_raw_seq}")
    return out
