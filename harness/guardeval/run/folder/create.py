"""Creating a run folder (or a study folder): built beside its final place, then renamed into it
(docs/design.md §6).

The partial folder `.<name>.partial-<pid>` is made and opened once, relative to a descriptor
of its parent, and everything in it is created through that descriptor (`RunFolder`) with
`O_CREAT | O_EXCL | O_NOFOLLOW`: a link planted in it while the launch plans (`raw.jsonl` or
`manifest.json` to a file elsewhere, `cohort/` to a folder elsewhere) is refused, never
written through, and the launch exits 2 having written nothing outside it. The rename into
place is checked to have moved that same folder.

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
from typing import TypeVar

import orjson

from guardeval.cohorts.model import Cohort
from guardeval.errors import GuardevalError, InputError, WriteFailed
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import COHORT_DIR, DECISIONS, MANIFEST, PARTIAL_LOCK, PROMPT_DIR, RAW, SCHEDULE, STIMULI
from guardeval.run.folder.manifest import CohortPin, FileHashes, RunManifest, manifest_with_hash

_PARTIAL = re.compile(r"\.(.+)\.partial-([0-9]+)")


def create_run_dir(run_dir: Path, *, manifest: RunManifest, cohort: Cohort,
                   fill: Callable[[RunFolder], FileHashes],
                   prompt_files: tuple[tuple[str, bytes], ...] = (), parent: RunFolder | None = None
                   ) -> RunManifest:
    """Materialise a new run folder atomically: build it beside, then rename into place (with
    `parent`, `run_dir` is its entry, built through its descriptor: `build_beside`).

    `fill(partial_folder)` streams `schedule.jsonl` and `stimuli.jsonl` into the partial folder
    (`RunFolder.create_new`) and returns the manifest fields it learned on the way (their
    SHA-256); the cohort's validated bytes go into `cohort/`, `prompt_files` (name, bytes) into
    `prompt/`; the manifest is written last. Returns the manifest as written (with its own
    `sha256`). Refused (InputError, nothing left behind): a symbolic link, a file or a non-empty
    folder at `run_dir`, a place that cannot hold a folder, anything planted in the partial
    folder while it is built. A disk that fills up meanwhile: WriteFailed, nothing left behind.
    Partial folders of launches that died are removed on the way.
    """
    return build_beside(run_dir, lambda folder: _fill_run(folder, manifest, cohort, fill, prompt_files),
                        parent=parent)


def create_run_in(parent: RunFolder, name: str, *, manifest: RunManifest, cohort: Cohort,
                  fill: Callable[[RunFolder], FileHashes],
                  prompt_files: tuple[tuple[str, bytes], ...] = ()) -> RunManifest:
    """`create_run_dir`'s run folder as `name` (`runs/<label>`) inside a folder that is itself
    being built (a partial study folder, renamed into place whole): made and filled through
    `parent`'s descriptors, each step `O_NOFOLLOW`, never by path, so a link planted in
    `parent` meanwhile is refused (InputError naming it), never written through."""
    parent.make_dir(name)
    with parent.folder(name) as folder:
        written = _fill_run(folder, manifest, cohort, fill, prompt_files)
        folder.sync()
    return written


def _fill_run(folder: RunFolder, manifest: RunManifest, cohort: Cohort, fill: Callable[[RunFolder], FileHashes],
              prompt_files: tuple[tuple[str, bytes], ...]) -> RunManifest:
    folder.make_dir(COHORT_DIR)
    _copy_cohort(cohort, folder, manifest.get("cohort"))
    if prompt_files:
        folder.make_dir(PROMPT_DIR)
        for name, data in prompt_files:
            if "/" in name or name in ("", ".", ".."):
                raise InputError(f"prompt file name '{name}' is not a plain file name", field="prompt")
            folder.write_new(f"{PROMPT_DIR}/{name}", data)
    hashes = fill(folder)
    written = manifest.copy()
    written["schedule_sha256"], written["stimuli_sha256"] = hashes["schedule_sha256"], hashes["stimuli_sha256"]
    folder.write_new(RAW, b"")
    folder.write_new(DECISIONS, b"")
    written = manifest_with_hash(written)
    folder.write_new(MANIFEST, orjson.dumps(written, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                          | orjson.OPT_APPEND_NEWLINE))
    return written


T = TypeVar("T")


def build_beside(target: Path, build: Callable[[RunFolder], T], *, what: str = "run folder",
                 content: frozenset[str] | None = None, parent: RunFolder | None = None) -> T:
    """A new folder at `target`, built by `build(partial)` in `.<name>.partial-<pid>` beside it
    (its lock held meanwhile), then synced and renamed into place; the result of `build`.
    `partial` is the partial folder opened once, relative to its parent's descriptor: `build`
    creates what it holds through it (`make_dir`, `new_file`, `write_new`: never through a
    link, never over an old file). Refused (InputError, nothing left behind) as
    `check_new_run_dir` refuses, or when the folder renamed into place is not the one built; on
    any failure the partial folder (and the parents made for it) is removed. Partial folders of
    builders that died are removed first (those holding only names of `content`).
    With `parent` (a study's `runs/`, opened through the study's descriptors), `target` names
    `parent`'s entry `target.name`: everything goes through `parent`'s descriptor, never by path,
    so a link put in place of the parent meanwhile is never written through."""
    if parent is None:
        check_new_run_dir(target, what)
        made = _make_parents(target.parent)
    else:
        made = []
    tmp_name = f".{target.name}.partial-{os.getpid()}"
    tmp = target.with_name(tmp_name)
    parent_fd: int | None = None
    folder: RunFolder | None = None
    lock_fd: int | None = None
    try:
        parent_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if parent is None \
            else parent.reopen()
        remove_stale_partials(parent_fd, content or _PARTIAL_CONTENT)
        # A leftover of an earlier builder under this pid (pids are reused): not ours to keep.
        shutil.rmtree(tmp_name, ignore_errors=True, dir_fd=parent_fd)
        os.mkdir(tmp_name, 0o755, dir_fd=parent_fd)
        folder = RunFolder(tmp, parent_fd=parent_fd)
        # Held while the folder is built: a later launch that can take it knows its owner died.
        lock_fd = folder.create_new(PARTIAL_LOCK)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = build(folder)
        folder.unlink(PARTIAL_LOCK)
        folder.sync()   # the files were synced as they were written; now the entries naming them
        _rename_into_place(parent_fd, tmp_name, target, folder.identity(), what)
    except BaseException as exc:
        if parent_fd is not None:
            shutil.rmtree(tmp_name, ignore_errors=True, dir_fd=parent_fd)
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
        if folder is not None:
            folder.close()
        if parent_fd is not None:
            os.close(parent_fd)
    return result


def _rename_into_place(parent_fd: int, tmp_name: str, target: Path, ours: tuple[int, int], what: str) -> None:
    """rename(2) the partial folder onto nothing, or onto an empty folder; a folder that is not
    empty (another launch won a race for it) is left alone. What arrives must be the folder
    that was built: one swapped in for it by name is not ours."""
    try:
        os.rename(tmp_name, target.name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise InputError(f"{what} already exists and is not empty (did another launch create it "
                             "meanwhile?)", path=target) from None
        raise
    st = os.stat(target.name, dir_fd=parent_fd, follow_symlinks=False)
    if (st.st_dev, st.st_ino) != ours:
        raise InputError(f"the partial folder was replaced while the {what} was being created; nothing of it "
                         "is used (launch again)", path=target)
    os.fsync(parent_fd)


def discard_unstarted(run_dir: Path) -> bool:
    """Remove the run folder a launch has just built when its first session was refused (a link
    planted in it, say) before anything was sent: the refusal leaves nothing behind, not a
    folder that `status` calls "not started" and `resume` refuses. Kept when it is no longer a
    folder (a link in its place) or its raw log holds anything (an answer is never thrown away).
    rmtree never follows a link (it removes the link)."""
    try:
        with RunFolder(run_dir) as folder:
            try:
                if folder.has(RAW) and folder.size(RAW) > 0:
                    return False
            except InputError:
                pass   # a link or a FIFO in raw.jsonl's place: nothing was logged through it
    except (GuardevalError, OSError):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return not os.path.lexists(run_dir)


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


def remove_stale_partials(folder: Path | int, content: frozenset[str] = _PARTIAL_CONTENT) -> list[Path]:
    """Remove `.<name>.partial-<pid>` folders whose launch is gone (killed mid-way): nobody holds
    its lock and its process no longer exists. A folder holding anything a launch does not write
    (a name outside `content`) is left alone, whatever its name. `folder` is a path or a
    descriptor of the folder (then everything is relative to it, and the paths returned are the
    bare names)."""
    removed: list[Path] = []
    try:
        dfd = folder if isinstance(folder, int) else os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return removed
    try:
        with os.scandir(dfd) as it:
            entries = list(it)
        for entry in entries:
            m = _PARTIAL.fullmatch(entry.name)
            if m is None or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                try:
                    ours = set(os.listdir(sub)) <= content
                finally:
                    os.close(sub)
            except OSError:
                ours = False
            if ours and not _partial_is_live(dfd, entry.name, int(m[2])):
                shutil.rmtree(entry.name, ignore_errors=True, dir_fd=dfd)
                removed.append(Path(entry.name) if isinstance(folder, int) else Path(folder) / entry.name)
    finally:
        if not isinstance(folder, int):
            os.close(dfd)
    return removed


def _partial_is_live(dfd: int, name: str, pid: int) -> bool:
    try:
        fd = os.open(f"{name}/{PARTIAL_LOCK}", os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
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


def _copy_cohort(cohort: Cohort, folder: RunFolder, pins: CohortPin | None) -> None:
    """Copy the cohort's validated bytes (read through the descriptors its load kept, never
    from the path again), hashing on the way: the copy must be the bytes the plan validated."""
    if pins and hashlib.sha256(cohort.meta_bytes).hexdigest() != pins["sha256"]:
        raise InputError("the cohort changed while the run was being planned", path=cohort.path / "cohort.json")
    folder.write_new(f"{COHORT_DIR}/cohort.json", cohort.meta_bytes)
    h = hashlib.sha256()
    with folder.new_file(f"{COHORT_DIR}/instances.jsonl") as fout:
        for chunk in cohort.instance_chunks():
            h.update(chunk)
            fout.write(chunk)
    if pins and pins.get("instances_sha256") is not None and h.hexdigest() != pins["instances_sha256"]:
        raise InputError("the cohort changed while the run was being planned", path=cohort.path / "instances.jsonl")
