"""What OpenRouter adds to an OpenAI-style answer's finish reason and usage (docs/design.md §7),
read into the reply after the generic client (guardeval.backends.chat_http) has taken what every
OpenAI-compatible server returns: `finish_reason`, token counts, a valid `usage.cost`.

- `choices[0].native_finish_reason`: the upstream provider's own finish reason, kept as text
  (redacted, at most 200 characters).
- `usage.is_byok` with `usage.cost_details.upstream_inference_cost`: the call ran on the caller's
  own provider key, so OpenRouter's `cost` is only its part and the upstream charges the rest
  (guardeval.run.dispatch.budget adds the two). Untrusted like any provider number: a cost that
  is not a finite number from 0 to the per-call cap is recorded as `cost_invalid` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from guardeval.backends.base import Reply, valid_cost

# Loaded when a reply is read, after the registry: importing it registers nothing new then.
from guardeval.backends.openai_compatible import keep_native_finish_reason


def normalise_reply(choice: Mapping[str, Any], data: Mapping[str, Any], reply: Reply,
                    clean: Callable[[str], str]) -> None:
    keep_native_finish_reason(choice, data, reply, clean)
    usage = data.get("usage")
    if isinstance(usage, dict) and usage.get("is_byok") is True:
        details = usage.get("cost_details")
        upstream = details.get("upstream_inference_cost") if isinstance(details, dict) else None
        reply.usage["is_byok"] = True
        if valid_cost(upstream):
            reply.usage["upstream_inference_cost"] = upstream
        elif upstream is not None:
            reply.usage["cost_invalid"] = True
