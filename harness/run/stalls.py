"""When a provider gives nothing usable, stop the run (resumable) instead of trying for ever
(docs/design.md §7). Two rules:

* outage: `max(10, 2 x concurrency)` attempts in a row failed with connection errors,
  timeouts or 5xx, and no answer came in between;
* rate limited: nothing but 429s (and such failures) for `rate_limit_stop_s` seconds since the
  last answer. Waits are capped at `retry_max_s`, so a provider that refuses every request
  with a huge `Retry-After` would otherwise be asked once a `retry_max_s` for as long as the
  schedule lasts (days, for a large run).

An answer is anything the provider answered: a reply, a failure of that call, a malformed or
error body. Calls in flight when a rule fires stay pending for `resume`.
"""

from __future__ import annotations

import time

DEFAULT_RATE_LIMIT_STOP_S = 600.0


def _unreachable(error_class: str) -> bool:
    return error_class in ("connection", "timeout") or error_class.startswith("http_5")


class Stalls:
    def __init__(self, concurrency: int, rate_limit_stop_s: float = DEFAULT_RATE_LIMIT_STOP_S) -> None:
        self.unreachable_limit = max(10, 2 * concurrency)
        self.rate_limit_stop_s = rate_limit_stop_s
        self.streak = 0                         # outage failures in a row
        self.last_answer = time.monotonic()
        self.limited = 0                        # 429s since the last answer
        self.failed_since = 0                   # other failures since the last answer

    def answered(self) -> None:
        self.streak = self.limited = self.failed_since = 0
        self.last_answer = time.monotonic()

    def failed(self, error_class: str, message: str) -> tuple[str, str] | None:
        """Note one failed attempt; (stop reason, message) when a rule now says stop."""
        if error_class == "http_429":
            self.limited += 1
            self.streak = 0     # the provider answered, if only to refuse: not an outage
            return self.check(message)
        if not _unreachable(error_class):
            self.answered()     # a body came back, only not a usable one: not a stall
            return None
        self.streak += 1
        self.failed_since += 1
        if self.streak >= self.unreachable_limit:
            return "unreachable", f"{self.streak} attempts in a row failed with no answer in between; last: {message}"
        return self.check(message)

    def check(self, last: str | None = None) -> tuple[str, str] | None:
        """The rate-limit rule, also asked now and then while every call waits."""
        quiet = time.monotonic() - self.last_answer
        if not self.limited or quiet < self.rate_limit_stop_s:
            return None
        other = f" and {self.failed_since} other failures" if self.failed_since else ""
        return "rate_limited", (f"no answer for {quiet:.0f} s (the limit is {self.rate_limit_stop_s:g} s, "
                                f"--rate-limit-stop): {self.limited} attempts answered 429{other}"
                                + (f"; last: {last}" if last else ""))
