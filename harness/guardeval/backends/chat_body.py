"""The request body of the chat-completions back-ends (`openrouter`, `openai-compatible`), apart
from their transport: rendering needs no HTTP client, so `verify` and planning, which render every
instance and send nothing, do not load one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardeval.backends.config import GuardConfig
from guardeval.backends.prompts import Prompt


def response_format(dialect: str, output_schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `response_format` of a dialect (harness/guardeval/backends/config.py DIALECTS): OpenAI's json_schema
    wrapper (name, strict, schema), or llama-cpp-python's json_object with the bare JSON Schema,
    which its server compiles to a grammar; None for free decoding."""
    if dialect == "json_schema":
        return {"type": "json_schema", "json_schema": output_schema}
    if dialect == "json_object":
        schema = output_schema.get("schema", output_schema)
        return {"type": "json_object", "schema": schema}
    return None


def chat_body(config: GuardConfig, prompt: Prompt, instance: Mapping[str, Any]) -> dict[str, Any]:
    """The stimulus for one instance: what is sent, without secrets. Deterministic."""
    body: dict[str, Any] = {
        "model": config.model,
        "messages": prompt.render_messages(instance),
        "temperature": config.temperature,
        "max_tokens": config.max_tokens,
    }
    if config.seed is not None:
        body["seed"] = config.seed
    if prompt.output_schema and (fmt := response_format(config.dialect, prompt.output_schema)) is not None:
        body["response_format"] = fmt
    if config.provider and "provider" in config.backend_entry.fields:
        # OpenRouter's routing table (docs/design.md §8). No `usage: {include: true}`: documented
        # as deprecated, usage is always returned.
        prov = dict(config.provider)
        body["provider"] = {k: prov[k] for k in sorted(prov)}
    return body
