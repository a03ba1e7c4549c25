"""A run's manifest and what it pins: the checked fields, the guard config, the prompt copy and
the row limits its cohort copy is read under."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import orjson

from guardeval.backends.config import GuardConfig, config_from_manifest
from guardeval.backends.prompts import Prompt, load_prompt, load_prompt_dir
from guardeval.canon import canonical_sha256
from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, MAX_DEPTH_CEILING, RowLimits, widest
from guardeval.cohorts.model import Cohort, load_cohort
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import COHORT_DIR, MANIFEST, PROMPT_DIR
from guardeval.run.launch_options import LaunchOptions

if TYPE_CHECKING:
    # Only the type: the python back-end's resolver loads when a python run is resumed or verified.
    from guardeval.backends.python_guard.resolve import Provenance


class CohortPin(TypedDict):
    """The manifest's `cohort`: the cohort a run was launched on (name and sha256 checked on read)."""

    name: str
    sha256: str
    instances_sha256: NotRequired[str]


class PromptPin(TypedDict):
    """The manifest's `prompt` (id, sha256 and parser checked on read)."""

    id: str
    sha256: str
    parser: str
    copy: NotRequired[str]          # the run folder's copy of the prompt's files


class ParentRef(TypedDict):
    """A replicate's `parent_run`: the run whose schedule it carries."""

    run_id: str
    path: str
    manifest_sha256: str
    schedule_sha256: str


class FileHashes(TypedDict):
    """The SHA-256 of schedule.jsonl and stimuli.jsonl, for the manifest."""

    schedule_sha256: str
    stimuli_sha256: str


class RunManifest(TypedDict, total=False):
    """manifest.json as written (`planning._manifest`, then the files' hashes, the launch options
    and its own `sha256`). Read back it is hostile until `read_manifest` has checked the fields
    of `_MANIFEST_FIELDS`; the rest are read as they are where they are used."""

    run_id: str
    created: str
    guardeval_version: str
    cohort: CohortPin
    schedule_sha256: str | None     # None until the schedule is written (or hashed: a dry run)
    stimuli_sha256: str | None
    n_calls: int
    seed: int
    order: str
    reps: int
    schedule_algorithm: str
    prompt: PromptPin
    guard: dict[str, Any]           # the guard config as recorded (backends/config_fields.py declares its fields)
    guard_sha256: str
    guard_callable: Provenance      # a python back-end's callable provenance (integrity/callable_pin.py)
    parent_run: ParentRef | None
    row_limits: dict[str, int]
    launch_options: LaunchOptions
    sha256: str


def manifest_with_hash(manifest: RunManifest) -> RunManifest:
    body = manifest.copy()
    body.pop("sha256", None)
    body["sha256"] = canonical_sha256(body)   # hashed without it, written last
    return body



def load_run_prompt(folder: RunFolder, manifest: Mapping[str, object]) -> Prompt:
    """The prompt a run was launched with: its own copy in `prompt/` (pinned by the manifest's
    `prompt.sha256`), or, for a run from before copies, the prompts folder's entry if it still
    hashes as pinned. InputError when neither holds."""
    pin = manifest["prompt"]   # verify passes a manifest it has not checked
    if not isinstance(pin, dict):
        raise InputError("not an object", path=folder.file(MANIFEST), field="prompt")
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


def read_manifest(folder: RunFolder) -> RunManifest:
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
    return cast(RunManifest, manifest)   # its fields every reader relies on, checked above


def row_limits_record(limits: RowLimits) -> dict[str, int] | None:
    """The manifest's `row_limits`: the bounds a launch read its cohort under, recorded only when
    raised past the defaults (absent means the defaults)."""
    if widest(limits, DEFAULT_ROW_LIMITS) == DEFAULT_ROW_LIMITS:
        return None
    wide = widest(limits, DEFAULT_ROW_LIMITS)
    return {"max_bytes": wide.max_bytes, "max_depth": wide.max_depth}


def run_row_limits(folder: RunFolder, manifest: Mapping[str, object], given: RowLimits = DEFAULT_ROW_LIMITS) -> RowLimits:
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


def run_config(folder: RunFolder, manifest: RunManifest) -> GuardConfig:
    """The run's guard config, from its manifest, checked as a config file is (`config_from_manifest`)."""
    return config_from_manifest(manifest["guard"], folder.file(MANIFEST))

