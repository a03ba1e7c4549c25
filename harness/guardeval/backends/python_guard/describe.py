"""An exception a guard raised, in words: what the raw log keeps of it (never a traceback).

Standard library only: a worker process (`worker.py`) describes what its guard raised before
sending it across, as the thread path does in this process.
"""

from __future__ import annotations

MAX_ERROR_CHARS = 500        # of an exception's message, in the raw log


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
