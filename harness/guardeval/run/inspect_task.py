"""The Inspect task that `guardeval cohort export --format inspect` writes, as code (docs/inspect.md).

An exported folder holds `dataset.jsonl` (one sample per cohort instance: the stimulus rendered
with the guard prompt, and metadata naming base, condition, interaction and domain), `task.json`
(what it was made from, the dataset's SHA-256, epochs and generation settings) and a three-line
`task.py` that calls `guard_task` here. So the task is this module, tested with guardeval, and a
folder cannot run a dataset other than the one exported: the SHA-256 is checked first.

The solver is one `generate(cache=False)`: the solver's `cache=False` is merged into that call's
config over `inspect eval --cache`, so Inspect's cache is never read or written and epochs are
fresh calls (a test runs the task with `--cache`); the log import quarantines any answer a model
event says came from the cache all the same. The scorer
applies the prompt's strict parser (`guardeval.run.inspect_verdict`): 1 block, 0 allow, "N" (no
answer) for a failed call, the status in its metadata. This module imports inspect_ai; nothing
in guardeval imports it except an exported task.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, GenerateConfig
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState, generate

from guardeval.backends.backend import no_cache_headers
from guardeval.backends.parsers import get_parser
from guardeval.canon import sha256_hex
from guardeval.cohorts.export_inspect import DATASET, TASK_JSON
from guardeval.run.inspect_verdict import verdict

SCORER = "guardeval_verdict"
_MESSAGE = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def _settings(folder: Path) -> dict[str, Any]:
    settings = json.loads((folder / TASK_JSON).read_text("utf-8"))
    data = (folder / DATASET).read_bytes()
    want = settings["dataset"]["sha256"]
    if sha256_hex(data) != want:
        raise ValueError(f"{folder / DATASET}: SHA-256 {sha256_hex(data)} is not the {want} that {TASK_JSON} pins "
                         "(export the cohort again rather than edit the dataset)")
    settings["_lines"] = data.splitlines()
    return settings


def _sample(line: bytes) -> Sample:
    rec = json.loads(line)
    messages = [_MESSAGE[m["role"]](content=m["content"]) for m in rec["input"]]
    return Sample(id=rec["id"], input=messages, target="", metadata=rec["metadata"])


@scorer(metrics=[mean()])
def guardeval_verdict(parser: str) -> Any:
    """The prompt's strict parser on the answer: 1 block, 0 allow, "N" when the call failed."""
    parse = get_parser(parser)

    async def score(state: TaskState, target: Target) -> Score:
        v = verdict(state.output, parse)
        value: Any = v["decision"] if v["status"] == "ok" and v["quarantine_reason"] is None else "N"
        return Score(value=value, answer=state.output.completion if state.output else None, explanation=v["detail"],
                     metadata={"status": v["status"], "decision": v["decision"], "score": v["score"],
                               "quarantine_reason": v["quarantine_reason"]})

    return score


def guard_task(folder: str | Path) -> Task:
    """The exported folder's task: its dataset, one uncached generate, the strict-parser scorer."""
    root = Path(folder)
    settings = _settings(root)
    samples = [_sample(line) for line in settings.pop("_lines") if line.strip()]
    cfg = settings["generate"]
    return Task(
        dataset=MemoryDataset(samples, name=settings["cohort"]["name"]),
        solver=generate(cache=False),
        scorer=guardeval_verdict(settings["prompt"]["parser"]),
        epochs=int(settings["epochs"]),
        # A router's response cache would replay byte-identical epochs: ask every registered
        # back-end's not to (its record's `no_cache_headers`; other providers ignore them).
        # Inspect sends them with every request of this task.
        config=GenerateConfig(temperature=cfg["temperature"], max_tokens=cfg["max_tokens"],
                              extra_headers=no_cache_headers()),
        # The cohort's name is its author's text: Inspect puts the task's name in log file names.
        name="guardeval_" + re.sub(r"[^A-Za-z0-9_]+", "_", str(settings["cohort"]["name"]))[:64],
        metadata={"guardeval": {k: settings[k] for k in ("cohort", "prompt", "dataset")}},
    )
