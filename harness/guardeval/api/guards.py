"""Guard configs from Python: load a TOML file, or describe a python guard in code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardeval.backends.config import GuardConfig, config_from_manifest, load_guard_config
from guardeval.backends.python_guard.entry import NAME as PYTHON


def load_guard(path: str | Path) -> GuardConfig:
    """A guard config file (or a shipped preset's name: `sim`, `python-example`), validated."""
    return load_guard_config(path)


def python_guard(name: str, callable: str, *, prompt: str = "guardeval-json-v1", model: str | None = None,
                 **settings: Any) -> GuardConfig:
    """A `backend = "python"` guard config: `callable` is "package.module:function" (importable:
    installed, or on sys.path). `settings` are any other config fields (`timeout_s`,
    `concurrency`, `max_attempts`, ...), checked by the rules a TOML file is checked by
    (InputError naming the field). The callable itself is imported when a run is planned."""
    data = {"name": name, "backend": PYTHON, "callable": callable, "model": model or callable, "prompt": prompt,
            **settings}
    config = config_from_manifest(data, Path("<python_guard>"))
    return GuardConfig(**{**config.to_manifest(), "source": f"python_guard({name!r})"})
