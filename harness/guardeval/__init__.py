"""guardeval: an asynchronous guard-evaluation harness.

    import guardeval as ge

    run = ge.launch("demo", "python-example", reps=3)
    est = ge.estimate(run.run_dir)            # typed records: est.effects[i].delta, .ci, .verdict

Every name of `guardeval.api` is here too (`ge.launch`, `ge.compare`, `ge.study_launch`, …),
loaded when first used. Data flows one way: cohort -> schedule -> dispatch -> raw log ->
decisions -> estimates.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any


@functools.cache
def _version() -> str:
    # The one place the version is written is pyproject.toml; installed, it is package metadata.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("guardeval")
    except PackageNotFoundError:   # a source tree on PYTHONPATH that was never installed
        return "0+unknown"


# The package's own modules: `from guardeval import cli` imports the module, never the API.
_MODULES = frozenset({"api", "bounded", "canon", "cli", "cohorts", "errors", "estimators", "backends", "inspect_logs",
                      "lru", "run", "schemas", "study", "terminal", "view"})


def __getattr__(name: str) -> Any:
    # `guardeval.__version__`, read from the metadata only when asked for (importlib.metadata
    # costs more than the rest of `guardeval --help`); the API's names, imported on first use so
    # that `import guardeval` (and the command line, which imports this package) stays cheap.
    if name == "__version__":
        return _version()
    if not name.startswith("_") and name not in _MODULES:
        api = importlib.import_module("guardeval.api")
        if name in api.__all__:
            return getattr(api, name)
    raise AttributeError(f"module 'guardeval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "__version__", *importlib.import_module("guardeval.api").__all__})
