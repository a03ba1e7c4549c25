"""Back-end name -> Guard class. Heavy back-ends are imported only when used."""

from __future__ import annotations

from guards.base import Guard
from guards.config import GuardConfig
from guards.prompts import Prompt


def make_guard(config: GuardConfig, prompt: Prompt, *, max_connections: int = 256) -> Guard:
    if config.backend == "openrouter":
        from guards.chat_http import OpenRouterGuard

        return OpenRouterGuard(config, prompt, max_connections=max_connections)
    if config.backend == "openai-compatible":
        from guards.chat_http import OpenAICompatibleGuard

        return OpenAICompatibleGuard(config, prompt, max_connections=max_connections)
    if config.backend == "mlx":
        from guards.mlx_backend import MlxGuard

        return MlxGuard(config, prompt)
    raise ValueError(f"unknown backend {config.backend!r}")
