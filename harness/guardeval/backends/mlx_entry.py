"""The `mlx` back-end declared: a local MLX model in this process (guardeval.backends.mlx_backend,
imported only when a guard is made)."""

from __future__ import annotations

from typing import Any

from guardeval.backends.backend import Backend, register

NAME = "mlx"


def _make_guard(config: Any, prompt: Any, max_connections: int) -> Any:
    from guardeval.backends.mlx_backend import MlxGuard

    return MlxGuard(config, prompt)


BACKEND = register(Backend(
    name=NAME, make_guard=_make_guard, in_process=True,
    dialects=frozenset({"json_schema", "none"}),
    dialect_refusals={"json_object": "the mlx backend constrains decoding itself: use true (json_schema) or false"},
    # One in-process model generates one call at a time; more would only queue inside the guard
    # and inflate latency_s.
    default_concurrency=1,
))
