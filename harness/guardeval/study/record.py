"""A study's own record, study.json (docs/study.md): the cohort, the schedule, the prompt, the
question (fixed at launch, changed only by a recorded edit), the budget, every run (label, run
id, manifest hash, its fingerprint when the last report was made), the last report, and every
command that wrote to the study. Its own `sha256` covers the rest, as a manifest's does.

A study folder may come from someone else: it is opened as a run folder is (`RunFolder`: no
link followed, regular files only, every read bounded, one writer), study.json is read under a
size bound, refused when it repeats a key, and checked against harness/guardeval/schemas/study.schema.json
before anything reads a field. Run labels are slugs (the schema's pattern), the only names
joined into a path (`runs/<label>`), and never through a link; each run is opened as every run
is (`guardeval.run.Run`: `open_run`).

The **study fingerprint** pins what a comparison was made from: `s<runs>.<decisions>.<24 hex>`,
the hex from the SHA-256 of the canonical JSON of the study id, cohort, schedule, prompt,
question, edits and, per run, its label, run id, manifest hash and run fingerprint *now*. A
run resumed, re-run or replaced since changes it; so does a run added or removed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, get_args

import orjson

from guardeval import __version__
from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import checked_json
from guardeval.errors import InputError, RunLocked
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, utcnow
from guardeval.run.run import Run

STUDY_JSON = "study.json"
RUNS_DIR = "runs"
STUDY_HTML, STUDY_MD, STUDY_REPORT_JSON = "study.html", "study.md", "study-report.json"
FORMAT = "guardeval-study/1"
MAX_STUDY_BYTES = 16 << 20      # a few KiB per run and command; far past that it is not one
MAX_DEPTH = 32
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
QuestionField = Literal["baseline", "placebo", "family", "margin", "failure_rule"]
QUESTION_FIELDS: tuple[QuestionField, ...] = get_args(QuestionField)
TOKEN = re.compile(r"s([0-9]{1,4})\.([0-9]{1,15})\.([0-9a-f]{24})")


def open_study(path: Any, run_command: str = "status") -> RunFolder:
    """The study folder (`RunFolder`): InputError when it is not one (no study.json). A run
    folder given instead is named as one, with `run_command`: the command that reads a run as
    this study command reads a study (`estimate` for `study report`)."""
    try:
        folder = RunFolder(path)
    except InputError as exc:
        raise InputError(exc.message.replace("run folder", "study folder"), path=exc.path) from None
    if not folder.has(STUDY_JSON):
        is_run = folder.has(MANIFEST)
        folder.close()
        if is_run:
            raise InputError(f"this is a run folder (it has {MANIFEST}), not a study folder (no {STUDY_JSON}): "
                             f"a run is read by `guardeval {run_command} {path}`", path=path)
        raise InputError(f"not a study folder (no {STUDY_JSON})", path=path)
    return folder


class StudyLock:
    """The study's writer lock: the study folder's own `flock` (a second writer: exit 1)."""

    def __init__(self, folder: RunFolder) -> None:
        self._lock = folder.lock()
        self.path = folder.path

    def __enter__(self) -> StudyLock:
        try:
            self._lock.__enter__()
        except RunLocked:
            raise RunLocked(f"{self.path}: another guardeval process is writing this study") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__()


def with_hash(record: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in record.items() if k != "sha256"}
    return {**body, "sha256": canonical_sha256(body)}


def read_record(folder: RunFolder) -> dict[str, Any]:
    """study.json, checked: bounded, valid JSON, no repeated key, the schema, its own hash
    (InputError naming the file and the field)."""
    path = folder.file(STUDY_JSON)
    raw = folder.read_small(STUDY_JSON, MAX_STUDY_BYTES, what="a study record")
    record = checked_json(raw, path, "study.schema.json", MAX_DEPTH)
    if with_hash(record)["sha256"] != record["sha256"]:
        raise InputError("does not match its own sha256 (edited by hand?)", path=path, field="sha256")
    labels = [r["label"] for r in record["runs"]]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        raise InputError(f"two runs have the label {dup!r}", path=path, field="runs")
    return record


def write_record(folder: RunFolder, record: Mapping[str, Any]) -> dict[str, Any]:
    """study.json replaced (a new file renamed over it, never through a link); the record as written."""
    out = with_hash(record)
    data = orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
    folder.replace(STUDY_JSON, lambda fh: fh.write(data))
    return out


class Question(TypedDict):
    """What a study asks (study/question.resolve_question), every default resolved."""

    baseline: str
    placebo: str | None
    family: list[str]
    margin: float
    failure_rule: str


class Command(TypedDict):
    """One entry of a study's `commands`."""

    at: str
    command: list[str]
    guardeval_version: str


class GuardRef(TypedDict):
    name: str
    backend: str
    model: str


class RunEntry(TypedDict):
    """One entry of a study's `runs`: the run it holds and when, by its manifest."""

    label: str
    run_id: str
    manifest_sha256: str
    guard: GuardRef
    added: str
    fingerprint: str | None             # the run's fingerprint at the study's last report


class StudyFingerprintRecord(TypedDict):
    token: str
    digest: str
    runs: dict[str, str | None]


def command(argv: Sequence[str] | None) -> Command:
    """One entry of `commands`: when, what (the command line, or the API call), which version."""
    shown = list(argv) if argv is not None else ["python", "-c", "guardeval.api.study_*"]
    return {"at": utcnow(), "command": [a[:4096] for a in shown[:1000]], "guardeval_version": __version__}


def cli_argv(args: Any) -> list[str]:
    """The command line as typed (`guardeval …`): what `commands` records for a CLI call."""
    return ["guardeval", *getattr(args, "argv", sys.argv[1:])]


def run_entry(label: str, manifest: Mapping[str, Any]) -> RunEntry:
    guard = manifest.get("guard") or {}
    return {"label": label, "run_id": manifest["run_id"], "manifest_sha256": manifest["sha256"],
            "guard": {"name": str(guard.get("name")), "backend": str(guard.get("backend")),
                      "model": str(guard.get("model"))},
            "added": utcnow(), "fingerprint": None}


def open_run(study: RunFolder, label: str) -> Run:
    """The run `runs/<label>` of a study (a slug, checked), opened as every run is (`Run`), each
    step relative to the study's folder and never through a link; InputError as `Run.open`."""
    return Run.inside(study, f"{RUNS_DIR}/{check_label(label, 'label')}")


def check_label(label: str, where: str) -> str:
    if not LABEL.fullmatch(label):
        raise InputError(f"label {label!r} is not a slug of 1-64 letters, digits, '.', '_' or '-' (it names the run's "
                         "folder)", field=where)
    return label


@dataclass(frozen=True)
class StudyFingerprint:
    token: str
    digest: str
    runs: dict[str, str | None]         # label -> the run fingerprint it was made from (None: missing)

    def record(self) -> StudyFingerprintRecord:
        return {"token": self.token, "digest": self.digest, "runs": dict(self.runs)}


def study_fingerprint(record: Mapping[str, Any], run_tokens: Mapping[str, str | None]) -> StudyFingerprint:
    """The study fingerprint over the record's identity and the runs' fingerprints `run_tokens`
    (label -> token now; None for a run that is missing or unreadable)."""
    runs = [{"label": r["label"], "run_id": r["run_id"], "manifest_sha256": r["manifest_sha256"],
             "fingerprint": run_tokens.get(r["label"])} for r in record["runs"]]
    body = {"study_id": record["study_id"], "cohort": record["cohort"], "schedule": record["schedule"],
            "prompt": record["prompt"], "question": record["question"], "edits": record["edits"], "runs": runs}
    digest = canonical_sha256(body)
    decisions = sum(int(t.split(".")[1]) for t in run_tokens.values() if t)
    return StudyFingerprint(f"s{len(runs)}.{decisions}.{digest[:24]}", digest,
                            {r["label"]: run_tokens.get(r["label"]) for r in record["runs"]})


def parse_token(text: str) -> str:
    """A study fingerprint as given on the command line (InputError when it is not one)."""
    t = text.strip().removeprefix("fingerprint").strip().lower()
    if not TOKEN.fullmatch(t):
        raise InputError("--expect: not a study fingerprint (expected sRUNS.DECISIONS.24-HEX, as `guardeval study "
                         "status` prints it; a run's fingerprint is checked with `guardeval verify RUN --expect`)")
    return t
