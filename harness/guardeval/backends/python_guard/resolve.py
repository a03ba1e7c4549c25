"""A guard config's `callable` ("package.module:function"): checked, imported, described.

The name comes from the guard config only (never from cohort data, never joined into a path).
Its parts are ASCII identifiers, none a dunder (`__globals__`, `__class__`, `__main__`: no
reaching through objects), no keyword. Importing runs the module's code, as any import does:
it is the guard the user named.

Provenance (recorded in the manifest and in every attempt's response): the name, the module
that defines the function, the installed distribution that provides that module and its version
(`importlib.metadata.packages_distributions`; none for a module on PYTHONPATH), and the SHA-256
of that module's source file, and `beside_config`: the guard config's folder when the module was
found there rather than on the import path (so `launch --guard my-guard.toml` works beside
`my_guard.py` with no PYTHONPATH; `resume` and `verify` look there again).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import keyword
import os
import re
import stat
import sys
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from guardeval.errors import InputError

MAX_NAME_CHARS = 256
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME_RE = re.compile(rf"({_IDENT}(?:\.{_IDENT})*):({_IDENT}(?:\.{_IDENT})*)")
MAX_SOURCE_BYTES = 64 << 20   # a source file hashed for provenance
# The package's folder, as imported (not resolved: the presets are reached through a link).
_SHIPPED = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Folders `load` appended to sys.path because a guard's module lay there, beside its config.
_BESIDE: set[str] = set()


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a `callable` value (None: it can). Never imports anything."""
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    m = _NAME_RE.fullmatch(name)
    if m is None:
        return "must be 'package.module:function' (ASCII identifiers separated by '.', one ':')"
    for part in (*m.group(1).split("."), *m.group(2).split(".")):
        if part.startswith("__") and part.endswith("__"):
            return f"'{part}': a dunder name is not allowed"
        if keyword.iskeyword(part):
            return f"'{part}' is a Python keyword"
    return None


def split(name: str) -> tuple[str, list[str]]:
    module, _, attrs = name.partition(":")
    return module, attrs.split(".")


def config_folder(source: object) -> str | None:
    """The folder of a guard config file (None: the config is not a file, e.g. `api.python_guard`)."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.path.abspath(os.fspath(source))
    return os.path.dirname(path) if os.path.isfile(path) else None


def load(name: str, *, where: object = None, field: str = "callable", beside: str | None = None) -> Callable[..., Any]:
    """Import the module and walk to the function. InputError (exit 2) naming the field and
    the import error when it does not import, has no such attribute, or is not callable.
    A module the import path does not have is looked for in `beside` (the guard config's
    folder), which is then appended to sys.path: the guard the config sits next to."""
    if (problem := name_problem(name)) is not None:
        raise InputError(problem, path=where, field=field)
    module_name, attrs = split(name)
    try:
        obj: Any = _import(module_name, beside)
    except BaseException as exc:  # noqa: BLE001 - any failure of the user's module is bad input here
        if isinstance(exc, KeyboardInterrupt):
            raise
        also = f", or beside the guard config in {beside}" if beside else ""
        raise InputError(f"cannot import module '{module_name}': {_text(exc)} (is it installed, on "
                         f"PYTHONPATH{also}?)", path=where, field=field) from None
    for i, attr in enumerate(attrs):
        try:
            obj = getattr(obj, attr)
        except Exception as exc:  # noqa: BLE001 - AttributeError, or a property that raised
            got = ".".join([module_name, *attrs[:i]]) if i else module_name
            raise InputError(f"'{got}' has no attribute '{attr}' ({_text(exc)})", path=where,
                             field=field) from None
    if not callable(obj):
        raise InputError(f"'{name}' is a {type(obj).__name__}, not a function", path=where, field=field)
    return obj


def _import(module_name: str, beside: str | None) -> Any:
    # What the module prints as it loads goes to stderr: stdout is the command's (`--json`).
    with contextlib.redirect_stdout(sys.stderr):
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            top = module_name.partition(".")[0]
            # Only a top-level module missing from the whole path: an import error inside the
            # guard's own code is the guard's to report.
            if beside is None or exc.name != top or locate(module_name, [beside]) is None:
                raise
        use_beside(beside)
        return importlib.import_module(module_name)


def _text(exc: BaseException, limit: int = 300) -> str:
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        said = "<unprintable>"
    return f"{type(exc).__name__}: {said[:limit]}"


class Provenance(TypedDict):
    """What was called (`provenance`), as a python run's manifest pins it (`guard_callable`)."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    source_sha256: str | None
    beside_config: NotRequired[str]   # the folder beside the config it was found in


def provenance(name: str, fn: Callable[..., Any]) -> Provenance:
    """What was called: name, defining module, distribution and version, source SHA-256."""
    module = getattr(inspect.unwrap(fn), "__module__", None) or split(name)[0]
    if not isinstance(module, str):
        module = split(name)[0]
    dist, version = distribution(module)
    path = source_file(module)
    if dist is None and path is not None and path.startswith(_SHIPPED + os.sep):
        # The shipped example guard lies beside its preset (guards/, the package's presets/):
        # guardeval's own file, so guardeval's version names it.
        dist, version = distribution("guardeval")
    out: Provenance = {"name": name, "module": module, "distribution": dist, "version": version,
                       "source_sha256": source_sha256(module)}
    folder = next((d for d in sorted(_BESIDE) if path is not None and path.startswith(d + os.sep)), None)
    if folder is not None:
        out["beside_config"] = folder
    return out


def distribution(module: str) -> tuple[str | None, str | None]:
    """(distribution, version) of the installed package providing `module`, else (None, None)."""
    top = module.partition(".")[0]
    names = _packages_distributions().get(top) or []
    if not names:
        return None, None
    dist = sorted(names)[0]
    try:
        return dist, importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return dist, None


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    # Scans every installed distribution once per process (tens of ms).
    return dict(importlib.metadata.packages_distributions())


def source_file(module: str) -> str | None:
    """The source file of `module`, found without importing or running anything: the loaded
    module's own file when this process has imported it (launch, resume), else `locate`.
    None for a built-in, a module with no source, or one not found."""
    mod = sys.modules.get(module)
    if mod is not None:
        try:
            return inspect.getsourcefile(mod)
        except TypeError:
            return None
    return locate(module)


def locate(module: str, path: list[str] | None = None) -> str | None:
    """Where the import system would find `module`'s source, looked up as plain files: never
    an import, never `find_spec` (which imports the parent packages, running their code), so a
    module named by a stranger's run folder runs nothing here (issue 27).

    Each part is looked for as Python's path finder does, in the folders of the parent package
    this process already imported (guardeval's own, or one a launch imported), else in the
    folders of `sys.path` (PYTHONPATH, the script's folder, site-packages): `part/__init__.py`
    (a package) or `part.py` in the first folder that has one, `part/` folders without
    `__init__.py` (namespace portions) joined when none has. Not found here: a module that
    only an import hook provides (setuptools' editable-install finder, a zip file) or that is
    not on this machine's path. `path` replaces `sys.path` for a top-level lookup (a guard
    config's folder, recorded as `beside_config`). Names are checked identifiers (`name_problem`), so no part
    can climb out of the folder it is looked for in."""
    parts = module.split(".")
    dirs: list[str] | None = None
    start = 0
    for i in range(len(parts) - 1, 0, -1):
        parent = sys.modules.get(".".join(parts[:i]))
        if parent is not None:
            dirs = [d for d in (getattr(parent, "__path__", None) or ()) if isinstance(d, str)]
            start = i
            break
    if dirs is None:
        dirs = [d or os.getcwd() for d in (sys.path if path is None else path) if isinstance(d, str)]
    for n, part in enumerate(parts[start:], start + 1):
        last = n == len(parts)
        found, portions = None, []
        for d in dirs:
            folder = os.path.join(d, part)
            if os.path.isfile(os.path.join(folder, "__init__.py")):
                found = os.path.join(folder, "__init__.py")
                break
            if os.path.isfile(folder + ".py"):
                found = folder + ".py"
                break
            if os.path.isdir(folder):
                portions.append(folder)
        if found is not None:
            if last:
                return found
            if not found.endswith("__init__.py"):
                return None          # a plain module has no submodules
            dirs = [os.path.dirname(found)]
        elif portions and not last:
            dirs = portions
        else:
            return None
    return None


def source_sha256(module: str, beside: str | None = None) -> str | None:
    """SHA-256 of `module`'s source file (`source_file`, else in the folder `beside`), read as a
    regular file of at most MAX_SOURCE_BYTES (a FIFO or a device there is not waited on: None)."""
    found = read_source(module, beside)
    return found[2] if found is not None else None


def read_source(module: str, beside: str | None = None) -> tuple[str, bytes, str] | None:
    """(path, bytes, SHA-256) of `module`'s source file (`source_file`, else in the folder
    `beside`), read once as a regular file of at most MAX_SOURCE_BYTES; None when it is not
    found that way or cannot be read so. `import_source` imports those very bytes."""
    path = source_file(module)
    if path is None and beside is not None:
        path = locate(module, [beside])
    return None if path is None else read_path(path)


def read_path(path: str) -> tuple[str, bytes, str] | None:
    """(path, bytes, SHA-256) of a source file read as `read_source` reads it."""
    data = _read_regular(path)
    return None if data is None else (path, data, hashlib.sha256(data).hexdigest())


def use_beside(folder: str) -> None:
    """A guard config's folder the module was found in: on the import path (appended: nothing
    installed is shadowed) and recorded as `beside_config` in its provenance."""
    if folder not in sys.path:
        sys.path.append(folder)
    _BESIDE.add(folder)


def _read_regular(path: str) -> bytes | None:
    chunks: list[bytes] = []
    n = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while chunk := os.read(fd, 1 << 20):
            n += len(chunk)
            if n > MAX_SOURCE_BYTES:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


class _HashedSource(importlib.machinery.SourceFileLoader):
    """Loads a module from bytes already read and hashed: never a second read of the file, never
    a cached .pyc (which could hold other code than the source hashed)."""

    def __init__(self, fullname: str, path: str, data: bytes) -> None:
        super().__init__(fullname, path)
        self._data = data

    def get_data(self, path: str) -> bytes:
        if path == self.path:
            return self._data
        return super().get_data(path)

    def get_code(self, fullname: str) -> Any:
        return compile(self._data, self.path, "exec", dont_inherit=True)


def import_source(module: str, path: str, data: bytes) -> Any:
    """Import `module` from `data` (the bytes `read_source` hashed), as the import system would
    from `path`. Its parent packages are imported first, as any import does; a module already
    imported is returned as it is (this process runs only one version of a module)."""
    if module in sys.modules:
        return sys.modules[module]
    parent, _, last = module.rpartition(".")
    if parent:
        importlib.import_module(parent)
        if module in sys.modules:   # the parent imported it itself
            return sys.modules[module]
    is_package = os.path.basename(path) == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        module, path, loader=_HashedSource(module, path, data),
        submodule_search_locations=[os.path.dirname(path)] if is_package else None)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        with contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(module, None)
        raise
    if parent:
        setattr(sys.modules[parent], last, mod)
    return mod


def changes(recorded: Any, now: Provenance) -> list[str]:
    """What differs between a recorded provenance and the current one, in words ([] = same)."""
    if not isinstance(recorded, dict):
        return ["the run records no provenance of its callable"]
    out = []
    for key, what in (("name", "name"), ("module", "defining module"), ("source_sha256", "source SHA-256"),
                      ("distribution", "distribution"), ("version", "version")):
        if recorded.get(key) != now.get(key):
            out.append(f"{what} {recorded.get(key)} -> {now.get(key)}")
    return out
