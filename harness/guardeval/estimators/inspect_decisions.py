"""Decisions from the log of a guard run as an Inspect task -> the decision table the estimators
read (docs/estimators.md, Input table; docs/inspect.md).

A sample is one call: its metadata names `base_id, interaction_id, domain, condition` (and, when
the task was written by `guardeval cohort export`, `role, label, tool` and the hashes that tie
it to the cohort and the prompt); its epoch is the repetition (epoch 1 = repetition 0). The
decision is the sample's answer under the prompt's strict parser (named in the metadata, or
given), exactly as a run derives it (`guardeval.run.inspect_verdict`), or a named score's 0/1 value
for a task guardeval did not write. When the exported scorer's score is in the log it must
agree with the answer, or the log is refused. An epoch the log lacks for a sample it holds is a
`missing` call; a log cut short (status other than success, fewer samples than its dataset
times its epochs) is incomplete, as a run would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.backends.parsers import PARSERS, get_parser
from guardeval.cohorts.model import ROLES
from guardeval.errors import InputError
from guardeval.estimators.table import ValidatedRows, validate_rows
from guardeval.inspect_logs import LogFile, read_logs, sample_name, samples_of, stimulus_sha256, text_of
from guardeval.run.inspect_verdict import Unanswered, Verdict, verdict

if TYPE_CHECKING:
    from guardeval.estimators.compare.compare_types import InputSource

REQUIRED = ("base_id", "interaction_id", "domain", "condition")
SCORER = "guardeval_verdict"      # the exported task's scorer (guardeval.run.inspect_task)


def _no_source() -> InputSource:
    return {}


@dataclass
class InspectTable:
    """What `estimate` and `compare` need of one or more logs of one guard."""

    rows: ValidatedRows
    roles: dict[str, str] | None
    baseline: str | None
    placebo: str | None
    complete: bool
    n_scheduled: int
    source: InputSource = field(default_factory=_no_source)
    model: str | None = None
    table_rows: list[dict[str, Any]] = field(default_factory=list)   # as a JSONL table writes them

    def table_bytes(self) -> bytes:
        """The rows as a decision table (`estimate --table` reads it back to the same estimate)."""
        import orjson

        return b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in self.table_rows)


def _meta_str(meta: Mapping[str, object], key: str, where: str, path: Path) -> str:
    if key not in meta:
        raise InputError(f"{where}: its metadata has no field '{key}' (a guard task's samples must name "
                         f"{', '.join(REQUIRED)}; `guardeval cohort export --format inspect` writes them)",
                         path=path, field=f"metadata.{key}")
    value = meta[key]
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: must be a non-empty string, got {value!r:.80}", path=path, field=f"metadata.{key}")
    return value


def _seen_sha256(sample: Any) -> str | None:
    """`stimulus_sha256` of what the sample's first model call was sent (None: no model call logged)."""
    for ev in sample.events or ():
        if getattr(ev, "event", None) == "model":
            return stimulus_sha256({"role": m.role, "content": text_of(m.content)} for m in ev.input or ())
    return None


def _cache_read(sample: Any) -> bool:
    return any(getattr(ev, "event", None) == "model" and ev.cache == "read" for ev in sample.events or ())


def _from_score(sample: Any, name: str, where: str, path: Path) -> Verdict:
    failed: Unanswered = {"decision": None, "score": None, "components": {}, "quarantine_reason": None}
    if sample.error is not None:
        return {**failed, "status": "provider_error", "detail": str(sample.error.message)[:300]}
    scores = sample.scores or {}
    if name not in scores:
        raise InputError(f"{where}: has no score {name!r} (its scores: {', '.join(sorted(scores)) or 'none'})",
                         path=path, field=f"scores.{name}")
    value = scores[name].value
    if value == "N":
        return {**failed, "status": "unparseable", "detail": f"score {name} is N (no answer)"}
    if isinstance(value, bool):
        return {**failed, "status": "ok", "decision": int(value)}
    if (isinstance(value, (int, float)) and value in (0, 1)) or value in ("0", "1"):
        return {**failed, "status": "ok", "decision": int(float(value))}
    raise InputError(f"{where}: score {name!r} is {value!r:.80}, not a decision (1 block, 0 allow, N no answer)",
                     path=path, field=f"scores.{name}")


def _from_answer(sample: Any, meta: dict[str, Any], parser: str | None, where: str, path: Path) -> Verdict:
    name = parser or meta.get("guardeval_parser")
    if name is None:
        raise InputError(f"{where}: its metadata names no parser (guardeval_parser); pass --inspect-parser NAME "
                         "or --inspect-score NAME", path=path, field="metadata.guardeval_parser")
    if name not in PARSERS:
        raise InputError(f"{where}: unknown parser {name!r} (known: {', '.join(PARSERS)})", path=path,
                         field="metadata.guardeval_parser")
    expected = meta.get("guardeval_stimulus_sha256")
    v = verdict(sample.output, get_parser(name), sample_error=sample.error, limit=sample.limit,
                seen_sha256=_seen_sha256(sample), expected_sha256=expected if isinstance(expected, str) else None,
                cache_read=_cache_read(sample))
    ours = (sample.scores or {}).get(SCORER)
    if ours is not None and parser is None:
        said = (ours.metadata or {}).get("status"), (ours.metadata or {}).get("decision")
        if said != (v["status"], v["decision"]):
            raise InputError(f"{where}: score {SCORER} says status {said[0]!r}, decision {said[1]!r}, but the answer in "
                             f"the log gives {v['status']!r}, {v['decision']!r} (the log was edited, or scored by "
                             "another parser)", path=path, field=f"scores.{SCORER}")
    return v


def _label(meta: Mapping[str, object], where: str, path: Path) -> Any:
    label = meta.get("label")
    if label is not None and (isinstance(label, bool) or label not in (0, 1)):
        raise InputError(f"{where}: must be 1, 0 or null, got {label!r:.80}", path=path, field="metadata.label")
    return label


def _log_rows(lf: LogFile, parser: str | None, score: str | None, roles: dict[str, str],
              where_of: list[str]) -> tuple[list[dict[str, Any]], int, bool]:
    """(rows, calls scheduled, complete) of one log; `roles` and `where_of` are filled as rows come."""
    ev = lf.log.eval
    epochs = int(ev.config.epochs or 1)
    rows: list[dict[str, Any]] = []
    seen: dict[Any, tuple[dict[str, Any], set[int]]] = {}
    for sample in samples_of(lf):
        where = sample_name(sample)
        meta = sample.metadata or {}
        keys = {k: _meta_str(meta, k, where, lf.path) for k in REQUIRED}
        role = meta.get("role")
        if role is not None:
            if role not in ROLES:
                raise InputError(f"{where}: role {role!r:.40} is not one of {', '.join(ROLES)}", path=lf.path,
                                 field="metadata.role")
            if roles.setdefault(keys["condition"], role) != role:
                raise InputError(f"{where}: condition {keys['condition']!r} has role {roles[keys['condition']]!r} on "
                                 "an earlier sample", path=lf.path, field="metadata.role")
        tool = meta.get("tool")
        v = _from_score(sample, score, where, lf.path) if score else _from_answer(sample, meta, parser, where, lf.path)
        started = sample.started_at
        row = {**keys, "repetition": int(sample.epoch) - 1, "decision": v["decision"], "status": v["status"],
               "label": _label(meta, where, lf.path), "tool": tool if isinstance(tool, str) and tool else None,
               "score": v["score"], "components": v["components"] or None,
               "quarantine_reason": v["quarantine_reason"], "retry_round": 0,
               "started": started if isinstance(started, str) else (started.isoformat() if started else None)}
        rows.append(row)
        where_of.append(where)
        template, epochs_seen = seen.setdefault(sample.id, (row, set()))
        epochs_seen.add(int(sample.epoch))
    # An epoch the log lacks for a sample it holds: a scheduled call without a decision.
    for sid, (template, epochs_seen) in seen.items():
        for e in range(1, epochs + 1):
            if e not in epochs_seen:
                rows.append({**template, "repetition": e - 1, "decision": None, "status": "missing", "score": None,
                             "components": None, "quarantine_reason": None, "started": None})
                where_of.append(f"sample {sid!r} epoch {e} (not in the log)")
    n_dataset = ev.dataset.samples if isinstance(ev.dataset.samples, int) else len(seen)
    scheduled = max(n_dataset, len(seen)) * epochs
    complete = lf.log.status == "success" and len(rows) == scheduled and all(r["status"] != "missing" for r in rows)
    return rows, scheduled, complete


def decision_table(paths: list[str | Path], *, parser: str | None = None, score: str | None = None,
                   max_unpacked: int | None = None) -> InspectTable:
    """The decision table of the guard run the logs hold (one or more logs of one guard: their
    calls together, each (base, condition, repetition) once)."""
    if parser is not None and score is not None:
        raise InputError("give --inspect-parser or --inspect-score, not both", field="--inspect-score")
    files = read_logs(paths, max_unpacked=max_unpacked)
    roles: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    where_of: list[str] = []
    paths_of: list[Path] = []
    scheduled, complete = 0, True
    for lf in files:
        before = len(rows)
        r, s, c = _log_rows(lf, parser, score, roles, where_of)
        rows.extend(r)
        paths_of.extend([lf.path] * (len(rows) - before))
        scheduled += s
        complete = complete and c
    try:
        validated = validate_rows(rows, path=None, lines=range(1, len(rows) + 1))
    except InputError as exc:
        n = (exc.line or 1) - 1
        fld = {"repetition": "epoch", None: None}.get(exc.field, f"metadata.{exc.field}")
        raise InputError(f"{where_of[n]}: {exc.message}", path=paths_of[n], field=fld) from None
    baselines = [c for c, r in roles.items() if r == "baseline"]
    placebos = [c for c, r in roles.items() if r == "placebo"]
    models = sorted({str(lf.log.eval.model) for lf in files})
    return InspectTable(rows=validated, roles=roles or None, baseline=baselines[0] if len(baselines) == 1 else None,
                        placebo=placebos[0] if placebos else None, complete=complete, n_scheduled=scheduled,
                        source={"inspect_logs": [lf.identity() for lf in files]}, model=", ".join(models),
                        table_rows=rows)
