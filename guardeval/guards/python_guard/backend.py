"""`backend = "python"`: a guard that is a Python function (docs/design.md §8).

The stimulus (`python_body`) is what the function is given: the callable's name, the chat
messages the prompt renders and the base's structured fields. It does not depend on the
function's code, so a run re-renders and verifies without importing it; the code's identity
(`resolve.provenance`: distribution, version, source SHA-256) is pinned by the manifest and
recorded in every attempt's response.

Sending: an `async def` function is awaited on the event loop, cut at `timeout_s`; one that
blocks the loop instead of awaiting is interrupted by a watchdog thread (`loop_watch`) and fails
as `python_blocked_loop`, a fatal error (the run stops, resumable).
A plain function runs on a daemon thread, at most `--concurrency` at once. Threads cannot be
killed: one still running at `timeout_s` is abandoned (the attempt is a `timeout`, retried like
any), keeps running until the function returns, and its result is dropped. At most
`--concurrency` abandoned threads may be alive at once; an attempt that would need more is a
fatal error (the run stops, resumable), so stuck threads never pile up past twice the
concurrency. Daemon threads never hold the process open at exit.

What the function returns: `str` (the text the prompt's parser reads), or a structured verdict
(`Verdict`, a dict, a dataclass) written in the parser's own format (`verdict_text`). Anything
else fails the attempt (transient, `python_return_type`) naming the type. An exception is a
transient `python_exception` recorded as its type and message (redacted, bounded, never a
traceback); guardeval's own `TransientError`, `CallFailed` and `FatalError` raised by the
function mean what they mean for any back-end.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import orjson

from guardeval.guards.base import Guard, Reply
from guardeval.guards.config import GuardConfig
from guardeval.guards.errors import AttemptError, FatalError, TransientError
from guardeval.guards.parsers.common import JSON_FIELDS
from guardeval.guards.prompts import Prompt
from guardeval.guards.python_guard import resolve
from guardeval.guards.python_guard.loop_watch import LoopBlocked, LoopWatch
from guardeval.guards.python_guard.output import Capture, Redirect
from guardeval.guards.python_guard.types import FIELDS, GuardInput
from guardeval.guards.redact import Redactor

MAX_ERROR_CHARS = 500        # of an exception's message, in the raw log
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


def describe_exception(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """`module.Type: message`, the message cut at `limit` characters; never the traceback."""
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ in ("builtins", None) else f"{cls.__module__}.{cls.__qualname__}"
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        said = "<unprintable>"
    cut = said[:limit] + (f"… ({len(said):,} characters)" if len(said) > limit else "")
    return f"{name[:200]}: {cut}" if said else name[:200]


class _Job:
    """One call of a sync function on its own daemon thread."""

    def __init__(self, fn: Callable[[GuardInput], Any], inp: GuardInput, done: anyio.Event,
                 token: Any, guard: PythonGuard, capture: Capture) -> None:
        self.fn, self.inp, self.done, self.token, self.guard = fn, inp, done, token, guard
        self.capture = capture
        self.value: Any = None
        self.error: AttemptError | None = None
        self.finished = False
        self.abandoned = False

    def run(self) -> None:
        self.capture.enter()   # this thread's own context: what it prints is this attempt's
        try:
            self.value = self.fn(self.inp)
        except BaseException as exc:  # noqa: BLE001 - everything a guard raises is recorded, not raised here
            # Converted here, in the thread: the traceback (and the frames' locals) goes with `exc`.
            self.error = self.guard.attempt_error(exc)
        finally:
            with self.guard.lock:
                self.finished = True
                abandoned = self.abandoned
                self.guard.abandoned.discard(self)
            self.inp = None  # type: ignore[assignment]
            if not abandoned:
                try:
                    anyio.from_thread.run_sync(self.done.set, token=self.token)
                except Exception:  # noqa: BLE001 - the loop is gone: nobody waits any more
                    pass


class PythonGuard(Guard):
    """`backend = "python"`, `callable = "package.module:function"`."""

    in_process = True

    def __init__(self, config: GuardConfig, prompt: Prompt, *, max_connections: int = 16) -> None:
        super().__init__(config, prompt)
        assert config.callable is not None
        self.fn = resolve.load(config.callable, where=config.source)
        self.provenance = resolve.provenance(config.callable, self.fn)
        # A function, or an object whose __call__ is `async def`.
        self.is_async = inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            type(self.fn).__call__)
        self.concurrency = max(1, max_connections)
        self.max_abandoned = self.concurrency
        self.lock = threading.Lock()
        self.abandoned: set[_Job] = set()
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
        if not self._redirected:
            Redirect.install()   # what the function prints is kept with its attempt (output.py)
            self._redirected = True
        capture = Capture()
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
        if self._redirected:
            Redirect.remove()
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
        if self._limiter is None:   # made inside the running loop
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        async with self._limiter:
            with self.lock:
                stuck = len(self.abandoned)
            if stuck >= self.max_abandoned:
                raise FatalError("python_threads", f"{stuck} calls of {self.config.callable} blocked past timeout_s "
                                 f"and their threads are still running (at most {self.max_abandoned}); the run "
                                 "stops here. Fix the function (or raise timeout_s), then resume")
            done = anyio.Event()
            job = _Job(self.fn, inp, done, anyio.lowlevel.current_token(), self, capture)
            thread = threading.Thread(target=job.run, name="guardeval-python-guard", daemon=True)
            thread.start()
            try:
                with anyio.move_on_after(self.config.timeout_s) as scope:
                    await done.wait()
            finally:
                # Timed out or cancelled: the thread cannot be stopped. It runs on, abandoned
                # (counted until it returns), and its result is dropped.
                with self.lock:
                    if not job.finished:
                        job.abandoned = True
                        self.abandoned.add(job)
            if scope.cancelled_caught and job.abandoned:
                raise self._timeout()
        if job.error is not None:
            raise job.error
        return job.value

    def attempt_error(self, exc: BaseException) -> AttemptError:
        """What an exception from the function means for the attempt (docs/design.md §7)."""
        if isinstance(exc, AttemptError):
            exc.with_traceback(None)
            return self._cleaned(exc)
        said = describe_exception(exc)
        safe = self._redact(said)
        if not isinstance(exc, Exception):   # SystemExit, KeyboardInterrupt raised by the guard
            return FatalError("python_exit", safe, redacted=safe is not said)
        return TransientError("python_exception", safe, redacted=safe is not said)

    def _cleaned(self, exc: AttemptError) -> AttemptError:
        """A guardeval error the function raised, its message bounded and redacted like any."""
        said = str(exc)
        cut = said[:MAX_ERROR_CHARS]
        safe = self._redact(cut)
        if safe is cut and cut == said:
            return exc
        return type(exc)(exc.error_class, safe, exc.reply, exc.retry_after, redacted=safe is not cut)

    def _read_return(self, value: Any, parser: str) -> Reply:
        """`_reply`, and a returned object that raises when it is read (a Mapping whose
        iteration raises, a dataclass that holds itself) fails the attempt naming the type,
        as any unreadable return does, instead of escaping the dispatcher."""
        try:
            return self._reply(value, parser)
        except AttemptError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever reading the guard's object raised
            raise TransientError("python_return_type", f"{self.config.callable} returned a "
                                 f"{type(value).__name__[:100]} that cannot be read: "
                                 f"{describe_exception(exc, 200)}") from None

    def _reply(self, value: Any, parser: str) -> Reply:
        kind = type(value).__name__
        stored: str | dict[str, Any]
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()   # never awaited: say so in the attempt, not as a warning at exit
            raise TransientError("python_return_type", f"{self.config.callable} returned a {kind[:100]}: an async "
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
            raise TransientError("python_return_type", f"{self.config.callable} returned a {kind[:100]}: expected "
                                 "str (the parser's text), a Verdict, a dict or a dataclass with the parser's fields")
        limit = self.config.max_response_bytes
        if len(content) > limit or len(content.encode("utf-8", "surrogatepass")) > limit:
            head = content.encode("utf-8", "surrogatepass")[:MAX_KEPT_BYTES].decode("utf-8", "replace")
            raise TransientError("response_too_large", f"{self.config.callable} returned more than "
                                 f"max_response_bytes ({limit:,} bytes)",
                                 Reply(status="local", raw=self._redact(head)))
        try:
            value_json = orjson.dumps(stored)
        except orjson.JSONEncodeError as exc:   # e.g. a str holding a lone surrogate
            raise TransientError("python_return_type", f"{self.config.callable} returned a {kind[:100]} that is not "
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
            raise TransientError("python_return_type", f"{self.config.callable} returned a {kind[:100]} that is "
                                 f"not JSON: {describe_exception(exc, 200)}") from None


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
