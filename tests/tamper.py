"""Tampering as someone who knows the formats would do it, for the tests that must catch it."""

from __future__ import annotations

from pathlib import Path

import orjson

from guardeval.canon import dumps_line, sha256_hex


def rechain_with_zero_costs(run: Path) -> None:
    """Set every logged cost to 0 and recompute every hash that covers it: the raw chain, each
    decision's raw_line_sha256, the chain head in the stop events. Nothing keyed is left to
    disagree, so `verify` alone cannot see the change."""
    shas: dict[int, str] = {}
    prev = "0" * 64
    out = []
    for line in (run / "raw.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        if isinstance(rec.get("usage"), dict) and "cost" in rec["usage"]:
            rec["usage"]["cost"] = 0
        rec["prev_sha256"] = prev
        body = dumps_line(rec)
        prev = shas[rec["seq"]] = sha256_hex(body[:-1])
        out.append(body)
    (run / "raw.jsonl").write_bytes(b"".join(out))
    decs = []
    for line in (run / "decisions.jsonl").read_bytes().splitlines():
        d = orjson.loads(line)
        d["raw_line_sha256"] = shas[d["raw_seq"]]
        decs.append(dumps_line(d))
    (run / "decisions.jsonl").write_bytes(b"".join(decs))
    evs = []
    for line in (run / "events.jsonl").read_bytes().splitlines():
        ev = orjson.loads(line)
        if ev.get("event") == "stop" and ev.get("last_seq") in shas:
            ev["last_raw_sha256"] = shas[ev["last_seq"]]
        evs.append(orjson.dumps(ev) + b"\n")
    (run / "events.jsonl").write_bytes(b"".join(evs))
