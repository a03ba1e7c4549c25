"""The one interface every back-end implements.

A guard turns a frozen instance into a request body (the *stimulus*: what is sent, minus
secrets) and sends that body, returning the reply exactly as received. Parsing is separate
(`guardeval.backends.parsers`), so the same reply can be re-parsed later.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeGuard

from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt


class Usage(TypedDict, total=False):
    """What an attempt used, as far as it can be trusted: token counts that are non-negative ints,
    a cost that is a finite non-negative number (else `cost_invalid`); no provider text."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost: float
    cost_invalid: bool              # the provider's cost was not a finite non-negative number
    is_byok: bool                   # OpenRouter: bring-your-own-key, billed upstream
    upstream_inference_cost: float  # OpenRouter BYOK: what the upstream charged
    max_tokens: int                 # a local back-end's refusal: the sizes that did not fit
    context_tokens: int
    generation_s: float             # a local back-end's own timing of the generation
    prompt_tps: float | None
    generation_tps: float | None


@dataclass
class Reply:
    """One attempt's answer, as received."""

    status: int | str            # HTTP status, or "local" for in-process back-ends
    raw: str                     # response text exactly as received (HTTP body / generated text)
    content: str | None = None   # the model's message text, extracted from `raw`
    finish_reason: str | None = None
    native_finish_reason: str | None = None  # the upstream's own finish reason, when reported
    usage: Usage = field(default_factory=lambda: Usage())  # prompt_tokens, completion_tokens, cost (+ BYOK cost)
    provider: str | None = None  # resolved upstream provider, when the back-end reports one
    answers_call_id: str | None = None  # call id echoed by the server, when it echoes one
    generation_id: str | None = None  # the provider's id of this generation (OpenRouter: `id`)
    redacted: bool = False       # the API key was removed from `raw` or a field taken from it
    # OpenRouter (guardeval.backends.openrouter.routing): the response headers that say what the router did
    # (cache status and source, generation id), its `openrouter_metadata`, and the slim
    # `error.metadata.previous_errors` of an error answer.
    response_headers: dict[str, str] = field(default_factory=dict)
    router_metadata: dict[str, Any] | None = None
    previous_errors: list[dict[str, Any]] = field(default_factory=list)
    # A python guard's own stdout/stderr during the attempt, bounded (harness/guardeval/backends/python_guard/output.py).
    guard_output: dict[str, Any] | None = None


# The most one attempt can plausibly cost, in USD. The dearest hosted models price a million
# output tokens at a few hundred dollars, and a guard call is one prompt and a short answer: a
# cost above this is a provider's nonsense (1e308 made the spend `inf`), not a bill to add up.
MAX_CALL_COST_USD = 1000.0


def valid_cost(value: Any) -> TypeGuard[int | float]:
    """A provider's cost that counts as spend: a finite number from 0 to MAX_CALL_COST_USD (not
    a bool). Anything else is unknown, never a refund (docs/design.md §7)."""
    if type(value) is int:
        return 0 <= value <= MAX_CALL_COST_USD
    return type(value) is float and math.isfinite(value) and 0 <= value <= MAX_CALL_COST_USD


class Guard(abc.ABC):
    """A configured guard back-end. One instance per run; `aclose` releases its resources."""

    def __init__(self, config: GuardConfig, prompt: Prompt) -> None:
        self.config = config
        self.prompt = prompt

    @abc.abstractmethod
    def render(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        """The request body for one instance, without secrets. Deterministic."""

    @abc.abstractmethod
    async def send(self, body: Mapping[str, Any], call_id: str) -> Reply:
        """Send one attempt. Raise TransientError / FatalError / CallFailed on failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections, models, threads."""

    @property
    def in_process(self) -> bool:
        """Runs in this process (python, mlx): its timeouts are the guard's, not an unreachable
        provider's. Said once, by its back-end's record."""
        return self.config.backend_entry.in_process

    @property
    def allowed_providers(self) -> tuple[str, ...]:
        """Routing slugs of the upstream providers the config allows, if it pins any (an answer
        from another is quarantined as drift; docs/design.md §10): its back-end's record says."""
        return self.config.allowed_providers
