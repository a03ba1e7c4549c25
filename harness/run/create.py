"""Creating a run folder: built beside its final place, then renamed into it (docs/design.md §6).

A launch killed half-way leaves a `.<name>.partial-<pid>` folder; the next launch beside it
removes those whose launch is gone (nobody holds its lock and its pid is not alive).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from harness.errors import InputError, WriteFailed
from harness.run.layout import COHORT_DIR, DECISIONS, MANIFEST, PARTIAL_LOCK, PROMPT_DIR, RAW, SCHEDULE, STIMULI
from harness.run.manifest import manifest_with_hash

_PARTIAL = re.compile(r"\.(.+)\.partial-([0-9]+)")


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
    def build(tmp: Path) -> dict[str, Any]:
        (tmp / COHORT_DIR).mkdir()
        _copy_cohort(cohort_src, tmp / COHORT_DIR, manifest.get("cohort") or {})
        if prompt_files:
            (tmp / PROMPT_DIR).mkdir()
            for name, data in prompt_files:
                if "/" in name or name in ("", ".", ".."):
                    raise InputError(f"prompt file name '{name}' is not a plain file name", field="prompt")
                (tmp / PROMPT_DIR / name).write_bytes(data)
        written = {**manifest, **fill(tmp)}
        (tmp / RAW).write_bytes(b"")
        (tmp / DECISIONS).write_bytes(b"")
        written = manifest_with_hash(written)
        (tmp / MANIFEST).write_bytes(orjson.dumps(written, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                                  | orjson.OPT_APPEND_NEWLINE))
        return written

    return build_beside(run_dir, build)


T = TypeVar("T")


def build_beside(target: Path, build: Callable[[Path], T], *, what: str = "run folder",
                 content: frozenset[str] | None = None) -> T:
    """A new folder at `target`, built by `build(partial)` in `.<name>.partial-<pid>` beside it
    (its lock held meanwhile), every file synced, then renamed into place; the result of
    `build`. Refused (InputError, nothing left behind) as `check_new_run_dir` refuses; on any
    failure the partial folder (and the parents made for it) is removed. Partial folders of
    builders that died are removed first (those holding only names of `content`)."""
    check_new_run_dir(target, what)
    made = _make_parents(target.parent)
    remove_stale_partials(target.parent, content or _PARTIAL_CONTENT)
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    lock_fd: int | None = None
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        # Held while the folder is built: a later launch that can take it knows its owner died.
        lock_fd = os.open(tmp / PARTIAL_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = build(tmp)
        for p in tmp.rglob("*"):
            if p.is_file():
                _fsync_path(p)
        os.unlink(tmp / PARTIAL_LOCK)
        try:
            # rename(2) onto nothing, or onto an empty folder; a folder that is not empty (another
            # launch won a race for it) is left alone.
            os.replace(tmp, target)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise InputError(f"{what} already exists and is not empty (did another launch create it "
                                 "meanwhile?)", path=target) from None
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
            raise InputError(f"cannot create the {what} ({exc.strerror or exc})", path=target) from None
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return result


def check_new_run_dir(run_dir: Path, what: str = "run folder") -> None:
    """Refuse what cannot become a new run folder (or study folder: `what`) before anything is
    written (also called by `launch` and `replicate` before their preflight: nothing is asked of
    the provider in vain)."""
    if run_dir.name in ("", ".", ".."):
        raise InputError(f"name the {what} itself (not '.', '..' or '/')", path=run_dir)
    if run_dir.is_symlink():
        raise InputError(f"is a symbolic link; give the {what} itself", path=run_dir)
    try:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
            why = "is not empty" if run_dir.is_dir() else "is a file, not a folder"
            raise InputError(f"{what} already exists and {why}", path=run_dir)
    except OSError as exc:
        raise InputError(f"cannot use as a {what} ({exc.strerror or exc})", path=run_dir) from None
    for parent in run_dir.parents:
        if parent.is_symlink() and not parent.exists():
            raise InputError("is a dangling symbolic link", path=parent)
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"is a file, not a folder: the {what} cannot go under it", path=parent)
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


def remove_stale_partials(folder: Path, content: frozenset[str] = _PARTIAL_CONTENT) -> list[Path]:
    """Remove `.<name>.partial-<pid>` folders whose launch is gone (killed mid-way): nobody holds
    its lock and its process no longer exists. A folder holding
    anything a launch does not write (a name outside `content`) is left alone, whatever its name."""
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
            ours = {p.name for p in path.iterdir()} <= content
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
