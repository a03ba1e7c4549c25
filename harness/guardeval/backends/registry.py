"""Back-end name -> Guard class. Heavy back-ends are imported only when used."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.base import Guard
from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt


def make_guard(config: GuardConfig, prompt: Prompt, *, max_connections: int = 256) -> Guard:
    if config.backend == "openrouter":
        from guardeval.backends.chat_http import OpenRouterGuard

        return OpenRouterGuard(config, prompt, max_connections=max_connections)
    if config.backend == "openai-compatible":
        from guardeval.backends.chat_http import OpenAICompatibleGuard

        return OpenAICompatibleGuard(config, prompt, max_connections=max_connections)
    if config.backend == "mlx":
        from guardeval.backends.mlx_backend import MlxGuard

        return MlxGuard(config, prompt)
    if config.backend == "python":
        from guardeval.backends.python_guard.backend import PythonGuard

        return PythonGuard(config, prompt, max_connections=max_connections)
    raise ValueError(f"unknown backend {config.backend!r}")


def make_renderer(config: GuardConfig, prompt: Prompt) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """`make_guard(...).render` without a transport: for code that renders and sends nothing
    (verify, planning). The chat back-ends' bodies need no HTTP client; mlx's needs its model
    folder (not the model), so it goes through the guard; a python guard's body needs no import."""
    if config.backend in ("openrouter", "openai-compatible"):
        from guardeval.backends.chat_body import chat_body

        return functools.partial(chat_body, config, prompt)
    if config.backend == "python":
        # The body does not depend on the function's code: rendering imports nothing.
        from guardeval.backends.python_guard.backend import python_body

        return functools.partial(python_body, config, prompt)
    return make_guard(config, prompt, max_connections=1).render
