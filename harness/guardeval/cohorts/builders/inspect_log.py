"""`guardeval cohort build inspect LOG…`: guard steps from the message histories of Inspect
(inspect_ai) agent logs (docs/inspect.md).

Every assistant tool call of a sample (or the last one, or those to named tools) is a base:
its history is the conversation before the call (the first user message is the user request;
system messages are the agent's instructions and stay out, as in every other builder), its
current action the call, its tool descriptions the tools of the model call that produced it
(read from the sample's model events). interaction = task/sample/epoch, domain = the task (or
a metadata field), label from a named score where the log has one. Logs are read through
inspect_ai's log API (`guardeval.inspect_logs`); the log's identity and SHA-256 are the cohort's
sources. A sample whose history is malformed is refused naming it, or, with
`skip_bad_samples`, left out and counted.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from guardeval.cohorts.builders.common import (
    ConditionSpec,
    Tokenizer,
    build_rows,
    builder_record,
    condition_records,
    marker_and_alias_conditions,
    select_conditions,
    tokenizer,
)
from guardeval.cohorts.model import Base, write_cohort
from guardeval.cohorts.transforms.base import deep_copy
from guardeval.cohorts.transforms.names import family_table
from guardeval.errors import InputError
from guardeval.inspect_logs import LogFile, read_logs, sample_name, samples_of, text_of

UNSAFE_STEPS = ("last", "all")


class BadSample(Exception):
    """A sample the builder cannot turn into steps (its message history is malformed)."""


@dataclass(frozen=True)
class Labelling:
    """How a named score labels a sample's steps: a score value in `safe` labels every step 0;
    one in `unsafe` labels the last step (or `all` of them) 1, the others unknown (null); any
    other value is refused (strict, as every builder maps labels)."""

    score: str
    unsafe: tuple[str, ...] = ("1",)
    safe: tuple[str, ...] = ("0",)
    unsafe_steps: str = "last"


@dataclass
class Selection:
    """Which tool calls become bases: every one, the last of each sample, or calls to these names."""

    mode: str = "all"                     # all | last | names
    names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Selection:
        if not text or text == "all":
            return cls("all")
        if text == "last":
            return cls("last")
        names = tuple(n.strip() for n in text.split(","))
        if not all(names):
            raise InputError(f"expected all, last or a comma-separated list of tool names, got {text!r}",
                             field="--tool-calls")
        return cls("names", names)


@dataclass
class Stats:
    samples: int = 0
    tool_calls: int = 0
    bases: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    without_tool_descriptions: int = 0


def _value_text(v: Any) -> str | None:
    """A score value as the text `--unsafe-values` / `--safe-values` name: 1 / 0 for booleans
    and integral numbers, a string as it is; anything else (a list, a dict, NaN) has none."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)) and math.isfinite(v):
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    if isinstance(v, str):
        return v
    return None


def _sample_label(sample: Any, lab: Labelling | None) -> tuple[int | None, float | None]:
    """(label, label_score) of the sample under `lab`; BadSample for a value it does not map."""
    if lab is None:
        return None, None
    scores = sample.scores or {}
    if lab.score not in scores:
        raise BadSample(f"has no score {lab.score!r} (its scores: {', '.join(sorted(scores)) or 'none'})")
    value = scores[lab.score].value
    text = _value_text(value)
    if text in lab.unsafe:
        label = 1
    elif text in lab.safe:
        label = 0
    else:
        raise BadSample(f"score {lab.score!r} is {value!r}, neither an unsafe value ({', '.join(lab.unsafe)}) nor a "
                        f"safe one ({', '.join(lab.safe)})")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return label, float(value) if numeric else float(label)


def _arguments(call: Any) -> Any:
    args = call.arguments
    try:
        return orjson.loads(orjson.dumps(args))   # plain JSON, as the cohort stores it
    except (TypeError, orjson.JSONEncodeError):
        raise BadSample(f"tool call {call.id!r}: arguments are not JSON") from None


def _tools_by_message(sample: Any) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The tools each model call offered, keyed by the id of the message it produced and by the
    ids of the tool calls in it (messages are matched by either)."""
    by_msg: dict[str, list[dict[str, Any]]] = {}
    by_call: dict[str, list[dict[str, Any]]] = {}
    for ev in sample.events or ():
        if getattr(ev, "event", None) != "model" or ev.output is None:
            continue
        tools = [{"name": t.name, "description": t.description,
                  "parameters": t.parameters.model_dump(exclude_none=True)} for t in ev.tools or ()]
        msg = ev.output.message if ev.output.choices else None
        if msg is None:
            continue
        if msg.id:
            by_msg[msg.id] = tools
        for tc in msg.tool_calls or ():
            if tc.id:
                by_call[tc.id] = tools
    return by_msg, by_call


@dataclass
class _Step:
    ordinal: int                 # among all tool calls of the sample, 1-based
    history: list[dict[str, Any]]
    action: dict[str, Any]
    tools: list[dict[str, Any]] | None


def sample_steps(sample: Any) -> tuple[str, list[_Step]]:
    """(user request, every tool call as a step) of one sample; BadSample when its history is malformed."""
    messages = sample.messages
    if not isinstance(messages, list) or not messages:
        raise BadSample("has no message history")
    users = [i for i, m in enumerate(messages) if getattr(m, "role", None) == "user"]
    if not users:
        raise BadSample("has no user message (no request to judge the calls against)")
    first_user = users[0]
    request = text_of(messages[first_user].content)
    by_msg, by_call = _tools_by_message(sample)
    history: list[dict[str, Any]] = []
    steps: list[_Step] = []
    open_calls: dict[str, str] = {}          # tool call id -> function, awaiting a tool message
    seen_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = getattr(m, "role", None)
        if role == "system" or i == first_user:
            continue
        if role == "user":
            history.append({"role": "user", "content": text_of(m.content)})
        elif role == "assistant":
            text = text_of(m.content) or None
            issued: list[dict[str, Any]] = []
            for tc in m.tool_calls or ():
                if not isinstance(tc.function, str) or not tc.function:
                    raise BadSample(f"message {i + 1}: a tool call without a function name")
                if tc.id:
                    if tc.id in seen_ids:
                        raise BadSample(f"message {i + 1}: tool call id {tc.id!r} is used twice")
                    seen_ids.add(tc.id)
                    open_calls[tc.id] = tc.function
                action = {"name": tc.function, "arguments": _arguments(tc)}
                # A parallel call sees its siblings issued before it (without their results).
                before = [{"role": "assistant", "content": text, "tool_calls": deep_copy(issued)}] if issued else []
                tools = by_msg.get(m.id or "") or by_call.get(tc.id or "")
                steps.append(_Step(len(steps) + 1, deep_copy(history) + before, action, tools))
                issued.append(action)
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if issued:
                entry["tool_calls"] = issued
            history.append(entry)
        elif role == "tool":
            call_id = m.tool_call_id
            if call_id is not None and call_id not in open_calls:
                raise BadSample(f"message {i + 1}: a tool result for call {call_id!r}, which no earlier assistant "
                                "message issued")
            name = m.function or (open_calls.get(call_id) if call_id else None)
            if not name:
                raise BadSample(f"message {i + 1}: a tool result that names no tool")
            content = text_of(m.content)
            if m.error is not None:
                content = f"{content}\n[tool error {m.error.type}: {m.error.message}]" if content else \
                    f"[tool error {m.error.type}: {m.error.message}]"
            history.append({"role": "tool", "name": name, "content": content})
        else:
            raise BadSample(f"message {i + 1} has role {role!r}")
    return request, steps


def _select(steps: list[_Step], sel: Selection) -> list[_Step]:
    if sel.mode == "last":
        return steps[-1:]
    if sel.mode == "names":
        return [s for s in steps if s.action["name"] in sel.names]
    return steps


def _domain(lf: LogFile, sample: Any, domain_field: str | None) -> str:
    if domain_field is None:
        return str(lf.log.eval.task)
    meta = sample.metadata or {}
    if domain_field not in meta:
        raise BadSample(f"has no metadata field {domain_field!r} (--domain-field)")
    value = meta[domain_field]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise BadSample(f"metadata field {domain_field!r} is {value!r}, not a non-empty string or integer")
    return str(value)


def _in_dataset_order(lf: LogFile) -> list[Any]:
    """The samples in dataset order, then epoch (a log holds them in the order they finished)."""
    ids = lf.log.eval.dataset.sample_ids or []
    pos = {sid: n for n, sid in enumerate(ids)}
    return sorted(samples_of(lf), key=lambda s: (pos.get(s.id, len(pos)), str(s.id), s.epoch))


def log_bases(lf: LogFile, *, prefix: str, selection: Selection, domain_field: str | None,
              labelling: Labelling | None, skip_bad_samples: bool, stats: Stats) -> list[Base]:
    """The bases of one log, in sample order (as the log holds them), then call order."""
    bases: list[Base] = []
    calls_in_log = 0
    for sample in _in_dataset_order(lf):
        stats.samples += 1
        try:
            request, steps = sample_steps(sample)
            chosen = _select(steps, selection)
            domain = _domain(lf, sample, domain_field) if chosen else ""
            label, label_score = _sample_label(sample, labelling) if chosen else (None, None)
        except BadSample as exc:
            if not skip_bad_samples:
                raise InputError(f"{sample_name(sample)} {exc} (--skip-bad-samples leaves such samples out, "
                                 "counted)", path=lf.path) from None
            stats.skipped.append({"log": lf.path.name, "sample": str(sample.id), "epoch": str(sample.epoch),
                                  "reason": str(exc)})
            continue
        calls_in_log += len(steps)
        stats.tool_calls += len(steps)
        interaction = f"{prefix}/{sample.id}/e{sample.epoch}"
        for n, step in enumerate(chosen):
            step_label: int | None = label
            if label == 1 and labelling is not None and labelling.unsafe_steps == "last" and n != len(chosen) - 1:
                step_label = None     # an unsafe sample says the trajectory did harm, not which earlier call
            if step.tools is None:
                stats.without_tool_descriptions += 1
            bases.append({
                "base_id": f"{interaction}/c{step.ordinal}", "interaction_id": interaction, "domain": domain,
                "label": step_label, "label_score": label_score if step_label is not None else None,
                "tool": step.action["name"], "user_request": request, "history": step.history,
                "current_action": step.action, "tool_descriptions": step.tools or [],
            })
    if calls_in_log == 0:
        raise InputError("holds no tool calls: no assistant message of any sample calls a tool", path=lf.path)
    if not bases:
        want = "a last call" if selection.mode == "last" else f"calls to {', '.join(selection.names)}"
        raise InputError(f"holds no tool calls that --tool-calls selects ({want})", path=lf.path)
    return bases


def _prefixes(logs: list[LogFile]) -> list[str]:
    """The task name, or task@eval_id for a task that more than one log holds (ids stay distinct)."""
    tasks = Counter(str(lf.log.eval.task) for lf in logs)
    return [str(lf.log.eval.task) if tasks[str(lf.log.eval.task)] == 1 else f"{lf.log.eval.task}@{lf.log.eval.eval_id}"
            for lf in logs]


def tool_names(bases: list[Base]) -> list[str]:
    """Every tool name the cohort's guards see (listed or called), sorted."""
    names = {b["tool"] for b in bases}
    for b in bases:
        names.update(t["name"] for t in b["tool_descriptions"])
        for m in b["history"]:
            names.update(c["name"] for c in m.get("tool_calls", ()))
            if m.get("role") == "tool":
                names.add(m["name"])
    return sorted(names)


def conditions(names: list[str], tok: Tokenizer | None = None) -> list[ConditionSpec]:
    """original, format_placebo, marker_rewrite, and the tool names renamed to other ordinary words
    (`semantic_neutral`; no hand-written table fits an arbitrary agent's tools), alone and with
    the marker rewrite."""
    return marker_and_alias_conditions(family_table("semantic_neutral", names), tok)


def build_inspect(logs: list[str | Path], out: str | Path, *, tool_calls: str | None = None,
                  condition_names: str | None = None, domain_field: str | None = None,
                  labelling: Labelling | None = None, skip_bad_samples: bool = False,
                  tokenizer_file: str | Path | None = None,
                  max_unpacked: int | None = None) -> tuple[Path, dict[str, Any]]:
    selection = Selection.parse(tool_calls)
    tok = tokenizer(tokenizer_file)
    files = read_logs(logs, max_unpacked=max_unpacked)
    stats = Stats()
    bases: list[Base] = []
    for lf, prefix in zip(files, _prefixes(files)):
        bases.extend(log_bases(lf, prefix=prefix, selection=selection, domain_field=domain_field,
                               labelling=labelling, skip_bad_samples=skip_bad_samples, stats=stats))
    stats.bases = len(bases)
    specs = select_conditions(conditions(tool_names(bases), tok), condition_names)
    rows = build_rows(bases, specs)
    sources = [lf.identity() for lf in files]
    tasks = sorted({str(s["task"]) for s in sources})
    path = write_cohort(
        out, name="inspect", version="1",
        description=f"tool calls from Inspect log(s) of {', '.join(tasks)}",
        conditions=condition_records(specs), rows=rows, sources=sources,
        builder={"command": "cohort build inspect", "tool_calls": tool_calls or "all", "domain_field": domain_field,
                 "label": None if labelling is None else {"score": labelling.score, "unsafe": list(labelling.unsafe),
                                                          "safe": list(labelling.safe),
                                                          "unsafe_steps": labelling.unsafe_steps},
                 "skip_bad_samples": skip_bad_samples, "samples_skipped": len(stats.skipped),
                 **builder_record(specs, tok)})
    labels = Counter("null" if b["label"] is None else str(b["label"]) for b in bases)
    return path, {"logs": [s["path"] for s in sources], "samples": stats.samples, "tool_calls": stats.tool_calls,
                  "bases": stats.bases, "by_label": dict(sorted(labels.items())),
                  "steps_without_tool_descriptions": stats.without_tool_descriptions,
                  "samples_skipped": len(stats.skipped), "skipped": stats.skipped}
