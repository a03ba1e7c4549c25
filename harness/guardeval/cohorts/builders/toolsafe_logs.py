"""`audit import-toolsafe`: TS-Guard's published predictions as rows for `audit units`.

Reads `guardian_test_logs/<bench>/TS-Guard/{preds,labels,meta_data}.json` (each verified
against its pin before parsing), keeps every row in file order, and writes one JSON line per
row: `bench, index` (position in the output), `source_index` (position in the bench's
files), `interaction_id, domain, label_score, label, pred_score, pred`. Scores map
strictly (0 -> 0; 0.5/1 -> 1); a `null` prediction is kept as `pred: null` and counted, never
dropped. preds/labels/meta_data must be arrays of one length. The interaction id is read from
each meta_data record (`id-interaction`, `id_interaction` or `interaction_id`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from guardeval.canon import dumps_line
from guardeval.cohorts.builders.pins import parse_pin_lines, read_json_array, verify_file
from guardeval.cohorts.builders.tsbench import DEFAULT_PINS, Where, agentharm_scores, strict_label
from guardeval.errors import InputError

_INTERACTION_KEYS = ("id-interaction", "id_interaction", "interaction_id")


def _score(value: Any, where: Where, allow_null: bool) -> tuple[float | None, int | None]:
    if value is None and allow_null:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{value!r} is not a finite score", **where)
    return float(value), strict_label(value, where)


def import_toolsafe(logs: str | Path, out: str | Path, pins_file: str | Path | None = None,
                    tsbench: str | Path | None = None) -> dict[str, Any]:
    """Write the rows file; with `tsbench` (the TS-Bench folder), AgentHarm labels are checked
    against harmful_steps then benign_steps scores, row by row (all 0/0.5/1 values)."""
    root = Path(logs)
    if root.is_symlink() or not root.is_dir():
        raise InputError("logs folder not found (symbolic links are refused)", path=root)
    out_path = Path(out)
    if out_path.is_dir():
        raise InputError("is a folder; --out names the file to write", path=out_path)
    pins_path = Path(pins_file) if pins_file else DEFAULT_PINS
    pins = parse_pin_lines(pins_path)
    benches: dict[str, dict[str, str]] = {}
    for pinned in pins:
        parts = pinned.split("/")
        if parts[0] != "guardian_test_logs" or parts[-1] not in ("preds.json", "labels.json", "meta_data.json"):
            continue
        rel = "/".join(parts[1:])  # <bench...>/TS-Guard/<file>
        bench = "/".join(parts[1:-2])
        for cand in (root / pinned, root / rel):
            if cand.exists() or cand.is_symlink():
                benches.setdefault(bench, {})[parts[-1]] = str(cand) + "\0" + pinned
                break
    complete = {b: f for b, f in benches.items() if len(f) == 3}
    if not complete:
        raise InputError("no complete TS-Guard log set (preds, labels, meta_data) found", path=root)
    # Verify all files first, then parse.
    for files in complete.values():
        for entry in files.values():
            path, pinned = entry.split("\0")
            verify_file(Path(path), *pins[pinned])
    rows: list[bytes] = []
    summary: dict[str, Any] = {}
    for bench in sorted(complete):
        paths = {k: Path(v.split("\0")[0]) for k, v in complete[bench].items()}
        preds, labels, meta = (read_json_array(paths[k]) for k in ("preds.json", "labels.json", "meta_data.json"))
        if not len(preds) == len(labels) == len(meta):
            raise InputError(f"lengths differ: preds {len(preds)}, labels {len(labels)}, meta_data {len(meta)}",
                             path=paths["preds.json"].parent)
        if tsbench is not None and bench == "agentharm":
            ref = agentharm_scores(Path(tsbench), pins, pins_path)
            got = [float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x for x in labels]
            if got != ref:
                first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
                raise InputError(f"labels do not follow harmful_steps then benign_steps (first mismatch at row "
                                 f"{first + 1}; {len(got)} labels vs {len(ref)} TS-Bench rows)",
                                 path=paths["labels.json"], line=first + 1)
        nulls = 0
        for i, (p, lab, m) in enumerate(zip(preds, labels, meta)):
            label_score, label = _score(lab, {"path": paths["labels.json"], "line": i + 1}, allow_null=False)
            pred_score, pred = _score(p, {"path": paths["preds.json"], "line": i + 1}, allow_null=True)
            nulls += pred is None
            if not isinstance(m, dict):
                raise InputError("record is not an object", path=paths["meta_data.json"], line=i + 1)
            key = next((k for k in _INTERACTION_KEYS if k in m), None)
            if key is None:
                raise InputError("no interaction id", path=paths["meta_data.json"], line=i + 1,
                                 field="/".join(_INTERACTION_KEYS))
            rows.append(dumps_line({"bench": bench, "index": len(rows), "source_index": i,
                                    "interaction_id": f"{bench}/{m[key]}", "domain": str(m.get("domain", bench)),
                                    "label_score": label_score, "label": label, "pred_score": pred_score, "pred": pred}))
        summary[bench] = {"rows": len(preds), "null_predictions": nulls}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(b"".join(rows))
    return {"out": str(out_path), "benches": summary}
