"""OpenRouter's dialect in small pieces: provider names, allowed providers, parameters the
preflight asks for, BYOK spend."""

from __future__ import annotations

import pytest

from guardeval.backends.checks import EMPTY_INSTANCE
from guardeval.backends.config import GuardConfig
from guardeval.backends.openrouter import providers
from guardeval.backends.openrouter.preflight import _serves_as, parameters_sent
from guardeval.backends.prompts import load_prompt
from guardeval.backends.registry import make_renderer
from guardeval.run.folder.spend import reported_cost

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("reported, slugs, allowed", [
    ("Anthropic", ["anthropic"], True),
    ("anthropic", ["anthropic"], True),
    ("Google", ["google-vertex"], True),
    ("Google AI Studio", ["google-vertex"], False),
    ("Google AI Studio", ["google-ai-studio"], True),
    ("Amazon Bedrock", ["amazon-bedrock"], True),
    ("DeepInfra", ["deepinfra/turbo"], True),
    ("Together", ["together"], True),
    ("DeepInfra", ["anthropic", "google-vertex"], False),
    ("Amazon Bedrock", ["anthropic", "amazon-bedrock"], True),
    (None, ["anthropic"], False),
    ("", ["anthropic"], False),
    (42, ["anthropic"], False),
])
def test_reported_provider_names_match_slugs(reported, slugs, allowed):
    assert providers.is_allowed(reported, slugs) is allowed


def _config(**provider: object) -> GuardConfig:
    return GuardConfig(name="g", backend="openrouter", model="anthropic/claude-haiku-4.5", prompt="guardeval-json-v1",
                       provider=dict(provider) or None)


def test_allowed_providers_follow_the_routing_table():
    assert _config(only=["anthropic", "amazon-bedrock"]).allowed_providers == ("anthropic", "amazon-bedrock")
    # With order and fallbacks off, every listed provider may answer, not only the first.
    assert _config(order=["anthropic", "google-vertex"], allow_fallbacks=False).allowed_providers == \
        ("anthropic", "google-vertex")
    assert _config(order=["anthropic"], allow_fallbacks=True).allowed_providers == ()
    assert _config().allowed_providers == ()
    local = GuardConfig(name="l", backend="openai-compatible", model="m", prompt="guardeval-json-v1")
    assert local.allowed_providers == ()


@pytest.mark.parametrize("seed, structured, want", [
    (None, True, ["temperature", "max_tokens", "response_format", "structured_outputs"]),
    (7, False, ["temperature", "max_tokens", "seed"]),
])
def test_parameters_sent_are_read_from_the_rendered_body(seed, structured, want):
    cfg = GuardConfig(name="g", backend="openrouter", model="a/b", prompt="guardeval-json-v1", seed=seed,
                      structured_output=structured, provider={"only": ["anthropic"]})
    body = make_renderer(cfg, load_prompt(cfg.prompt))(EMPTY_INSTANCE)
    assert parameters_sent(body) == want
    assert "provider" in body and "usage" not in body


def test_endpoint_tags_pin_variants():
    assert _serves_as({"tag": "deepinfra/turbo"}, ("deepinfra",))            # a base slug allows its variants
    assert not _serves_as({"tag": "deepinfra/fp4"}, ("deepinfra/turbo",))    # a variant pins itself
    assert _serves_as({"tag": "google-vertex"}, ("google-vertex",))
    assert _serves_as({"provider_name": "Google"}, ("google-vertex",))       # no tag: by name


def test_byok_spend_counts_the_upstream_charge():
    assert reported_cost({"cost": 0.001}) == 0.001
    # Not BYOK: upstream_inference_cost (when present) is part of `cost`, not added.
    assert reported_cost({"cost": 0.001, "upstream_inference_cost": 0.001}) == 0.001
    assert reported_cost({"cost": 0.00005, "is_byok": True, "upstream_inference_cost": 0.001}) == pytest.approx(0.00105)
    assert reported_cost({"is_byok": True, "upstream_inference_cost": 0.001}) == 0.001
    assert reported_cost({}) is None and reported_cost(None) is None
    # Untrusted like any provider number: an invalid part counts as unknown, never as a refund.
    assert reported_cost({"cost": -5, "is_byok": True, "upstream_inference_cost": 0.001}) == 0.001
    assert reported_cost({"cost": 0.001, "is_byok": True, "upstream_inference_cost": float("inf")}) == 0.001
