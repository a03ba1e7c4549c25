"""What a back-end is: one `Backend` record per back-end, and the table they register in.

Each back-end declares itself in one module of its own (`DECLARED` below), which builds its
`Backend` and calls `register`; nothing else in the package compares a config's `backend` to a
name. The declaring modules are imported by name on the first lookup, and their guards only when
a guard is made, so a back-end whose dependencies are heavy (mlx) costs nothing until it is used.

Hooks take the config as `Any`: this module sits below `guardeval.backends.config` (which looks
its back-end up here), so it cannot name `GuardConfig` without an import circle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from guardeval.backends.quarantine import QuarantineCheck, no_checks

# The shipped back-ends, in the order every list of them shows (whichever module is imported
# first): name -> the module that declares it (and calls `register` when imported). A back-end
# registered at run time (a test's, a plugin's) follows them, in the order it registered.
DECLARED: dict[str, str] = {
    "openrouter": "guardeval.backends.openrouter.backend",
    "openai-compatible": "guardeval.backends.openai_compatible",
    "mlx": "guardeval.backends.mlx_entry",
    "python": "guardeval.backends.python_guard.entry",
}


class FinalAnswer(TypedDict):
    """A call's final answer as `audit providers` hands it to the back-end (run/provider_audit.py)."""

    call_id: str
    generation_id: str | None
    provider: str | None            # the provider the answer named, as logged
    spend: float | None             # the spend logged for it (USD)


class DriftCall(TypedDict):
    call_id: str
    provider_name: str | None


class UnconfirmedCall(TypedDict):
    call_id: str
    generation_id: str | None
    why: str | None


class ReportedDiffersCall(TypedDict):
    call_id: str
    reported: str | None
    provider_name: str | None


class CostDiffersCall(TypedDict):
    call_id: str
    logged: float | None
    total_cost: float | None


class AuditFindings(TypedDict):
    """What an `audit_providers` hook found, in report order (each list cut to the first few)."""

    allowed_providers: list[str]
    answers: int
    confirmed: int
    drift: int
    drift_calls: list[DriftCall]
    unconfirmed: int
    unconfirmed_calls: list[UnconfirmedCall]
    reported_differs: int
    reported_differs_calls: list[ReportedDiffersCall]
    served_by: dict[str, int]
    spend_logged_usd: float
    total_cost_usd: float
    cost_differs: int
    cost_differs_calls: list[CostDiffersCall]


def _no_providers(config: Any) -> tuple[str, ...]:
    return ()


def _at_base_url(config: Any) -> str:
    return f"at {config.effective_base_url}"


def _nothing_to_add(data: dict[str, Any]) -> None:
    return None


def _no_check(data: dict[str, Any], fail: Callable[..., Exception]) -> None:
    return None


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _no_raw_fields(reply: Any) -> dict[str, Any]:
    return {}


def _plain_reply(choice: Mapping[str, Any], data: Mapping[str, Any], reply: Any, clean: Callable[[str], str]) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """One back-end: its config rules and defaults, and how its guards are made and checked."""

    name: str
    # A guard of this back-end: make_guard(config, prompt, max_connections) (imports lazily).
    make_guard: Callable[[Any, Any, int], Any]
    # The request body without a transport (verify and planning render and send nothing); None:
    # through a guard made with one connection.
    make_renderer: Callable[[Any, Any], Callable[[Mapping[str, Any]], dict[str, Any]]] | None = None
    default_base_url: str | None = None
    default_api_key_env: str | None = None
    # `structured_output = true` as a dialect, the dialects accepted, and why one is refused
    # where the refusal has its own words (otherwise the message names the back-ends that take it).
    default_dialect: str = "json_schema"
    dialects: frozenset[str] = frozenset({"json_schema", "json_object", "none"})
    dialect_refusals: Mapping[str, str] = field(default_factory=dict)
    # The back-end-only config fields this back-end accepts (guardeval.backends.config_fields), and
    # the keys of its `provider` table when it takes one (config_fields.Field each: type, words, choices).
    fields: frozenset[str] = frozenset()
    provider_fields: tuple[Any, ...] = ()
    # Extra checks of a config's values (after the generic ones), and defaults it fills in.
    check_config: Callable[[dict[str, Any], Callable[..., Exception]], None] = _no_check
    complete: Callable[[dict[str, Any]], None] = _nothing_to_add
    # Calls run in this process (always local), else local when the endpoint is a loopback address.
    in_process: bool = False
    # A loopback endpoint of this back-end is the simulated provider (its `usage.cost` made up).
    simulated_when_local: bool = False
    # --concurrency when the config sets none.
    default_concurrency: int = 16
    # The preflight: preflight(config, prompt, workload) -> a CheckList result; None: no server to ask.
    preflight: Callable[[Any, Any, Any], Any] | None = None
    # Who the preflight asks, in a refusal ("OpenRouter", "the server").
    server: str = "the server"
    # The routing slugs an answer may come from (GuardConfig.allowed_providers), read from the
    # config's `provider` table alone (report.html asks it of a manifest's table).
    allowed_providers: Callable[[Any], tuple[str, ...]] = _no_providers
    # Its own quarantine checks of an answered call (routing, caches), after the generic ones.
    quarantine: QuarantineCheck = no_checks
    # `guardeval audit providers`: audit_providers(config, key, final answers, concurrency) ->
    # (its findings, whether every answer was confirmed); None: the endpoint keeps no such records.
    audit_providers: Callable[[Any, str | None, list[FinalAnswer], int], tuple[AuditFindings, bool]] | None = None
    # Where a run's calls go, for the launch line ("at URL", "calling pkg.mod:fn").
    target: Callable[[Any], str] = _at_base_url
    # A chat-completions answer's fields beyond the OpenAI shape that this back-end reads into the
    # reply (guardeval.backends.chat_http): normalise_reply(choices[0], body, reply, clean), after
    # the generic client has set content, finish_reason and usage (token counts, a valid cost).
    # `clean` redacts a string taken from the answer; whatever is kept is bounded and checked
    # like any provider value (the finish reason of the upstream, OpenRouter's BYOK cost).
    normalise_reply: Callable[[Mapping[str, Any], Mapping[str, Any], Any, Callable[[str], str]], None] = \
        _plain_reply
    # The HTTP chat client's wire (guardeval.backends.chat_http): the path after the base URL, the
    # headers that carry the key (none are sent without one), headers sent on every request, and
    # an answer's JSON in the chat-completions shape (choices[0].message.content, finish_reason,
    # usage) for a server that answers in another (None: it answers in that shape).
    chat_path: str = "/chat/completions"
    auth_headers: Callable[[str], dict[str, str]] = _bearer
    request_headers: Mapping[str, str] = field(default_factory=dict)
    to_chat_shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # Headers that turn off the endpoint's response cache, for any caller of it (an exported
    # Inspect task sends every back-end's); the client sends them as part of `request_headers`.
    no_cache_headers: Mapping[str, str] = field(default_factory=dict)
    # What an attempt's raw line records of the answer beyond the generic fields (router metadata,
    # response headers), in the order written: raw_fields(reply) -> {key: value}.
    raw_fields: Callable[[Any], dict[str, Any]] = _no_raw_fields

    @property
    def takes_callable(self) -> bool:
        """A guard that is a Python function (its code is pinned at launch and checked on resume)."""
        return "callable" in self.fields


_TABLE: dict[str, Backend] = {}


def register(entry: Backend) -> Backend:
    """Add (or replace) a back-end; returns it, so a module can write `BACKEND = register(...)`."""
    _load()   # the declared back-ends are found first, whoever registers first
    _TABLE[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a back-end registered at run time (a test's)."""
    _TABLE.pop(name, None)


def _load() -> None:
    # Each declared back-end's module, imported once (a line added to DECLARED is found on the
    # next lookup). A declaring module imported first is half-imported here (this runs inside its
    # own `register`): importing it again is a no-op, and its entry lands in its declared place.
    for name, module in DECLARED.items():
        if name not in _TABLE:
            importlib.import_module(module)


def _ordered() -> list[Backend]:
    """The table in the declared order, then the back-ends registered at run time as they came."""
    shipped = [_TABLE[name] for name in DECLARED if name in _TABLE]
    return shipped + [b for name, b in _TABLE.items() if name not in DECLARED]


def find_backend(name: object) -> Backend | None:
    """The registered back-end of that name, or None (a name read from a file may be anything)."""
    _load()
    return _TABLE.get(name) if isinstance(name, str) else None


def backend_for(name: str) -> Backend:
    """The registered back-end of that name; ValueError for an unknown one (the config parser
    refuses those with InputError first)."""
    entry = find_backend(name)
    if entry is None:
        raise ValueError(f"unknown backend {name!r}")
    return entry


def backend_names() -> tuple[str, ...]:
    """Every registered back-end's name: the declared ones in DECLARED's order, then those
    registered at run time in the order they came."""
    _load()
    return tuple(b.name for b in _ordered())


def backends_with(test: Callable[[Backend], bool]) -> tuple[str, ...]:
    """The names of the back-ends for which `test` holds (for messages that list them)."""
    _load()
    return tuple(b.name for b in _ordered() if test(b))


def no_cache_headers() -> dict[str, str]:
    """Every registered back-end's `no_cache_headers`, merged (in the registry's order)."""
    _load()
    return {k: v for b in _ordered() for k, v in b.no_cache_headers.items()}


def builtin_names() -> tuple[str, ...]:
    """The shipped back-ends' names, in their declared order."""
    return tuple(DECLARED)
