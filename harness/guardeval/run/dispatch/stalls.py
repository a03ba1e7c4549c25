"""When a provider gives nothing usable, stop the run (resumable) instead of trying for ever
(docs/design.md §7). Two rules:

* outage: `max(10, 2 x concurrency)` attempts in a row failed with connection errors,
  timeouts, 5xx or unusable answers, and no usable answer came in between. The stop says what
  the streak was: `server_errors` when 5xx answers are in it (the server answered: calling it
  unreachable would send the user looking in the wrong place); `unusable_answers` when the
  server answered with nothing a chat completion can be read from (`UNUSABLE`: a body that is
  not JSON, not an object or without choices, or one that closed or stalled after its status
  line); `guard_timeouts` when an in-process guard (python, mlx) kept missing its `timeout_s`
  (nothing was unreachable); `unreachable` only when no attempt got an HTTP answer;
* rate limited: nothing but 429s (and such failures) for `rate_limit_stop_s` seconds since the
  last answer. Waits are capped at `retry_max_s`, so a provider that refuses every request
  with a huge `Retry-After` would otherwise be asked once a `retry_max_s` for as long as the
  schedule lasts (days, for a large run).

An answer is anything else the provider answered: a reply, a failure of that call, an error
body. Calls in flight when a rule fires stay pending for `resume`.

A guard's own errors (`GuardError`: a python guard's exception, wrong return, dead worker) are
answers, not an outage; `GuardErrors` stops the run when `GUARD_ERROR_STREAK` calls in a row
ended in the same one (`guard_errors`): a guard that fails every call, or every worker that
dies, is found after a few dozen calls, not after the whole schedule.
"""

from __future__ import annotations

import time

from guardeval.run.folder.causes import guard_cause

DEFAULT_RATE_LIMIT_STOP_S = 600.0
NO_ANSWER = frozenset(("connection", "timeout"))
# Answered, but with nothing to read: the attempt's error classes (guardeval.backends.chat_http).
UNUSABLE = frozenset(("malformed", "body_cut", "body_timeout"))
# Calls in a row ending in the same guard error that stop the run. A guard that fails a third of
# its calls at random reaches it by chance about once in 3**20 (3.5 billion) calls.
GUARD_ERROR_STREAK = 20


def _kind(error_class: str) -> str | None:
    """What a failed attempt says about the provider: no answer, a server error, an unusable
    answer, or (None) an answer."""
    if error_class in NO_ANSWER:
        return "no_answer"
    if error_class.startswith("http_5"):
        return "server_error"
    return "unusable" if error_class in UNUSABLE else None


class Stalls:
    def __init__(self, concurrency: int, rate_limit_stop_s: float = DEFAULT_RATE_LIMIT_STOP_S, *,
                 in_process: bool = False) -> None:
        self.unreachable_limit = max(10, 2 * concurrency)
        self.rate_limit_stop_s = rate_limit_stop_s
        self.in_process = in_process            # the guard runs here: its timeouts are its own
        self.streak = 0                         # outage failures in a row
        self.kinds = {"no_answer": 0, "server_error": 0, "unusable": 0}   # of them, by kind
        self.last_answer = time.monotonic()
        self.limited = 0                        # 429s since the last answer
        self.failed_since = 0                   # other failures since the last answer

    def answered(self) -> None:
        self.streak = self.limited = self.failed_since = 0
        self.kinds = dict.fromkeys(self.kinds, 0)
        self.last_answer = time.monotonic()

    def failed(self, error_class: str, message: str) -> tuple[str, str] | None:
        """Note one failed attempt; (stop reason, message) when a rule now says stop."""
        if error_class == "http_429":
            self.limited += 1
            self.streak = 0   # the provider answered, if only to refuse: not an outage
            self.kinds = dict.fromkeys(self.kinds, 0)
            return self.check(message)
        kind = _kind(error_class)
        if kind is None:
            self.answered()     # a body came back that says what went wrong: not a stall
            return None
        self.streak += 1
        self.kinds[kind] += 1
        self.failed_since += 1
        if self.streak >= self.unreachable_limit:
            return self._outage(message)
        return self.check(message)

    def _outage(self, message: str) -> tuple[str, str]:
        n, k = self.streak, self.kinds
        if k["server_error"]:
            also = f", {k['unusable']} with nothing usable in the answer" if k["unusable"] else ""
            return "server_errors", (f"{n} attempts in a row failed, {k['server_error']} of them answered with a "
                                     f"server error{also}; last: {message}")
        if k["unusable"]:
            return "unusable_answers", (f"{n} attempts in a row failed, {k['unusable']} of them answered with nothing "
                                        "a chat completion can be read from (an empty or cut body, no JSON object, "
                                        f"no choices); last: {message}")
        if self.in_process:
            return "guard_timeouts", (f"{n} attempts in a row timed out: the guard did not return within its "
                                      f"timeout_s; last: {message}")
        return "unreachable", f"{n} attempts in a row got no answer; last: {message}"

    def check(self, last: str | None = None) -> tuple[str, str] | None:
        """The rate-limit rule, also asked now and then while every call waits."""
        quiet = time.monotonic() - self.last_answer
        if not self.limited or quiet < self.rate_limit_stop_s:
            return None
        other = f" and {self.failed_since} other failures" if self.failed_since else ""
        return "rate_limited", (f"no answer for {quiet:.0f} s (the limit is {self.rate_limit_stop_s:g} s, "
                                f"--rate-limit-stop): {self.limited} attempts answered 429{other}"
                                + (f"; last: {last}" if last else ""))


class GuardErrors:
    """Calls in a row whose guard failed them with the same error (its cause: the exception's
    type, or the error class), counted as calls end."""

    def __init__(self, limit: int = GUARD_ERROR_STREAK) -> None:
        self.limit = limit
        self.cause: str | None = None
        self.streak = 0

    def ended(self) -> None:
        """A call ended otherwise."""
        self.cause, self.streak = None, 0

    def failed(self, error_class: str, message: str) -> tuple[str, str] | None:
        """Note one call ended by a guard error; (stop reason, message) when the streak is long enough."""
        cause = f"{error_class}: {guard_cause(error_class, message)}"
        self.streak = self.streak + 1 if cause == self.cause else 1
        self.cause = cause
        if self.streak < self.limit:
            return None
        what = "worker processes died" if error_class == "python_worker_died" else "the guard failed"
        return "guard_errors", (f"{self.streak} calls in a row ended with the same guard error ({what}); "
                                f"last: {error_class}: {message}")
