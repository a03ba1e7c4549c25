"""Failure taxonomy for one attempt (docs/design.md §7).

Every exception carries the `Reply` received so far (if any) so the raw log records the
attempt exactly as it happened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from guardeval.backends.base import Reply

# HTTP statuses worth another try, whoever answers them.
TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 524, 529})
REFUSED_PREFIX = "refused_"   # error classes of calls the provider declined (decision `refused`)
# A prompt longer than the model's context, in the words servers use for it.
CONTEXT_RE = re.compile(r"maximum context length|context length exceeded|exceeds the context|context_length_exceeded",
                        re.IGNORECASE)
MESSAGE_LIMIT = 300


def error_object(text: str) -> dict[str, Any] | None:
    """The `error` object of an error body, or None."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    return err if isinstance(err, dict) else None


def message_of(text: str, err: Mapping[str, Any] | None = None, limit: int = MESSAGE_LIMIT) -> str:
    """The error's message (or the start of the body), on one line, bounded."""
    err = err if err is not None else error_object(text)
    msg = err.get("message") if err else None
    if isinstance(msg, str) and msg:
        return msg[:limit].replace("\n", " ")
    if err is None:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return data["error"][:limit]
    return text[:limit].replace("\n", " ")


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
