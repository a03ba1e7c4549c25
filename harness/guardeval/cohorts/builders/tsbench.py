"""`guardeval cohort build tsbench`: import ToolSafe TS-Bench step files supplied by the user.

Every file is verified against its pinned byte count and SHA-256 (default pins:
`toolsafe-lfs-pins.txt` next to this module) before it is parsed; symbolic links are refused.
Records carry `instruction, history, current_action, env_info, score, id-interaction,
id-segment`. The score maps strictly: 0 -> label 0; 0.5 or 1 -> label 1; anything else
(missing, null, NaN, infinite, another number) refuses the file, naming the record. AgentHarm's
rows are emitted in the authors' order, `harmful_steps` then `benign_steps`, and that order
is checked. Only the `original` condition is built (TS-Bench text is free-form, so the name
transforms do not apply structurally).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypedDict

from guardeval.cohorts.builders.common import (
    ConditionSpec,
    Tokenizer,
    build_rows,
    builder_record,
    condition_records,
    representation_conditions,
    select_conditions,
    tokenizer,
)
from guardeval.cohorts.builders.pins import SourcePin, parse_pin_lines, read_json_array, verify_file
from guardeval.cohorts.model import Base, write_cohort
from guardeval.cohorts.transforms import format_placebo, identity
from guardeval.errors import InputError

# ToolSafe commit 92a9540e: the TS-Bench and TS-Guard log files' sizes and SHA-256 (package data).
DEFAULT_PINS = Path(__file__).with_name("toolsafe-lfs-pins.txt")
FIELDS = ("instruction", "history", "current_action", "env_info", "score", "id-interaction", "id-segment")
AGENTHARM_ORDER = ("TS-Bench/agentharm-traj/harmful_steps.json", "TS-Bench/agentharm-traj/benign_steps.json")


class At(TypedDict):
    """Where a record was read: InputError's `path` and `line`."""

    path: object
    line: int


class Where(At, total=False):
    field: str                      # and, where one is known, the field


def strict_label(score: Any, where: Where) -> int:
    """0 -> 0; 0.5 / 1 -> 1; refuse anything else (no silent drops)."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise InputError(f"score {score!r} is not a finite number", **where)
    if score == 0:
        return 0
    if score in (0.5, 1):
        return 1
    raise InputError(f"score {score!r} is not one of 0, 0.5, 1", **where)


def resolve(source: Path, pinned: str) -> Path:
    """A pinned path under SOURCE, given either as the repo root or the TS-Bench folder."""
    direct = source / pinned
    if direct.exists() or direct.is_symlink():
        return direct
    head, _, rest = pinned.partition("/")
    return source / rest if rest else direct


def _domain(pinned: str) -> str:
    bench = pinned.split("/")[1]  # e.g. agentdojo-traj
    if bench == "agentdojo-traj":
        return Path(pinned).stem  # one domain per suite
    return bench.removesuffix("-traj")


def _text(value: Any) -> Any:
    return value if isinstance(value, (str, list, dict)) else str(value)


def load_bases(source: Path, pins: dict[str, tuple[int, str]]) -> tuple[list[Base], list[SourcePin]]:
    wanted = [p for p in pins if p.startswith("TS-Bench/")]
    present = [p for p in wanted if resolve(source, p).exists() or resolve(source, p).is_symlink()]
    if not present:
        raise InputError("no pinned TS-Bench file found under the source folder", path=source)
    # Verify every present file before parsing any of them.
    provenance = []
    for p in present:
        entry = verify_file(resolve(source, p), *pins[p])
        entry["path"] = p
        provenance.append(entry)
    # AgentHarm: harmful_steps strictly before benign_steps (the reference labels' order).
    order = [p for p in present if p not in AGENTHARM_ORDER] + [p for p in AGENTHARM_ORDER if p in present]
    bases: list[Base] = []
    seen: set[str] = set()
    for p in order:
        path = resolve(source, p)
        domain = _domain(p)
        for idx, rec in enumerate(read_json_array(path)):
            where: At = {"path": path, "line": idx + 1}
            if not isinstance(rec, dict):
                raise InputError("record is not an object", **where)
            for f in FIELDS:
                if f not in rec:
                    raise InputError("missing required field", field=f, **where)
            label = strict_label(rec["score"], {**where, "field": "score"})
            action = rec["current_action"]
            tool = action.get("name") if isinstance(action, dict) else None
            interaction = f"{domain}/{rec['id-interaction']}"
            base_id = f"{Path(p).stem}/{rec['id-interaction']}/{rec['id-segment']}"
            if base_id in seen:
                raise InputError(f"duplicate id-interaction/id-segment '{base_id}'", field="id-segment", **where)
            seen.add(base_id)
            bases.append({
                "base_id": base_id, "interaction_id": interaction, "domain": domain,
                "label": label, "label_score": float(rec["score"]),
                "tool": str(tool) if tool else "unknown",
                "user_request": str(rec["instruction"]), "history": _text(rec["history"]),
                "current_action": _text(action), "tool_descriptions": _text(rec["env_info"]),
            })
    check_agentharm_order(bases)
    return bases, provenance


def check_agentharm_order(bases: list[Base]) -> None:
    """Every harmful_steps row precedes every benign_steps row."""
    kinds = [b["base_id"].split("/", 1)[0] for b in bases if b["domain"] == "agentharm"]
    if "benign_steps" in kinds and "harmful_steps" in kinds[kinds.index("benign_steps"):]:
        raise InputError("agentharm rows must be harmful_steps then benign_steps", field="order")


def agentharm_scores(source: Path, pins: dict[str, tuple[int, str]], pins_path: Path) -> list[float]:
    """Ordinal scores of harmful_steps then benign_steps (verified first), for label alignment."""
    missing = [p for p in AGENTHARM_ORDER if p not in pins]
    if missing:
        raise InputError(f"no pin for {', '.join(missing)} (needed to check the AgentHarm labels)", path=pins_path)
    out: list[float] = []
    for p in AGENTHARM_ORDER:
        path = resolve(source, p)
        verify_file(path, *pins[p])
        for idx, rec in enumerate(read_json_array(path)):
            if not isinstance(rec, dict) or "score" not in rec:
                raise InputError("missing required field", path=path, line=idx + 1, field="score")
            strict_label(rec["score"], {"path": path, "line": idx + 1, "field": "score"})
            out.append(float(rec["score"]))
    return out


def conditions(tok: Tokenizer | None = None) -> list[ConditionSpec]:
    """The baseline (the default), the formatting placebo, and the argument and schema conditions
    (TS-Bench rows are text where its files give text: those conditions change only what is JSON)."""
    return [ConditionSpec("original", "baseline", identity()), ConditionSpec("format_placebo", "placebo", format_placebo()),
            *representation_conditions(tok)]


def build_tsbench(source: str | Path, out: str | Path, pins_file: str | Path | None = None, *,
                  condition_names: str | None = None,
                  tokenizer_file: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    src = Path(source)
    if src.is_symlink() or not src.is_dir():
        raise InputError("source folder not found (symbolic links are refused)", path=src)
    pins = parse_pin_lines(Path(pins_file) if pins_file else DEFAULT_PINS)
    bases, provenance = load_bases(src, pins)
    tok = tokenizer(tokenizer_file)
    specs = select_conditions(conditions(tok), condition_names)
    if not condition_names:
        specs = specs[:1]   # the baseline alone, as before --conditions
    rows = build_rows(bases, specs)
    path = write_cohort(out, name="tsbench", version="1", description="ToolSafe TS-Bench steps (user-supplied files)",
                        conditions=condition_records(specs), rows=rows, sources=provenance,
                        builder={"command": "cohort build tsbench", **builder_record(specs, tok)})
    return path, {"bases": len(bases), "files": [p["path"] for p in provenance]}
