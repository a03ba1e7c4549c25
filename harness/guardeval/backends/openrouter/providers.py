"""Routing slugs and the provider names OpenRouter reports (docs/design.md §7, provider checks).

A config pins providers by *slug* (`provider.only` / `provider.order`, e.g. `anthropic`,
`google-vertex`, `deepinfra/turbo`: a base slug and an optional variant after `/`), while an
answer names the provider that served it by *display name* (`"Anthropic"`, `"Google"`,
`"Amazon Bedrock"`): in the top-level `provider` field of a chat completion (seen in OpenRouter's
examples, absent from its published response schema) and in `provider_name` of the
generation-stats and model-endpoints answers (both documented).

The table below holds the pairs that differ by more than letter case and punctuation, as
OpenRouter's provider list (`GET /api/v1/providers`: `slug`, `name`) gives them; any other slug
is matched by its letters and digits (`deepinfra` ~ `DeepInfra`). `guardeval preflight` reads
the pinned model's endpoint list and refuses a run whose provider would answer under a name
this matching does not recognise, so an unknown name fails before anything is spent instead of
quarantining every call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# slug (without variant) -> display name, where the two differ beyond case and punctuation.
DISPLAY_NAMES: dict[str, str] = {
    "google-vertex": "Google",
    "google-ai-studio": "Google AI Studio",
    "amazon-bedrock": "Amazon Bedrock",
    "x-ai": "xAI",
    "azure": "Azure",
    "anthropic": "Anthropic",
    "openai": "OpenAI",
    "deepinfra": "DeepInfra",
    "deepseek": "DeepSeek",
    "sambanova": "SambaNova",
    "together": "Together",
    "fireworks": "Fireworks",
    "groq": "Groq",
    "mistral": "Mistral",
    "cohere": "Cohere",
    "cerebras": "Cerebras",
}


def base_slug(slug: str) -> str:
    """`deepinfra/turbo` -> `deepinfra`; a variant serves under its base provider's name."""
    return slug.split("/", 1)[0].strip().lower()


def key(name: object) -> str:
    """'Amazon Bedrock', 'amazon-bedrock' and 'AmazonBedrock' compare equal: letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower()) if isinstance(name, str) else ""


def display_name(slug: str) -> str:
    """The name an answer from `slug` is expected to carry (the table, else the slug itself)."""
    base = base_slug(slug)
    return DISPLAY_NAMES.get(base, base)


def accepted_keys(slugs: Iterable[str]) -> frozenset[str]:
    """Every comparison key an answer from one of `slugs` may carry."""
    out: set[str] = set()
    for slug in slugs:
        out.update({key(slug), key(base_slug(slug)), key(display_name(slug))})
    out.discard("")
    return frozenset(out)


def is_allowed(reported: object, slugs: Iterable[str]) -> bool:
    """Does a reported provider name (display name or slug) belong to one of `slugs`?"""
    return bool(key(reported)) and key(reported) in accepted_keys(slugs)
