"""What the simulated provider sends, typed: the chat completion and its parts, router metadata,
GET /generation's record, GET /stats, and the three-field answer its guard writes. Each is built
as a literal in the order OpenRouter sends it (the bytes on the wire follow that order)."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class Answer(TypedDict):
    """The guard's answer (`guard.verdict`), before it is written as text."""

    malicious_user_request: bool
    third_party_attack: bool
    current_action_harmfulness: float


class CostDetails(TypedDict):
    upstream_inference_cost: float | None
    upstream_inference_prompt_cost: float
    upstream_inference_completions_cost: float


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost: float
    is_byok: bool
    cost_details: CostDetails


class Message(TypedDict):
    role: str
    content: str


class ErrorMetadata(TypedDict):
    provider_name: str
    raw: str


class ChoiceError(TypedDict):
    code: int
    message: str
    metadata: ErrorMetadata


class Choice(TypedDict):
    index: int
    finish_reason: str
    native_finish_reason: str
    message: Message
    error: NotRequired[ChoiceError]   # the `choice_error` fault: an error during generation, at HTTP 200


class Endpoint(TypedDict):
    provider: str
    model: str
    selected: bool


class Endpoints(TypedDict):
    total: int
    available: list[Endpoint]


class Attempt(TypedDict):
    provider: str
    model: str
    status: int


class Stage(TypedDict, total=False):
    """A pipeline stage (the spec's compression and guardrail stages)."""

    type: str
    name: str
    guardrail_id: str
    guardrail_scope: str
    summary: str
    data: dict[str, int | str | bool]


class RouterMetadata(TypedDict):
    """`openrouter_metadata`, as the spec's `OpenRouterMetadata`."""

    requested: str
    strategy: str
    region: str
    summary: str
    attempt: int
    is_byok: bool
    endpoints: Endpoints
    attempts: list[Attempt]
    pipeline: NotRequired[list[Stage]]


class ChatReply(TypedDict):
    id: str
    object: str
    created: int
    model: str
    provider: NotRequired[str]      # absent under the `no_provider_field` fault
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage
    openrouter_metadata: NotRequired[RouterMetadata]


class Availability(TypedDict):
    """`error.availability` of an `avail_CODE` fault."""

    code: str
    requested_models: list[str]
    affected_providers: list[str]
    excluded_by: list[str]
    fallback_models: list[str]
    constraint: str | None
    docs_url: str
    retryable: NotRequired[bool]
    retry_after: NotRequired[float | None]


class Generation(TypedDict):
    """What GET /generation reports of a generation served."""

    id: str
    model: object                   # the request's `model`, as sent
    provider_name: str
    total_cost: float
    is_byok: bool
    upstream_inference_cost: float | None
    tokens_prompt: int
    tokens_completion: int
    finish_reason: str
    native_finish_reason: str
    streamed: bool
    cancelled: bool
    created_at: str


class ProfileRecord(TypedDict):
    name: str
    base: float
    tool: float
    marker: float
    prose: float
    description: str
    fingerprint: str


class Stats(TypedDict):
    """GET /stats: counts for tests (`?call_id=`: that call's attempts too)."""

    requests: int
    ok: int
    rate_limited: int
    cache_hits: int
    cache_entries: int
    faults: dict[str, int]
    call_ids: int
    profile: ProfileRecord
    call_id: NotRequired[str]
    attempts: NotRequired[int]
