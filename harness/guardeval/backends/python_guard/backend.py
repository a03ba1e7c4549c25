"""`backend = "python"`: a guard that is a Python function (docs/design.md §8).

The stimulus (`python_body`) is what the function is given: the callable's name, the chat
messages the prompt renders and the base's structured fields. It does not depend on the
function's code, so a run re-renders and verifies without importing it; the code's identity
(`resolve.provenance`: distribution, version, source SHA-256) is pinned by the manifest and
recorded in every attempt's response.

Sending, `isolation = "thread"` (the default): an `async def` function is awaited on the event
loop, cut at `timeout_s`; one that blocks the loop instead of awaiting is interrupted by a
watchdog thread (`loop_watch`) and fails as `python_blocked_loop`, a fatal error (the run stops,
resumable). A plain function runs on a pool of at most `--concurrency` worker threads kept for
the run (`threads`), so what it keeps per thread is built once per worker. Threads cannot be
killed: one still running at `timeout_s` is abandoned (the attempt is a `timeout`, retried like
any), leaves the pool, keeps running until the function returns, and its result is dropped. At
most `--concurrency` abandoned threads may be alive at once; an attempt that would need more is
a fatal error (the run stops, resumable), so stuck threads never pile up past twice the
concurrency. Daemon threads never hold the process open at exit.

`isolation = "process"`: every call runs in one of at most `--concurrency` worker processes kept
for the run (`processes`, `worker`), each importing the guard's module once. The input and the
answer cross as JSON: the worker turns the return into its decision shape (the text, or the
verdict's fields) or refuses it naming its type (`python_return_type`), so nothing the guard
returns ever runs code here. Every answer names the call, the attempt and the worker's pid; any
other answer (a copy of the worker the guard forked) kills the worker and fails the attempt
(`python_worker_died`, the guard's own error: tried once more, on a fresh worker). What the call
writes to fds 1 and 2 is kept with its attempt. A call past `timeout_s` is a `timeout` and its
worker is killed with its process group, so nothing of it runs on; a worker that dies during a
call (a segfault, `os._exit`) fails that attempt the same way, naming how it ended. A worker
that cannot import the module, or does not finish starting within `start_timeout_s`
(`python_worker_start`), or finds a source other than the run's (`python_source_changed`: its
SHA-256 is checked as every worker starts, before the module is imported, and the module is
imported from the bytes hashed, so every attempt's answer comes from the pinned code), stops the
run (fatal, resumable).

What the function returns: `str` (the text the prompt's parser reads), or a structured verdict
(`Verdict`, a dict, a dataclass) written in the parser's own format (`verdict_text`). Anything
else fails the attempt (`python_return_type`) naming the type. An exception is a
`python_exception` recorded as its type and message (redacted, bounded, never a traceback).
These are the guard's own errors (`GuardError`), not an outage: the dispatcher tries the call
once more at once and then records it as `guard_error` (docs/design.md §7); an exception whose
type the config's `retry_on` names is transient instead (retried with back-off, for a guard
that calls a service). guardeval's own `TransientError`, `CallFailed`, `FatalError` and
`GuardError` raised by the function mean what they mean for any back-end.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import orjson

from guardeval.backends.base import Guard, Reply
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import AttemptError, CallFailed, FatalError, GuardError, TransientError
from guardeval.backends.parsers.common import JSON_FIELDS
from guardeval.backends.prompts import Prompt
from guardeval.backends.python_guard import resolve
from guardeval.backends.python_guard.describe import MAX_ERROR_CHARS, describe_exception
from guardeval.backends.python_guard.last_words import LastWords
from guardeval.backends.python_guard.loop_watch import LoopBlocked, LoopWatch
from guardeval.backends.python_guard.output import Capture, Redirect, received_record
from guardeval.backends.python_guard.processes import (
    ProcessWorkers,
    ProtocolError,
    SourceChanged,
    WorkerLost,
    WorkerStartFailed,
)
from guardeval.backends.python_guard.threads import Job, ThreadWorkers
from guardeval.backends.python_guard.types import FIELDS, GuardInput
from guardeval.backends.redact import Redactor

__all__ = ["MAX_ERROR_CHARS", "PythonGuard", "describe_exception", "python_body", "verdict_text"]

MAX_KEPT_BYTES = 2048        # of an answer over max_response_bytes (as for HTTP bodies)


def python_body(config: GuardConfig, prompt: Prompt, instance: Mapping[str, Any]) -> dict[str, Any]:
    """The stimulus for one instance: what the function receives, nothing secret. Deterministic."""
    return {
        "backend": "python",
        "callable": config.callable,
        "model": config.model,
        "parser": prompt.parser,
        "messages": prompt.render_messages(instance),
        "fields": {k: instance[k] for k in FIELDS},
    }


def verdict_text(verdict: Mapping[str, Any], parser: str) -> str:
    """A structured verdict in the parser's own format. For `ts-guard-tags`, tags when the three
    fields are valid; anything else (and every other parser) gets JSON, which the parser then
    judges strictly like any answer."""
    if parser == "ts-guard-tags" and _valid_three(verdict):
        mal, att, harm = (verdict[k] for k in JSON_FIELDS)
        yes = {True: "yes", False: "no"}
        return (f"<Malicious_User_Request> {yes[mal]} <\\Malicious_User_Request>\n"
                f"<Being_Attacked> {yes[att]} <\\Being_Attacked>\n"
                f"<Harmfulness_Rating> {float(harm):.1f} <\\Harmfulness_Rating>")
    return orjson.dumps(dict(verdict)).decode()


def _valid_three(v: Mapping[str, Any]) -> bool:
    if set(v) != set(JSON_FIELDS):
        return False
    mal, att, harm = (v[k] for k in JSON_FIELDS)
    return (type(mal) is bool and type(att) is bool and type(harm) in (int, float)
            and float(harm) in (0.0, 0.5, 1.0))


class PythonGuard(Guard):
    """`backend = "python"`, `callable = "package.module:function"`."""

    def __init__(self, config: GuardConfig, prompt: Prompt, *, max_connections: int = 16) -> None:
        super().__init__(config, prompt)
        assert config.callable is not None
        self.fn = resolve.load(config.callable, where=config.source)
        self.provenance = resolve.provenance(config.callable, self.fn)
        self.isolation = config.isolation
        # A function, or an object whose __call__ is `async def` (in a worker process, it runs
        # on the worker's own loop).
        coroutine = inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(type(self.fn).__call__)
        self.is_async = self.isolation == "thread" and coroutine
        self.concurrency = max(1, max_connections)
        self.max_abandoned = self.concurrency
        self._threads = ThreadWorkers(self.concurrency)
        self._processes = ProcessWorkers(config.callable, str(self.provenance["module"]), self.concurrency,
                                         max_bytes=2 * config.max_response_bytes + (64 << 10),
                                         start_timeout_s=config.start_timeout_s) \
            if self.isolation == "process" else None
        self._limiter: anyio.CapacityLimiter | None = None
        self._provenance_json = orjson.dumps(self.provenance, option=orjson.OPT_SORT_KEYS)
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        self._redact = Redactor(key)
        # An `async def` guard that blocks the loop is interrupted by a watchdog (loop_watch).
        self._watch = LoopWatch(config.callable, config.timeout_s, PythonGuard._call_async.__code__) \
            if self.is_async else None
        self._redirected = False
        self._blocked: str | None = None

    def render(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        return python_body(self.config, self.prompt, instance)

    async def send(self, body: Mapping[str, Any], call_id: str) -> Reply:
        inp = _input(body, call_id)
        if self._limiter is None:   # made inside the running loop
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        if self._processes is not None:
            return await self._send_to_process(self._processes, inp)
        if not self._redirected:
            Redirect.install()   # what the function prints is kept with its attempt (output.py)
            LastWords.install()  # a guard that ends the process is named as it does (last_words.py)
            self._redirected = True
        capture = Capture(self.config.callable)
        try:
            try:
                if self._blocked is not None:
                    # It blocked the loop once: every call of it would (those started meanwhile too).
                    raise FatalError("python_blocked_loop", self._blocked)
                value = await (self._call_async(inp, capture) if self.is_async else self._call_in_thread(inp, capture))
            except LoopBlocked as exc:
                self._blocked = str(exc)
                raise FatalError("python_blocked_loop", self._blocked) from None
            reply = self._read_return(value, inp.parser)
        except AttemptError as exc:
            exc.guard_output = capture.record(self._redact)
            raise
        reply.guard_output = capture.record(self._redact)
        return reply

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._threads.close()
        if self._processes is not None:
            await self._processes.close()
        if self._redirected:
            Redirect.remove()
            LastWords.remove()
            self._redirected = False

    def _timeout(self) -> TransientError:
        return TransientError("timeout", f"{self.config.callable} did not return within timeout_s "
                              f"({self.config.timeout_s:g} s)")

    async def _call_async(self, inp: GuardInput, capture: Capture) -> Any:
        if self._watch is not None:
            self._watch.start()   # on the loop's thread, once
        value: Any = None
        with anyio.move_on_after(self.config.timeout_s) as scope:
            token = capture.enter()
            try:
                value = await self.fn(inp)
            except (AttemptError, LoopBlocked):
                raise
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # noqa: BLE001 - what the guard raised, recorded
                raise self.attempt_error(exc) from None
            finally:
                capture.leave(token)
        if scope.cancelled_caught:
            raise self._timeout()
        return value

    async def _call_in_thread(self, inp: GuardInput, capture: Capture) -> Any:
        assert self._limiter is not None
        async with self._limiter:
            stuck = self._threads.abandoned
            if stuck >= self.max_abandoned:
                raise FatalError("python_threads", f"{stuck} calls of {self.config.callable} blocked past timeout_s "
                                 f"and their threads are still running (at most {self.max_abandoned}); the run "
                                 "stops here. Fix the function (or raise timeout_s), then resume")
            job = Job(self.fn, inp, capture, self.attempt_error)
            # Timed out or cancelled, the thread cannot be stopped: it runs on, abandoned
            # (counted until it returns), and its result is dropped.
            if not await self._threads.run(job, self.config.timeout_s):
                raise self._timeout()
        if job.error is not None:
            raise job.error
        return job.value

    async def _send_to_process(self, workers: ProcessWorkers, inp: GuardInput) -> Reply:
        name = self.config.callable
        assert self._limiter is not None
        async with self._limiter:
            try:
                answer = await workers.call(inp, self.config.timeout_s, self.provenance["source_sha256"])
            except TimeoutError:
                raise self._timeout() from None
            except ProtocolError as exc:
                raise GuardError("python_worker_died", f"the worker process running {name} broke the worker "
                                 f"protocol: it {exc}; it was killed and a fresh worker takes its "
                                 "place") from None
            except WorkerLost as exc:
                raise GuardError("python_worker_died", f"the worker process running {name} {exc} during the "
                                 "call; a fresh worker takes its place") from None
            except WorkerStartFailed as exc:
                said = self._redact(str(exc)[:MAX_ERROR_CHARS])
                raise FatalError("python_worker_start", f"a worker process could not start {name}: {said}. The run "
                                 "stops here; fix it, then resume") from None
            except SourceChanged as exc:
                raise FatalError("python_source_changed", f"the source of {self.provenance['module']} changed during "
                                 f"the run (SHA-256 {self.provenance['source_sha256']} at launch, {exc.now} in a worker "
                                 "started now): its answers would not be the launch's guard. Restore it, or resume "
                                 "with --allow-changed-callable") from None
        output = received_record(answer.get("output"), self._redact)
        try:
            value, returned = self._received(answer)
            reply = self._read_return(value, inp.parser, returned)
        except AttemptError as exc:
            exc.guard_output = output
            raise
        reply.guard_output = output
        return reply

    def _received(self, answer: dict[str, Any]) -> tuple[Any, str]:
        """The value a worker's answer carries (worker.py: JSON data, a str or a dict) and the
        name of the type returned, or the AttemptError the answer means."""
        kind, name = answer.get("kind"), self.config.callable
        returned = str(answer.get("returned"))[:100]
        if kind == "ok" and isinstance(answer.get("value"), (str, dict)):
            return answer["value"], returned
        if kind == "refused":
            why = str(answer.get("why"))[:300]
            if why == "not a decision shape":
                raise GuardError("python_return_type", f"{name} returned a {returned}: expected str (the parser's "
                                 "text), a Verdict, a dict or a dataclass with the parser's fields")
            raise GuardError("python_return_type", f"{name} returned a {returned} that cannot be sent from its "
                             f"worker process (it must be a str, or a verdict whose fields are JSON): {why}")
        if kind == "too_large" and type(answer.get("bytes")) is int:
            raise GuardError("response_too_large", f"{name} returned a {returned} of {answer['bytes']:,} bytes "
                             f"as JSON, more than max_response_bytes allows ({self.config.max_response_bytes:,} "
                             "bytes)")
        if kind == "raised" and answer.get("how") == "attempt" and isinstance(answer.get("error"), list) \
                and len(answer["error"]) == 4:
            cls_name, error_class, message, retry_after = answer["error"]
            cls = {"CallFailed": CallFailed, "FatalError": FatalError, "GuardError": GuardError}.get(str(cls_name),
                                                                                                 TransientError)
            retry = retry_after if type(retry_after) in (int, float) else None
            raise self._cleaned(cls(str(error_class)[:100], str(message), retry_after=retry))
        if kind == "raised":
            raise self._described(str(answer.get("said")), fatal=answer.get("how") == "exit")
        raise GuardError("python_worker_died", f"the worker process running {name} answered "
                         f"{str(kind)[:40]!r}")

    def attempt_error(self, exc: BaseException) -> AttemptError:
        """What an exception from the function means for the attempt (docs/design.md §7)."""
        if isinstance(exc, AttemptError):
            exc.with_traceback(None)
            return self._cleaned(exc)
        # SystemExit, KeyboardInterrupt raised by the guard: fatal.
        return self._described(describe_exception(exc), fatal=not isinstance(exc, Exception))

    def _described(self, said: str, *, fatal: bool) -> AttemptError:
        """An exception the guard raised, described (`describe_exception`): its own error, tried
        once more at once, unless the config's `retry_on` names its type (retried like an outage)."""
        safe = self._redact(said)
        if fatal:
            return FatalError("python_exit", safe, redacted=safe is not said)
        kind = TransientError if retried(said, self.config.retry_on) else GuardError
        return kind("python_exception", safe, redacted=safe is not said)

    def _cleaned(self, exc: AttemptError) -> AttemptError:
        """A guardeval error the function raised, its message bounded and redacted like any."""
        said = str(exc)
        cut = said[:MAX_ERROR_CHARS]
        safe = self._redact(cut)
        if safe is cut and cut == said:
            return exc
        return type(exc)(exc.error_class, safe, exc.reply, exc.retry_after, redacted=safe is not cut)

    def _read_return(self, value: Any, parser: str, returned: str | None = None) -> Reply:
        """`_reply`, and a returned object that raises when it is read (a Mapping whose
        iteration raises, a dataclass that holds itself) fails the attempt naming the type,
        as any unreadable return does, instead of escaping the dispatcher."""
        try:
            return self._reply(value, parser, returned)
        except AttemptError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever reading the guard's object raised
            raise GuardError("python_return_type", f"{self.config.callable} returned a "
                             f"{(returned or type(value).__name__)[:100]} that cannot be read: "
                             f"{describe_exception(exc, 200)}") from None

    def _reply(self, value: Any, parser: str, returned: str | None = None) -> Reply:
        # `returned`: the type's name in the worker process (`value` is then its JSON data).
        kind = returned or type(value).__name__
        stored: str | dict[str, Any]
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()   # never awaited: say so in the attempt, not as a warning at exit
            raise GuardError("python_return_type", f"{self.config.callable} returned a {kind[:100]}: an async "
                             "guard must be an `async def` function (it is then awaited on the event loop)")
        if isinstance(value, str):
            content, stored = value, value
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            stored = dataclasses.asdict(value)
            content = self._verdict_text(dataclasses.asdict(value), parser, kind)
        elif isinstance(value, Mapping):
            stored = dict(value)
            content = self._verdict_text(dict(value), parser, kind)
        else:
            raise GuardError("python_return_type", f"{self.config.callable} returned a {kind[:100]}: expected "
                             "str (the parser's text), a Verdict, a dict or a dataclass with the parser's fields")
        limit = self.config.max_response_bytes
        if len(content) > limit or len(content.encode("utf-8", "surrogatepass")) > limit:
            head = content.encode("utf-8", "surrogatepass")[:MAX_KEPT_BYTES].decode("utf-8", "replace")
            raise GuardError("response_too_large", f"{self.config.callable} returned more than "
                             f"max_response_bytes ({limit:,} bytes)",
                             Reply(status="local", raw=self._redact(head)))
        try:
            value_json = orjson.dumps(stored)
        except orjson.JSONEncodeError as exc:   # e.g. a str holding a lone surrogate
            raise GuardError("python_return_type", f"{self.config.callable} returned a {kind[:100]} that is not "
                             f"valid text: {describe_exception(exc, 200)}") from None
        raw_text = (b'{"callable":' + self._provenance_json + b',"returned":' + orjson.dumps(kind[:100])
                    + b',"value":' + value_json + b"}").decode()
        reply = Reply(status="local", raw=self._redact(raw_text), content=self._redact(content),
                      finish_reason="stop", usage={"cost": 0.0})
        reply.redacted = reply.raw is not raw_text or reply.content is not content
        return reply

    def _verdict_text(self, verdict: dict[str, Any], parser: str, kind: str) -> str:
        try:
            return verdict_text(verdict, parser)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise GuardError("python_return_type", f"{self.config.callable} returned a {kind[:100]} that is "
                             f"not JSON: {describe_exception(exc, 200)}") from None


def retried(described: str, names: Sequence[str] | None) -> bool:
    """Whether `retry_on` names the exception `describe_exception` described: its name, its
    module and name, or its top-level package and name (`httpx.ReadTimeout` for
    `httpx._exceptions.ReadTimeout`). Only the exception's own type is matched, not its bases:
    a worker process sends the description alone."""
    if not names:
        return False
    full = described.split(": ", 1)[0]
    parts = full.split(".")
    return any(n in (full, parts[-1], f"{parts[0]}.{parts[-1]}") for n in names)


def _input(body: Mapping[str, Any], call_id: str) -> GuardInput:
    """The function's own copy of the body (a fresh parse: what it mutates is not the run's)."""
    data = orjson.loads(orjson.dumps(body))
    fields = data.get("fields") or {}
    messages = data.get("messages")
    if not isinstance(messages, list) or not isinstance(fields, dict):
        raise FatalError("bad_request", "request body has no 'messages' list or 'fields' object")
    return GuardInput(messages=messages, call_id=call_id, parser=str(data.get("parser")),
                      user_request=str(fields.get("user_request")), history=fields.get("history"),
                      current_action=fields.get("current_action"), tool_descriptions=fields.get("tool_descriptions"))
