"""A run's manifest and what it pins: the checked fields, the guard config, the prompt copy and
the row limits its cohort copy is read under."""

from __future__ import annotations

from typing import Any

import orjson

from guardeval.backends.config import GuardConfig, config_from_manifest
from guardeval.backends.prompts import Prompt, load_prompt, load_prompt_dir
from guardeval.canon import canonical_sha256
from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, MAX_DEPTH_CEILING, RowLimits, widest
from guardeval.cohorts.model import Cohort, load_cohort
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import COHORT_DIR, MANIFEST, PROMPT_DIR


def manifest_with_hash(manifest: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return {**body, "sha256": canonical_sha256(body)}



def load_run_prompt(folder: RunFolder, manifest: dict[str, Any]) -> Prompt:
    """The prompt a run was launched with: its own copy in `prompt/` (pinned by the manifest's
    `prompt.sha256`), or, for a run from before copies, the prompts folder's entry if it still
    hashes as pinned. InputError when neither holds."""
    pin = manifest["prompt"]
    if pin.get("copy"):
        path, dfd = folder.subdir(PROMPT_DIR)
        prompt = load_prompt_dir(path, str(pin["id"]), dir_fd=dfd)
        if prompt.sha256 != pin["sha256"]:
            raise InputError("the run's copy of its prompt does not match manifest.prompt.sha256", path=path,
                             field="prompt.sha256")
        return prompt
    prompt = load_prompt(pin["id"])
    if prompt.sha256 != pin["sha256"]:
        raise InputError(f"this run has no copy of its prompt and prompt '{prompt.id}' has changed since it was "
                         f"launched (sha256 {prompt.sha256[:12]}…, manifest {pin['sha256'][:12]}…); restore it, "
                         "or start a new run with `guardeval replicate`", path=folder.file(MANIFEST),
                         field="prompt.sha256")
    return prompt


# The manifest fields that the readers of a run (status, resume, replicate, estimate, the views)
# take as they are, with their types; `verify` reads the manifest on its own and reports each
# problem. The guard config is checked whole (`run_config`).
_MANIFEST_FIELDS: dict[str, type] = {"run_id": str, "n_calls": int, "seed": int, "reps": int, "order": str,
                                     "schedule_sha256": str, "stimuli_sha256": str, "guard": dict,
                                     "cohort": dict, "cohort.name": str, "cohort.sha256": str,
                                     "prompt": dict, "prompt.id": str, "prompt.sha256": str, "prompt.parser": str,
                                     "sha256": str}
_KINDS = {str: "a string", int: "a whole number", dict: "an object"}
# A manifest is a few KiB (the guard config in it is at most 1 MiB); far past that it is not one.
MAX_MANIFEST_BYTES = 16 << 20


def _manifest_json(folder: RunFolder) -> Any:
    """manifest.json parsed, unchecked (InputError: absent, too large, not JSON)."""
    path = folder.file(MANIFEST)
    if not folder.has(MANIFEST):
        raise InputError("not a run folder (no manifest.json)", path=folder.path)
    try:
        return orjson.loads(folder.read_small(MANIFEST, MAX_MANIFEST_BYTES, what="a run manifest"))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None


def read_manifest(folder: RunFolder) -> dict[str, Any]:
    """manifest.json, its fields of `_MANIFEST_FIELDS` checked (InputError naming the field)."""
    path = folder.file(MANIFEST)
    manifest = _manifest_json(folder)
    if not isinstance(manifest, dict):
        raise InputError("not a JSON object", path=path)
    for name, kind in _MANIFEST_FIELDS.items():
        outer, _, inner = name.partition(".")
        value = manifest.get(outer)
        value = value.get(inner) if inner and isinstance(value, dict) else value
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(f"missing, or not {_KINDS[kind]}", path=path, field=name)
    if not isinstance(manifest.get("parent_run"), (dict, type(None))):
        raise InputError(f"not {_KINDS[dict]}", path=path, field="parent_run")
    return manifest


def row_limits_record(limits: RowLimits) -> dict[str, int] | None:
    """The manifest's `row_limits`: the bounds a launch read its cohort under, recorded only when
    raised past the defaults (absent means the defaults)."""
    if widest(limits, DEFAULT_ROW_LIMITS) == DEFAULT_ROW_LIMITS:
        return None
    wide = widest(limits, DEFAULT_ROW_LIMITS)
    return {"max_bytes": wide.max_bytes, "max_depth": wide.max_depth}


def run_row_limits(folder: RunFolder, manifest: dict[str, Any], given: RowLimits = DEFAULT_ROW_LIMITS) -> RowLimits:
    """The bounds a run's own cohort copy is read under: those its launch recorded, or `given`
    (the command's flags), whichever is wider, so that a run launched with `--max-row-bytes` can
    be verified, estimated and viewed without repeating the flag."""
    rec = manifest.get("row_limits")
    if rec is None:
        return given
    path = folder.file(MANIFEST)
    if not isinstance(rec, dict):
        raise InputError(f"not {_KINDS[dict]}", path=path, field="row_limits")
    values: dict[str, int] = {}
    for name, ceiling in (("max_bytes", None), ("max_depth", MAX_DEPTH_CEILING)):
        v = rec.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or (ceiling is not None and v > ceiling):
            bound = f" <= {ceiling}" if ceiling is not None else ""
            raise InputError(f"missing, or not a whole number >= 1{bound}", path=path, field=f"row_limits.{name}")
        values[name] = v
    return widest(given, RowLimits(**values))


def load_cohort_copy(folder: RunFolder, limits: RowLimits, pinned_sha256: str | None = None) -> Cohort:
    """The run's copy of its cohort (`cohort/`), read through the run folder's descriptor of it
    like every other file of the run (`RunFolder.subdir`, `load_cohort`'s `dir_fd`)."""
    path, dfd = folder.subdir(COHORT_DIR)
    return load_cohort(path, dir_fd=dfd, pinned_sha256=pinned_sha256, limits=limits)


def run_config(folder: RunFolder, manifest: dict[str, Any]) -> GuardConfig:
    """The run's guard config, from its manifest, checked as a config file is (`config_from_manifest`)."""
    return config_from_manifest(manifest["guard"], folder.file(MANIFEST))

