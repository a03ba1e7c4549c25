"""The run folder as one object (docs/design.md §6): every file of a run is opened here.

A run folder may come from someone else, so nothing in it is trusted, least of all its shape:

* The folder is opened once, `O_DIRECTORY | O_NOFOLLOW`, and every file relative to that
  descriptor (`openat`) with `O_NOFOLLOW`: a symbolic link at the folder or inside it is refused,
  naming it, for reading and for writing alike (a link to a file elsewhere can never be
  appended to, overwritten or created through).
* Only regular files are read or written: a FIFO (which would block a reader), a device (which
  never ends) or a folder in a file's place is refused, naming it. Opens are non-blocking, so a
  FIFO is found by `fstat`, never waited on.
* Each file is opened once per command (the descriptor is kept and read by offset, `pread`), so
  every pass of a command reads the same file, however the names change meanwhile.
* Every read is bounded: small files (the manifest, a report) by their size cap, log lines by
  `line_cap` (16 × the row and response bounds the run was launched under), so a line far past
  anything a writer writes is refused without being read whole.
* The lock is the folder itself: `flock` on a descriptor of the folder opened for the session
  (its own lock slot, so two sessions in one process exclude each other too). Deleting `.lock` (kept, with
  the holder's pid, for people) cannot let a second writer in; the kernel releases the lock when
  its holder dies, even by SIGKILL.
* Reports are replaced, not overwritten: written to a new name (`O_EXCL | O_NOFOLLOW`) and renamed
  over the old one, which replaces a link rather than following it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from guardeval.errors import GuardevalError, InputError, WriteFailed
from guardeval.run.folder.folder_io import LineTooLong, PRead, RunLock
from guardeval.run.folder.layout import LOCK, MANIFEST, RUNS_ROOT

# The per-line bound when the manifest gives no bounds of its own: 16 x (1 MiB row + 4 MiB
# response), the defaults. A raw line holds the rendered request (the row, escaped), the response
# and its content (both escaped): a few times the two bounds, never 16.
DEFAULT_LINE_CAP = 16 * ((1 << 20) + (4 << 20))
MAX_LINE_CAP = 1 << 30          # whatever a manifest says, no line of more than 1 GiB is read
_LINK = "is a symbolic link; a run folder's files are never opened through a link"
_NOT_REGULAR = "is not a regular file (a FIFO, a device or a folder stands in its place)"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotWritable(InputError):
    """Outputs meant for a run folder that this process cannot write (exit 2): a read-only mount
    (an archive, a colleague's share, a published replication) is read, never written; `--out`
    names where the outputs go instead."""

    def __init__(self, folder: Path, what: str) -> None:
        super().__init__(f"the run folder is not writable (a read-only mount, or another user's folder), so {what} "
                         "cannot go into it: name a folder for the outputs with --out DIR", path=folder)


class RunFolder:
    """One run folder, opened once; the only code that opens a run folder's files.

    `RunFolder(path)` opens the folder (InputError, exit 2: missing, not a folder, a symbolic
    link). Names are those of `guardeval.run.folder.layout` (`RAW`, `MANIFEST`, ...), or `sub/name` for a
    file of `cohort/` or `prompt/`. Close it (or use `with`) when the command is done.
    """

    def __init__(self, path: str | Path, *, parent_fd: int | None = None) -> None:
        self.path = Path(path) if parent_fd is not None else _named(Path(path))
        # Inside another folder (`folder`; a partial folder being built, `guardeval.run.folder.create`): opened
        # relative to its descriptor, by its last name, never through a link.
        self._fd = _open_dir(self.path, parent_fd, self.path.name if parent_fd is not None else self.path)
        self._files: dict[str, int | None] = {}    # name -> read descriptor (None: absent)
        self._dirs: dict[str, int] = {}
        self._small: dict[str, bytes] = {}
        self._line_cap: int | None = None

    # -- names and lifetime ----------------------------------------------------------------------
    def __str__(self) -> str:
        # Messages name the folder as the user gave it.
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def file(self, name: str) -> Path:
        """The path of `name`, for messages (never opened by the caller)."""
        return self.path / name

    def close(self) -> None:
        for fd in [*self._files.values(), *self._dirs.values()]:
            if fd is not None:
                os.close(fd)
        self._files.clear()
        self._dirs.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def require_open(self, what: str = "RunFolder") -> None:
        """InputError when closed: every read would fail on a closed descriptor ("Bad file
        descriptor"), which is not a damaged run but a `what` used after `close`."""
        if self.closed:
            raise InputError(f"this {what} was closed, so nothing of the run can be read through it: open it again "
                             "(Run.open(path))", path=self.path)

    def __del__(self) -> None:
        # A folder handed along and dropped (a view's call rows) closes with its last reference.
        if getattr(self, "_fd", -1) >= 0:
            self.close()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        """Whether `name` is there (a regular file; anything else in its place is refused)."""
        return self._read_fd(name) is not None

    def size(self, name: str) -> int:
        """Its size in bytes now (0 when absent)."""
        fd = self._read_fd(name)
        return os.fstat(fd).st_size if fd is not None else 0

    def reader(self, name: str) -> BinaryIO | None:
        """A buffered reader of `name` from its first byte, with its own offset (None: absent).
        Closing it leaves the folder's descriptor open."""
        fd = self._read_fd(name)
        if fd is None:
            return None
        return io.BufferedReader(PRead(fd), 1 << 20)

    def read_small(self, name: str, limit: int, *, what: str) -> bytes:
        """The bytes of a small file (the manifest, a report), at most `limit`: InputError naming
        it when it is absent or larger. Read once per command."""
        if name not in self._small:
            fh = self.reader(name)
            if fh is None:
                raise InputError("no such file", path=self.file(name))
            with fh:
                data = fh.read(limit + 1)
            if len(data) > limit:
                raise InputError(f"larger than {limit} bytes: not {what}", path=self.file(name))
            self._small[name] = data
        return self._small[name]

    def lines(self, name: str) -> Iterator[tuple[int, bytes]]:
        """(line number, line with its newline) of every line of a log; a torn last line comes
        without its newline (the caller decides). A line longer than `line_cap` raises
        LineTooLong when `line_cap` bytes of it have been read, never more."""
        fh = self.reader(name)
        if fh is None:
            return
        cap = self.line_cap
        with fh:
            lineno = 0
            while line := fh.readline(cap + 1):
                lineno += 1
                if len(line) > cap and not line.endswith(b"\n"):
                    raise LineTooLong(self.file(name), lineno, cap)
                yield lineno, line

    def mapped_lines(self, name: str, start: int = 0, end: int | None = None,
                     window: int = 64 << 20) -> Iterator[tuple[int, Any, int, int, int]]:
        """(line number, buffer, line start, newline position, buffer offset in the file) of every
        complete line (of the lines in bytes [start, end), when given: both line boundaries; line
        numbers then count from `start`). `buffer[line start:newline]` is the line; the buffer is
        valid until the next item.

        A 1M-call raw log is several GB. It is mapped a window at a time (the page cache is read
        in place: no copy into the process, and resident memory stays one window) and newlines
        are found with memchr. A torn last line (no newline) is left out, as `lines` callers do;
        a line longer than `line_cap` raises LineTooLong.
        """
        fd = self._read_fd(name)
        if fd is None:
            return
        size = os.fstat(fd).st_size
        size = size if end is None else min(end, size)
        base, lineno, cap = start, 0, self.line_cap
        while base < size:
            start = base - base % mmap.ALLOCATIONGRANULARITY
            length = min(size - start, window)
            with mmap.mmap(fd, length, offset=start, access=mmap.ACCESS_READ) as mm:
                pos = base - start
                while (nl := mm.find(b"\n", pos)) >= 0:
                    lineno += 1
                    yield lineno, mm, pos, nl, start
                    pos = nl + 1
            if start + pos == base:          # no complete line in this window
                if start + length >= size:
                    return                   # a torn last line
                if length - (base - start) > cap:
                    raise LineTooLong(self.file(name), lineno + 1, cap)
                window *= 2                  # a line longer than the window
            base = start + pos

    def mapped(self, name: str) -> mmap.mmap | None:
        """The whole of `name` mapped read-only (None: absent or empty); the caller closes it."""
        fd = self._read_fd(name)
        if fd is None or os.fstat(fd).st_size == 0:
            return None
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)

    def sha256(self, name: str) -> str:
        """SHA-256 of the whole of `name` (InputError when absent), read a piece at a time."""
        fh = self.reader(name)
        if fh is None:
            raise InputError("no such file", path=self.file(name))
        h = hashlib.sha256()
        with fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    def pread(self, name: str, length: int, offset: int) -> bytes:
        """`length` bytes of `name` at `offset` (fewer at its end)."""
        fd = self._read_fd(name)
        return os.pread(fd, length, offset) if fd is not None else b""

    def line_at(self, name: str, offset: int) -> bytes:
        """The line starting at byte `offset`, without its newline (a torn one as it is), read in
        growing pieces up to `line_cap` (LineTooLong past it; the line number is not known here: 0)."""
        piece, got = 1 << 16, b""
        while True:
            more = self.pread(name, piece, offset + len(got))
            nl = more.find(b"\n")
            if nl >= 0 or not more:
                line = got + (more[:nl] if nl >= 0 else more)
                if len(line) > self.line_cap:
                    raise LineTooLong(self.file(name), 0, self.line_cap)
                return line
            got += more
            if len(got) > self.line_cap:
                raise LineTooLong(self.file(name), 0, self.line_cap)
            piece = min(piece * 2, 64 << 20)

    def line_boundary(self, name: str, near: int) -> int:
        """The first line start at or after byte `near` (the file size when there is none)."""
        fh = self.reader(name)
        if fh is None:
            return 0
        with fh:
            fh.seek(max(near - 1, 0))
            if near > 0:
                while (chunk := fh.readline(1 << 20)) and not chunk.endswith(b"\n"):
                    pass   # the rest of the line that byte near-1 is in, a bounded piece at a time
            return fh.tell()

    def subdir(self, name: str) -> tuple[Path, int]:
        """(path, descriptor) of `cohort/` or `prompt/` for the loaders below the run layer, once
        checked: a folder, not a link, holding regular files only (InputError naming what is
        not). The loaders open its files relative to the descriptor, non-blocking, and check
        each once open (`guardeval.bounded.open_regular`): what is renamed in after this check is
        refused then, never waited on. The descriptor is the folder's (closed with it)."""
        dfd = self._dir_fd(name)
        with os.scandir(dfd) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    why = _LINK if entry.is_symlink() else _NOT_REGULAR
                    raise InputError(why, path=self.file(f"{name}/{entry.name}"))
        return self.file(name), dfd

    def folder(self, name: str) -> RunFolder:
        """A folder inside this one (`runs/<label>` of a study) as a RunFolder of its own, each
        step opened relative to the one before and never through a link (InputError)."""
        sub, _, leaf = name.rpartition("/")
        if not leaf or leaf in (".", "..") or any(part in ("", ".", "..") for part in sub.split("/") if sub):
            raise InputError("not a plain folder name", path=self.file(name))
        return RunFolder(self.file(name), parent_fd=self._dir_fd(sub) if sub else self._fd)

    def folders(self, name: str) -> list[str]:
        """The names of the folders in `name` (a folder of this one); anything else there (a
        link, a file) is refused, naming it. [] when `name` is absent."""
        if not self.has_subdir(name):
            return []
        out = []
        with os.scandir(self._dir_fd(name)) as entries:
            for entry in entries:
                if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                    why = _LINK if entry.is_symlink() else "is not a folder"
                    raise InputError(why, path=self.file(f"{name}/{entry.name}"))
                out.append(entry.name)
        return sorted(out)

    def has_subdir(self, name: str) -> bool:
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror or exc})", path=self.file(name)) from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(_LINK, path=self.file(name))
        return stat.S_ISDIR(st.st_mode)

    @property
    def line_cap(self) -> int:
        """The longest log line read: 16 x (row bound + response bound) of the run's manifest
        (its `row_limits.max_bytes` and `guard.max_response_bytes` where it records them, the
        defaults otherwise), at most 1 GiB."""
        if self._line_cap is None:
            row, response = 1 << 20, 4 << 20
            try:
                m = orjson.loads(self.read_small(MANIFEST, 16 << 20, what="a run manifest"))
            except (InputError, orjson.JSONDecodeError):
                m = None
            if isinstance(m, dict):
                rec, guard = m.get("row_limits"), m.get("guard")
                row = _bound(rec.get("max_bytes") if isinstance(rec, dict) else None, row)
                response = _bound(guard.get("max_response_bytes") if isinstance(guard, dict) else None, response)
            self._line_cap = min(16 * (row + response), MAX_LINE_CAP)
        return self._line_cap

    # -- writing -----------------------------------------------------------------------------------
    def open_append(self, name: str) -> int:
        """A descriptor appending to `name` (created if absent; a link or anything but a regular
        file refused, InputError). The caller owns it (`writer.AppendLog`)."""
        return self._open(name, _APPEND, create=True)

    def open_update(self, name: str) -> int | None:
        """A read-write descriptor of an existing regular file (None: absent); the caller closes it."""
        try:
            return self._open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None

    def create_new(self, name: str) -> int:
        """A descriptor of a file that did not exist (O_EXCL: never an old file, never a link)."""
        return self._open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, create=True)

    @contextmanager
    def new_file(self, name: str) -> Iterator[BinaryIO]:
        """A new file (`create_new`: never an old file, never a link), buffered, synced to the
        disk when the block ends without an error."""
        with os.fdopen(self.create_new(name), "wb", buffering=1 << 20) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())

    def write_new(self, name: str, data: bytes) -> None:
        """`data` as the new file `name` (`new_file`)."""
        with self.new_file(name) as fh:
            fh.write(data)

    def make_dir(self, name: str) -> None:
        """Create the folder `name` (`cohort/`, `prompt/`) in a folder being built, and open it
        (never through a link). Refused when anything is there already: something else was put
        in the folder meanwhile."""
        sub, _, leaf = name.rpartition("/")
        dfd = self._dir_fd(sub) if sub else self._fd   # `runs/<label>`: made in `runs/` as opened, never by path
        try:
            os.mkdir(leaf, 0o755, dir_fd=dfd)
        except FileExistsError:
            raise InputError("already exists: something else was put in the folder while it was being built",
                             path=self.file(name)) from None
        except FileNotFoundError:
            self.check_same_dir(sub)   # the folder it goes in was removed (or a link put in its place)
            raise
        self._dir_fd(name)

    def check_same_dir(self, name: str) -> None:
        """InputError unless `name` still names the folder this one opened as `name` (a link, or
        another folder, put in its place since: the link is named)."""
        if not name or name not in self._dirs:
            return
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            raise InputError("was removed while the folder was being built", path=self.file(name)) from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(_LINK, path=self.file(name))
        ours = os.fstat(self._dirs[name])
        if (st.st_dev, st.st_ino) != (ours.st_dev, ours.st_ino):
            raise InputError("was replaced while the folder was being built", path=self.file(name))

    def sync(self) -> None:
        """fsync the folder and its open subfolders (their entries: the files created in them)."""
        for fd in self._dirs.values():
            os.fsync(fd)
        os.fsync(self._fd)

    def writable(self) -> bool:
        """Whether this process may create files in the folder (false on a read-only mount, or in
        another user's folder): asked before work whose outputs would go into it."""
        return os.access(".", os.W_OK, dir_fd=self._fd)

    def free_space(self) -> int:
        """Bytes this user may still write on the folder's disk (`fstatvfs` of its descriptor: the
        folder renamed, or the working directory changed, meanwhile asks the same disk)."""
        st = os.fstatvfs(self._fd)
        return st.f_bavail * st.f_frsize

    def identity(self) -> tuple[int, int]:
        """(device, inode) of the folder opened: what a name must still lead to."""
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self._fd)
        except FileNotFoundError:
            pass

    def replace(self, name: str, write: Callable[[BinaryIO], object]) -> Path:
        """`write(file)` into a new file beside `name`, synced, then renamed over `name`: a link
        at `name` is replaced, never followed, and a failed write leaves nothing behind."""
        tmp = f".{name}.partial-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            fd = self.create_new(tmp)
        except InputError:
            if not self.writable():
                raise NotWritable(self.path, name) from None
            raise
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException as exc:
            self.unlink(tmp)
            if isinstance(exc, OSError) and exc.errno in _FULL:
                # A write has no file name of its own: the message names the file being replaced.
                raise WriteFailed(self.file(name), exc, f"{name} was left as it was.") from None
            raise
        cached = self._files.pop(name, None)
        if cached is not None:
            os.close(cached)
        self._small.pop(name, None)
        return self.file(name)

    # -- the lock ----------------------------------------------------------------------------------
    def lock(self) -> RunLock:
        """The run's writer lock (a context manager): exclusive `flock` on the folder itself;
        `.lock` gets the holder's pid, for people (a link there is refused, never created through)."""
        return RunLock(self.reopen, self.path, self._write_pid)

    def reopen(self) -> int:
        """A new descriptor of this folder (its own open file description: its own lock slot); the
        caller closes it."""
        return os.open(".", _DIR, dir_fd=self._fd)

    def _write_pid(self) -> None:
        try:
            fd = self._open(LOCK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, create=True)
        except WriteFailed:
            return   # a full disk: the pid is for people; the lock is the flock
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        finally:
            os.close(fd)

    def held_by_another(self) -> bool:
        """Whether a process holds the run's lock now (is running it). Creates nothing; the lock
        dies with its process, so a killed run reads as not running."""
        fd = self.reopen()   # its own lock slot
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    # -- inside --------------------------------------------------------------------------------------
    def _read_fd(self, name: str) -> int | None:
        # An absent file is looked for again next time: a live run's writer creates events.jsonl
        # and decisions.jsonl after the folder was opened, and the fingerprint a session prints
        # at its end must see them. A file once open stays that descriptor.
        fd = self._files.get(name)
        if fd is None:
            try:
                fd = self._open(name, _READ)
            except FileNotFoundError:
                return None
            self._files[name] = fd
        return fd

    def _dir_fd(self, name: str) -> int:
        if name not in self._dirs:
            # `a/b` opened one step at a time, each relative to the one before: no link followed.
            sub, _, leaf = name.rpartition("/")
            self._dirs[name] = _open_dir(self.file(name), self._dir_fd(sub) if sub else self._fd, leaf, link=_LINK)
        return self._dirs[name]

    def _open(self, name: str, flags: int, *, create: bool = False) -> int:
        """`name` opened relative to the folder: FileNotFoundError when absent, InputError for a
        link or anything but a regular file."""
        sub, _, leaf = name.rpartition("/")
        dfd = self._dir_fd(sub) if sub else self._fd
        try:
            fd = os.open(leaf, flags, 0o644, dir_fd=dfd) if create else os.open(leaf, flags, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._refusal(name, dfd, leaf, exc) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputError(_NOT_REGULAR, path=self.file(name))
        if flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return fd

    def _refusal(self, name: str, dfd: int, leaf: str, exc: OSError) -> GuardevalError:
        try:
            mode = os.stat(leaf, dir_fd=dfd, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode) or exc.errno == errno.ELOOP:
            return InputError(_LINK, path=self.file(name))
        if mode and not stat.S_ISREG(mode) or exc.errno in (errno.ENXIO, errno.EISDIR):
            return InputError(_NOT_REGULAR, path=self.file(name))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return WriteFailed(self.file(name), exc, "Nothing half-written was kept.")
        return InputError(f"cannot open ({exc.strerror or exc})", path=self.file(name))



def _named(path: Path) -> Path:
    """A bare run id (`20261201T…-haiku-4.5-772ac8`) names `runs/<id>` when nothing of that name
    is here: what a launch printed can be pasted as is."""
    if len(path.parts) == 1 and path.name not in (".", "..") and not os.path.lexists(path):
        candidate = Path(RUNS_ROOT) / path
        if os.path.lexists(candidate):
            return candidate
    return path


def write_into(where: RunFolder | Path, name: str, write: Callable[[BinaryIO], object]) -> Path:
    """`write(file)` as `name` in a run folder (`RunFolder.replace`) or in a plain folder given
    by `--out` (a new file beside, `O_EXCL`, renamed into place): a reader never sees half a
    file, and a failed write leaves nothing behind."""
    if isinstance(where, RunFolder):
        return where.replace(name, write)
    target = where / name
    tmp = target.with_name(f".{name}.partial-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with open(tmp, "xb") as fh:
            write(fh)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in _FULL:
            raise WriteFailed(target, exc, f"{name} was left as it was.") from None
        raise
    return target


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def reason(exc: InputError) -> str:
    """The message of an InputError without the path it names (for verify's problem list)."""
    text = str(exc)
    prefix = f"{exc.path}: " if exc.path is not None else ""
    return text[len(prefix):] if text.startswith(prefix) else text


def _bound(value: Any, default: int) -> int:
    return value if type(value) is int and value > default else default


def _open_dir(path: Path, dfd: int | None, name: str | Path,
              link: str = "is a symbolic link; give the run folder itself, nothing in it is followed") -> int:
    try:
        return os.open(name, _DIR, dir_fd=dfd) if dfd is not None else os.open(name, _DIR)
    except FileNotFoundError:
        raise InputError("not a run folder (no such folder)", path=path) from None
    except OSError as exc:
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode) or exc.errno == errno.ELOOP:
            raise InputError(link, path=path) from None
        if exc.errno == errno.ENOTDIR:
            raise InputError("is not a folder", path=path) from None
        raise InputError(f"cannot open ({exc.strerror or exc})", path=path) from None
