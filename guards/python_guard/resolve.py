"""A guard config's `callable` ("package.module:function"): checked, imported, described.

The name comes from the guard config only (never from cohort data, never joined into a path).
Its parts are ASCII identifiers, none a dunder (`__globals__`, `__class__`, `__main__`: no
reaching through objects), no keyword. Importing runs the module's code, as any import does:
it is the guard the user named.

Provenance (recorded in the manifest and in every attempt's response): the name, the module
that defines the function, the installed distribution that provides that module and its version
(`importlib.metadata.packages_distributions`; none for a module on PYTHONPATH), and the SHA-256
of that module's source file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import keyword
import re
import sys
from collections.abc import Callable
from typing import Any

from harness.errors import InputError

MAX_NAME_CHARS = 256
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME_RE = re.compile(rf"({_IDENT}(?:\.{_IDENT})*):({_IDENT}(?:\.{_IDENT})*)")
MAX_SOURCE_BYTES = 64 << 20   # a source file hashed for provenance


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


def load(name: str, *, where: object = None, field: str = "callable") -> Callable[..., Any]:
    """Import the module and walk to the function. InputError (exit 2) naming the field and
    the import error when it does not import, has no such attribute, or is not callable."""
    if (problem := name_problem(name)) is not None:
        raise InputError(problem, path=where, field=field)
    module_name, attrs = split(name)
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - any failure of the user's module is bad input here
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(f"cannot import module '{module_name}': {_text(exc)} (is it installed, or on "
                         "PYTHONPATH?)", path=where, field=field) from None
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


def _text(exc: BaseException, limit: int = 300) -> str:
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        said = "<unprintable>"
    return f"{type(exc).__name__}: {said[:limit]}"


def provenance(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """What was called: name, defining module, distribution and version, source SHA-256."""
    module = getattr(inspect.unwrap(fn), "__module__", None) or split(name)[0]
    if not isinstance(module, str):
        module = split(name)[0]
    dist, version = distribution(module)
    return {"name": name, "module": module, "distribution": dist, "version": version,
            "source_sha256": source_sha256(module)}


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
    """The source file of `module`: the loaded module's, else found without running it (only
    its parent packages are imported). None for a built-in or a module with no source."""
    mod = sys.modules.get(module)
    path = None
    if mod is not None:
        try:
            path = inspect.getsourcefile(mod)
        except TypeError:
            path = None
    else:
        try:
            spec = importlib.util.find_spec(module)
        except Exception:  # noqa: BLE001 - a parent package that fails to import: not found here
            spec = None
        if spec is not None and isinstance(spec.origin, str) and spec.origin.endswith(".py"):
            path = spec.origin
    return path


def source_sha256(module: str) -> str | None:
    path = source_file(module)
    if path is None:
        return None
    h = hashlib.sha256()
    n = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                n += len(chunk)
                if n > MAX_SOURCE_BYTES:
                    return None
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def changes(recorded: Any, now: dict[str, Any]) -> list[str]:
    """What differs between a recorded provenance and the current one, in words ([] = same)."""
    if not isinstance(recorded, dict):
        return ["the run records no provenance of its callable"]
    out = []
    for key, what in (("name", "name"), ("module", "defining module"), ("source_sha256", "source SHA-256"),
                      ("distribution", "distribution"), ("version", "version")):
        if recorded.get(key) != now.get(key):
            out.append(f"{what} {recorded.get(key)} -> {now.get(key)}")
    return out
