"""Reading Inspect (inspect_ai) evaluation logs: the one door both directions of the bridge use
(docs/inspect.md).

A log is parsed by inspect_ai's own log API (`read_eval_log`). What guardeval adds is the
checking an outsider's file needs first: a local regular file (no link, no URL: inspect_ai
would open `s3://…` too; a FIFO is never waited on), at most `MAX_LOG_BYTES`, hashed as read so
the SHA-256 recorded is of the bytes parsed, a `.eval` zip's members inflated here under caps
(`guardeval.inspect_zip`: a zip bomb is refused in its first MiB, inspect_ai never inflates
anything), and inspect_ai's exceptions turned into exit-2 messages that say what is wrong with
which file. inspect_ai is an optional extra, imported only here and only when a log is read.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from guardeval.bounded import open_regular, read_fd
from guardeval.canon import canonical_sha256, sha256_hex
from guardeval.errors import InputError
from guardeval.inspect_zip import restored

EXTRA = "pip install 'guardeval[inspect]'"
# The memory a log may take is bounded by these three (docs/inspect.md, "Reading a log": the
# bound, and what it was measured at). An agent run of a few thousand samples is tens of MB.
MAX_LOG_BYTES = 256 << 20
# What a `.eval` zip may unpack to, all members together (its messages compress ~10x): each
# member is inflated to at most its claimed size (`guardeval.inspect_zip`), so this bounds it.
# A default, not a law: `--inspect-max-unpacked MIB` raises it up to MAX_UNPACKED_LIMIT, at about
# 15 bytes of memory per byte unpacked (docs/inspect.md, "The memory bound").
MAX_UNPACKED_BYTES = 256 << 20
MAX_UNPACKED_LIMIT = 4 << 30
UNPACKED_OPTION = "--inspect-max-unpacked"
# Members of a `.eval` zip (one per sample, plus a few): refused before zipfile reads the directory.
MAX_MEMBERS = 200_000
# Log-format versions guardeval reads (inspect_ai's schema version is 2; 1 is the older format
# inspect_ai still converts). inspect_ai reads a `.eval` of any version from bytes without
# complaint, so the version is checked here.
SUPPORTED_VERSIONS = (1, 2)


def require_inspect() -> Any:
    """The `inspect_ai.log` module, or InputError saying which extra to install."""
    try:
        import inspect_ai.log as log_api
    except ModuleNotFoundError:
        raise InputError(f"reading Inspect logs needs the optional extra: {EXTRA}", field="inspect") from None
    return log_api


class LogIdentity(TypedDict):
    """An Inspect log as a cohort or a report names it (`LogFile.identity`); the eval's fields as
    Inspect wrote them."""

    path: str
    bytes: int
    sha256: str
    format: str
    eval_id: object
    run_id: object
    task: object
    task_id: object
    task_version: object
    model: object
    created: object
    status: object
    log_version: object
    inspect_ai: object


@dataclass(frozen=True)
class LogFile:
    """A log as read: its path, the SHA-256 and size of the bytes parsed, and inspect_ai's EvalLog."""

    path: Path
    sha256: str
    bytes: int
    log: Any

    def identity(self) -> LogIdentity:
        """What a cohort or a report records as its source: the eval's own ids and the file's pin."""
        ev = self.log.eval
        return {"path": self.path.name, "bytes": self.bytes, "sha256": self.sha256, "format": "inspect_ai",
                "eval_id": ev.eval_id, "run_id": ev.run_id, "task": ev.task, "task_id": ev.task_id,
                "task_version": ev.task_version, "model": ev.model, "created": ev.created,
                "status": self.log.status, "log_version": self.log.version,
                "inspect_ai": (ev.packages or {}).get("inspect_ai")}


def _read_local(path: Path) -> bytes:
    # Non-blocking and checked once open (`open_regular`): a FIFO or a folder named as a log is
    # refused, naming it, never waited on; a link is refused (inspect_ai would follow it).
    try:
        fd = open_regular(path, path=path, follow=False)
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    try:
        return read_fd(fd, MAX_LOG_BYTES, path=path, what="an Inspect log (too large to read as one)")
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    finally:
        os.close(fd)


def read_log(path: str | Path, *, max_unpacked: int | None = None) -> LogFile:
    """One Inspect log file (`.eval` or `.json`), read whole through inspect_ai (attachments
    resolved, so message texts are the texts the model saw); InputError naming the file and
    what is wrong with it. A `.eval` may unpack to `max_unpacked` bytes (default
    `MAX_UNPACKED_BYTES`)."""
    cap = MAX_UNPACKED_BYTES if max_unpacked is None else max_unpacked
    log_api = require_inspect()
    p = Path(path)
    data = _read_local(p)
    if not data:
        raise InputError("an empty file, not an Inspect log", path=p)
    sha256, size = sha256_hex(data), len(data)
    is_zip = data[:4] == b"PK\x03\x04"
    if is_zip:
        # Inflated here under caps, re-stored: inspect_ai never inflates what the zip claims.
        parsed = restored(p, data, max_members=MAX_MEMBERS, max_unpacked=cap, how_to_raise=_how_to_raise(cap))
        del data   # the compressed bytes are not held while inspect_ai reads
    elif data.lstrip()[:1] != b"{":
        raise InputError("not an Inspect log (neither a .eval zip nor a JSON log)", path=p)
    else:
        parsed = data
    try:
        log = log_api.read_eval_log(io.BytesIO(parsed), resolve_attachments=True)
    except Exception as exc:   # inspect_ai raises what its readers raise: name it, never a traceback
        raise InputError(_read_failure(exc, is_zip), path=p) from None
    if log.version not in SUPPORTED_VERSIONS:
        raise InputError(_unsupported(repr(log.version)), path=p)
    return LogFile(p, sha256, size, log)


def _how_to_raise(cap: int) -> str:
    if cap >= MAX_UNPACKED_LIMIT:
        return ""
    return (f"; for a log you trust, raise it with {UNPACKED_OPTION} MIB (up to {MAX_UNPACKED_LIMIT >> 20:,}): reading "
            "takes about 15 times the unpacked size in memory (docs/inspect.md, 'The memory bound')")


def unpacked_cap(mib: int | None) -> int | None:
    """`--inspect-max-unpacked MIB` in bytes (None: the default), InputError out of range."""
    if mib is None:
        return None
    if not 1 <= mib <= MAX_UNPACKED_LIMIT >> 20:
        raise InputError(f"{UNPACKED_OPTION} {mib}: out of range (1 to {MAX_UNPACKED_LIMIT >> 20:,} MiB)",
                         field=UNPACKED_OPTION)
    return mib << 20


def _unsupported(version: str) -> str:
    return (f"log-format version {version} is not supported (guardeval reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))})")


_VERSION_REFUSED = re.compile(r"Unable to read version (\S+) of log format")


def _read_failure(exc: Exception, is_zip: bool) -> str:
    name = type(exc).__name__
    text = str(exc).splitlines()[0][:200] if str(exc) else name
    if (m := _VERSION_REFUSED.search(text)) is not None:    # inspect_ai's JSON reader checks it itself
        return _unsupported(m.group(1))
    if is_zip:
        return f"a truncated or damaged .eval file ({name}: {text})"
    if "JSON" in name or "EOF while parsing" in text or "Invalid JSON" in text:
        return f"a truncated or invalid JSON log ({name}: {text})"
    if name == "ValidationError":
        return f"not an Inspect log: it does not have the shape of an EvalLog ({text})"
    return f"not a readable Inspect log ({name}: {text})"


def read_logs(paths: Iterable[str | Path], *, max_unpacked: int | None = None) -> list[LogFile]:
    logs = [read_log(p, max_unpacked=max_unpacked) for p in paths]
    if not logs:
        raise InputError("no Inspect log given")
    return logs


def samples_of(lf: LogFile) -> list[Any]:
    """The log's samples; InputError when it holds none (a header-only log, `--no-log-samples`)."""
    samples = lf.log.samples
    if not samples:
        raise InputError("holds no samples (was it written with --no-log-samples, or before any sample "
                         "finished?)", path=lf.path)
    return list(samples)


def sample_name(sample: Any) -> str:
    """How a message names a sample: its id and epoch, as Inspect's viewer shows them."""
    return f"sample {sample.id!r} epoch {sample.epoch}"


def text_of(content: Any) -> str:
    """A message's content as text: a string as it is, a list of parts as its text parts joined
    (reasoning, images and other parts carry no text a guard is shown)."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content or ():
        if getattr(part, "type", None) == "text":
            parts.append(str(part.text))
    return "\n".join(parts)


def stimulus_sha256(messages: Iterable[Any]) -> str:
    """SHA-256 of a stimulus as guardeval exports it: [{role, content}, …] as canonical JSON (what
    a sample's metadata pins, and what the import recomputes from the model call's input)."""
    return canonical_sha256([{"role": str(m["role"]), "content": str(m["content"])} for m in messages])


# Inspect's `stop_reason` -> the finish_reason guardeval's strict parsers and decide() read.
_FINISH = {"stop": "stop", "max_tokens": "length", "model_length": "length", "content_filter": "content_filter",
           "tool_calls": "tool_calls", "unknown": None}


def finish_reason(stop_reason: Any) -> str | None:
    return _FINISH.get(stop_reason) if isinstance(stop_reason, str) else None
