"""Running a run folder: its undecided calls (and, with --retry-failed, its failed ones)
through the dispatcher, and what the session did (`RunOutcome`). Launch, resume and replicate
all end in `execute`; planning is `guardeval.run.planning`.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, TypeGuard

import anyio

from guardeval.backends.config import GuardConfig
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import Prompt
from guardeval.backends.registry import make_guard, make_renderer
from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, Cohort, RowLimits
from guardeval.errors import CheckFailed, InputError, RunStopped, WriteFailed
from guardeval.run import retry as retries
from guardeval.run.dispatch.decide import decide
from guardeval.run.dispatch.dispatch import Dispatcher, DispatchOptions, DispatchResult
from guardeval.run.dispatch.stalls import DEFAULT_RATE_LIMIT_STOP_S
from guardeval.run.folder import supersede
from guardeval.run.folder.causes import Causes, FailureCause
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, SCHEDULE, STIMULI
from guardeval.run.folder.lines import STIMULUS_LINE, iter_jsonl, parse_line
from guardeval.run.folder.manifest import load_run_prompt, read_manifest, run_config
from guardeval.run.folder.spend import Prices, Unpriced
from guardeval.run.folder.writer import RunWriter
from guardeval.run.integrity import callable_pin
from guardeval.run.integrity.fingerprint import run_fingerprint
from guardeval.run.planning import load_run_cohort, require_key
from guardeval.run.schedule import ScheduleRow
from guardeval.run.status import decision_counts
from guardeval.terminal import safe

# -- executing ---------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    run_dir: Path
    total: int
    decided: int
    result: DispatchResult
    recovered: int   # decisions re-derived from raw lines on open
    torn: list[Path]
    statuses: dict[str, int] = field(default_factory=dict)   # decisions of the whole run, by status
    fingerprint: str | None = None   # guardeval.run.integrity.fingerprint, taken when the session ended
    retry: retries.RetrySession = field(default_factory=retries.RetrySession)
    simulated: bool = False     # sent to the simulated provider (for the hint when it is not there)
    failure_causes: list[FailureCause] = field(default_factory=list)   # guardeval.run.folder.causes

    @property
    def complete(self) -> bool:
        return self.decided >= self.total


def execute(folder: RunFolder, *, base_url: str | None = None, concurrency: int | None = None,
            rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
            progress: bool = True, handle_signals: bool = True, adaptive: bool = True,
            row_limits: RowLimits = DEFAULT_ROW_LIMITS, retry_failed: tuple[str, ...] | None = None,
            rate_limit_stop_s: float | None = None, allow_changed_callable: bool = False) -> RunOutcome:
    """Dispatch every undecided call of a run folder (launch and resume both end here); with
    `retry_failed` (failure statuses), also the calls whose live decision has one of them, their
    new decisions superseding the old (`guardeval.run.folder.supersede`). `folder` is the run
    as its caller opened it (`guardeval.run.Run.open`), left open."""
    with session(folder, base_url=base_url, concurrency=concurrency, rpm=rpm, max_cost=max_cost,
                 max_calls=max_calls, progress=progress, handle_signals=handle_signals, adaptive=adaptive,
                 row_limits=row_limits, retry_failed=retry_failed, rate_limit_stop_s=rate_limit_stop_s,
                 allow_changed_callable=allow_changed_callable) as s:
        anyio.run(s.dispatch, backend_options=backend_options())
    return s.finished()


@dataclass
class Session:
    """A run opened for dispatch by `session`: its lock held, its logs open, its pending calls
    lined up. `dispatch` (a coroutine) sends them; several sessions may be dispatched in one
    event loop (a study's runs), each with its own options."""

    folder: RunFolder
    config: GuardConfig
    prompt: Prompt
    writer: RunWriter
    cohort: Cohort
    parser: Any
    rows: Iterable[ScheduleRow]
    total: int                  # the run's calls (what the progress counts to)
    options: DispatchOptions    # may be changed before `dispatch` (handle_signals, progress, budget_type)
    already: int
    spent: float
    unpriced: Unpriced
    retrying: int = 0           # decided calls tried again (`--retry-failed`), counted apart
    dispatcher: Dispatcher | None = None   # set once `dispatch` has begun
    result: DispatchResult | None = None
    outcome: RunOutcome | None = None      # set when the session has closed
    error: CheckFailed | None = None       # the run turned out damaged (raised by `finished`)

    async def dispatch(self) -> DispatchResult:
        guard = make_guard(self.config, self.prompt, max_connections=max(self.options.concurrency, 1))
        try:
            cohort = self.cohort
            self.dispatcher = Dispatcher(guard=guard, writer=self.writer,
                                         instance_for=lambda r: cohort.instance(r["base_id"], r["condition"]),
                                         parser=self.parser, options=self.options)
            self.result = await self.dispatcher.run(self.rows, total=self.total, already=self.already,
                                                    retrying=self.retrying,
                                                    spent_before=self.spent, unpriced_before=self.unpriced)
            return self.result
        finally:
            with anyio.CancelScope(shield=True):
                await guard.aclose()

    def finished(self) -> RunOutcome:
        """The outcome once the session has closed; CheckFailed when the run proved damaged."""
        if self.error is not None:
            raise self.error
        assert self.outcome is not None, "the session has not closed"
        return self.outcome


@contextmanager
def session(folder: RunFolder, *, base_url: str | None = None, concurrency: int | None = None,
            rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
            progress: bool = True, handle_signals: bool = True, adaptive: bool = True,
            row_limits: RowLimits = DEFAULT_ROW_LIMITS, retry_failed: tuple[str, ...] | None = None,
            rate_limit_stop_s: float | None = None, allow_changed_callable: bool = False) -> Iterator[Session]:
    """Open a run for dispatch (the lock, the checks, recovery, the pending calls: see `execute`)
    and yield the `Session`; its `dispatch` must have run when the block ends normally. On the
    way out: the stop event, the logs closed, `outcome` set (or `error`, for a damaged run)."""
    run_dir = folder.path
    manifest = read_manifest(folder)
    config = run_config(folder, manifest).with_base_url(base_url)
    require_key(config, folder.file(MANIFEST))
    # A python guard: its code must be the launch's (or the change accepted): exit 2 otherwise.
    code = callable_pin.check_resume(folder.file(MANIFEST), manifest, config, allow_changed=allow_changed_callable)
    with folder.lock():
        # A prompt that no longer renders the launch's bodies would write every pending call off
        # as a replay mismatch: refused here (InputError).
        prompt = load_run_prompt(folder, manifest)
        parser = get_parser(prompt.parser)
        writer = RunWriter(folder)
        # The logs are read (a large raw log by workers) while the cohort is loaded; nothing is
        # changed on disk until the checks below have passed (`open` moves torn lines aside).
        writer.scan()
        try:
            cohort = load_run_cohort(folder, manifest, row_limits)
            _check_rendering(folder, cohort, config, prompt)
        except BaseException:
            writer.abandon_scan()
            raise
        state = writer.open()
        s: Session | None = None
        try:
            recovered = _recover_decisions(folder, writer, parser, config)
            retry = retries.prepare(
                folder, writer, retry_failed,
                lambda rec, sha, expected: decide(rec, sha, expected_request_sha256=expected.get(rec["call_id"]),
                                                  parser=parser, backend=config.backend,
                                                  allowed_providers=config.allowed_providers),
                lambda cids: _stimuli_for(folder, cids))
            total = int(manifest["n_calls"])
            pending = PendingRows(folder, state.decided, cohort)
            sources: list[PendingRows] = [pending]
            rows: Iterable[ScheduleRow] = pending
            # A session with nothing to send, recover or retry leaves the run as it was: no start
            # and stop in events.jsonl (so a fingerprint written down stays true), no progress line.
            idle = (total == len(state.decided) and not retry.n_targets and not (recovered + retry.recovered)
                    and not state.torn)
            if not idle:
                writer.event("start", pending=total - len(state.decided), total=total,
                             torn=[p.name for p in state.torn], recovered=recovered + retry.recovered,
                             **({"callable": code} if code is not None else {}))
            if retry.targets is not None and retry.n_targets:
                # Undecided calls first, then the retries (a later measurement either way).
                again = PendingRows(folder, supersede.NotTargeted(retry.targets), cohort)
                sources.append(again)
                rows = itertools.chain(pending, retries.with_targets(again, retry.targets))
                retries.record_start(folder, writer, retry)
            options = DispatchOptions(
                concurrency=concurrency or config.concurrency or _default_concurrency(config), rpm=rpm,
                max_cost=max_cost, max_calls=max_calls, max_attempts=config.max_attempts,
                retry_initial_s=config.retry_initial_s, retry_max_s=config.retry_max_s, prices=_prices(config),
                progress=progress and not idle, handle_signals=handle_signals, adaptive=adaptive,
                simulated_spend=config.is_simulated,
                rate_limit_stop_s=rate_limit_stop_s or DEFAULT_RATE_LIMIT_STOP_S,
                max_response_bytes=config.max_response_bytes)
            s = Session(folder, config, prompt, writer, cohort, parser, rows, total, options,
                        len(state.decided), state.spent, state.unpriced, retrying=retry.n_targets)
            yield s
            result = s.result
            assert result is not None, "a session's dispatch must run before it closes"
            decided = len(state.decided)
            try:
                # A pilot's stop says so: `status` must not read it as every pending call handled.
                pilot = result.stop_reason is None and max_calls is not None and decided < total
                if not (idle and result.dispatched == 0):   # nothing happened: nothing to record
                    writer.event("stop", reason="max_calls" if pilot else result.stop_reason, decided=decided,
                                 total=total, adaptive=adaptive, min_concurrency=result.min_concurrency,
                                 rate_limited=result.rate_limited, limit_cuts=result.limit_cuts,
                                 limit_restores=result.limit_restores, background_429=result.background_429,
                                 last_seq=state.last_seq, last_raw_sha256=state.last_raw_sha,
                                 fatal=result.fatal_message, retried=result.retried,
                                 answered_by=dict(writer.answered))
            except WriteFailed:
                pass   # the stop event is informational; the dispatcher has already stopped on this
        finally:
            try:
                writer.close()
            except WriteFailed as exc:
                # Decisions still held are re-derived from their raw lines on resume.
                if s is None or s.result is None:
                    raise
                if s.result.stop_reason != "write_failed":
                    s.result.stop_reason, s.result.fatal_message = "write_failed", str(exc)
    s.error = next((source.error for source in sources if source.error is not None), None)
    if s.error is not None:
        return
    # The whole run's statuses (this session's are in `result`): one more pass over the decisions,
    # after the calls, so that it never delays the first request of a large resume.
    causes = Causes()
    statuses = decision_counts(folder, causes=causes)[1]
    s.outcome = RunOutcome(run_dir, total, decided, result, recovered + retry.recovered, state.torn, statuses,
                           run_fingerprint(folder, manifest).token, retry, config.is_simulated, causes.result())


def _recover_decisions(folder: RunFolder, writer: RunWriter, parser: Any, config: GuardConfig) -> int:
    """A raw line marked final whose decision was lost (crash between the two writes): derive
    the decision from the log instead of paying for the call again."""
    finals = writer.state.final_raw
    if not finals:
        return 0
    expected = _stimuli_for(folder, set(finals))
    recovered = 0
    for rec, line_sha in writer.undecided_finals():
        writer.append_decision(decide(rec, line_sha, expected_request_sha256=expected.get(rec["call_id"]),
                                      parser=parser, backend=config.backend,
                                      allowed_providers=config.allowed_providers))
        recovered += 1
    finals.clear()
    return recovered


def _stimuli_for(folder: RunFolder, call_ids: set[str]) -> dict[str, str]:
    """request_sha256 of a few calls (one pass over stimuli.jsonl, keeping only those)."""
    found: dict[str, str] = {}
    for _, _, rec in iter_jsonl(folder, STIMULI):
        if rec["call_id"] in call_ids:
            found[rec["call_id"]] = rec["request_sha256"]
    return found


class PendingRows:
    """The undecided calls, in schedule order, each carrying its frozen `request_sha256`.

    schedule.jsonl and stimuli.jsonl are written together, line for line, so they are read
    together (zip), never loaded: memory does not grow with the run. A line pair whose call
    ids disagree (a damaged run) ends the iteration; the dispatcher then finishes what is in
    flight and `execute` raises `error` (CheckFailed) once the run is closed cleanly. So does a
    row that names no instance of the run's cohort: there is nothing it could send.
    """

    def __init__(self, folder: RunFolder, decided: Container[str], cohort: Cohort) -> None:
        self.folder, self.run_dir, self.decided, self.cohort = folder, folder.path, decided, cohort
        self.error: CheckFailed | None = None

    def __iter__(self) -> Iterator[ScheduleRow]:
        sched, stim = self.folder.file(SCHEDULE), self.folder.file(STIMULI)
        lineno = 0
        try:
            for lineno, sline, tline in _line_pairs(self.folder, SCHEDULE, STIMULI):
                cid, request_sha = _call_id_pair(sline, tline)
                if cid is not None and cid in self.decided:
                    continue  # half a million of these in a half-done large run: no parse
                row = parse_line(sline[:-1], sched, lineno)
                if cid is None:
                    st = parse_line(tline[:-1], stim, lineno)
                    cid, request_sha = row["call_id"], st["request_sha256"]
                    if cid != st["call_id"]:
                        self.error = self._damaged(f"line {lineno}: call_id differs between schedule.jsonl and "
                                                   "stimuli.jsonl")
                        return
                    if cid in self.decided:
                        continue
                if not self._names_an_instance(row):
                    self.error = self._damaged(f"line {lineno}: the row names no instance of the run's cohort "
                                               "(base_id, condition, instance_sha256)")
                    return
                if not isinstance(request_sha, str):
                    raise TypeError("'request_sha256'")   # a malformed stimuli line: damaged, below
                row["request_sha256"] = request_sha
                yield row
        except ValueError:   # zip(strict=True): one file is longer than the other
            self.error = self._damaged("schedule.jsonl and stimuli.jsonl differ in length")
        except (KeyError, TypeError) as exc:
            self.error = self._damaged(f"line {lineno}: missing or malformed field {exc}")
        except CheckFailed as exc:
            self.error = exc

    def _names_an_instance(self, row: dict[str, Any]) -> TypeGuard[ScheduleRow]:
        """The row names an instance of the cohort (a row missing its fields does not): what the
        dispatcher reads of it (call id and request hash come from the checked line pair)."""
        try:
            self.cohort.cell(row["base_id"], row["condition"])
        except (KeyError, TypeError):
            return False
        return isinstance(row.get("instance_sha256"), str)

    def _damaged(self, what: str) -> CheckFailed:
        return CheckFailed(f"{self.run_dir}: {what} (the run is damaged; `guardeval verify {self.run_dir}` "
                           "lists every problem)")


def _line_pairs(folder: RunFolder, a: str, b: str) -> Iterator[tuple[int, bytes, bytes]]:
    """(line number, line of a, line of b), complete lines only (a torn last line is left out,
    as `iter_jsonl` does); ValueError when one file has more lines than the other."""
    ia, ib = folder.lines(a), folder.lines(b)
    lineno = 0
    while True:
        la, lb = next(ia, (0, b""))[1], next(ib, (0, b""))[1]
        done_a, done_b = not la.endswith(b"\n"), not lb.endswith(b"\n")
        if done_a or done_b:
            if done_a != done_b:
                raise ValueError("one file has more lines than the other")
            return
        lineno += 1
        yield lineno, la, lb


def _call_id_pair(sline: bytes, tline: bytes) -> tuple[str | None, str | None]:
    """(call id, request hash) of a schedule and a stimuli line in the writers' shape that
    agree on the call id; (None, None) when they are not (then both are parsed and checked)."""
    m = STIMULUS_LINE.fullmatch(tline)
    at = sline.find(b',"call_id":"')
    if m is None or at < 0 or sline[at + 12:at + 46] != m[1] + b'",':
        return None, None
    return m[1].decode(), m[2].decode()


def _check_rendering(folder: RunFolder, cohort: Cohort, config: GuardConfig, prompt: Prompt) -> None:
    """Re-render the first scheduled call; if it no longer matches the launch, refuse to go on."""
    first = next((rec for _, _, rec in iter_jsonl(folder, SCHEDULE)), None)
    if first is None:
        return
    frozen = next((rec for _, _, rec in iter_jsonl(folder, STIMULI)), {})
    body = make_renderer(config, prompt)(cohort.instance(first["base_id"], first["condition"]))
    if frozen.get("call_id") != first["call_id"] or canonical_sha256(body) != frozen.get("request_sha256"):
        raise InputError("the request re-rendered now differs from the one frozen at launch (stimuli.jsonl): the "
                         "guard config or the rendering changed; restore them, or start a new run with "
                         "`guardeval replicate`", path=folder.file(STIMULI), line=1)


def _default_concurrency(config: GuardConfig) -> int:
    # Each back-end says (mlx's one in-process model generates one call at a time).
    return config.backend_entry.default_concurrency


def backend_options() -> dict[str, bool]:
    """uvloop when installed: a cheaper event loop for thousands of concurrent calls."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def _prices(config: GuardConfig) -> Prices | None:
    if config.price_in_per_mtok is None or config.price_out_per_mtok is None:
        return None
    # Upper estimate per call: a 4k-token prompt is generous for guard prompts; refined by
    # the running mean once calls finish.
    per_call = 4000 / 1e6 * config.price_in_per_mtok + config.max_tokens / 1e6 * config.price_out_per_mtok
    return Prices(config.price_in_per_mtok, config.price_out_per_mtok, per_call)


def finish_message(outcome: RunOutcome) -> str:
    """The run's totals (not only this session's): `960/960 calls decided: ok 950, unparseable 10`."""
    text = f"{outcome.decided}/{outcome.total} calls decided"
    if outcome.statuses:
        text += ": " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.statuses.items()))
    if outcome.result.decided != outcome.decided:
        text += f" ({outcome.result.decided} in this session)"
    if outcome.retry.targets is not None:
        got = outcome.result.retried
        text += f"; retried {sum(got.values())} of {outcome.retry.n_targets} failed"
        if got:
            text += ": " + ", ".join(f"{k} {v}" for k, v in sorted(got.items()))
    return text


class RetryRecord(TypedDict):
    """`session.retry` of `outcome_json`: what `--retry-failed` targeted and what it decided."""

    statuses: list[str]
    targets: int
    rounds: dict[str, int]
    decided: int
    new_statuses: dict[str, int]


class SessionRecord(TypedDict):
    dispatched: int
    decided: int
    statuses: dict[str, int]
    recovered: int
    torn: list[str]
    retry: RetryRecord | None


class OutcomeRecord(TypedDict):
    """What `launch`, `resume` and `replicate` print with --json (`outcome_json`)."""

    run_dir: str
    total: int
    decided: int
    complete: bool
    statuses: dict[str, int]
    failure_causes: list[FailureCause]
    session: SessionRecord
    stop_reason: str | None
    fatal_message: str | None
    fingerprint: str | None


def outcome_json(outcome: RunOutcome) -> OutcomeRecord:
    """What `launch`, `resume` and `replicate` print with --json."""
    r = outcome.result
    return {"run_dir": str(outcome.run_dir), "total": outcome.total, "decided": outcome.decided,
            "complete": outcome.complete, "statuses": outcome.statuses, "failure_causes": outcome.failure_causes,
            "session": {"dispatched": r.dispatched, "decided": r.decided, "statuses": r.statuses,
                        "recovered": outcome.recovered, "torn": [str(p) for p in outcome.torn],
                        "retry": _retry_json(outcome)},
            "stop_reason": r.stop_reason, "fatal_message": r.fatal_message, "fingerprint": outcome.fingerprint}


def _retry_json(outcome: RunOutcome) -> RetryRecord | None:
    t = outcome.retry.targets
    if t is None:
        return None
    return {"statuses": list(t.statuses), "targets": len(t.calls),
            "rounds": {str(k): v for k, v in outcome.retry.rounds.items()},
            "decided": sum(outcome.result.retried.values()), "new_statuses": outcome.result.retried}


def raise_if_stopped(outcome: RunOutcome) -> None:
    r = outcome.result
    hint = f"resume with: guardeval resume {outcome.run_dir}"
    # The provider's own words, shown, never obeyed by the terminal.
    said = safe(r.fatal_message)
    if r.stop_reason == "write_failed":
        raise RunStopped(f"stopped: {said}")
    if r.stop_reason == "fatal":
        # A Python guard's own fatal error (python_blocked_loop) is not the provider's.
        whose = "guard" if (r.fatal_class or "").startswith("python_") else "provider"
        raise RunStopped(f"stopped by a fatal {whose} error: {said}. Fix the cause, then {hint}")
    if r.stop_reason == "unreachable":
        where = (" Is `guardeval sim-server` running? It listens on a free port: give the URL it printed as "
                 "--base-url." if outcome.simulated else "")
        raise RunStopped(f"stopped: the provider looks unreachable ({said}); calls left pending.{where} "
                         f"When it is back, {hint}")
    if r.stop_reason == "server_errors":
        raise RunStopped(f"stopped: the server kept answering with errors ({said}); calls left pending. "
                         f"Check the server (its log says why), then {hint}")
    if r.stop_reason == "unusable_answers":
        raise RunStopped(f"stopped: the server answered, but with nothing usable ({said}); calls left pending. "
                         f"Check that --base-url is an OpenAI-compatible /chat/completions server (`guardeval "
                         f"preflight --guard FILE` asks it once), then {hint}")
    if r.stop_reason == "guard_timeouts":
        raise RunStopped(f"stopped: the guard kept timing out ({said}); calls left pending. Make it faster or "
                         f"raise timeout_s in its config, then {hint}")
    if r.stop_reason == "guard_errors":
        raise RunStopped(f"stopped: the guard kept failing with its own error ({said}); calls left pending. Fix "
                         f"the guard (or give its config retry_on = [...] for an exception that waiting cures), "
                         f"then {hint}")
    if r.stop_reason == "rate_limited":
        raise RunStopped(f"stopped: the provider answered nothing but rate limits ({said}); calls left pending. "
                         f"When it serves again, {hint}")
    if r.stop_reason == "no_room":
        raise RunStopped(f"stopped: {said}; calls left pending. Free some space, then {hint}")
    if r.stop_reason == "budget":
        raise RunStopped(f"stopped: --max-cost reached. {hint}")
    if r.stop_reason and r.stop_reason.startswith("signal"):
        # A guard interrupted by the signal says why it had kept the run from answering it.
        why = f": {said}" if r.fatal_message else ""
        raise RunStopped(f"interrupted ({r.stop_reason}{why}); {hint}")
