"""A fixed `datetime.now()` for the modules of one package, while a replay runs.

AgentDojo's tools stamp what they create with the wall clock (a new file's `last_modified`, a
sent email's `timestamp`), and those stamps reach the observations a cohort freezes. So that
two builds of one cohort are byte-identical, the replay sees a fixed instant instead: every
module of the package that did `import datetime` gets, for the duration, a copy of the module
whose `datetime` class answers `now()`, `today()` and `utcnow()` with that instant and is the
real class in every other respect (construction, class methods, `isinstance`).
"""

from __future__ import annotations

import datetime as _dt
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _frozen_datetime_class(at: _dt.datetime) -> type:
    real = _dt.datetime

    class _Proxy(type):
        # Everything but the clock goes to the real class, so instances are always real datetimes.
        def __getattr__(cls, name: str) -> Any:
            return getattr(real, name)

        def __call__(cls, *args: Any, **kwargs: Any) -> _dt.datetime:
            return real(*args, **kwargs)

        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, real)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, real)

    class FrozenDatetime(metaclass=_Proxy):
        @staticmethod
        def now(tz: _dt.tzinfo | None = None) -> _dt.datetime:
            return at if tz is None else at.replace(tzinfo=_dt.UTC).astimezone(tz)

        @staticmethod
        def today() -> _dt.datetime:
            return at

        @staticmethod
        def utcnow() -> _dt.datetime:
            return at

    return FrozenDatetime


@contextmanager
def frozen_clock(package: str, at: _dt.datetime) -> Iterator[None]:
    """Within the block, `datetime.datetime.now()` in `package`'s loaded modules returns `at`
    (a naive instant, read as UTC when a time zone is asked for)."""
    shim = types.ModuleType("datetime", _dt.__doc__)
    shim.__dict__.update({k: v for k, v in vars(_dt).items() if not k.startswith("__")})
    shim.datetime = _frozen_datetime_class(at)  # type: ignore[attr-defined]
    prefix = package + "."
    patched = [m for name, m in list(sys.modules.items())
               if (name == package or name.startswith(prefix)) and getattr(m, "datetime", None) is _dt]
    for m in patched:
        m.datetime = shim  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m in patched:
            m.datetime = _dt  # type: ignore[attr-defined]
