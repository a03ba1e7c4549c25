"""The simulated provider's information routes: generation stats, a model's endpoints, the key,
the account's guardrails (each as OpenRouter documents it; docs/sim-server.md)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from guardeval.backends.openrouter import providers
from guardeval.backends.sim import router
from guardeval.backends.sim.config import ServerConfig


def _error_body(code: int, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def shown_name(slug: str) -> str:
    """The display name the simulator answers under for `slug`: guardeval's table, else the
    base slug capitalised (OpenRouter answers with display names, not slugs)."""
    name = providers.display_name(slug)
    return name[:1].upper() + name[1:] if name == providers.base_slug(slug) else name


def listed_slugs(config: ServerConfig) -> tuple[str, ...]:
    return config.endpoint_providers if config.endpoint_providers is not None else \
        ("sim", *providers.DISPLAY_NAMES)


class InfoRoutes:
    """GET routes beside chat completions; mixed into `SimProvider`, whose state they read."""

    config: ServerConfig
    generations: Any
    spent: float

    def _json(self, status: int, body: bytes, headers: dict[str, str]) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json", headers=headers)

    def _auth_error(self, request: web.Request, headers: dict[str, str]) -> web.Response | None:
        raise NotImplementedError

    async def handle_generation(self, request: web.Request) -> web.Response:
        """GET /generation?id=: the generation's provider and cost, as OpenRouter's stats endpoint."""
        refused = self._auth_error(request, {})
        if refused is not None:
            return refused
        gen = self.generations.get(request.query.get("id", ""))
        if gen is None:
            return self._json(404, _error_body(404, "Generation not found"), {})
        return self._json(200, orjson.dumps({"data": gen}), {})

    async def handle_endpoints(self, request: web.Request) -> web.Response:
        """GET /models/{author}/{slug}/endpoints: the endpoints serving a model, one per listed provider."""
        cfg = self.config
        refused = self._auth_error(request, {})
        if refused is not None:
            return refused
        model = f"{request.match_info['author']}/{request.match_info['slug']}"
        pricing = {"prompt": f"{cfg.price_in / 1e6:.12g}", "completion": f"{cfg.price_out / 1e6:.12g}",
                   "request": "0", "image": "0"}
        endpoints = [{
            "name": f"{shown_name(slug)} | {model}", "model_name": model, "context_length": cfg.context_length,
            "pricing": pricing, "provider_name": shown_name(slug), "tag": slug, "quantization": None,
            "max_completion_tokens": cfg.max_completion_tokens, "max_prompt_tokens": None,
            "supported_parameters": list(cfg.supported_parameters), "status": 0, "uptime_last_30m": 100.0,
        } for slug in listed_slugs(cfg)]
        data = {"id": model, "name": f"Simulated {model}", "created": 0, "description": "guardeval's simulated guard",
                "architecture": {"modality": "text->text", "input_modalities": ["text"], "output_modalities": ["text"],
                                 "tokenizer": "Other", "instruct_type": None},
                "endpoints": endpoints}
        return self._json(200, orjson.dumps({"data": data}), {})

    async def handle_key(self, request: web.Request) -> web.Response:
        """GET /key: the key's limit and usage (usage: what this server has charged so far)."""
        cfg = self.config
        refused = self._auth_error(request, {})
        if refused is not None:
            return refused
        usage = round(self.spent, 10)
        limit = cfg.key_limit
        data = {"label": "sk-or-v1-sim…", "limit": limit, "usage": usage,
                "limit_remaining": None if limit is None else round(max(0.0, limit - usage), 10),
                "limit_reset": None, "is_free_tier": False, "is_provisioning_key": False}
        return self._json(200, orjson.dumps({"data": data}), {})

    async def handle_guardrails(self, request: web.Request) -> web.Response:
        """GET /guardrails: a management-key route (guardeval.backends.sim.router.guardrails_answer)."""
        refused = self._auth_error(request, {})
        if refused is not None:
            return refused
        status, data = router.guardrails_answer(self.config.guardrail_filters)
        return self._json(status, data, {})

