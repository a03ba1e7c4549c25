"""Failure taxonomy for one attempt (docs/design.md §7).

Every exception carries the `Reply` received so far (if any) so the raw log records the
attempt exactly as it happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardeval.backends.base import Reply


class AttemptError(Exception):
    """An attempt that did not yield a usable reply."""

    def __init__(self, error_class: str, message: str, reply: Reply | None = None,
                 retry_after: float | None = None, redacted: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.reply = reply
        self.retry_after = retry_after
        # The secret was removed from the message (or from the reply: `reply.redacted`).
        self.redacted = redacted or (reply is not None and reply.redacted)
        self.guard_output: dict[str, Any] | None = None   # a python guard's prints (Reply.guard_output)


class TransientError(AttemptError):
    """Retry with backoff: 408/409/425/429/5xx, connection errors, timeouts, malformed bodies,
    HTTP-200 error bodies."""


class FatalError(AttemptError):
    """Stop launching new calls; the run stays resumable: 400/401/402/403/404/422 and other 4xx."""


class GuardError(AttemptError):
    """The guard's own failure, not an outage: a python guard's exception, a return of the wrong
    type or one that cannot be used, a worker process that died. The call is tried once more at
    once (no back-off) and then fails as `guard_error`; identical ones in a row stop the run
    (docs/design.md §7). A guard config's `retry_on` turns the exceptions it names back into
    TransientError."""


class CallFailed(AttemptError):
    """This call cannot succeed (e.g. `context_overflow`): record a failure, go on with others."""


RESET = "reset the connection"   # in a message: the server was reached and hung up (no start-it hint)


def connection_reset(exc: BaseException) -> bool:
    """Whether the server reset the connection (ECONNRESET somewhere in the exception's chain of
    causes): it was reached, so neither a timeout nor a server to start. httpx-aiohttp reports
    it as ConnectTimeout; the cause says what it was."""
    import errno

    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            return False
        if isinstance(cur, ConnectionResetError) or (isinstance(cur, OSError) and cur.errno == errno.ECONNRESET):
            return True
        cur = cur.__cause__ or cur.__context__
    return False
