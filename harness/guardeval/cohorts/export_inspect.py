"""`guardeval cohort export COHORT --format inspect OUT`: a cohort as an Inspect task (docs/inspect.md).

OUT gets `dataset.jsonl` (one sample per instance, in the cohort's order: the messages the guard
prompt renders for it, exactly as `launch` would send them, and metadata naming base_id,
interaction_id, domain, condition, role, label, tool and the hashes that tie the sample to the
cohort and the prompt), `task.json` (the cohort, prompt and dataset pins, epochs, generation
settings) and `task.py`, which runs `guardeval.run.inspect_task.guard_task` on the folder. Writing it
needs no inspect_ai; running it does (and guardeval, for the strict parser).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from guardeval.backends.parsers import PARSERS
from guardeval.backends.prompts import load_prompt
from guardeval.canon import sha256_hex
from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.cohorts.model import load_cohort
from guardeval.errors import InputError
from guardeval.inspect_logs import stimulus_sha256

FORMAT = "guardeval-inspect-task"
TASK_JSON, DATASET, TASK_PY = "task.json", "dataset.jsonl", "task.py"
# The whole of an exported task.py: the task is guardeval's code (harness/guardeval/run/inspect_task.py), run
# on this folder, so what Inspect runs is what guardeval tests.
TASK_PY_TEXT = '''"""An Inspect task written by `guardeval cohort export --format inspect` (guardeval docs/inspect.md).

Run it from this folder (Inspect's cache stays off: the task passes cache=False itself):
    inspect eval task.py --model PROVIDER/MODEL
then estimate the log with: guardeval estimate --inspect-log LOG
"""

from pathlib import Path

from inspect_ai import task

from guardeval.run.inspect_task import guard_task


@task
def guardeval_guard():
    return guard_task(Path(__file__).parent)
'''


def _out_dir(out: str | Path) -> Path:
    """OUT: a new folder, or an empty one (an export never overwrites files it did not write)."""
    root = Path(out)
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise InputError("is not a folder; OUT names the folder to write the task into", path=root)
    if root.is_dir() and any(root.iterdir()):
        raise InputError("is not empty; export into a new or empty folder", path=root)
    # Missing parents (`tasks/` of `tasks/my-agent`) are made once the export holds; one that
    # exists as something other than a folder is refused here, before any work.
    parent = next((p for p in root.parents if p.exists() or p.is_symlink()), None)
    if parent is not None and not parent.is_dir():
        raise InputError("is not a folder", path=parent)
    return root


def export_inspect(cohort_dir: str | Path, out: str | Path, *, prompt_id: str = "guardeval-json-v1", epochs: int = 3,
                   temperature: float = 0.0, max_tokens: int = 256,
                   limits: RowLimits = DEFAULT_ROW_LIMITS) -> tuple[Path, dict[str, Any]]:
    root = _out_dir(out)
    if epochs < 1 or max_tokens < 1:
        raise InputError("epochs and max tokens must be at least 1", field="--reps")
    prompt = load_prompt(prompt_id)
    if prompt.parser not in PARSERS:
        raise InputError(f"prompt {prompt_id} names parser {prompt.parser!r}, which guardeval does not have",
                         field="prompt")
    cohort = load_cohort(cohort_dir, limits=limits)
    baseline = cohort.baseline()
    tools = {r["base_id"]: r["tool"] for r in cohort.iter_instances() if r["condition"] == baseline}
    lines: list[bytes] = []
    for n, row in enumerate(cohort.iter_instances(), start=1):
        messages = prompt.render_messages(row)
        meta = {"base_id": row["base_id"], "interaction_id": row["interaction_id"], "domain": row["domain"],
                "condition": row["condition"], "role": row["role"], "label": row["label"],
                "tool": tools[row["base_id"]], "guardeval_instance_sha256": row["instance_sha256"],
                "guardeval_stimulus_sha256": stimulus_sha256(messages), "guardeval_parser": prompt.parser,
                "guardeval_prompt": prompt.id, "guardeval_prompt_sha256": prompt.sha256,
                "guardeval_cohort_sha256": cohort.sha256}
        lines.append(orjson.dumps({"id": n, "input": messages, "target": "", "metadata": meta},
                                  option=orjson.OPT_APPEND_NEWLINE))
    data = b"".join(lines)
    settings: dict[str, Any] = {
        "format": FORMAT, "version": 1,
        "cohort": {"name": cohort.name, "sha256": cohort.sha256, "instances_sha256": cohort.meta["instances_sha256"],
                   "conditions": [{"name": c.name, "role": c.role} for c in cohort.conditions]},
        "prompt": {"id": prompt.id, "sha256": prompt.sha256, "parser": prompt.parser},
        "dataset": {"file": DATASET, "sha256": sha256_hex(data), "samples": len(lines)},
        "epochs": epochs, "generate": {"temperature": temperature, "max_tokens": max_tokens},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / DATASET).write_bytes(data)
    (root / TASK_JSON).write_text(json.dumps(settings, indent=2) + "\n", "utf-8")
    (root / TASK_PY).write_text(TASK_PY_TEXT, "utf-8")
    cohort.close()
    return root, {"samples": len(lines), "epochs": epochs, "calls": len(lines) * epochs, "prompt": prompt.id,
                  "dataset_sha256": settings["dataset"]["sha256"]}
