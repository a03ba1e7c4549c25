"""Every guard-config field, declared once: its accepted types, whether it is required, its
default, its range, whether it is held as a float, its documentation, and whether only some
back-ends take it (those whose `Backend.fields` name it). The parser, the range checks, "did you
mean", `GuardConfig` (its defaults, and a check of its field list), `to_manifest` and the
generated reference page (docs/reference/guard-config.md) all read `FIELDS`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

# A guard's answer is a few KB; a body past this (decoded) is a failed attempt, not a crash
# (docs/design.md §7). 16 calls in flight then hold at most 64 MiB of bodies.
DEFAULT_MAX_RESPONSE_BYTES = 4 << 20
# Where a python guard's calls run (harness/guardeval/backends/python_guard): worker threads of this
# process, or worker processes of their own.
Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[str, ...] = get_args(Isolation)


@dataclass(frozen=True)
class Field:
    name: str
    types: tuple[type, ...]
    doc: str
    required: bool = False
    default: Any = None
    # Inclusive bounds of a number (finite values only).
    range: tuple[float, float] | None = None
    # Held as a float (TOML and JSON may hold it as an integer).
    is_float: bool = False
    # Taken only by the back-ends whose `Backend.fields` name it.
    backend_only: bool = False
    # Left out of the manifest at its default: runs launched before the field existed hash as before.
    omitted_at_default: bool = False
    # The only values a string may take (none: any).
    choices: tuple[str, ...] = ()

    @property
    def type_names(self) -> str:
        return "/".join(t.__name__ for t in self.types)


_NUM = (int, float)

FIELDS: tuple[Field, ...] = (
    Field("name", (str,), "1–64 of A-Z a-z 0-9 . _ -, not . or .. (it becomes part of the run id and folder name)",
          required=True),
    Field("backend", (str,), "the back-end (guardeval.backends.backend): {backends}", required=True),
    Field("model", (str,), "the model the back-end asks for: at most 1024 characters, no control characters",
          required=True),
    Field("prompt", (str,), "a prompt id (same rule as name): a folder under $GUARDEVAL_PROMPTS, ./prompts or the "
          "shipped prompts", required=True),
    Field("base_url", (str,), "http:// or https:// with a host, at most 2048 characters; no credentials, query or "
          "fragment (default: OpenRouter's API; http://127.0.0.1:8000/v1 for openai-compatible); --base-url overrides"),
    Field("api_key_env", (str,), "the NAME of the environment variable holding the key (OPENROUTER_API_KEY for "
          "openrouter; none for local back-ends); a value that looks like a token is refused without being echoed"),
    Field("temperature", _NUM, "sampling temperature", default=0.0, range=(0.0, 2.0), is_float=True),
    Field("max_tokens", (int,), "the answer's token cap", default=256, range=(1, 1 << 20)),
    Field("seed", (int,), "the sampling seed sent, a signed 64-bit integer (none: not sent)",
          range=(-(1 << 63), (1 << 63) - 1)),
    Field("timeout_s", _NUM, "per attempt, in seconds", default=60.0, range=(0.001, 3600.0), is_float=True),
    Field("max_attempts", (int,), "attempts per call before it is exhausted", default=6, range=(1, 100)),
    Field("concurrency", (int,), "the default for --concurrency (16 when unset)", range=(1, 4096)),
    Field("price_in_per_mtok", _NUM, "USD per million prompt tokens, for projections and --max-cost admission",
          range=(0.0, 10_000.0), is_float=True),
    Field("price_out_per_mtok", _NUM, "USD per million answer tokens, for projections and --max-cost admission",
          range=(0.0, 10_000.0), is_float=True),
    Field("structured_output", (bool, str), "the shape of response_format when the prompt declares a schema: "
          "json_schema, json_object, none (or false), auto (openai-compatible: the preflight probes and records it); "
          "true is the back-end's default", default=True),
    Field("retry_initial_s", _NUM, "the first backoff after a retryable failure, in seconds", default=1.0,
          range=(0.0, 3600.0), is_float=True),
    Field("retry_max_s", _NUM, "the largest backoff, in seconds", default=60.0, range=(0.0, 3600.0), is_float=True),
    Field("context_tokens", (int,), "the context length (mlx: an override of the model's)", range=(1, 10_000_000)),
    Field("max_response_bytes", (int,), "the largest response body read, decoded; a larger one is a "
          "response_too_large attempt", default=DEFAULT_MAX_RESPONSE_BYTES, range=(1, 1 << 30)),
    Field("provider", (dict,), "OpenRouter routing table (openrouter only): the keys below", backend_only=True),
    Field("callable", (str,), "python back-end only: package.module:function, imported when the guard runs",
          backend_only=True, omitted_at_default=True),
    Field("isolation", (str,), "python back-end only: where calls run: thread (worker threads of the harness) or "
          "process (worker processes, each importing the module once: stoppable at timeout_s, one interpreter lock "
          "each); docs/how-to/python-guard.md says which to choose", default="thread", backend_only=True,
          omitted_at_default=True),
    Field("retry_on", (list,), "python back-end only: the exceptions of the guard that are retried with back-off "
          "like an outage, by their type's name (TimeoutError) or module and name (httpx.ReadTimeout), at most 32; "
          "for a guard that calls a service. Any other exception, a wrong return type or a dead worker is the "
          "guard's own error: tried once more at once, then the call fails as guard_error (docs/how-to/"
          "python-guard.md)", backend_only=True, omitted_at_default=True),
    Field("start_timeout_s", _NUM, "python back-end, isolation = \"process\" only: how long a worker process may "
          "take to start (import the module) before the run stops, in seconds", default=60.0, range=(0.001, 3600.0),
          is_float=True, backend_only=True, omitted_at_default=True),
    Field("label", (str,), "what replicate, compare and the pages call runs of this guard (at most 64 characters, "
          "no control characters; default: the guard that answered, e.g. the simulator's profile, else name); "
          "--label overrides", omitted_at_default=True),
)
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}


def provider_fields() -> tuple[Field, ...]:
    """The `[provider]` table's keys: those the registered back-ends declare (`Backend.provider_fields`),
    each once, in the registry's order."""
    from guardeval.backends.backend import backend_for, backend_names

    seen: dict[str, Field] = {}
    for name in backend_names():
        for f in backend_for(name).provider_fields:
            seen.setdefault(f.name, f)
    return tuple(seen.values())


def default(name: str) -> Any:
    """A field's declared default (GuardConfig's dataclass defaults read it)."""
    return BY_NAME[name].default


def doc(f: Field) -> str:
    """A field's documentation, with the registered back-ends' names where it lists them."""
    if "{backends}" not in f.doc:
        return f.doc
    from guardeval.backends.backend import backend_names

    names = backend_names()
    return f.doc.format(backends=", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0])
