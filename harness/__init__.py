"""guardeval: asynchronous guard-evaluation harness.

Data flows one way: cohort -> schedule -> dispatch -> raw log -> decisions -> estimates.
"""

from __future__ import annotations

import functools


@functools.cache
def _version() -> str:
    # The one place the version is written is pyproject.toml; installed, it is package metadata.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("guardeval")
    except PackageNotFoundError:   # a source tree on PYTHONPATH that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    # `harness.__version__`, read from the metadata only when asked for (importlib.metadata costs
    # more than the rest of `guardeval --help`).
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
