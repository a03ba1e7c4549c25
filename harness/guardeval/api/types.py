"""The typed records `guardeval.api` returns (dataclasses; `to_dict()` gives the JSON shape)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The estimators' own records, not copies: a condition's effect is the effects table's row
# (estimators/report/rows.py), a pair's difference the comparison's row (estimators/compare/rows.py),
# a quantity's decision the one decision record (estimators/verdicts/record.py).
from guardeval.estimators.compare.rows import PairRow as Difference
from guardeval.estimators.report.rows import EffectRow as Effect
from guardeval.estimators.report.rows import Interval as Interval
from guardeval.estimators.verdicts.record import Decision as Decision
from guardeval.records import Record

if TYPE_CHECKING:   # these load numpy; `status` and `verify` import these types and must not
    from guardeval.estimators.compare.compare_types import CompareResult
    from guardeval.estimators.types import Excluded, Report
    from guardeval.run.folder.causes import FailureCause
    from guardeval.run.integrity.fingerprint import FingerprintRecord
    from guardeval.run.integrity.verify_state import Verified
    from guardeval.run.runner import OutcomeRecord
    from guardeval.run.status import LastStop, RetriedCalls
    from guardeval.study.record import StudyFingerprintRecord
    from guardeval.study.status import RunCheck


@dataclass(frozen=True)
class Projection(Record):
    """What a launch would cost, projected before anything is sent (`launch --dry-run`): an upper
    estimate, prompt characters / 4 and every call's full `max_tokens`."""

    calls: int
    prompt_tokens_est: int
    max_output_tokens: int
    cost_usd_upper_est: float | None


@dataclass
class LaunchPlan(Record):
    """A launch or replicate, prepared and hashed; nothing written yet (`launch_plan` writes it)."""

    run_id: str
    run_dir: Path
    n_calls: int
    bases: int
    conditions: list[str]
    reps: int
    order: str
    seed: int
    guard: str
    backend: str
    model: str
    prompt: str
    schedule_sha256: str
    parent_run: str | None
    projection: Projection
    _plan: Any = field(default=None, repr=False, compare=False)   # guardeval.run.planning.Plan
    # A replicate's parent run, opened by `plan_replicate` and held for the plan: closed by `launch_plan`.
    _parent: Any = field(default=None, repr=False, compare=False)   # guardeval.run.Run | None


@dataclass(frozen=True)
class RunResult(Record):
    """What one launch, resume or replicate did, and where the whole run stands."""

    run_dir: Path
    total: int
    decided: int
    complete: bool
    statuses: dict[str, int]                # the whole run's decisions by status
    session_dispatched: int
    session_decided: int
    recovered: int                          # decisions re-derived from the raw log on open
    torn: list[Path]                        # torn last lines moved aside
    stop_reason: str | None                 # None: every pending call handled (or --max-calls)
    fatal_message: str | None
    fingerprint: str | None                 # the run's fingerprint when the session ended (`verify --expect`)
    # Why the whole run's failed calls failed: [{status, cause, calls, example}], most first.
    failure_causes: list[FailureCause] = field(default_factory=list)
    _outcome: Any = field(default=None, repr=False, compare=False)

    @property
    def retry(self) -> Any:
        """What `retry_failed` did (`guardeval.run.retry.RetrySession`: targets, rounds)."""
        return self._outcome.retry

    def message(self) -> str:
        """The run's totals in words, as the CLI's last line: `960/960 calls decided: ok 960`."""
        from guardeval.run.runner import finish_message

        return finish_message(self._outcome)

    def outcome_json(self) -> OutcomeRecord:
        """What `launch`, `resume` and `replicate` print with --json."""
        from guardeval.run.runner import outcome_json

        return outcome_json(self._outcome)

    def raise_if_stopped(self) -> None:
        """RunStopped (exit 1, resumable) when a fatal error, the budget, a full disk or a signal stopped it."""
        from guardeval.run.runner import raise_if_stopped

        raise_if_stopped(self._outcome)


@dataclass(frozen=True)
class RunStatus(Record):
    """`guardeval status`: the same fields as `status --json`."""

    run_id: str
    run_dir: str
    guard: str
    model: str
    cohort: str
    parent_run: str | None
    n_calls: int
    decided: int
    pending: int
    complete: bool
    running: bool
    state: str                              # running, damaged, complete, stopped, interrupted, not_started
    statuses: dict[str, int]
    failure_causes: list[FailureCause]    # why the failed calls failed: {status, cause, calls, example}
    quarantined: int
    quarantine_by_reason: dict[str, int]
    generation_replays: int
    attempts: int
    retries: int
    spend_usd: float
    spend_simulated: bool
    last_stop: LastStop | None
    undecided_answers: int                  # final answers without a decision line (`resume` re-derives them)
    problems: list[Any]                     # what is wrong: a cut raw log, a broken retry chain, ...
    fingerprint: str                        # the run's fingerprint now
    retried: RetriedCalls | None = None   # calls given new attempts by `resume --retry-failed`, by round
    answered_by: dict[str, int] = field(default_factory=dict)   # who answered (sim profile, reported model, callable)
    extra: dict[str, Any] = field(default_factory=dict)   # fields of `status --json` newer than this record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunStatus:
        """From `status --json` (a record from a newer guardeval keeps its extra fields in `extra`)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {**{k: v for k, v in d.items() if k != "extra"}, **self.extra}


@dataclass(frozen=True)
class Problem(Record):
    """One thing `verify` or `status` found wrong: the file, the line when there is one, and what."""

    file: str
    line: int | None
    message: str


@dataclass(frozen=True)
class Skipped(Record):
    """A check `verify` could not make here, and why (`--allow-skipped` accepts it)."""

    check: str
    reason: str


_VERIFY_OPTIONAL = ("n_calls", "n_raw", "n_decisions", "undecided_answers", "fingerprint")


@dataclass(frozen=True)
class VerifyReport(Record):
    """`guardeval verify`: ok is false on any problem, or a skipped check unless allowed."""

    ok: bool
    problems: list[Problem]
    skipped: list[Skipped]
    checked: str
    n_calls: int | None = None              # None when the manifest could not be read
    n_raw: int | None = None
    n_decisions: int | None = None
    undecided_answers: int | None = None    # final answers without a decision (not OK)
    fingerprint: FingerprintRecord | None = None   # the run's fingerprint, checked against `expect`

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {k: v for k, v in d.items() if v is not None or k not in _VERIFY_OPTIONAL}


@dataclass(frozen=True)
class Estimate(Record):
    """`guardeval estimate`: the headline numbers typed; `report` is the whole report.json."""

    run_dir: Path | None
    baseline: str
    placebo: str | None
    failure_rule: str
    n_calls: int
    n_bases: int
    complete: bool
    publishable: bool
    verified: bool
    quarantined: int
    block_rate: dict[str, float | None]
    effects: list[Effect]
    notes: list[str]
    report: Report = field(repr=False)
    # Failed and quarantined calls against one limit, by condition, with whether failures depend
    # on the condition (report.json's `excluded`); `publishable` is its verdict.
    excluded: Excluded | None = None

    def effect(self, condition: str) -> Effect:
        """The effect of one condition (KeyError if it has none)."""
        for e in self.effects:
            if e.condition == condition:
                return e
        raise KeyError(condition)


@dataclass(frozen=True)
class Comparison(Record):
    """`guardeval compare`: runs of one schedule; `conditions` is the first pair (B − A),
    `result` the whole comparison (every pair, the leaderboard, ranking checks)."""

    runs: list[Path]
    labels: list[str]
    baseline: str
    failure_rule: str
    publishable: bool
    complete: bool
    ranking_changed: bool
    conditions: list[Difference]
    written: list[Path]
    checks: list[Verified]                  # per run: verified first?, and the checks skipped
    result: CompareResult = field(repr=False)
    excluded: dict[str, Excluded] = field(default_factory=dict)   # label -> that input's `excluded`


@dataclass(frozen=True)
class CallRecord(Record):
    """One scheduled call joined across the run folder (the columns of `guardeval export`)."""

    call_id: str
    base_id: str
    interaction_id: str
    domain: str
    condition: str
    repetition: int
    label: int | None
    tool: str | None
    decision: int | None
    score: float | None
    status: str | None
    quarantine_reason: str | None
    attempts: int
    latency_s: float | None
    cost: float | None
    provider: str | None
    finish_reason: str | None
    retry_round: int | None = None          # the `resume --retry-failed` round that decided it (None: none)


@dataclass(frozen=True)
class StudyRun(Record):
    """One run of a study after a `study_launch`, `study_resume` or `study_add`."""

    label: str
    run_dir: Path
    dispatched: bool                        # sent calls in this command (False: already complete, or refused)
    complete: bool
    decided: int | None
    total: int | None
    statuses: dict[str, int]
    stop_reason: str | None                 # as RunResult's; None when it ended on its own
    fatal_message: str | None
    fingerprint: str | None
    error: str | None                       # why it could not start, or broke (the others went on)
    # Why its failed calls failed: [{status, cause, calls, example}] (as RunStatus's).
    failure_causes: list[FailureCause] = field(default_factory=list)


@dataclass(frozen=True)
class StudyResult(Record):
    """What one `study_launch`, `study_resume` or `study_add` did, and where the study stands."""

    study_dir: Path
    runs: list[StudyRun]                    # every run of the study
    complete: bool                          # every run has every call decided
    incomplete: list[str]
    spend_usd: float                        # the whole study's
    max_cost: float | None                  # the study's budget in this command
    interrupted: str | None                 # `signal SIGTERM` when a signal stopped it
    fingerprint: str                        # the study fingerprint now (`study_verify(expect=)`)

    def run(self, label: str) -> StudyRun:
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(label)

    def stopped(self) -> dict[str, str]:
        """label -> why, for each run of this command that did not end on its own."""
        return {r.label: r.error or str(r.stop_reason) for r in self.runs
                if r.dispatched and (r.error is not None or r.stop_reason is not None)}

    def raise_if_stopped(self) -> None:
        """RunStopped (exit 1, resumable) when a run stopped: a fatal answer, the budget, a signal..."""
        from guardeval.errors import RunStopped

        stopped = self.stopped()
        if stopped:
            listed = "; ".join(f"{k}: {v}" for k, v in stopped.items())
            raise RunStopped(f"{len(stopped)} run(s) of the study stopped ({listed}); the others went on. Fix the "
                             f"cause, then: guardeval study resume {self.study_dir}")


@dataclass(frozen=True)
class StudyVerifyReport(Record):
    """`guardeval study verify`: every run, and the study's record against them."""

    ok: bool
    problems: list[Problem]
    skipped: list[Skipped]
    notes: list[str]
    runs: dict[str, RunCheck]               # label -> its run's verification
    checked: str
    fingerprint: StudyFingerprintRecord | None   # {"token", "digest", "runs": {label: run fingerprint}}


@dataclass(frozen=True)
class StudyReport(Record):
    """`guardeval study report`: the answer, typed where a caller reads it; `report` is the
    whole of study-report.json."""

    study_dir: Path
    fingerprint: str
    answer: list[str]                       # the answer in words, lead first
    most_sensitive: dict[str, str]          # intervention -> the one guard it moves most (absent: a tie, or a shared place)
    least_sensitive: dict[str, str]
    holds: dict[str, bool | None]           # intervention -> does most − least hold after the correction
    corrected_effects: dict[str, list[str]]  # guard -> interventions with a placebo-corrected effect
    complete: bool
    publishable: bool
    written: list[Path]
    report: dict[str, Any] = field(repr=False)
    excluded: dict[str, Excluded] = field(default_factory=dict)   # guard label -> its run's `excluded`
