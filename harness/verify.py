"""`guardeval verify`: recompute every hash and the raw-log chain; name the file and line.

Checks are independent of the guard's availability, except the optional re-render of
stimuli and re-derivation of decisions, which run when the run's prompt is loadable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from harness.canon import canonical_sha256, dumps_line, file_sha256, sha256_hex
from harness.errors import GuardevalError
from harness.schedule import call_id_for
from harness.store import DECISIONS, EVENTS, GENESIS, MANIFEST, RAW, SCHEDULE, STIMULI

MAX_PROBLEMS = 50


class _Report:
    def __init__(self) -> None:
        self.problems: list[dict[str, Any]] = []

    def add(self, file: str, line: int | None, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append({"file": file, "line": line, "message": message})


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n") if path.exists() else []


def _line_containing(path: Path, needle: str) -> int | None:
    for i, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), start=1):
        if needle in line:
            return i
    return None


def _iter(path: Path, rep: _Report, name: str):
    """Yield (lineno, body, obj) for each line; report torn/invalid lines."""
    data = _lines(path)
    if data and data[-1] != b"":
        rep.add(name, len(data), "torn last line (no newline); `guardeval resume` moves it aside")
    for lineno, body in enumerate(data[:-1] if data else [], start=1):
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            rep.add(name, lineno, f"not valid JSON ({exc})")
            continue
        if not isinstance(obj, dict):
            rep.add(name, lineno, "not a JSON object")
            continue
        if dumps_line(obj)[:-1] != body:
            rep.add(name, lineno, "line is not in canonical form (bytes changed)")
        yield lineno, body, obj


def verify_run(run_dir: Path) -> dict[str, Any]:
    rep = _Report()
    mpath = run_dir / MANIFEST
    try:
        manifest = orjson.loads(mpath.read_bytes())
    except orjson.JSONDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        rep.add(MANIFEST, int(m.group(1)) if m else None, f"not valid JSON ({exc})")
        return {"ok": False, "problems": rep.problems, "checked": "manifest unreadable"}
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    manifest_ok = canonical_sha256(body) == manifest.get("sha256")

    # Files pinned by the manifest: if one disagrees, the manifest line naming it is suspect too.
    sched_sha = file_sha256(run_dir / SCHEDULE)
    stim_sha = file_sha256(run_dir / STIMULI)
    pinned_lines: list[tuple[str, str]] = []
    if sched_sha != manifest.get("schedule_sha256"):
        rep.add(SCHEDULE, None, "SHA-256 does not match manifest.schedule_sha256")
        pinned_lines.append(("schedule_sha256", str(manifest.get("schedule_sha256"))))
    if stim_sha != manifest.get("stimuli_sha256"):
        rep.add(STIMULI, None, "SHA-256 does not match manifest.stimuli_sha256")
        pinned_lines.append(("stimuli_sha256", str(manifest.get("stimuli_sha256"))))
    cohort = None
    try:
        from harness.cohort import load_cohort

        cohort = load_cohort(run_dir / "cohort")
        if cohort.sha256 != (manifest.get("cohort") or {}).get("sha256"):
            rep.add("cohort/cohort.json", None, "SHA-256 does not match manifest.cohort.sha256")
            pinned_lines.append(("cohort.sha256", str((manifest.get("cohort") or {}).get("sha256"))))
    except GuardevalError as exc:
        rep.add("cohort", None, str(exc))
    guard = manifest.get("guard")
    if isinstance(guard, dict) and canonical_sha256(guard) != manifest.get("guard_sha256"):
        rep.add(MANIFEST, _line_containing(mpath, '"guard_sha256"'), "guard_sha256 does not match the guard config")
    if not manifest_ok:
        line = None
        for _, value in pinned_lines:
            line = line or _line_containing(mpath, value)
        line = line or _line_containing(mpath, f'"sha256": "{manifest.get("sha256")}"')
        rep.add(MANIFEST, line, "manifest sha256 does not match its content")

    # schedule.jsonl: every line recomputable from the cohort and the seed.
    seed, reps = manifest.get("seed"), manifest.get("reps")
    sched_rows: list[dict[str, Any]] = []
    seen_cells: set[tuple[str, str, int]] = set()
    for lineno, _, row in _iter(run_dir / SCHEDULE, rep, SCHEDULE):
        sched_rows.append(row)
        try:
            if row["index"] != lineno - 1:
                rep.add(SCHEDULE, lineno, f"index {row['index']} out of order")
            cell = (row["base_id"], row["condition"], row["repetition"])
            if cell in seen_cells:
                rep.add(SCHEDULE, lineno, "duplicate base x condition x repetition")
            seen_cells.add(cell)
            if not (isinstance(reps, int) and isinstance(row["repetition"], int) and 0 <= row["repetition"] < reps):
                rep.add(SCHEDULE, lineno, "repetition out of range")
            if cohort is not None:
                inst = cohort.instance(row["base_id"], row["condition"])
                for k in ("interaction_id", "domain", "instance_sha256"):
                    if row[k] != inst[k]:
                        rep.add(SCHEDULE, lineno, f"{k} does not match the cohort")
            if row["call_id"] != call_id_for(seed, row["base_id"], row["condition"], row["repetition"],
                                             row["instance_sha256"]):
                rep.add(SCHEDULE, lineno, "call_id does not match its recomputation")
        except (KeyError, TypeError) as exc:
            rep.add(SCHEDULE, lineno, f"missing or malformed field {exc}")
    if len(sched_rows) != manifest.get("n_calls"):
        rep.add(SCHEDULE, None, f"{len(sched_rows)} lines, manifest says {manifest.get('n_calls')}")
    order = {r.get("call_id"): r for r in sched_rows}

    # stimuli.jsonl: one per scheduled call, in schedule order; re-rendered when possible.
    render = _renderer(manifest)
    render_cache: dict[str, str] = {}
    stimuli: dict[str, str] = {}
    for lineno, _, row in _iter(run_dir / STIMULI, rep, STIMULI):
        cid, sha = row.get("call_id"), row.get("request_sha256")
        stimuli[str(cid)] = str(sha)
        if lineno - 1 >= len(sched_rows) or sched_rows[lineno - 1].get("call_id") != cid:
            rep.add(STIMULI, lineno, "call_id does not match schedule.jsonl at this line")
            continue
        if render is not None and cohort is not None:
            s = sched_rows[lineno - 1]
            key = s.get("instance_sha256")
            if not isinstance(key, str):
                continue  # the schedule line itself is broken; reported above
            if key not in render_cache:
                try:
                    render_cache[key] = canonical_sha256(render(cohort.instance(s["base_id"], s["condition"])))
                except (KeyError, TypeError):
                    continue  # the schedule line itself is broken; reported above
            if render_cache[key] != sha:
                rep.add(STIMULI, lineno, "request_sha256 does not match the re-rendered request")

    # raw.jsonl: the hash chain.
    prev, last_seq = GENESIS, 0
    raw_index: dict[int, tuple[str, dict[str, Any]]] = {}
    n_raw = 0
    for lineno, body, rec in _iter(run_dir / RAW, rep, RAW):
        n_raw += 1
        line_sha = sha256_hex(body)
        try:
            if rec["prev_sha256"] != prev:
                # Either the previous line changed after it was chained, or this link did.
                if lineno > 1:
                    rep.add(RAW, lineno - 1, "line differs from the bytes the next line chained (changed?)")
                rep.add(RAW, lineno, "prev_sha256 does not match the previous line (chain broken)")
            if rec["seq"] != last_seq + 1:
                rep.add(RAW, lineno, f"seq {rec['seq']} does not follow {last_seq}")
            if rec["call_id"] not in order:
                rep.add(RAW, lineno, "call_id is not in the schedule")
            if canonical_sha256(rec["request"]) != rec["request_sha256"]:
                rep.add(RAW, lineno, "request_sha256 does not match the logged request")
            elif rec.get("outcome") != "not_sent" and stimuli.get(rec["call_id"]) != rec["request_sha256"]:
                rep.add(RAW, lineno, "sent request differs from stimuli.jsonl")
            resp = rec["response"]
            want = sha256_hex(resp.encode("utf-8")) if resp is not None else None
            if rec["response_sha256"] != want:
                rep.add(RAW, lineno, "response_sha256 does not match the logged response")
            last_seq = rec["seq"]
        except (KeyError, TypeError, AttributeError) as exc:
            rep.add(RAW, lineno, f"missing or malformed field {exc}")
        raw_index[rec.get("seq", -lineno)] = (line_sha, rec)
        prev = line_sha
    _check_chain_head(run_dir, rep, last_seq, prev)

    # decisions.jsonl: each points at its final raw line; re-derived when the parser is available.
    parser, pinned = _parser_and_pin(manifest)
    decided: set[str] = set()
    n_dec = 0
    for lineno, _, d in _iter(run_dir / DECISIONS, rep, DECISIONS):
        n_dec += 1
        try:
            cid = d["call_id"]
            if cid not in order:
                rep.add(DECISIONS, lineno, "call_id is not in the schedule")
            if cid in decided:
                rep.add(DECISIONS, lineno, "call decided twice")
            decided.add(cid)
            raw = raw_index.get(d["raw_seq"])
            if raw is None:
                rep.add(DECISIONS, lineno, f"raw_seq {d['raw_seq']} not in raw.jsonl")
                continue
            line_sha, rec = raw
            if line_sha != d["raw_line_sha256"]:
                rep.add(DECISIONS, lineno, "raw_line_sha256 does not match the raw line")
            if rec.get("call_id") != cid:
                rep.add(DECISIONS, lineno, "raw line answers another call")
            if parser is not None:
                from harness.decide import decide

                again = decide(rec, line_sha, expected_request_sha256=stimuli.get(cid), parser=parser,
                               pinned_provider=pinned)
                if again != d:
                    rep.add(DECISIONS, lineno, "decision differs from its re-derivation from the raw line")
        except (KeyError, TypeError, ValueError) as exc:
            rep.add(DECISIONS, lineno, f"missing or malformed field {exc}")
    checked = (f"{len(sched_rows)} scheduled calls, {n_raw} raw attempts, {n_dec} decisions, "
               f"{len(stimuli)} stimuli")
    return {"ok": not rep.problems, "problems": rep.problems, "checked": checked,
            "n_calls": len(sched_rows), "n_raw": n_raw, "n_decisions": n_dec}


def _check_chain_head(run_dir: Path, rep: _Report, last_seq: int, last_sha: str) -> None:
    """The last `stop` event records the chain head; a changed or cut last line shows up here."""
    path = run_dir / EVENTS
    if not path.exists():
        return
    head = None
    for line in _lines(path):
        try:
            ev = orjson.loads(line) if line else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "stop" and ev.get("last_seq") is not None:
            head = ev
    if head is None:
        return
    if head["last_seq"] > last_seq:
        rep.add(RAW, None, f"raw log ends at seq {last_seq}, but seq {head['last_seq']} was written")
    elif head["last_seq"] == last_seq and head.get("last_raw_sha256") != last_sha:
        rep.add(RAW, last_seq if last_seq else None,
                "last line differs from the chain head recorded when the run stopped")


def _renderer(manifest: dict[str, Any]):
    try:
        from guards.config import GuardConfig
        from guards.prompts import load_prompt
        from guards.registry import make_guard

        prompt = load_prompt(manifest["prompt"]["id"])
        if prompt.sha256 != manifest["prompt"]["sha256"]:
            return None
        return make_guard(GuardConfig(**manifest["guard"]), prompt, max_connections=1).render
    except Exception:  # noqa: BLE001 - verification of the rest must not depend on the guard
        return None


def _parser_and_pin(manifest: dict[str, Any]):
    try:
        from guards.config import GuardConfig
        from guards.parsers import get_parser

        cfg = GuardConfig(**manifest["guard"])
        pinned = cfg.pinned_provider if cfg.backend == "openrouter" else None
        return get_parser(manifest["prompt"]["parser"]), pinned
    except Exception:  # noqa: BLE001
        return None, None
