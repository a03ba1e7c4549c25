"""The run folder (docs/design.md §6): manifest, schedule, stimuli, hash-chained raw log, decisions.

Write discipline: `raw.jsonl` and `decisions.jsonl` are append-only; a raw line is written
(and flushed) before the decision that points at it, so a crash can leave at most a torn last
line (moved aside on the next open) or a raw line without its decision (re-derived, not
re-sent). A lock file held with `flock` keeps a second process out; the kernel releases it
when the holder dies, even by SIGKILL.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import re
import shutil
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from guards.base import valid_cost
from guards.config import GuardConfig, config_from_manifest
from guards.prompts import Prompt, load_prompt, load_prompt_dir
from harness.bounded import read_json
from harness.canon import canonical_sha256, dumps_line, sha256_hex
from harness.cohorts.limits import DEFAULT_ROW_LIMITS, MAX_DEPTH_CEILING, RowLimits, widest
from harness.errors import CheckFailed, InputError, RunLocked, WriteFailed
from harness.run.budget import Unpriced, priced_cost, reported_cost
from harness.run.records import Attempt, Decision
from harness.run.workers import halves

GENESIS = "0" * 64
MANIFEST, SCHEDULE, STIMULI, RAW, DECISIONS, EVENTS, LOCK = (
    "manifest.json", "schedule.jsonl", "stimuli.jsonl", "raw.jsonl", "decisions.jsonl", "events.jsonl", ".lock")
COHORT_DIR, PROMPT_DIR = "cohort", "prompt"
PARTIAL_LOCK = ".partial-lock"
_PARTIAL = re.compile(r"\.(.+)\.partial-([0-9]+)")
_SAFE_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,64}")
RESUME_HINT = "Nothing half-written was kept: free some space, then `guardeval resume {run}`"


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(prefix: str) -> str:
    # The id names the run folder: a prefix from a config is checked here too, not trusted.
    if not _SAFE_PREFIX.fullmatch(prefix):
        raise InputError("a run id prefix must be 1-64 characters of A-Z a-z 0-9 . _ -", field="name")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{prefix}-{os.urandom(3).hex()}"


def manifest_with_hash(manifest: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return {**body, "sha256": canonical_sha256(body)}


def create_run_dir(run_dir: Path, *, manifest: dict[str, Any], cohort_src: Path,
                   fill: Callable[[Path], dict[str, Any]],
                   prompt_files: tuple[tuple[str, bytes], ...] = ()) -> dict[str, Any]:
    """Materialise a new run folder atomically: build it beside, then rename into place.

    `fill(partial_folder)` streams `schedule.jsonl` and `stimuli.jsonl` into the partial folder
    and returns the manifest fields it learned on the way (their SHA-256); `prompt_files` (name,
    bytes) go into `prompt/`; the manifest is written last. Returns the manifest as written
    (with its own `sha256`). Refused (InputError, nothing left behind): a symbolic link, a file
    or a non-empty folder at `run_dir`, a place that cannot hold a folder. A disk that fills up
    meanwhile: WriteFailed, nothing left behind. Partial folders of launches that died are
    removed on the way.
    """
    check_new_run_dir(run_dir)
    made = _make_parents(run_dir.parent)
    remove_stale_partials(run_dir.parent)
    tmp = run_dir.with_name(f".{run_dir.name}.partial-{os.getpid()}")
    lock_fd: int | None = None
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        # Held while the folder is built: a later launch that can take it knows its owner died.
        lock_fd = os.open(tmp / PARTIAL_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (tmp / COHORT_DIR).mkdir()
        _copy_cohort(cohort_src, tmp / COHORT_DIR, manifest.get("cohort") or {})
        if prompt_files:
            (tmp / PROMPT_DIR).mkdir()
            for name, data in prompt_files:
                if "/" in name or name in ("", ".", ".."):
                    raise InputError(f"prompt file name '{name}' is not a plain file name", field="prompt")
                (tmp / PROMPT_DIR / name).write_bytes(data)
        manifest = {**manifest, **fill(tmp)}
        (tmp / RAW).write_bytes(b"")
        (tmp / DECISIONS).write_bytes(b"")
        manifest = manifest_with_hash(manifest)
        (tmp / MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                                  | orjson.OPT_APPEND_NEWLINE))
        for p in tmp.rglob("*"):
            if p.is_file():
                _fsync_path(p)
        os.unlink(tmp / PARTIAL_LOCK)
        try:
            # rename(2) onto nothing, or onto an empty folder; a folder that is not empty (another
            # launch won a race for it) is left alone.
            os.replace(tmp, run_dir)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise InputError("run folder already exists and is not empty (did another launch create it "
                                 "meanwhile?)", path=run_dir) from None
            raise
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise WriteFailed(exc.filename or tmp, exc, "Nothing was written: free some space, then launch "
                                  "again.") from None
            raise InputError(f"cannot create the run folder ({exc.strerror or exc})", path=run_dir) from None
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return manifest


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse what cannot become a new run folder before anything is written (also called by
    `launch` and `replicate` before their preflight: nothing is asked of the provider in vain)."""
    if run_dir.name in ("", ".", ".."):
        raise InputError("name the run folder itself (not '.', '..' or '/')", path=run_dir)
    if run_dir.is_symlink():
        raise InputError("is a symbolic link; give the run folder itself", path=run_dir)
    try:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
            what = "is not empty" if run_dir.is_dir() else "is a file, not a folder"
            raise InputError(f"run folder already exists and {what}", path=run_dir)
    except OSError as exc:
        raise InputError(f"cannot use as a run folder ({exc.strerror or exc})", path=run_dir) from None
    for parent in run_dir.parents:
        if parent.is_symlink() and not parent.exists():
            raise InputError("is a dangling symbolic link", path=parent)
        if parent.exists():
            if not parent.is_dir():
                raise InputError("is a file, not a folder: the run folder cannot go under it", path=parent)
            break


def _make_parents(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (removed again if the launch fails)."""
    missing: list[Path] = []
    for p in (folder, *folder.parents):
        if p.exists():
            break
        missing.append(p)
    made: list[Path] = []
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            for d in reversed(made):
                try:
                    d.rmdir()
                except OSError:
                    break
            raise InputError(f"cannot create a folder here ({exc.strerror or exc})", path=p) from None
        made.append(p)
    return made


# What a partial run folder can hold: a folder holding anything else is not one of ours.
_PARTIAL_CONTENT = frozenset((PARTIAL_LOCK, COHORT_DIR, PROMPT_DIR, MANIFEST, SCHEDULE, STIMULI, RAW, DECISIONS))


def remove_stale_partials(folder: Path) -> list[Path]:
    """Remove `.<name>.partial-<pid>` folders whose launch is gone (killed mid-way): nobody holds
    its lock and its process no longer exists. A folder holding
    anything a launch does not write is left alone, whatever its name."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _PARTIAL.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        try:
            ours = {p.name for p in path.iterdir()} <= _PARTIAL_CONTENT
        except OSError:
            ours = False
        if ours and not _partial_is_live(path, int(m[2])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _partial_is_live(path: Path, pid: int) -> bool:
    try:
        fd = os.open(path / PARTIAL_LOCK, os.O_RDWR)
    except FileNotFoundError:
        return _pid_alive(pid)   # just created, or just renamed into place: ask the process table
    except OSError:
        return True              # cannot tell: keep it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True              # its launch holds the lock
    finally:
        os.close(fd)             # (closing also releases a lock taken here)
    # The lock was free: its launch died, or it is alive between creating the lock file and
    # locking it. Only the process table tells these apart.
    return _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _copy_cohort(src: Path, dst: Path, pins: dict[str, Any]) -> None:
    """Copy the cohort, hashing on the way: the copy must be the bytes the plan validated."""
    for name, pin in (("cohort.json", pins.get("sha256")), ("instances.jsonl", pins.get("instances_sha256"))):
        h = hashlib.sha256()
        with open(src / name, "rb") as fin, open(dst / name, "wb") as fout:
            while chunk := fin.read(1 << 20):
                h.update(chunk)
                fout.write(chunk)
        if pin is not None and h.hexdigest() != pin:
            raise InputError("the cohort changed while the run was being planned", path=src / name)


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_run_prompt(run_dir: Path, manifest: dict[str, Any]) -> Prompt:
    """The prompt a run was launched with: its own copy in `prompt/` (pinned by the manifest's
    `prompt.sha256`), or, for a run from before copies, the prompts folder's entry if it still
    hashes as pinned. InputError when neither holds."""
    pin = manifest["prompt"]
    if pin.get("copy"):
        path = run_dir / PROMPT_DIR
        prompt = load_prompt_dir(path, str(pin["id"]))
        if prompt.sha256 != pin["sha256"]:
            raise InputError("the run's copy of its prompt does not match manifest.prompt.sha256", path=path,
                             field="prompt.sha256")
        return prompt
    prompt = load_prompt(pin["id"])
    if prompt.sha256 != pin["sha256"]:
        raise InputError(f"this run has no copy of its prompt and prompt '{prompt.id}' has changed since it was "
                         f"launched (sha256 {prompt.sha256[:12]}…, manifest {pin['sha256'][:12]}…); restore it, "
                         "or start a new run with `guardeval replicate`", path=run_dir / MANIFEST,
                         field="prompt.sha256")
    return prompt


# The manifest fields that the readers of a run (status, resume, replicate, estimate, the views)
# take as they are, with their types; `verify` reads the manifest on its own and reports each
# problem. The guard config is checked whole (`run_config`).
_MANIFEST_FIELDS: dict[str, type] = {"run_id": str, "n_calls": int, "seed": int, "reps": int, "order": str,
                                     "schedule_sha256": str, "stimuli_sha256": str, "guard": dict,
                                     "cohort": dict, "cohort.name": str, "cohort.sha256": str,
                                     "prompt": dict, "prompt.id": str, "prompt.sha256": str, "prompt.parser": str,
                                     "sha256": str}
_KINDS = {str: "a string", int: "a whole number", dict: "an object"}
# A manifest is a few KiB (the guard config in it is at most 1 MiB); far past that it is not one.
MAX_MANIFEST_BYTES = 16 << 20


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """manifest.json, its fields of `_MANIFEST_FIELDS` checked (InputError naming the field)."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError("not a run folder (no manifest.json)", path=run_dir)
    manifest = read_json(path, MAX_MANIFEST_BYTES, what="a run manifest")
    if not isinstance(manifest, dict):
        raise InputError("not a JSON object", path=path)
    for name, kind in _MANIFEST_FIELDS.items():
        outer, _, inner = name.partition(".")
        value = manifest.get(outer)
        value = value.get(inner) if inner and isinstance(value, dict) else value
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(f"missing, or not {_KINDS[kind]}", path=path, field=name)
    if not isinstance(manifest.get("parent_run"), (dict, type(None))):
        raise InputError(f"not {_KINDS[dict]}", path=path, field="parent_run")
    return manifest


def row_limits_record(limits: RowLimits) -> dict[str, int] | None:
    """The manifest's `row_limits`: the bounds a launch read its cohort under, recorded only when
    raised past the defaults (absent means the defaults)."""
    if widest(limits, DEFAULT_ROW_LIMITS) == DEFAULT_ROW_LIMITS:
        return None
    wide = widest(limits, DEFAULT_ROW_LIMITS)
    return {"max_bytes": wide.max_bytes, "max_depth": wide.max_depth}


def run_row_limits(run_dir: Path, manifest: dict[str, Any], given: RowLimits = DEFAULT_ROW_LIMITS) -> RowLimits:
    """The bounds a run's own cohort copy is read under: those its launch recorded, or `given`
    (the command's flags), whichever is wider, so that a run launched with `--max-row-bytes` can
    be verified, estimated and viewed without repeating the flag."""
    rec = manifest.get("row_limits")
    if rec is None:
        return given
    path = run_dir / MANIFEST
    if not isinstance(rec, dict):
        raise InputError(f"not {_KINDS[dict]}", path=path, field="row_limits")
    values: dict[str, int] = {}
    for name, ceiling in (("max_bytes", None), ("max_depth", MAX_DEPTH_CEILING)):
        v = rec.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or (ceiling is not None and v > ceiling):
            bound = f" <= {ceiling}" if ceiling is not None else ""
            raise InputError(f"missing, or not a whole number >= 1{bound}", path=path, field=f"row_limits.{name}")
        values[name] = v
    return widest(given, RowLimits(**values))


def run_config(run_dir: Path, manifest: dict[str, Any]) -> GuardConfig:
    """The run's guard config, from its manifest, checked as a config file is (`config_from_manifest`)."""
    return config_from_manifest(manifest["guard"], run_dir / MANIFEST)


def iter_jsonl(path: Path) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(line number, line bytes without newline, parsed object) for every complete line."""
    with open(path, "rb", buffering=1 << 20) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                return  # a torn last line is handled by RunWriter.recover_torn
            body = line[:-1]
            yield lineno, body, parse_line(body, path, lineno)


class RunLock:
    """Exclusive, non-blocking `flock` on `<run>/.lock`."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WriteFailed(self.path, exc, "The run was not changed.") from None
        # A `status` probe (`held_by_another`) holds the lock for microseconds: try a few times
        # over ~50 ms before concluding that another writer has it.
        for attempt in range(6):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 5:
                    os.close(fd)
                    raise RunLocked(f"{self.path.parent}: another guardeval process is writing this run") from None
                time.sleep(0.01)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the holder's pid is for people reading the file; the lock is the flock
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def held_by_another(run_dir: Path) -> bool:
        """Whether a process holds the run's lock now (is running it). Creates nothing; the lock
        dies with its process, so a killed run reads as not running."""
        try:
            fd = os.open(run_dir / LOCK, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return False   # never run, or unreadable: no writer can be known to hold it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)


@dataclass
class RunState:
    """What the files say has happened; rebuilt by one scan of each log on open.

    Per-call state is kept only where a run cannot go on without it: the set of decided call
    ids (to skip them), and attempt counts and final raw lines of the calls *not* yet decided
    (a decided call is never sent again, so its history is not needed here).
    """

    last_seq: int = 0
    last_raw_sha: str = GENESIS
    attempts: dict[str, int] = field(default_factory=dict)        # call_id -> attempts logged (undecided calls)
    decided: set[str] = field(default_factory=set)
    final_raw: dict[str, tuple[int, int]] = field(default_factory=dict)  # undecided call -> (offset, line) of its final raw line
    spent: float = 0.0                                            # reported cost summed over every attempt
    unpriced: Unpriced = field(default_factory=Unpriced)          # answers the provider did not price
    torn: list[Path] = field(default_factory=list)


class RawFields(NamedTuple):
    call_id: Any
    final: Any
    outcome: Any
    cost: Any                   # what the provider says the attempt cost (`budget.reported_cost`)
    usage: dict[str, Any]
    generation_id: Any = None   # the provider's generation id, when recorded


def raw_head(buf: Any, start: int = 0, end: int | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(every field before `request`, the `usage` object) of the raw line `buf[start:end]` (no
    newline), without parsing its request.

    A raw line is canonical JSON (sorted keys, no spaces) of a record whose fields before
    `request` are scalars and whose last field is `usage`; inside a JSON string every `"` is
    escaped, so `,"request":` can only be that key and `,"usage":` (from the end) only the
    top-level usage. The head and the usage object are parsed on their own: ~5x cheaper than
    parsing a line whose request carries the whole trajectory. Anything unexpected (a line not
    in that shape) returns None and the caller parses the whole line: the answer is exact.
    `buf` may be bytes or an mmap.
    """
    end = len(buf) if end is None else end
    cut = buf.find(b',"request":', start, end)
    at = buf.rfind(b',"usage":', start, end)
    if cut < 0 or at < cut or buf[end - 1] != 0x7D:   # "}"
        return None
    try:
        # One parse of `[head, usage]`: the two fragments, each a whole JSON object.
        head, usage = orjson.loads(b"".join((b"[", buf[start:cut], b"},", buf[at + 9:end - 1], b"]")))
    except (orjson.JSONDecodeError, ValueError):
        return None
    if type(head) is not dict or type(usage) is not dict or "call_id" not in head or "final" not in head \
            or "outcome" not in head:
        return None
    return head, usage


def raw_fields(buf: Any, start: int = 0, end: int | None = None) -> RawFields | None:
    """call_id, final, outcome, reported cost (`budget.reported_cost`), usage and generation id
    of the raw line `buf[start:end]` (see `raw_head`; None: parse the whole line)."""
    parts = raw_head(buf, start, end)
    if parts is None:
        return None
    head, usage = parts
    return RawFields(head["call_id"], head["final"], head["outcome"], reported_cost(usage), usage,
                     head.get("generation_id"))


def full_raw_fields(body: bytes, path: Path, lineno: int) -> RawFields:
    """The same fields from a full parse (CheckFailed, as iter_jsonl, if not a JSON object)."""
    rec = parse_line(body, path, lineno)
    usage = rec.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return RawFields(rec.get("call_id"), rec.get("final"), rec.get("outcome"), reported_cost(usage), usage,
                     rec.get("generation_id"))


def iter_mapped_lines(path: Path, start: int = 0, end: int | None = None,
                      window: int = 64 << 20) -> Iterator[tuple[int, Any, int, int, int]]:
    """(line number, buffer, line start, newline position, buffer offset in the file) of every
    complete line (of the lines in bytes [start, end), when given: both line boundaries; line
    numbers then count from `start`). `buffer[line start:newline]` is the line; the buffer is
    valid until the next item.

    A 1M-call raw log is several GB. It is mapped a window at a time (the page cache is read
    in place: no copy into the process, and resident memory stays one window) and newlines are
    found with memchr. A torn last line (no newline) is left out, as `iter_jsonl` does.
    """
    size = path.stat().st_size if path.exists() else 0
    size = size if end is None else min(end, size)
    base, lineno = start, 0
    with open(path, "rb") as fh:
        while base < size:
            start = base - base % mmap.ALLOCATIONGRANULARITY
            length = min(size - start, window)
            with mmap.mmap(fh.fileno(), length, offset=start, access=mmap.ACCESS_READ) as mm:
                pos = base - start
                while (nl := mm.find(b"\n", pos)) >= 0:
                    lineno += 1
                    yield lineno, mm, pos, nl, start
                    pos = nl + 1
            if start + pos == base:          # no complete line in this window
                if start + length >= size:
                    return                   # a torn last line
                window *= 2                  # a line longer than the window
            base = start + pos


def iter_raw_fields(path: Path, start: int = 0, end: int | None = None,
                    window: int = 64 << 20) -> Iterator[tuple[int, int, int, RawFields]]:
    """(line number, offset, length with newline, fields) of every complete line of raw.jsonl
    (see `iter_mapped_lines`); each line's few fields come from `raw_fields`."""
    for lineno, buf, pos, nl, offset in iter_mapped_lines(path, start, end, window):
        fields = raw_fields(buf, pos, nl)
        if fields is None:
            fields = full_raw_fields(buf[pos:nl], path, lineno)
        yield lineno, offset + pos, nl + 1 - pos, fields


def parse_line(body: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        raise damaged(path, lineno, "not a JSON object")
    return obj


# Lines exactly as the writers write them (canonical JSON, lower-case hex ids): a match proves
# the shape, so the few fields a scan needs are read without parsing the line.
STIMULUS_LINE = re.compile(rb'\{"call_id":"([0-9a-f]{32})","request_sha256":"([0-9a-f]{64})"\}\n')
_DECISION_HEAD = re.compile(rb'\{"attributable":(?:true|false),"call_id":"([0-9a-f]{32})","components":')
# The last five fields of a decision line, all scalars (nothing nested from here on).
_DECISION_TAIL = re.compile(rb',"quarantine_reason":(?:null|"([a-z_]+)"),"raw_line_sha256":"[0-9a-f]{64}",'
                            rb'"raw_seq":[0-9]+,"score":(?:null|-?[0-9][0-9.eE+-]*),"status":"([a-z_]+)"\}\n')


def decision_call_id(line: bytes) -> str | None:
    """The call id of a decision line in the writer's shape (None: parse the line)."""
    m = _DECISION_HEAD.match(line)
    return m[1].decode() if m is not None else None


def decision_fields(line: bytes) -> tuple[str, Any, Any] | None:
    """(call_id, status, quarantine_reason) of a decision line in the writer's shape, read
    from its head and its last five fields; None: parse the line."""
    m = _DECISION_HEAD.match(line)
    at = line.rfind(b',"quarantine_reason":')
    tail = _DECISION_TAIL.fullmatch(line, at) if at >= 0 else None
    if m is None or tail is None:
        return None
    reason = tail[1].decode() if tail[1] is not None else None
    return m[1].decode(), tail[2].decode(), reason


def parsed_decision_fields(line: bytes, path: Path, lineno: int) -> tuple[str, str, str | None]:
    """`decision_fields` of a line not in the writer's shape: parsed, each field checked
    (CheckFailed names the line, as a line that is not a JSON object does)."""
    rec = parse_line(line.rstrip(b"\n"), path, lineno)
    cid, status, reason = rec.get("call_id"), rec.get("status"), rec.get("quarantine_reason")
    if not isinstance(cid, str):
        raise damaged(path, lineno, "missing or malformed field 'call_id'")
    if not isinstance(status, str):
        raise damaged(path, lineno, "missing or malformed field 'status'")
    if reason is not None and not isinstance(reason, str):
        raise damaged(path, lineno, "malformed field 'quarantine_reason'")
    return cid, status, reason


def damaged(path: Path, lineno: int, what: str) -> CheckFailed:
    return CheckFailed(f"{path}: line {lineno}: {what} (the file is damaged; `guardeval verify {path.parent}` "
                       "lists every problem)")


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line with its newline) of every complete line; a torn last line is left
    out, as `iter_jsonl` does."""
    with open(path, "rb", buffering=1 << 20) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                return
            yield lineno, line


class AppendLog:
    """One append-only log file: whole writes or nothing.

    A write the disk does not take in full (ENOSPC, EDQUOT, EFBIG, an I/O error) is cut back to
    where it began, so no torn line is left behind by a full disk, and every later write or sync
    raises the same WriteFailed: after a failure, nothing more is appended to this run.
    """

    def __init__(self, path: Path, hint: str) -> None:
        self.path, self._hint = path, hint
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.failed: WriteFailed | None = None

    def write(self, data: bytes) -> None:
        fd = self._usable()
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.write(fd, view[done:])
        except OSError as exc:
            if done:
                try:
                    os.ftruncate(fd, self.size)   # frees space: succeeds on a full disk
                except OSError:
                    pass
            raise self._fail(exc) from None
        self.size += len(data)

    def sync(self) -> None:
        # Allowed after a failed write: what is in the file is whole lines (cut back).
        fd = self._fd
        assert fd is not None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self._fail(exc) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _usable(self) -> int:
        if self.failed is not None:
            raise self.failed
        assert self._fd is not None
        return self._fd

    def _fail(self, exc: OSError) -> WriteFailed:
        self.failed = WriteFailed(self.path, exc, self._hint)
        return self.failed


class RunWriter:
    """Appends attempts and decisions; owns the open log files of a live run."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.state = RunState()
        self._raw: AppendLog | None = None
        self._dec: AppendLog | None = None
        self._events: AppendLog | None = None
        self._pending: list[bytes] = []
        self._scan: _RawScan | None = None
        self._hint = RESUME_HINT.format(run=run_dir)

    # -- opening and recovery ----------------------------------------------------------------
    def scan(self) -> None:
        """Start reading the logs: the decisions here, then the raw log in workers when it is
        large (`open` collects them), so that the caller can load the cohort meanwhile.
        Complete lines only: a torn last line is moved aside by `open`, after the scan."""
        if self._scan is not None:
            return
        st = self.state
        # Decisions first, so that the raw scan keeps history only for undecided calls.
        path = self.run_dir / DECISIONS
        for lineno, line in iter_lines(path):
            cid = decision_call_id(line)
            st.decided.add(cid if cid is not None else parsed_decision_fields(line, path, lineno)[0])
        self._scan = _RawScan(self.run_dir / RAW, st.decided)

    def abandon_scan(self) -> None:
        if self._scan is not None:
            self._scan.stop()

    def open(self) -> RunState:
        self.scan()
        assert self._scan is not None
        self._merge_raw(self._scan.parts())
        for name in (RAW, DECISIONS):
            moved = recover_torn(self.run_dir / name, self._hint)
            if moved:
                self.state.torn.append(moved)
        st = self.state
        try:
            self._raw = AppendLog(self.run_dir / RAW, self._hint)
            self._dec = AppendLog(self.run_dir / DECISIONS, self._hint)
            self._events = AppendLog(self.run_dir / EVENTS, self._hint)
        except OSError as exc:
            self.close_files()
            raise WriteFailed(exc.filename, exc, self._hint) from None
        return st

    def _merge_raw(self, parts: list[RawPart]) -> None:
        """Spend, attempts and final lines of undecided calls, chain head: the parts of the raw
        log merged in log order, so the state is that of one sequential pass."""
        st, path = self.state, self.run_dir / RAW
        lines_before = 0
        for part in parts:
            for cost in part.costs:    # one at a time, in log order, as the attempts were written
                st.spent += cost
            st.unpriced.merge(part.unpriced)
            for cid, n in part.attempts.items():
                st.attempts[cid] = st.attempts.get(cid, 0) + n
            for cid, where in part.finals.items():
                if where is None:
                    st.final_raw.pop(cid, None)
                else:
                    st.final_raw[cid] = (where[0], where[1] + lines_before)
            lines_before += part.n_lines
        last = next((part.last for part in reversed(parts) if part.last is not None), None)
        if last is not None:
            offset, length = last
            with open(path, "rb") as fh:
                body = os.pread(fh.fileno(), length, offset)[:-1]
            st.last_seq = parse_line(body, path, lines_before)["seq"]
            st.last_raw_sha = sha256_hex(body)

    def undecided_finals(self) -> Iterator[tuple[dict[str, Any], str]]:
        """(record, line sha256) of each final raw line whose decision is missing, in log order."""
        path = self.run_dir / RAW
        with open(path, "rb") as fh:
            for offset, lineno in sorted(self.state.final_raw.values()):
                fh.seek(offset)
                body = fh.readline()[:-1]
                yield parse_line(body, path, lineno), sha256_hex(body)

    def close(self) -> None:
        """Write the held decisions and sync every log; the files are closed even when that
        fails (WriteFailed is raised after)."""
        try:
            self.flush()
            for log in (self._raw, self._dec, self._events):
                if log is not None:
                    log.sync()
        finally:
            self.close_files()

    def close_files(self) -> None:
        for log in (self._raw, self._dec, self._events):
            if log is not None:
                log.close()
        self._raw = self._dec = self._events = None

    # -- appends -----------------------------------------------------------------------------
    def append_raw(self, record: Attempt, *, request_json: bytes | None = None) -> tuple[int, str]:
        """Add seq and prev_sha256, write one line; return (seq, sha256 of the line).

        `request_json` is the request body already in canonical JSON: it is spliced in as the
        `request` field (the same bytes `dumps_line` would produce, without re-sorting the body
        on every attempt).
        """
        assert self._raw is not None
        st = self.state
        seq = st.last_seq + 1
        line = dumps_line({**record, "seq": seq, "prev_sha256": st.last_raw_sha})
        if request_json is not None:
            # Keys are sorted, so "request" goes right before "request_sha256"; inside string
            # values a quote is escaped, so this pattern can only be that key.
            at = line.index(b',"request_sha256":')
            line = line[:at] + b',"request":' + request_json + line[at:]
        self._raw.write(line)   # whole or not at all (WriteFailed): the state moves only after
        st.last_seq = seq
        st.last_raw_sha = sha256_hex(line[:-1])
        cid = record["call_id"]
        st.attempts[cid] = st.attempts.get(cid, 0) + 1
        return st.last_seq, st.last_raw_sha

    def append_decision(self, record: Decision) -> None:
        # Held back until `flush()` (the dispatcher's ticker, and close): a decision lost in a
        # crash is re-derived from its final raw line on the next open, never re-sent.
        self._pending.append(dumps_line(record))
        self.state.decided.add(record["call_id"])
        if len(self._pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        """fsync the raw log, then write the held decisions: on disk, a decision never points
        at a raw line that a power loss could take away."""
        if not self._pending or self._raw is None or self._dec is None:
            return
        self._raw.sync()
        self._dec.write(b"".join(self._pending))
        self._pending.clear()

    def event(self, kind: str, **fields: Any) -> None:
        assert self._events is not None
        self._events.write(dumps_line({"at": utcnow(), "event": kind, "pid": os.getpid(), **fields}))


@dataclass
class RawPart:
    """What a scan of some of raw.jsonl's lines (bytes [start, end)) learned; see `_scan_raw`."""

    n_lines: int = 0
    costs: array = field(default_factory=lambda: array("d"))   # reported costs, in log order
    unpriced: Unpriced = field(default_factory=Unpriced)        # answers without a positive cost
    attempts: dict[Any, int] = field(default_factory=dict)     # undecided call -> attempts here
    finals: dict[Any, tuple[int, int] | None] = field(default_factory=dict)  # last line here: final (offset, line) or not (None)
    last: tuple[int, int] | None = None                         # (offset, length) of the last line


def scan_raw_part(path: Path, start: int, end: int | None, decided: set[str]) -> RawPart:
    part = RawPart()
    for lineno, offset, length, f in iter_raw_fields(path, start, end):
        if valid_cost(f.cost):
            part.costs.append(f.cost)
        if f.outcome == "reply" and priced_cost(f.usage) is None:
            part.unpriced.add(f.usage)
        cid = f.call_id
        if not isinstance(cid, str):
            raise damaged(path, lineno, "missing or malformed field 'call_id'")
        if cid not in decided:
            part.attempts[cid] = part.attempts.get(cid, 0) + 1
            part.finals[cid] = (offset, lineno) if f.final else None
        part.n_lines = lineno
        part.last = (offset, length)
    return part


class _RawScan:
    """`scan_raw_part` over raw.jsonl: each half of a large log in a forked worker (they
    inherit the set of decided calls), started now and collected by `parts`; a small log, one
    CPU, or a failed worker: read here (a damaged line then raises, named by its number)."""

    def __init__(self, path: Path, decided: set[str]) -> None:
        self.path, self.decided = path, decided
        self._workers = halves(path, scan_raw_part, decided)

    def parts(self) -> list[RawPart]:
        parts = [w.result() for w in self._workers]
        complete = bool(parts) and all(p is not None for p in parts)
        self._workers = []
        return parts if complete else [scan_raw_part(self.path, 0, None, self.decided)]

    def stop(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []


def recover_torn(path: Path, hint: str = "") -> Path | None:
    """If the file ends without a newline, move the torn tail to `<name>.torn-<stamp>`.
    The copy is written and synced before the file is cut; if the disk cannot take it, the
    copy is removed and nothing changes (WriteFailed)."""
    if not path.exists():
        return None
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return None
        # Find the last newline by scanning backwards in blocks.
        pos, cut = size, 0
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            idx = block.rfind(b"\n")
            if idx >= 0:
                cut = pos + idx + 1
                break
        fh.seek(cut)
        tail = fh.read()
        aside = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        try:
            with open(aside, "wb") as out:
                out.write(tail)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            aside.unlink(missing_ok=True)
            raise WriteFailed(aside, exc, hint) from None
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return aside
