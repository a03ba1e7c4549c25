"""The documented chat-completions request body as a JSON Schema (`chat_request.schema.json`,
written from OpenRouter's documentation; sources in its `$comment`).

The simulated provider refuses a body that does not match it, as OpenRouter would refuse a
malformed one, and `guardeval preflight` checks guardeval's own rendered body against it
before anything is sent.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match


@functools.cache
def validator() -> Draft202012Validator:
    text = resources.files("guardeval.backends.openrouter").joinpath("chat_request.schema.json").read_text("utf-8")
    return Draft202012Validator(json.loads(text))


def problem(body: Any) -> str | None:
    """Why `body` is not a valid request (the first problem found, with its location), or None."""
    # best_match descends into oneOf branches: it names the closest branch's problem.
    err = best_match(validator().iter_errors(body))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "(body)"
    return f"{where}: {err.message[:300]}"
