"""A run, opened one way: `Run.open(x)` (issue 38 §2).

`x` is a path, a bare run id (`runs/<id>`, RunFolder's rule), an open RunFolder or a Run. The
"not a run folder" check is made here once; every part of the run is a typed property read at
most once (`cached_property`), and what users do to a run (status, verify, resume, retry) are
methods over the library functions. Estimating a run and reading its call rows belong to layers
above this one: they are `guardeval.api.estimate(run)` and `guardeval.api.calls(run)`, which
take a Run too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt
from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.cohorts.model import Cohort
from guardeval.errors import InputError
from guardeval.run import launch_options as _launch_options
from guardeval.run.folder import manifest as _manifest
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, SCHEDULE
from guardeval.run.folder.lines import iter_jsonl
from guardeval.run.folder.manifest import CohortPin, PromptPin, RunManifest
from guardeval.run.integrity.fingerprint import Fingerprint, run_fingerprint

if TYPE_CHECKING:
    # Only for the types: the dispatcher (HTTP client, numpy) loads when a run is resumed.
    from guardeval.run.integrity.verify_state import Verification
    from guardeval.run.runner import RunOutcome
    from guardeval.run.status import RunStatusRecord

RunLike = str | Path | RunFolder


@dataclass(frozen=True)
class Manifest:
    """manifest.json with the fields every reader relies on checked and typed; `raw` is the whole
    object as read (the guard config, the launch options, the row limits, ...)."""

    run_id: str
    n_calls: int
    seed: int
    reps: int
    order: str
    schedule_sha256: str
    stimuli_sha256: str
    guard: dict[str, Any]           # the guard config as recorded (backends/config_fields.py declares its fields)
    cohort: CohortPin
    prompt: PromptPin
    sha256: str
    parent_run: Mapping[str, object] | None   # a replicate's parent, as recorded (read, not relied on)
    raw: RunManifest

    @classmethod
    def of(cls, raw: RunManifest) -> Manifest:
        """From a manifest already checked by `read_manifest` (the types hold)."""
        return cls(run_id=raw["run_id"], n_calls=raw["n_calls"], seed=raw["seed"], reps=raw["reps"],
                   order=raw["order"], schedule_sha256=str(raw["schedule_sha256"]),
                   stimuli_sha256=str(raw["stimuli_sha256"]),
                   guard=raw["guard"], cohort=raw["cohort"], prompt=raw["prompt"], sha256=raw["sha256"],
                   parent_run=raw.get("parent_run"), raw=raw)


class Run:
    """One run folder and what it holds. Close it (or use `with`) when done; a RunFolder handed
    to `Run.open` stays its owner's and is not closed here."""

    def __init__(self, folder: RunFolder, *, owns: bool) -> None:
        self._folder = folder
        self._owns = owns   # opened here (from a path), so closed here

    @classmethod
    def open(cls, run: Run | RunLike) -> Run:
        """The one way to open a run (InputError, exit 2: no such folder, a link, no manifest.json;
        a Run or RunFolder already closed, which reads nothing: open its path again)."""
        if isinstance(run, Run):
            run.folder.require_open("Run")
            return run
        if isinstance(run, RunFolder):
            run.require_open("RunFolder")
            return cls._checked(run, owns=False)
        return cls._checked(RunFolder(run), owns=True)

    @classmethod
    def inside(cls, parent: RunFolder, name: str) -> Run:
        """The run in the folder `name` of `parent` (a study's `runs/<label>`), each step opened
        relative to the one before and never through a link; InputError as `open`."""
        return cls._checked(parent.folder(name), owns=True)

    @classmethod
    def _checked(cls, folder: RunFolder, *, owns: bool) -> Run:
        """The "not a run folder" check, made once; a folder opened here is closed when it fails."""
        try:
            if not folder.has(MANIFEST):
                raise InputError("not a run folder (no manifest.json)", path=folder.path)
        except BaseException:
            if owns:
                folder.close()
            raise
        return cls(folder, owns=owns)

    @classmethod
    @contextmanager
    def using(cls, run: Run | RunLike) -> Iterator[Run]:
        """`Run.open(run)` for a `with` block: closed after only when opened here (a Run or a
        RunFolder given stays open for its owner)."""
        opened = cls.open(run)
        try:
            yield opened
        finally:
            if opened is not run:
                opened.close()

    def close(self) -> None:
        if self._owns:
            self._folder.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return str(self._folder.path)

    def __repr__(self) -> str:
        return f"Run({str(self._folder.path)!r})"

    # -- parts, each read once ---------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._folder.path

    @property
    def folder(self) -> RunFolder:
        return self._folder

    @cached_property
    def manifest(self) -> Manifest:
        return Manifest.of(_manifest.read_manifest(self._folder))

    @cached_property
    def config(self) -> GuardConfig:
        return _manifest.run_config(self._folder, self.manifest.raw)

    @cached_property
    def prompt(self) -> Prompt:
        return _manifest.load_run_prompt(self._folder, self.manifest.raw)

    @cached_property
    def row_limits(self) -> RowLimits:
        """The bounds the run's cohort copy is read under (those its launch recorded, if raised)."""
        return _manifest.run_row_limits(self._folder, self.manifest.raw, DEFAULT_ROW_LIMITS)

    @cached_property
    def cohort(self) -> Cohort:
        return _manifest.load_cohort_copy(self._folder, self.row_limits, self.manifest.cohort["sha256"])

    @cached_property
    def schedule(self) -> tuple[dict[str, Any], ...]:
        """schedule.jsonl's rows, in order (a torn last line left out)."""
        return tuple(rec for _, _, rec in iter_jsonl(self._folder, SCHEDULE))

    @cached_property
    def launch_options(self) -> _launch_options.LaunchOptions:
        """What the launch recorded (`max_cost`, `rpm`, `concurrency`, ...); {} for an older run."""
        return _launch_options.recorded(self.manifest.raw, self._folder.file(MANIFEST))

    @cached_property
    def fingerprint(self) -> Fingerprint:
        # The run as it is when first asked; a session run through this object changes it.
        return run_fingerprint(self._folder, self.manifest.raw)

    # -- what users do to a run --------------------------------------------------------------------
    def status(self) -> RunStatusRecord:
        """`guardeval status`: decided and pending calls, spend, state."""
        from guardeval.run.status import run_status

        self._folder.require_open("Run")
        return run_status(self._folder)

    def verify(self, *, allow_skipped: bool = False, row_limits: RowLimits = DEFAULT_ROW_LIMITS,
               expect: str | None = None) -> Verification:
        """`guardeval verify`: every hash, the chain, every decision (`expect`: a parsed token)."""
        from guardeval.run.integrity.verify import verify_run

        self._folder.require_open("Run")   # a closed Run is not a damaged run
        return verify_run(self._folder, allow_skipped=allow_skipped, row_limits=row_limits, expect=expect)

    def resume_options(self, given: Mapping[str, Any]) -> tuple[_launch_options.LaunchOptions, list[str]]:
        """The dispatch options a resume runs with: each given one (not None), else the launch's
        record; with the flags taken from the launch, for a message."""
        return _launch_options.merged(given, self.launch_options)

    def resume(self, *, base_url: str | None = None, concurrency: int | None = None, rpm: float | None = None,
               max_cost: float | None = None, max_calls: int | None = None, fixed_concurrency: bool | None = None,
               rate_limit_stop_s: float | None = None, progress: bool = False, handle_signals: bool = True,
               row_limits: RowLimits = DEFAULT_ROW_LIMITS, retry_failed: tuple[str, ...] | None = None,
               allow_changed_callable: bool = False) -> RunOutcome:
        """Send the undecided calls. An option left None is the launch's (`resume_options`): a
        recorded budget, rate or limit applies to every resume, whoever calls it."""
        from guardeval.run.runner import execute

        self._folder.require_open("Run")
        o, _ = self.resume_options({"concurrency": concurrency, "fixed_concurrency": fixed_concurrency, "rpm": rpm,
                                    "max_cost": max_cost, "rate_limit_stop_s": rate_limit_stop_s})
        return execute(self._folder, base_url=base_url, concurrency=o["concurrency"], rpm=o["rpm"],
                       max_cost=o["max_cost"], max_calls=max_calls, progress=progress, handle_signals=handle_signals,
                       adaptive=not o["fixed_concurrency"], row_limits=row_limits, retry_failed=retry_failed,
                       rate_limit_stop_s=o["rate_limit_stop_s"], allow_changed_callable=allow_changed_callable)

    def retry(self, statuses: Sequence[str], **options: Any) -> RunOutcome:
        """`resume --retry-failed`: also the calls whose decision has one of `statuses`
        (e.g. `("exhausted",)`); `options` are `resume`'s."""
        from guardeval.run.folder.supersede import parse_statuses

        try:
            parsed = parse_statuses(",".join(statuses))
        except ValueError as exc:
            raise InputError(str(exc), field="retry_failed") from None
        return self.resume(retry_failed=parsed, **options)
