"""Back-end name -> its guard (guardeval.backends.backend holds the records). Heavy back-ends are
imported only when used."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.backend import backend_for
from guardeval.backends.base import Guard
from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt


def make_guard(config: GuardConfig, prompt: Prompt, *, max_connections: int = 256) -> Guard:
    guard: Guard = backend_for(config.backend).make_guard(config, prompt, max_connections)
    return guard


def make_renderer(config: GuardConfig, prompt: Prompt) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """`make_guard(...).render` without a transport: for code that renders and sends nothing
    (verify, planning). The chat back-ends' bodies need no HTTP client; mlx's needs its model
    folder (not the model), so it goes through the guard; a python guard's body needs no import."""
    renderer = backend_for(config.backend).make_renderer
    if renderer is not None:
        return renderer(config, prompt)
    return make_guard(config, prompt, max_connections=1).render
