"""Bounded async dispatch of scheduled calls (docs/design.md §7).

Structure: one task group owns every call task; a producer admits calls through a capacity
limiter (so at most `concurrency` tasks exist: memory is bounded by the schedule, not by the
backlog) and an optional requests-per-minute spacer. Each call retries transient failures with
tenacity (jittered exponential backoff, `Retry-After` honoured) and logs every attempt to the
hash-chained raw log before its decision. A guard's own error (`GuardError`) is tried once more
at once and no more: the call is then `guard_error`, and a streak of identical ones stops the
run (`stalls.GuardErrors`). A fatal error, the budget, `--max-calls` or a signal
stops admission; what is in flight finishes or is cancelled, and the run stays resumable.

Adaptive concurrency (on unless `adaptive=False`): attempts pass a wire gate whose limit
starts at `concurrency` and is moved by `guardeval.run.dispatch.adaptive.RateController`: a 429 that load
explains cuts it (to what the provider was serving) and pauses all new attempts for its
`Retry-After`; a 429 within the background rate that the controller learned only delays its own
call. The limit grows back by about one request per round trip while it binds.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from guardeval.backends.base import Guard, Reply, Usage
from guardeval.backends.errors import AttemptError, CallFailed, FatalError, GuardError, TransientError
from guardeval.backends.parsers import Parsed
from guardeval.canon import canonical_bytes, sha256_hex
from guardeval.cohorts.model import Instance
from guardeval.errors import WriteFailed
from guardeval.lru import LRU
from guardeval.run.dispatch.adaptive import RateController, WireGate
from guardeval.run.dispatch.budget import Budget, Gate
from guardeval.run.dispatch.decide import decide
from guardeval.run.dispatch.progress import RunProgress
from guardeval.run.dispatch.room import Room
from guardeval.run.dispatch.stalls import DEFAULT_RATE_LIMIT_STOP_S, GuardErrors, Stalls
from guardeval.run.folder import supersede
from guardeval.run.folder.layout import utcnow
from guardeval.run.folder.records import Attempt
from guardeval.run.folder.spend import Prices, Unpriced
from guardeval.run.folder.writer import RunWriter
from guardeval.run.schedule import ScheduleRow

BODY_CACHE = 1024   # distinct instances whose rendered body is kept (a small cohort: all of them)
# Stops that leave the calls in flight pending: the provider gives nothing usable, or the disk
# could not record what it gave.
HALTS = frozenset({"unreachable", "server_errors", "unusable_answers", "guard_timeouts", "guard_errors",
                   "rate_limited", "no_room"})


@dataclass
class DispatchOptions:
    concurrency: int = 16
    rpm: float | None = None
    max_cost: float | None = None
    max_calls: int | None = None
    max_attempts: int = 6
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    prices: Prices | None = None        # the guard config's, for answers the provider does not price
    progress: bool = True
    handle_signals: bool = True
    adaptive: bool = True               # False: --fixed-concurrency (429s only back off per call)
    simulated_spend: bool = False       # the simulated provider's costs: labelled as such in progress
    rate_limit_stop_s: float = DEFAULT_RATE_LIMIT_STOP_S   # nothing but 429s this long: stop (resumable)
    max_response_bytes: int = 4 << 20   # the config's: room kept on the disk for each answer
    # The run's budget and progress display. A study (guardeval.study) dispatching several runs
    # in one loop passes a budget that also holds the study's shared limit, and a progress
    # line that its one display draws.
    budget_type: Callable[..., Budget] = Budget
    progress_type: Callable[..., RunProgress] = RunProgress


@dataclass
class DispatchResult:
    dispatched: int = 0
    decided: int = 0
    stop_reason: str | None = None      # None = every pending call was handled
    fatal_message: str | None = None
    fatal_class: str | None = None      # the fatal error's class (python_blocked_loop is the guard's own)
    statuses: dict[str, int] = field(default_factory=dict)
    retried: dict[str, int] = field(default_factory=dict)   # new decisions of retried calls, by status
    min_concurrency: int = 0            # lowest adaptive limit reached
    rate_limited: int = 0               # attempts answered 429
    limit_cuts: int = 0                 # 429 episodes that cut the limit
    limit_restores: int = 0             # cuts undone: their 429s proved to be background
    background_429: float | None = None  # learned share of 429s that load does not explain
    budget_unenforceable: bool = False  # --max-cost given, but nothing prices the calls
    budget_estimated: bool = False      # --max-cost counts unpriced answers at the config's prices


class _Spacer:
    """Requests-per-minute cap: attempts start on a grid of 60/rpm-second slots, one per slot and
    never before it (a start that a busy event loop delays does not push the later slots back,
    so over a minute the rate is the cap)."""

    def __init__(self, rpm: float | None) -> None:
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = anyio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            await anyio.sleep(delay)


class _Wait:
    """Jittered exponential backoff, never shorter than the server's Retry-After, never longer
    than `maximum` (`retry_max_s`): a Retry-After of 1e9, `inf` or a far-future date is the
    provider's text, not an order to sleep for ever (docs/design.md §7).

    `offset` counts attempts made before tenacity took over (the first attempt runs outside
    it: the common, successful path then pays nothing for retry bookkeeping). With `paced`
    (adaptive concurrency), a 429 that says when to come back is retried then, plus a little
    jitter: the shared limit and the global Retry-After pause already slow every call down, and
    an exponential wait on top would only leave the provider's capacity unused.
    """

    def __init__(self, initial: float, maximum: float, offset: int = 0, paced: bool = False) -> None:
        self.initial, self.maximum, self.offset, self.paced = initial, maximum, offset, paced

    def delay(self, failed_attempts: int, exc: BaseException | None) -> float:
        retry_after = getattr(exc, "retry_after", None)
        if self.paced and retry_after is not None and getattr(exc, "error_class", None) == "http_429":
            return min(self.maximum, retry_after + random.uniform(0, self.initial / 10))
        # The exponent is bounded so that a config with thousands of attempts cannot overflow.
        expo = self.initial * 2.0 ** min(failed_attempts - 1, 64)
        floor = retry_after if retry_after is not None else 0.0
        return min(self.maximum, max(expo, floor) + random.uniform(0, self.initial))

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.delay(state.attempt_number + self.offset, exc)


class _CircuitOpen(Exception):
    """Raised inside a call when the breaker has opened: end the call without a decision."""


class _Ended(Exception):
    """Raised inside a call whose final attempt is recorded: no more attempts."""


class Dispatcher:
    def __init__(self, *, guard: Guard, writer: RunWriter, instance_for: Callable[[ScheduleRow], Instance],
                 parser: Callable[[str | None, str | None], Parsed], options: DispatchOptions) -> None:
        self.guard, self.writer, self.instance_for = guard, writer, instance_for
        self.parser, self.opt = parser, options
        self._raw_fields = guard.config.backend_entry.raw_fields
        # Each pending row carries its frozen `request_sha256` (stimuli.jsonl); it is kept here
        # only while its call is in flight (for `_finish`), so this stays as small as --concurrency.
        self.expected_sha: dict[str, str] = {}
        # A retried call's live decision (`supersede`), while the call is in flight: its new one supersedes it.
        self._supersedes: dict[str, supersede.Live] = {}
        self.result = DispatchResult()
        self.progress: RunProgress | None = None
        self._spacer = _Spacer(options.rpm)
        self._stop: str | None = None
        self._in_flight = 0
        self.budget = options.budget_type(options.max_cost, options.prices)
        # Rendered bodies by instance (repetitions and retries share one), bounded: a million-call
        # run has ~100,000 distinct instances, and a body is only needed while its calls run.
        self._bodies: LRU[str, tuple[dict[str, Any], str]] = LRU(BODY_CACHE)
        self._request_json: LRU[str, bytes] = LRU(BODY_CACHE)   # request_sha256 -> canonical body bytes
        self._empty_retried: set[str] = set()   # calls in flight already retried once for empty content
        self._stalls = Stalls(options.concurrency, options.rate_limit_stop_s, in_process=guard.in_process)
        self._guard_errors = GuardErrors()
        self._guard_failed: set[str] = set()    # calls in flight whose guard already failed once
        self._halted = anyio.Event()    # set by a stop in HALTS: waiting calls give up at once
        self._room = Room(writer.folder, options.max_response_bytes)
        self._largest_request = 8 << 10     # before the first body is rendered
        # Adaptive concurrency: a gate on attempts in flight, its limit set by the controller.
        self._control = RateController(max(1, options.concurrency))
        self._gate = WireGate(self._control.limit)
        self._pause_until = 0.0         # Retry-After of a load-driven 429, honoured by every new attempt
        self.result.min_concurrency = self._gate.capacity
        self._calls_scope: anyio.CancelScope | None = None
        self._scope: anyio.CancelScope | None = None

    # -- public ------------------------------------------------------------------------------
    async def run(self, pending: Iterable[ScheduleRow], *, total: int, already: int,
                  spent_before: float = 0.0, unpriced_before: Unpriced | None = None,
                  retrying: int = 0) -> DispatchResult:
        self.budget = self.opt.budget_type(self.opt.max_cost, self.opt.prices, spent=spent_before,
                                           unpriced=unpriced_before)
        limiter = anyio.Semaphore(max(1, self.opt.concurrency))
        with self.opt.progress_type(total, already, enabled=self.opt.progress,
                                    simulated_spend=self.opt.simulated_spend, retrying=retrying) as progress:
            self.progress = progress
            progress.spend = self.budget.total
            if self.opt.max_calls is not None:
                progress.goal = already + self.opt.max_calls     # a pilot: its ETA is to its own end
            if self.opt.adaptive:
                progress.wire = f"c={self._gate.capacity}/{self.opt.concurrency}"
            async with anyio.create_task_group() as tg:
                self._scope = tg.cancel_scope
                if self.opt.handle_signals:
                    tg.start_soon(self._watch_signals)
                tg.start_soon(self._ticker)
                async with anyio.create_task_group() as calls:
                    self._calls_scope = calls.cancel_scope
                    for row in pending:
                        await limiter.acquire()
                        if not await self._admit():
                            limiter.release()
                            break
                        self._in_flight += 1
                        self.result.dispatched += 1
                        calls.start_soon(self._call_task, row, limiter)
                tg.cancel_scope.cancel()  # stop the signal watcher and ticker
        return self.result

    @property
    def in_flight(self) -> int:
        """Calls admitted and not yet ended."""
        return self._in_flight

    def interrupt(self, reason: str) -> None:
        """Stop now, as a signal does (`reason`: `signal SIGTERM`): admission ends and the calls
        in flight are cancelled; they stay pending for `resume`. For whoever watches the signals
        when this dispatcher does not (a study's several runs in one loop)."""
        self._stop = self.result.stop_reason = reason
        if self._scope is not None:
            self._scope.cancel()

    # -- admission -------------------------------------------------------------------------
    async def _admit(self) -> bool:
        """May one more call start? Waits while the budget cannot be judged yet."""
        while True:
            if self._stop:
                return False
            if self.opt.max_calls is not None and self.result.dispatched >= self.opt.max_calls:
                self._stop = "max_calls"
                return False
            short = self._room.shortfall(self._in_flight + 1, self._largest_request)
            if short is not None:
                if self._in_flight:
                    await anyio.sleep(0.01)   # room for fewer at once: wait for those in flight
                    continue
                self._halt("no_room", short)
                return False
            gate = self.budget.gate(self._in_flight)
            if gate is Gate.WAIT:
                # No price known and nothing answered yet: one call at a time until something is.
                await anyio.sleep(0.01)
                continue
            if gate is Gate.STOP:
                self._stop = self.result.stop_reason = "budget"
                return False
            if self.budget.unenforceable and not self.result.budget_unenforceable:
                self.result.budget_unenforceable = True
                self._note(f"--max-cost ${self.opt.max_cost:g} cannot be enforced: the provider reports no cost "
                           "and the guard config sets no prices (price_in_per_mtok, price_out_per_mtok); calls go on "
                           "at full concurrency")
            return True

    def _note(self, message: str) -> None:
        """Said once, on stderr and in events.jsonl."""
        self.writer.event("note", message=message)
        if self.progress is not None:
            self.progress.note(message)

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.interrupt(f"signal {signal.Signals(signum).name}")
                return

    def _halt(self, reason: str, message: str) -> None:
        """Stop admitting calls; those in flight or waiting to retry stay pending for `resume`."""
        if self._stop not in HALTS and self.result.stop_reason is None:   # a fatal error or the budget says more
            self._stop = self.result.stop_reason = reason
            self.result.fatal_message = message
        self._halted.set()

    async def _sleep(self, delay: float) -> None:
        """A wait between attempts that a halt cuts short (the call then stays pending)."""
        with anyio.move_on_after(delay):
            await self._halted.wait()
        if self._halted.is_set():
            raise _CircuitOpen()

    async def _ticker(self) -> None:
        # Keeps the display moving (rate, ETA) even when no call finishes for a while.
        while True:
            await anyio.sleep(0.5)
            if not self._halted.is_set() and (stall := self._stalls.check()) is not None:
                self._halt(*stall)   # every call is waiting out a 429: nothing new will say so
            try:
                self.writer.flush()
            except WriteFailed as exc:
                self._write_failed(exc)
            if self.progress is not None:
                self.progress.refresh()

    # -- one call ----------------------------------------------------------------------------
    def _write_failed(self, exc: WriteFailed) -> None:
        """The run folder takes no more writes (a full disk): stop now. Calls in flight are
        cancelled, since an answer that cannot be logged would be paid for and lost; they stay
        pending for `resume`."""
        if self._stop != "write_failed":
            self._stop = self.result.stop_reason = "write_failed"
            self.result.fatal_message = str(exc)
        if self._calls_scope is not None:
            self._calls_scope.cancel()

    async def _call_task(self, row: ScheduleRow, limiter: anyio.Semaphore) -> None:
        try:
            await self._call(row)
        except WriteFailed as exc:
            self._write_failed(exc)
        finally:
            self.expected_sha.pop(row["call_id"], None)
            self._supersedes.pop(row["call_id"], None)
            self._empty_retried.discard(row["call_id"])
            self._guard_failed.discard(row["call_id"])
            self._in_flight -= 1
            limiter.release()

    async def _call(self, row: ScheduleRow) -> None:
        call_id = row["call_id"]
        expected = self.expected_sha[call_id] = row["request_sha256"]
        if "supersedes" in row:
            self._supersedes[call_id] = row["supersedes"]
        # Repetitions of one instance send the same body: render and hash it once.
        cached = self._bodies.get(row["instance_sha256"])
        if cached is None:
            body = self.guard.render(self.instance_for(row))
            data = canonical_bytes(body)
            cached = self._bodies.put(row["instance_sha256"], (body, sha256_hex(data)))
            self._request_json.put(cached[1], data)
            self._largest_request = max(self._largest_request, len(data))
        body, request_sha = cached
        if request_sha != expected:
            # The re-rendered stimulus is not the one frozen at launch: never send it.
            rec = self._record(call_id, body, request_sha, started=utcnow(), t0=time.monotonic(),
                               outcome="not_sent", final=True,
                               error_class="replay_mismatch",
                               error="re-rendered request differs from stimuli.jsonl; not sent")
            self._finish(rec)
            return
        max_attempts = self.opt.max_attempts
        wait = _Wait(self.opt.retry_initial_s, self.opt.retry_max_s, offset=1, paced=self.opt.adaptive)
        try:
            try:
                await self._try(call_id, body, request_sha, last=max_attempts <= 1)
                return
            except TransientError as exc:
                if max_attempts <= 1:
                    return  # recorded as the final attempt; decision `exhausted` written
                await self._sleep(wait.delay(1, exc))
            retrying = AsyncRetrying(stop=stop_after_attempt(max_attempts - 1), wait=wait, sleep=self._sleep,
                                     retry=retry_if_exception_type(TransientError), reraise=True)
            async for attempt in retrying:
                with attempt:
                    n = attempt.retry_state.attempt_number + 1
                    await self._try(call_id, body, request_sha, last=n >= max_attempts)
        except (TransientError, GuardError, _Ended):
            pass  # recorded as the final attempt; decision `exhausted` or `guard_error` already written
        except _CircuitOpen:
            pass  # left pending: the provider looks unreachable or rate-limits all, or no room to log
        except FatalError as exc:
            # After --max-calls has closed admission (`_stop` set, no stop reason) a fatal error
            # must still stop the run: a pilot that met a 401 did not succeed.
            if self.result.stop_reason is None:
                self._stop = self.result.stop_reason = "fatal"
                self.result.fatal_message, self.result.fatal_class = str(exc), exc.error_class

    async def _try(self, call_id: str, body: dict[str, Any], request_sha: str, *, last: bool) -> None:
        """One attempt; when the guard's own error fails it, one more at once, the call's last:
        an exception or a wrong return is the guard's defect (or an input it cannot read), which
        waiting does not cure (docs/design.md §7)."""
        try:
            await self._attempt(call_id, body, request_sha, last=last)
        except GuardError:
            if last or call_id in self._guard_failed:
                raise
            self._guard_failed.add(call_id)
            try:
                await self._attempt(call_id, body, request_sha, last=True)
            except (TransientError, GuardError):
                raise _Ended() from None

    async def _attempt(self, call_id: str, body: dict[str, Any], request_sha: str, *, last: bool) -> None:
        if self._halted.is_set():
            raise _CircuitOpen()
        await self._spacer.wait()
        await self._pass_gate()
        request = self._request_json.get(request_sha)
        size = len(request) if request is not None else self._largest_request
        if self._halted.is_set() or (short := self._room.shortfall(self._gate.active, size)) is not None:
            self._gate.release()
            if not self._halted.is_set():
                self._halt("no_room", short or "")
            raise _CircuitOpen()
        started, t0 = utcnow(), time.monotonic()
        in_flight = self._gate.active   # this attempt included: the level the provider sees it at
        try:
            try:
                reply = await self.guard.send(body, call_id)
            finally:
                self._gate.release()
        except TransientError as exc:
            if (stall := self._stalls.failed(exc.error_class, str(exc))) is not None:
                self._halt(*stall)
            if exc.error_class == "http_429":
                self._on_rate_limited(t0, exc.retry_after, in_flight)
            # While the provider looks down (or refuses everything), a call's last failure is not
            # final: it stays pending for `resume` instead of being written off as `exhausted`.
            final = last and not self._halted.is_set()
            rec = self._record(call_id, body, request_sha, started=started, t0=t0, outcome="transient",
                               final=final, exc=exc)
            if final:
                self._finish(rec)
            elif self._halted.is_set():
                raise _CircuitOpen() from None
            elif self.progress is not None:
                self.progress.retry()
            raise
        except GuardError as exc:
            # The guard answered, with its own error: not an outage. Final on the call's last
            # attempt, or on its second guard error (`_try`).
            self._stalls.answered()
            final = last or call_id in self._guard_failed
            rec = self._record(call_id, body, request_sha, started=started, t0=t0, outcome="guard_error",
                               final=final, exc=exc)
            if final:
                self._finish(rec)
                if (stop := self._guard_errors.failed(exc.error_class, str(exc))) is not None:
                    self._halt(*stop)
            elif self.progress is not None:
                self.progress.retry()
            raise
        except FatalError as exc:
            self._stalls.answered()
            self._record(call_id, body, request_sha, started=started, t0=t0, outcome="fatal", final=False, exc=exc)
            raise
        except CallFailed as exc:
            self._stalls.answered()
            self._answered(t0, in_flight)
            rec = self._record(call_id, body, request_sha, started=started, t0=t0, outcome="call_failed",
                               final=True, exc=exc)
            self._finish(rec)
            return
        self._stalls.answered()
        self._answered(t0, in_flight)
        if not last and _empty_answer(reply) and call_id not in self._empty_retried:
            # Documented: a provider warming up may answer with no content. Retried once; a
            # second empty answer is scored (unparseable) like any other.
            self._empty_retried.add(call_id)
            self._record(call_id, body, request_sha, started=started, t0=t0, outcome="transient", final=False,
                         reply=reply, error_class="empty_content",
                         error="empty content with finish_reason stop; retried once")
            if self.progress is not None:
                self.progress.retry()
            raise TransientError("empty_content", "empty content with finish_reason stop", reply)
        rec = self._record(call_id, body, request_sha, started=started, t0=t0, outcome="reply", final=True,
                           reply=reply)
        self._finish(rec)

    async def _pass_gate(self) -> None:
        """Take a slot under the adaptive limit, outside any Retry-After pause (a pause can
        begin while a call waits for its slot, so it is checked again once the slot is held)."""
        while True:
            while (delay := self._pause_until - time.monotonic()) > 0:
                await self._sleep(delay)
            await self._gate.acquire()
            if self._pause_until <= time.monotonic():
                return
            self._gate.release()

    def _answered(self, t0: float, in_flight: int) -> None:
        """An answer that was not a rate limit: the controller may grow the limit."""
        if self.opt.adaptive:
            self._control.answered(t0, time.monotonic(), saturated=self._gate.saturated, in_flight=in_flight)
            self._follow_limit()

    def _on_rate_limited(self, t0: float, retry_after: float | None, in_flight: int) -> None:
        self.result.rate_limited += 1
        if not self.opt.adaptive:
            return
        now = time.monotonic()
        if self._control.rate_limited(t0, now, in_flight=in_flight) and retry_after:
            self._pause_until = max(self._pause_until, now + min(retry_after, self.opt.retry_max_s))
        self._follow_limit()

    def _follow_limit(self) -> None:
        """Copy the controller's limit to the gate (waking whoever now fits) and to the result."""
        control, gate = self._control, self._gate
        if gate.limit != control.limit:
            gate.limit = control.limit
            gate.wake()
            if self.progress is not None:
                self.progress.wire = f"c={gate.capacity}/{self.opt.concurrency}"
        self.result.min_concurrency = control.min_capacity
        self.result.limit_cuts = control.cuts
        self.result.limit_restores = control.restores
        self.result.background_429 = control.background

    def _record(self, call_id: str, body: dict[str, Any], request_sha: str, *, started: str, t0: float,
                outcome: str, final: bool, reply: Reply | None = None, exc: AttemptError | None = None,
                error_class: str | None = None, error: str | None = None) -> tuple[Attempt, int, str]:
        if exc is not None:
            reply = reply or exc.reply
            error_class, error = exc.error_class, str(exc)
        response = reply.raw if reply is not None else None
        if response is not None:
            self._room.saw_answer(len(response))
        usage: Usage = reply.usage.copy() if reply is not None else {}
        added = self.budget.charge(usage, answered=outcome == "reply")
        if added and self.progress is not None:
            self.progress.add_spend(added)
        if self.budget.estimated and not self.result.budget_estimated:
            self.result.budget_estimated = True
            self._note(f"the provider reports no cost: --max-cost ${self.opt.max_cost:g} counts its answers at the "
                       "guard config's prices (price_in_per_mtok, price_out_per_mtok), an estimate")
        rec: Attempt = {
            "call_id": call_id,
            "attempt": self.writer.state.attempts.get(call_id, 0) + 1,
            "started": started, "finished": utcnow(),
            "request_sha256": request_sha,
            "status": reply.status if reply is not None else None,
            "response": response,
            "response_sha256": sha256_hex(response.encode("utf-8")) if response is not None else None,
            "content": reply.content if reply is not None else None,
            "finish_reason": reply.finish_reason if reply is not None else None,
            "native_finish_reason": reply.native_finish_reason if reply is not None else None,
            "generation_id": reply.generation_id if reply is not None else None,
            "error_class": error_class, "error": error,
            "latency_s": round(time.monotonic() - t0, 6),
            "usage": usage,
            "provider": reply.provider if reply is not None else None,
            "answers_call_id": reply.answers_call_id if reply is not None else None,
            "outcome": outcome, "final": final,
        }
        if reply is not None:
            # What the back-end adds to the line (a router's metadata, say): its record's, read by `decide`.
            cast(dict[str, Any], rec).update(self._raw_fields(reply))
        output = (reply.guard_output if reply is not None else None) or (exc.guard_output if exc is not None else None)
        if output:
            # What a python guard printed during the attempt, kept off the command's own output.
            rec["guard_output"] = output
        if (reply is not None and reply.redacted) or (exc is not None and exc.redacted):
            # The API key was cut out of this line (docs/design.md §11): `response` is what was
            # received less the key, and `response_sha256` is of the text stored here.
            rec["redacted"] = True
        # An evicted body (a call retried for long while thousands of others ran) is serialised again.
        request_json = self._request_json.get(request_sha) or canonical_bytes(body)
        seq, line_sha = self.writer.append_raw(rec, request_json=request_json)
        rec["seq"] = seq
        return rec, seq, line_sha

    def _finish(self, logged: tuple[Attempt, int, str]) -> None:
        rec, _, line_sha = logged
        decision = decide(rec, line_sha, expected_request_sha256=self.expected_sha[rec["call_id"]],
                          parser=self.parser, backend=self.guard.config.backend,
                          allowed_providers=self.guard.allowed_providers)
        st = decision["status"]
        old = self._supersedes.get(rec["call_id"])
        if old is not None:
            decision = supersede.mark(decision, old)
            self.result.retried[st] = self.result.retried.get(st, 0) + 1
        self.writer.append_decision(decision)
        if st != "guard_error":
            self._guard_errors.ended()
        self.result.decided += 1
        self.result.statuses[st] = self.result.statuses.get(st, 0) + 1
        if self.progress is not None:
            self.progress.call_done(failed=st != "ok", quarantined=decision["quarantine_reason"] is not None,
                                    retried=old is not None)


def _empty_answer(reply: Reply) -> bool:
    """An HTTP answer with no content although the model says it stopped normally."""
    return (reply.status == 200 and reply.finish_reason == "stop"
            and (reply.content is None or not reply.content.strip()))
