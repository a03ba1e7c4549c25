"""report.html: one self-contained file (no network, no external file) that shows a run.

The page is static HTML for the summary (header, forest plot as an inline SVG image, tables
from report.json) plus one JSON block that the inline script turns into the call browser and
the pairs view. Everything from the run is hostile text: the HTML parts are escaped here, the
JSON block has `<`, `>`, `&` and U+2028/9 escaped (so no string can close the script
element), and the script only ever writes run text with `textContent`.

Size: request bodies are stored once per distinct `request_sha256`, and their message text
as lines interned in one table (most lines repeat across conditions and bases). A run over
`FULL_EMBED_MAX` calls embeds a bounded selection (`select_calls`) and says so.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from guardeval.backends.backend import find_backend
from guardeval.canon import canonical_bytes
from guardeval.errors import CheckFailed, GuardevalError, InputError
from guardeval.estimators.report.presentation import presentation
from guardeval.estimators.report.sections import Section
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, REPORT_HTML, REPORT_JSON, STIMULI
from guardeval.run.folder.lines import iter_jsonl
from guardeval.view import tables as T
from guardeval.view.calls import CallRow, RunCalls, load_calls, read_attempts
from guardeval.view.files import out_file, write_atomically

if TYPE_CHECKING:
    from guardeval.run.run import Run

_SLOT = re.compile(r"@@([a-z_]+)@@")
FULL_EMBED_MAX = 20_000     # calls; above this the report embeds a selection
ROW_CAP = 100_000           # call rows embedded at most (large runs)
DETAIL_CAP = 3_000          # calls whose messages and attempts are embedded at most (large runs)
SAMPLE_CALLS = 2_000        # whole bases sampled into a large run's report, about this many calls

ROW_COLUMNS = ("call_id", "index", "base_id", "interaction_id", "domain", "condition", "repetition", "label", "tool",
               "decision", "score", "status", "quarantine_reason", "attempts", "latency_s", "cost", "provider",
               "finish_reason", "flip", "error_class")
# Attempt fields shown in the call detail (the request is shown once, as messages).
ATTEMPT_FIELDS = ("seq", "attempt", "started", "finished", "status", "outcome", "final", "latency_s", "error_class",
                  "error", "provider", "finish_reason", "answers_call_id", "request_sha256", "response",
                  "response_sha256", "prev_sha256", "line_sha256", "usage")


@dataclass
class Selection:
    rows: list[int]          # indexes into RunCalls.rows, in schedule order
    details: set[int]        # of those, the calls whose messages and attempts are embedded
    complete: bool
    note: str


def _base_order(base_id: str) -> bytes:
    return hashlib.sha256(base_id.encode("utf-8", "surrogatepass")).digest()


def select_calls(calls: RunCalls, *, full_max: int = FULL_EMBED_MAX, row_cap: int = ROW_CAP,
                 detail_cap: int = DETAIL_CAP, sample_calls: int = SAMPLE_CALLS) -> Selection:
    """Every call of a run up to `full_max` calls. Above: every failed, quarantined or flipped
    call with the baseline call it flipped against, plus whole bases in a fixed pseudo-random
    order (SHA-256 of the base id) until about `sample_calls`; rows capped at `row_cap` in that
    priority. Messages and attempts for at most `detail_cap` of them: failures and quarantine
    first, then the sampled bases, then flips."""
    rows = calls.rows
    n = len(rows)
    if n <= full_max:
        return Selection(list(range(n)), set(range(n)), True, f"all {n:,} calls embedded")
    by_base: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_base.setdefault(r["base_id"], []).append(i)
    base_call = {(r["base_id"], r["repetition"]): i for i, r in enumerate(rows) if r["condition"] == calls.baseline}
    failed = [i for i, r in enumerate(rows) if r["status"] not in ("ok", "missing") or r["quarantine_reason"]]
    flipped: list[int] = []
    for i, r in enumerate(rows):
        if r["flip"]:
            partner = base_call.get((r["base_id"], r["repetition"]))
            flipped += [i] if partner is None else [i, partner]
    sample: list[int] = []
    n_sampled = 0
    for base in sorted(by_base, key=_base_order):
        if len(sample) >= sample_calls:
            break
        sample += by_base[base]
        n_sampled += 1
    chosen: dict[int, None] = {}
    for group in (failed, sample, flipped):
        for i in group:
            if len(chosen) >= row_cap:
                break
            chosen.setdefault(i, None)
    details: set[int] = set()
    for group in (failed, sample, flipped):
        for i in group:
            if len(details) >= detail_cap:
                break
            if i in chosen:
                details.add(i)
    n_failed, n_flip = len(set(failed)), sum(1 for r in rows if r["flip"])
    note = (f"{len(chosen):,} of {n:,} calls embedded: every failed or quarantined call ({n_failed:,}), every "
            f"flipped call ({n_flip:,}) with its baseline partner, and the calls of {n_sampled:,} sampled bases; "
            f"messages and attempts for {len(details):,} of them.")
    if len(chosen) < len(set(failed) | set(flipped) | set(sample)):
        note += f" The row cap ({row_cap:,}) left some of them out."
    return Selection(sorted(chosen), details, False, note)


class _Lines:
    """Interned text lines: a message is stored as a list of line numbers into one table."""

    def __init__(self) -> None:
        self.table: list[str] = []
        self._ids: dict[str, int] = {}

    def ids(self, text: str) -> list[int]:
        out = []
        for line in text.split("\n"):
            i = self._ids.get(line)
            if i is None:
                i = self._ids[line] = len(self.table)
                self.table.append(line)
            out.append(i)
        return out


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):   # content parts
        return "\n".join(p.get("text", "") if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                         else orjson.dumps(p).decode() for p in content)
    return orjson.dumps(content).decode()


def _encode_columns(rows: list[CallRow]) -> tuple[list[list[Any]], dict[str, list[Any]]]:
    """Rows as arrays; a string column with few distinct values as indexes into its own list."""
    enums: dict[str, list[Any]] = {}
    for col in ROW_COLUMNS:
        values = [r.get(col) for r in rows]
        distinct = {v for v in values if v is not None}
        if (col != "call_id" and distinct and all(isinstance(v, str) for v in distinct)
                and len(distinct) <= max(64, len(rows) // 4)):
            enums[col] = sorted(distinct)
    index = {col: {v: i for i, v in enumerate(vals)} for col, vals in enums.items()}
    out = []
    for r in rows:
        out.append([index[c].get(r.get(c), r.get(c)) if c in index and isinstance(r.get(c), str) else r.get(c)
                    for c in ROW_COLUMNS])
    return out, enums


class Body(TypedDict):
    """A request body in the page's data: its parameters (an index into `params`) and its messages
    as [role, line ids]."""

    params: int
    messages: list[list[object]]


class CallDetail(TypedDict):
    """What the call browser shows of one call beyond its row."""

    instance_sha256: str | None
    stimulus_sha256: str | None
    components: dict[str, bool | int | float | None] | None
    detail: str | None
    raw_seq: int | None
    raw_line_sha256: str | None
    attempts: list[dict[str, object]]   # the raw lines' ATTEMPT_FIELDS


def _stimuli(folder: RunFolder, wanted: set[str]) -> dict[str, str | None]:
    """call id -> the request hash stimuli.jsonl fixed for it, for the calls `wanted`."""
    out: dict[str, str | None] = {}
    for _, _, rec in iter_jsonl(folder, STIMULI):
        if rec.get("call_id") in wanted:
            out[rec["call_id"]] = rec.get("request_sha256")
    return out


def build_data(calls: RunCalls, sel: Selection) -> dict[str, Any]:
    rows = [calls.rows[i] for i in sel.rows]
    encoded, enums = _encode_columns(rows)
    lines = _Lines()
    bodies: dict[str, Body] = {}
    params: list[Any] = []
    param_ids: dict[bytes, int] = {}
    details: dict[str, CallDetail] = {}
    detail_rows = [calls.rows[i] for i in sel.rows if i in sel.details]
    stimuli = _stimuli(calls.folder, {r["call_id"] for r in detail_rows})
    for r in detail_rows:
        summary = calls.attempts.get(r["call_id"])
        attempts = read_attempts(calls.folder, summary.where) if summary else []
        shown: list[dict[str, object]] = []
        for a in attempts:
            req, sha = a.get("request"), a.get("request_sha256")
            if isinstance(req, Mapping) and isinstance(sha, str) and sha not in bodies:
                rest = {k: v for k, v in req.items() if k != "messages"}
                key = canonical_bytes(rest)
                if key not in param_ids:
                    param_ids[key] = len(params)
                    params.append(rest)
                msgs = req.get("messages")
                if not isinstance(msgs, list):
                    msgs = []
                bodies[sha] = {"params": param_ids[key],
                               "messages": [[str(m.get("role")) if isinstance(m, Mapping) else "?",
                                             lines.ids(_message_text(m.get("content") if isinstance(m, Mapping) else m))]
                                            for m in msgs]}
            shown.append({k: a.get(k) for k in ATTEMPT_FIELDS})
        details[r["call_id"]] = {
            "instance_sha256": r["instance_sha256"], "stimulus_sha256": stimuli.get(r["call_id"]),
            "components": r["components"], "detail": r["detail"], "raw_seq": r["raw_seq"],
            "raw_line_sha256": r["raw_line_sha256"], "attempts": shown,
        }
    return {"columns": list(ROW_COLUMNS), "rows": encoded, "enums": enums, "baseline": calls.baseline,
            "conditions": calls.conditions, "roles": calls.roles, "n_total": len(calls.rows),
            "complete": sel.complete, "note": sel.note, "lines": lines.table, "bodies": bodies, "params": params,
            "details": details, "run": str(calls.manifest.get("run_id") or "")}


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside <script type="application/json">: no `<`, `>`, `&`, U+2028/9
    in it (they appear only inside strings, where the \\u escapes mean the same)."""
    raw = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    for bad, good in ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
                      ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029")):
        raw = raw.replace(bad, good)
    return raw.decode("utf-8")


def asset(name: str) -> str:
    text = resources.files("guardeval.view").joinpath("assets", name).read_text(encoding="utf-8")
    if name != "report.html":
        assert "</script" not in text.lower() and "</style" not in text.lower(), name
    return text


def verify_summary(run: Run | Path | RunFolder, report: Mapping[str, Any], *, just_estimated: bool = False,
                   allow_skipped: bool = False) -> dict[str, Any]:
    """Whether the run verifies. `estimate` verifies a run before estimating it and records that
    in report.json (`source.verified`, `source.verify_skipped`): right after it, that record is
    the answer. Otherwise (`guardeval report` later, or an estimate made with --no-verify) the
    run may have changed since, so `verify_run` runs now."""
    src = report.get("source") or {}
    if just_estimated and src.get("verified") is True:
        allowed = [s.get("check") for s in src.get("verify_skipped") or [] if isinstance(s, Mapping)]
        return {"ok": True, "how": "checked by estimate before estimating",
                "checked": "skipped, allowed: " + ", ".join(map(str, allowed)) if allowed else "every check",
                "problems": []}
    from guardeval.run.integrity.verify import verify_run
    from guardeval.run.run import Run

    with Run.using(run) as r:
        result = verify_run(r.folder, allow_skipped=allow_skipped)
    skipped: list[Mapping[str, Any]] = [s for s in result.get("skipped") or [] if isinstance(s, Mapping)]
    names = ", ".join(str(s.get("check")) for s in skipped)
    return {"ok": bool(result.get("ok")), "how": "run when this report was made",
            "checked": str(result.get("checked") or "") + (f"; skipped: {names}" if skipped else ""),
            "problems": list(result.get("problems") or [])[:5], "n_problems": len(result.get("problems") or []),
            "skipped": skipped}


def _pinned(guard: Mapping[str, Any]) -> str | None:
    """The first provider the manifest's guard allows: its back-end's rule (Backend.allowed_providers,
    which reads the routing table alone), on the table as recorded, whatever else the manifest holds."""
    entry = find_backend(guard.get("backend"))
    allowed = entry.allowed_providers(SimpleNamespace(provider=guard.get("provider"))) if entry is not None else ()
    return allowed[0] if allowed else None


def _header(calls: RunCalls, report: Mapping[str, Any], verify: Mapping[str, Any]) -> str:
    m = calls.manifest
    guard: Mapping[str, Any] = m.get("guard") or {}
    cohort: Mapping[str, Any] = m.get("cohort") or {}
    prompt: Mapping[str, Any] = m.get("prompt") or {}
    decided = sum(1 for r in calls.rows if r["status"] != "missing")
    problems = "; ".join(f"{p.get('file')} line {p.get('line')}: {p.get('message')}" for p in verify["problems"])
    facts: list[tuple[str, Any, str]] = [
        ("guard", guard.get("name"), ""), ("model", guard.get("model"), ""), ("backend", guard.get("backend"), ""),
        ("pinned provider", _pinned(guard) or "none (any upstream)", ""),
        ("prompt", f"{prompt.get('id')} (sha256 {prompt.get('sha256')})", "hash"),
        ("run", m.get("run_id"), ""), ("parent run", m.get("parent_run"), ""),
        ("cohort", f"{cohort.get('name')} (sha256 {cohort.get('sha256')})", "hash"),
        ("schedule sha256", m.get("schedule_sha256"), "hash"), ("stimuli sha256", m.get("stimuli_sha256"), "hash"),
        ("manifest sha256", m.get("sha256"), "hash"),
        ("fingerprint", (report.get("source") or {}).get("fingerprint"), "hash"),
        ("seed / order / repetitions", f"{m.get('seed')} / {m.get('order')} / {m.get('reps')}", ""),
        ("created", m.get("created"), ""),
        ("first attempt / last answer", f"{calls.first_started or '—'} / {calls.last_finished or '—'}", ""),
        ("calls", f"{len(calls.rows):,} scheduled, {decided:,} decided, {calls.n_raw:,} attempts", ""),
        ("spend", "—" if calls.spend is None else f"${calls.spend:.4f} ({_spend_source(calls)})", ""),
        ("verify", ("passed" if verify["ok"] else "FAILED") + f" ({verify['how']}; {verify.get('checked') or ''})"
         + (f": {problems}" if problems else ""), "ok" if verify["ok"] else "bad"),
        ("report made", datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
         + f" by guardeval {m.get('guardeval_version', '')}", ""),
    ]
    items = "".join(f'<dt>{T.esc(k)}</dt><dd class="{cls}">{T.esc(T.fmt(v))}</dd>' for k, v, cls in facts)
    return f'<dl class="facts header">{items}</dl>'


def _spend_source(calls: RunCalls) -> str:
    """Whose numbers the spend is: the simulated provider's made-up costs are labelled as
    `status` and the progress line label them."""
    from guardeval.backends.config import config_from_manifest

    try:
        simulated = config_from_manifest(calls.manifest.get("guard") or {}, calls.folder.file(MANIFEST)).is_simulated
    except GuardevalError:
        simulated = False
    if simulated:
        return "simulated provider: usage.cost made up by guardeval sim-server, not billed"
    return "usage.cost reported by the provider"


def _title(calls: RunCalls) -> str:
    from guardeval.run.folder.answered import answered_by, run_title

    return run_title(calls.manifest, answered_by(calls.folder))


def _svg_data_uri(report: Mapping[str, Any], title: str) -> str:
    from guardeval.estimators.report.plot import figure_bytes, forest_figure

    # As an <img>, an SVG can run no script: labels from the cohort stay inert.
    return "data:image/svg+xml;base64," + base64.b64encode(figure_bytes(forest_figure(report, title), "svg")).decode()


def _retried_words(report: Mapping[str, Any]) -> str:
    n = (report.get("retried") or {}).get("n_calls")
    return f"; {n} calls counted at a retry's decision (later measurements)" if n else ""


def build_html(calls: RunCalls, report: Mapping[str, Any], verify: Mapping[str, Any],
               selection: Selection | None = None) -> str:
    sel = selection or select_calls(calls)
    data = build_data(calls, sel)
    title = _title(calls)
    summary = T.esc(T.fmt(
        f"{report.get('n_bases')} bases, {report.get('n_interactions')} interactions, {report.get('n_calls')} calls; "
        f"baseline {report.get('baseline')}, placebo {report.get('placebo') or 'none'}; headline failure rule "
        f"{report.get('failure_rule')}" + ("" if report.get("complete", True) else "; INCOMPLETE run")
        + _retried_words(report)))
    accuracy, components, more = report.get("accuracy"), report.get("components"), T.more_sections(report)
    # What the page shows of the report, built once (estimators/report/presentation.py); below,
    # only read.
    p = presentation(report)
    # The families report.md shows, as the same tables (harness/guardeval/estimators/report/sections.py).
    def shown(sections: list[Section], *groups: str, heading: str = "") -> str:
        if not sections:    # a report.json from an earlier version lacks this family
            return ""
        return heading + "".join(map(T.section, sections)) + T.definitions(*groups)

    summary_tab = "".join([
        T.in_words(p),
        f"<h2>Run</h2>{_header(calls, report, verify)}",
        "<h2>Effects</h2><p class=\"lead\">The headline is the placebo-corrected effect (Δ − placebo); a row marked * "
        "has a headline that differs from 0 after Holm in its stated family (below the table). Intervals are "
        f"unadjusted {p.level} (1 − α).</p>", T.notes(report),
        f'<img class="plot" alt="forest plot of the effects" src="{_svg_data_uri(report, title)}">',
        T.contrasts_table(p), T.definitions("effects", "rules"),
        "<h2>Diagnostics</h2>", T.diagnostics(report), T.definitions("diagnostics"),
        shown(p.contrast_diagnostics, "contrast diagnostics"),
        shown(p.block_rates, "block rates", "stability", heading="<h2>Block rates and stability</h2>"),
        "<h2>Strata</h2>", T.strata_tables(p), T.definitions("strata"), shown(p.strata_corrected),
        shown(p.order, "order", heading="<h2>Dispatch order</h2>"),
        "<h2>Coverage</h2>", T.coverage_table(report), T.definitions("coverage"),
        shown(p.excluded, "excluded", heading="<h2>Excluded calls</h2>"),
        "<h2>Quarantine</h2>", T.quarantine_table(p), T.definitions("quarantine"),
        "<h2>Against labels</h2>" + shown(p.labels)
        + "<details><summary>every field of report.json's accuracy</summary>"
        + T.generic(accuracy, row_name="condition", fields_as_rows=True) + "</details>"
        + T.definitions("accuracy") if accuracy else "",
        shown(p.worst_case, "worst case"),
        "<h2>Component rates</h2>" + T.generic(components, row_name="condition") if components else "",
        "<h2>More in report.json</h2>" + more if more else "",
    ])
    slots = {
        "title": T.esc(title), "summary": summary, "summary_tab": summary_tab, "css": asset("report.css"),
        "js": asset("report.js"), "data": json_for_script(data),
        "embed_note": T.esc(sel.note + ("" if sel.complete else
                                        " Every call: guardeval show RUN CALL_ID; guardeval export RUN.")),
    }
    # One pass over the template: text put into a slot is never scanned for slots again.
    return _SLOT.sub(lambda m: slots[m[1]], asset("report.html"))


# report.json summarises; it does not grow with the calls (48 KiB for the demo run).
MAX_REPORT_BYTES = 64 << 20


def read_report(folder: RunFolder) -> dict[str, Any]:
    from guardeval.cohorts.limits import DUPLICATE_KEY, has_duplicate_keys

    path = folder.file(REPORT_JSON)
    if not folder.has(REPORT_JSON):
        raise InputError("no report.json: run `guardeval estimate RUN` first", path=folder.path)
    raw = folder.read_small(REPORT_JSON, MAX_REPORT_BYTES, what="a guardeval report")
    try:
        report = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if has_duplicate_keys(raw, report):   # refused as every other file is (exit 2), not as "older"
        raise InputError(DUPLICATE_KEY, path=path)
    if not isinstance(report, dict) or not isinstance(report.get("contrasts"), list):
        raise InputError("not a guardeval report (no contrasts)", path=path)
    return report


def write_report_html(run: Run | str | Path | RunFolder, report: Mapping[str, Any] | None = None, *,
                      out: str | Path | None = None, calls: RunCalls | None = None,
                      just_estimated: bool = False, allow_skipped: bool = False) -> Path:
    """Write report.html for a run (into the run folder, replacing never following what is
    there, unless `out` names a file); `just_estimated`: `report` comes from an estimate made a
    moment ago (see `verify_summary`).

    Without `report` (`guardeval report`: report.json, read from the run), the run is verified
    first (a skipped check is a failure unless `allow_skipped`) and the report.json re-checked
    against it (`recheck_report`). A run that fails either gets no report that looks like one:
    the page says why instead (no numbers of the run in it), and CheckFailed (exit 1) says the
    same. A Run or RunFolder given is read as it is (left open for its owner)."""
    from guardeval.run.run import Run

    with Run.using(run) as r:
        folder = r.folder
        target = out_file(out, folder.file(REPORT_HTML)) if out is not None else None
        if report is None:
            return _report_from_file(r, target, calls, allow_skipped)
        calls = calls or load_calls(folder)
        _same_schedule(folder, calls, report)
        verification = verify_summary(r, report, just_estimated=just_estimated, allow_skipped=allow_skipped)
        return _write(folder, target, build_html(calls, report, verification))


def _report_from_file(run: Run, target: Path | None, calls: RunCalls | None, allow_skipped: bool) -> Path:
    from guardeval.estimators.runs import recheck_report

    folder = run.folder
    verification = verify_summary(run, {}, allow_skipped=allow_skipped)
    if not verification["ok"]:
        reasons = [f"{p.get('file')}" + (f" line {p['line']}" if p.get("line") else "") + f": {p.get('message')}"
                   for p in verification["problems"]]
        more = verification["n_problems"] - len(reasons)
        reasons += [f"(and {more} more)"] if more > 0 else []
        reasons += [f"skipped: {s.get('check')}: {s.get('reason')} (--allow-skipped accepts it)"
                    for s in verification["skipped"]]
        where = _write(folder, target, _refusal_page(folder, "this run does not verify", reasons))
        raise CheckFailed(f"{folder.path}: the run does not verify, so guardeval shows no report of it: "
                          f"{reasons[0] if reasons else 'verify failed'}. `guardeval verify {folder.path}` lists "
                          f"every problem; {where} says so")
    calls = calls or load_calls(folder)
    report = read_report(folder)
    _same_schedule(folder, calls, report)
    try:
        # "verify passed" must vouch for the numbers too: a report.json is a file anyone can
        # edit, so it is checked against the run before anything of it is shown.
        recheck_report(run, report)
    except CheckFailed as exc:
        _write(folder, target, _refusal_page(folder, "its report.json is not the estimate of this run", [str(exc)]))
        raise
    return _write(folder, target, build_html(calls, report, verification))


def _same_schedule(folder: RunFolder, calls: RunCalls, report: Mapping[str, Any]) -> None:
    src = report.get("source") or {}
    if src.get("schedule_sha256") not in (None, calls.manifest.get("schedule_sha256")):
        raise InputError("report.json belongs to another run (schedule sha256 differs); re-run "
                         "`guardeval estimate`", path=folder.file(REPORT_JSON))


def _write(folder: RunFolder, target: Path | None, page: str) -> Path:
    data = page.encode("utf-8")
    if target is None:
        return folder.replace(REPORT_HTML, lambda fh: fh.write(data))
    return write_atomically(target, lambda tmp: tmp.write_bytes(data))


def _refusal_page(folder: RunFolder, why: str, reasons: list[str]) -> str:
    """In place of a report: why there is none (the run's text escaped), and what to do."""
    items = "".join(f"<li><code>{T.esc(r)}</code></li>" for r in reasons[:20])
    run = T.esc(str(folder.path))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>guardeval · no report: {T.esc(why)}</title>"
            "<style>body{font:16px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem}"
            "code{white-space:pre-wrap;word-break:break-word}</style></head><body>"
            f"<h1>No report: {T.esc(why)}</h1>"
            f"<p>guardeval shows no estimate of the run at <code>{run}</code> while it fails its checks: what a page "
            "would show could not be vouched for. What failed:</p>"
            f"<ul>{items}</ul>"
            f"<p><code>guardeval verify {run}</code> lists every problem. Once the run verifies, "
            f"<code>guardeval estimate {run}</code> makes its report again.</p>"
            f"<p>Made {datetime.now(UTC).isoformat(timespec='seconds').replace('+00:00', 'Z')}.</p></body></html>\n")
