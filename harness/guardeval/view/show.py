"""`guardeval show RUN CALL_ID`: one call's story for a terminal, from the files themselves:
its schedule row, the request it sent (rendered messages), every attempt with status,
latency, error and the raw response, its decision and parsed components, and the hashes that
link them. Every string from the run is printed with control characters escaped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from guardeval.terminal import safe


def _one(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return safe(value)
    return safe(orjson.dumps(value).decode())


def _block(text: str, indent: str = "    ") -> list[str]:
    return [indent + line for line in safe(text, newlines=True).split("\n")]


def _mark(a: Any, b: Any) -> str:
    if a is None or b is None:
        return ""
    return "  (matches)" if a == b else "  (DIFFERS)"


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return orjson.dumps(content, option=orjson.OPT_INDENT_2).decode()


def story_text(story: Mapping[str, Any]) -> str:
    s, d, attempts = story["schedule"], story.get("decision"), story["attempts"]
    inst = story.get("instance") or {}
    stim = story.get("stimulus_sha256")
    out = [f"call {_one(s.get('call_id'))}  (schedule index {_one(s.get('index'))})",
           f"  base {_one(s.get('base_id'))}  interaction {_one(s.get('interaction_id'))}  domain {_one(s.get('domain'))}",
           f"  condition {_one(s.get('condition'))}  repetition {_one(s.get('repetition'))}  "
           f"label {_one(inst.get('label'))}  tool {_one(inst.get('tool'))}",
           f"  instance_sha256 {_one(s.get('instance_sha256'))}",
           f"  request_sha256 fixed at launch (stimuli.jsonl) {_one(stim)}", ""]
    sent = next((a for a in attempts if isinstance(a.get("request"), Mapping)), None)
    if sent is None:
        out += ["request: not sent (no attempt in raw.jsonl)", ""]
    else:
        req = sent["request"]
        out.append(f"request (rendered messages; request_sha256 {_one(sent.get('request_sha256'))}"
                   f"{_mark(sent.get('request_sha256'), stim)})")
        for m in req.get("messages") or []:
            role = m.get("role") if isinstance(m, Mapping) else None
            out.append(f"  --- {_one(role)} ---")
            out += _block(_message_text(m.get("content") if isinstance(m, Mapping) else m))
        rest = {k: v for k, v in req.items() if k != "messages"}
        out += [f"  --- other request fields: {_one(rest)}", ""]
    out.append(f"attempts ({len(attempts)})")
    for a in attempts:
        err = f"  {_one(a.get('error_class'))}: {_one(a.get('error'))}" if a.get("error_class") else ""
        out += [f"  #{_one(a.get('attempt'))}  raw.jsonl line {a.get('line')}, seq {_one(a.get('seq'))}  "
                f"HTTP {_one(a.get('status'))}  {_one(a.get('outcome'))}{' (final)' if a.get('final') else ''}  "
                f"{_one(a.get('latency_s'))} s{err}",
                f"    started {_one(a.get('started'))}  finished {_one(a.get('finished'))}  provider "
                f"{_one(a.get('provider'))}  finish_reason {_one(a.get('finish_reason'))}  usage {_one(a.get('usage'))}",
                f"    request_sha256 {_one(a.get('request_sha256'))}{_mark(a.get('request_sha256'), stim)}",
                f"    line sha256 {_one(a.get('line_sha256'))}  prev_sha256 {_one(a.get('prev_sha256'))}",
                f"    raw response (sha256 {_one(a.get('response_sha256'))}):"]
        resp = a.get("response")
        out += _block(resp if isinstance(resp, str) else _one(resp), "      ")
    out.append("")
    if d is None:
        out.append("decision: none yet (the call is pending)")
    else:
        final = next((a for a in attempts if a.get("seq") == d.get("raw_seq")), attempts[-1] if attempts else {})
        dec = {1: "1 (block)", 0: "0 (allow)"}.get(d.get("decision"), _one(d.get("decision")))
        out += [f"decision: status {_one(d.get('status'))}, decision {dec}, score {_one(d.get('score'))}, "
                f"attributable {_one(d.get('attributable'))}",
                f"  components {_one(d.get('components'))}",
                f"  quarantine {_one(d.get('quarantine_reason'))}  detail {_one(d.get('detail'))}",
                f"  raw_seq {_one(d.get('raw_seq'))}  raw_line_sha256 {_one(d.get('raw_line_sha256'))}"
                f"{_mark(d.get('raw_line_sha256'), final.get('line_sha256'))}"]
        out += _history(story.get("decisions") or [])
    return "\n".join(out)


def _history(decisions: list[Mapping[str, Any]]) -> list[str]:
    """A retried call's decisions, oldest first: each later one supersedes the one before."""
    if len(decisions) < 2:
        return []
    out = ["", f"decisions ({len(decisions)}; the last is counted, each earlier one superseded by a retry)"]
    for d in decisions:
        sup = d.get("supersedes") if isinstance(d.get("supersedes"), Mapping) else None
        what = (f"retry round {_one(d.get('retry_round'))}, supersedes sha256 {_one(sup.get('decision_sha256'))}"
                if sup is not None else "first decision")
        out.append(f"  decisions.jsonl line {_one(d.get('line'))}: status {_one(d.get('status'))}, raw_seq "
                   f"{_one(d.get('raw_seq'))}, {what}; line sha256 {_one(d.get('line_sha256'))}")
    return out
