"""Guard configs: TOML files validated on load (docs/design.md §8).

Secrets never live here: a config names the environment variable holding the key
(`api_key_env`); the value is read at send time and never stored on the config object.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.canon import canonical_sha256
from harness.errors import InputError

BACKENDS = ("openrouter", "openai-compatible", "mlx")
DEFAULT_BASE_URL = {"openrouter": "https://openrouter.ai/api/v1", "openai-compatible": "http://127.0.0.1:8000/v1"}

# field -> (accepted python types, required)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "backend": ((str,), True),
    "model": ((str,), True),
    "prompt": ((str,), True),
    "base_url": ((str,), False),
    "api_key_env": ((str,), False),
    "temperature": ((int, float), False),
    "max_tokens": ((int,), False),
    "seed": ((int,), False),
    "timeout_s": ((int, float), False),
    "max_attempts": ((int,), False),
    "concurrency": ((int,), False),
    "price_in_per_mtok": ((int, float), False),
    "price_out_per_mtok": ((int, float), False),
    "structured_output": ((bool,), False),
    "retry_initial_s": ((int, float), False),
    "retry_max_s": ((int, float), False),
    "context_tokens": ((int,), False),
    "provider": ((dict,), False),
}
_PROVIDER_FIELDS: dict[str, tuple[type, ...]] = {
    "only": (list,), "order": (list,), "allow_fallbacks": (bool,), "require_parameters": (bool,),
    "data_collection": (str,), "quantizations": (list,),
}


@dataclass(frozen=True)
class GuardConfig:
    name: str
    backend: str
    model: str
    prompt: str
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 256
    seed: int | None = None
    timeout_s: float = 60.0
    max_attempts: int = 6
    concurrency: int | None = None
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    structured_output: bool = True
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    context_tokens: int | None = None
    provider: dict[str, Any] | None = None
    source: str | None = field(default=None, compare=False)

    def to_manifest(self) -> dict[str, Any]:
        """The config as recorded in a run manifest: no secrets (only the variable's name)."""
        d = asdict(self)
        d.pop("source", None)
        return d

    @property
    def sha256(self) -> str:
        return canonical_sha256(self.to_manifest())

    def with_base_url(self, url: str | None) -> GuardConfig:
        if not url:
            return self
        return GuardConfig(**{**self.to_manifest(), "base_url": url, "source": self.source})

    @property
    def effective_base_url(self) -> str | None:
        return self.base_url or DEFAULT_BASE_URL.get(self.backend)

    @property
    def allowed_providers(self) -> tuple[str, ...]:
        """The providers an answer may come from: every slug of `provider.only`, else every slug
        of `provider.order` when fallbacks are off; () when routing is left to OpenRouter."""
        if self.backend != "openrouter":
            return ()
        p = self.provider or {}
        if p.get("only"):
            return tuple(str(s) for s in p["only"])
        if p.get("order") and p.get("allow_fallbacks") is False:
            return tuple(str(s) for s in p["order"])
        return ()

    @property
    def pinned_provider(self) -> str | None:
        """The first allowed provider (for display)."""
        allowed = self.allowed_providers
        return allowed[0] if allowed else None


def _line_of(text: str, key: str) -> int | None:
    pat = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i, line in enumerate(text.splitlines(), start=1):
        if pat.match(line):
            return i
    return None


def load_guard_config(path: str | Path) -> GuardConfig:
    p = Path(path)
    if not p.is_file():
        raise InputError("guard config not found", path=p)
    text = p.read_text("utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"not valid TOML ({exc})", path=p, line=int(m.group(1)) if m else None) from None
    for key, value in data.items():
        if key not in _FIELDS:
            raise InputError("unknown field", path=p, line=_line_of(text, key), field=key)
        types, _ = _FIELDS[key]
        if isinstance(value, bool) and bool not in types:
            raise InputError(f"expected {'/'.join(t.__name__ for t in types)}, got bool",
                             path=p, line=_line_of(text, key), field=key)
        if not isinstance(value, types):
            raise InputError(f"expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}",
                             path=p, line=_line_of(text, key), field=key)
    for key, (_, required) in _FIELDS.items():
        if required and key not in data:
            raise InputError("missing required field", path=p, field=key)
        if required and not str(data[key]).strip():
            raise InputError("must not be empty", path=p, line=_line_of(text, key), field=key)
    if data["backend"] not in BACKENDS:
        raise InputError(f"unknown backend '{data['backend']}' (expected one of {', '.join(BACKENDS)})",
                         path=p, line=_line_of(text, "backend"), field="backend")
    for key in ("max_tokens", "max_attempts", "concurrency", "context_tokens"):
        if key in data and data[key] < 1:
            raise InputError("must be >= 1", path=p, line=_line_of(text, key), field=key)
    for key in ("timeout_s", "price_in_per_mtok", "price_out_per_mtok", "temperature", "retry_initial_s",
                "retry_max_s"):
        if key in data and data[key] < 0:
            raise InputError("must be >= 0", path=p, line=_line_of(text, key), field=key)
    if "provider" in data:
        if data["backend"] != "openrouter":
            raise InputError("a provider table applies only to the openrouter backend",
                             path=p, field="provider")
        for key, value in data["provider"].items():
            if key not in _PROVIDER_FIELDS:
                raise InputError("unknown field", path=p, line=_line_of(text, key), field=f"provider.{key}")
            if not isinstance(value, _PROVIDER_FIELDS[key]):
                raise InputError(f"expected {_PROVIDER_FIELDS[key][0].__name__}", path=p,
                                 line=_line_of(text, key), field=f"provider.{key}")
        if data["provider"].get("data_collection", "deny") not in ("deny", "allow"):
            raise InputError("expected 'deny' or 'allow'", path=p, field="provider.data_collection")
    if data["backend"] == "openrouter":
        data.setdefault("api_key_env", "OPENROUTER_API_KEY")
        if "provider" in data:
            # docs/design.md §8 defaults: a pinned provider means no silent fallback, no parameter
            # dropping, no data collection unless the config says otherwise.
            data["provider"] = {"allow_fallbacks": False, "require_parameters": True, "data_collection": "deny",
                                **data["provider"]}
    if "api_key_env" in data and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", data["api_key_env"]):
        # A value that is not a variable name is probably a pasted key: refuse without echoing it.
        raise InputError("must be the NAME of an environment variable (is a key pasted here?)",
                         path=p, line=_line_of(text, "api_key_env"), field="api_key_env")
    for key in ("temperature", "timeout_s", "price_in_per_mtok", "price_out_per_mtok", "retry_initial_s",
                "retry_max_s"):
        if key in data:
            data[key] = float(data[key])
    return GuardConfig(**data, source=str(p))
