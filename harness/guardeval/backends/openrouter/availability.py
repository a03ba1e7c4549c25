"""OpenRouter's model-availability errors: `error.availability` (docs/design.md §7).

Documented on OpenRouter's errors page (https://openrouter.ai/docs/api-reference/errors, "Model
availability errors", August 2026): a request that no endpoint can serve carries
`error.availability` = {`code`, `retryable`, `retry_after`, `requested_models`,
`affected_providers`, `excluded_by`, `fallback_models`, `constraint`, `docs_url`}, with eleven
stable codes (`CODES`). The docs say to switch on `retryable`, not on the code, and to treat a
code they do not list defensively. guardeval does exactly that:

- `retryable: true`: a transient failure; the call waits `retry_after` seconds (or the
  Retry-After header), capped at `retry_max_s` like every wait, and tries again.
- anything else (false, absent, not a bool — an unknown code included): the run stops,
  resumable, with the code, what excluded the endpoints (`excluded_by`, `constraint`) and
  `docs_url` in the message. Every value is provider text: bounded and escaped for a terminal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardeval.terminal import safe

CODES = ("model_not_found", "wrong_endpoint", "no_endpoints", "model_deprecated", "model_unavailable_upstream",
         "capacity_exhausted", "temporarily_unavailable", "region_restricted", "privacy_restricted",
         "constraint_filtered", "free_variant_ended")
ERROR_CLASS_PREFIX = "availability_"
_LIMIT = 120


@dataclass(frozen=True)
class Availability:
    code: str                   # as sent, bounded and escaped ("unknown" when absent)
    known: bool                 # one of CODES
    retryable: bool             # exactly `retryable: true`
    retry_after: float | None   # seconds, finite and >= 0, else None
    detail: str                 # excluded_by, constraint, affected providers, docs_url: for the message

    @property
    def error_class(self) -> str:
        return ERROR_CLASS_PREFIX + (self.code if self.known else "unknown")


def _shown(value: Any) -> str:
    if isinstance(value, list):
        value = ", ".join(str(v)[:_LIMIT] for v in value[:8])
    elif isinstance(value, Mapping):
        value = ", ".join(f"{str(k)[:40]}={str(v)[:60]}" for k, v in list(value.items())[:8])
    return safe(str(value)[:_LIMIT * 2])


def read(err: Any) -> Availability | None:
    """The availability object of an error object (`error`), or None when it has none."""
    if not isinstance(err, Mapping):
        return None
    av = err.get("availability")
    if not isinstance(av, Mapping):
        meta = err.get("metadata")
        av = meta.get("availability") if isinstance(meta, Mapping) else None
    if not isinstance(av, Mapping):
        return None
    raw_code = av.get("code")
    code = safe(raw_code[:60]) if isinstance(raw_code, str) and raw_code else "unknown"
    known = code in CODES
    wait = av.get("retry_after")
    retry_after = float(wait) if isinstance(wait, (int, float)) and not isinstance(wait, bool) \
        and math.isfinite(wait) and wait >= 0 else None
    parts = [f"{name} {_shown(av[name])}" for name in ("excluded_by", "constraint", "affected_providers",
                                                        "requested_models", "fallback_models")
             if av.get(name) not in (None, "", [], {})]
    if not known:
        parts.insert(0, "a code OpenRouter's docs do not list")
    if isinstance(av.get("docs_url"), str) and av["docs_url"]:
        parts.append(f"see {_shown(av['docs_url'])}")
    return Availability(code, known, av.get("retryable") is True, retry_after, "; ".join(parts))


def message(status: int, av: Availability, text: str) -> str:
    """The error message: status, code, retryability, the provider's message, the details."""
    what = "retryable" if av.retryable else "not retryable"
    return safe(f"HTTP {status}: model availability {av.code} ({what}): {text[:200]}"
                + (f" ({av.detail})" if av.detail else ""))
