"""The `python` back-end declared: a guard that is a Python function (`callable`), run in worker
threads or processes (`isolation`); guardeval.backends.python_guard.backend is imported only when
a guard is made."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.backend import Backend, register

NAME = "python"


def _make_guard(config: Any, prompt: Any, max_connections: int) -> Any:
    from guardeval.backends.python_guard.backend import PythonGuard

    return PythonGuard(config, prompt, max_connections=max_connections)


def _renderer(config: Any, prompt: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    # The body does not depend on the function's code: rendering imports nothing.
    from guardeval.backends.python_guard.backend import python_body

    return functools.partial(python_body, config, prompt)


def _check(data: dict[str, Any], fail: Callable[..., Exception]) -> None:
    """The name's shape only: importing it is `guardeval.backends.python_guard.resolve.load`."""
    from guardeval.backends.python_guard.resolve import name_problem

    if "callable" not in data:
        raise fail("missing required field (the python backend needs callable = \"package.module:function\")",
                   "callable")
    if (problem := name_problem(data["callable"])) is not None:
        raise fail(problem, "callable")
    if "start_timeout_s" in data and data.get("isolation") != "process":
        raise fail('applies only to isolation = "process" (a worker process\'s start)', "start_timeout_s")


def _target(config: Any) -> str:
    return f"calling {config.callable}"


BACKEND = register(Backend(
    name=NAME, make_guard=_make_guard, make_renderer=_renderer,
    fields=frozenset({"callable", "isolation", "retry_on", "start_timeout_s"}),
    check_config=_check, in_process=True, target=_target,
))
