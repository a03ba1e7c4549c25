"""Guard configs: TOML files validated on load (docs/design.md §8).

Secrets never live here: a config names the environment variable holding the key
(`api_key_env`); the value is read at send time and never stored on the config object.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from guardeval.bounded import read_bounded
from guardeval.canon import canonical_sha256
from guardeval.errors import InputError

BACKENDS = ("openrouter", "openai-compatible", "mlx", "python")
# The guard configs shipped with guardeval (haiku-4.5.toml, sim.toml).
PRESETS = Path(__file__).resolve().parent / "presets"
# A guard's answer is a few KB; a body past this (decoded) is a failed attempt, not a crash
# (docs/design.md §7). 16 calls in flight then hold at most 64 MiB of bodies.
DEFAULT_MAX_RESPONSE_BYTES = 4 << 20
DEFAULT_BASE_URL = {"openrouter": "https://openrouter.ai/api/v1", "openai-compatible": "http://127.0.0.1:8000/v1"}
# How a chat back-end asks for the prompt's output schema (`structured_output`):
#   json_schema  {"type": "json_schema", "json_schema": SCHEMA}  (OpenAI, OpenRouter, vLLM)
#   json_object  {"type": "json_object", "schema": SCHEMA}       (llama-cpp-python's server: a grammar)
#   none         no response_format: free decoding
#   auto         openai-compatible only: the preflight probes the server and records what it accepts
DIALECTS = ("json_schema", "json_object", "none", "auto")
# Where a python guard's calls run (harness/guardeval/backends/python_guard): worker threads of this
# process, or worker processes of their own.
Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[str, ...] = get_args(Isolation)

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
    "structured_output": ((bool, str), False),
    "retry_initial_s": ((int, float), False),
    "retry_max_s": ((int, float), False),
    "context_tokens": ((int,), False),
    "max_response_bytes": ((int,), False),
    "provider": ((dict,), False),
    "callable": ((str,), False),
    "isolation": ((str,), False),
    "label": ((str,), False),
}
_PROVIDER_FIELDS: dict[str, tuple[type, ...]] = {
    "only": (list,), "order": (list,), "allow_fallbacks": (bool,), "require_parameters": (bool,),
    "data_collection": (str,), "quantizations": (list,),
}

# What each key means: the guard-config reference (docs/reference/guard-config.md) is generated
# from these with _FIELDS (type, required), the dataclass defaults and RANGES, so it cannot drift.
FIELD_DOCS: dict[str, str] = {
    "name": "1–64 of A-Z a-z 0-9 . _ -, not . or .. (it becomes part of the run id and folder name)",
    "backend": "openrouter, openai-compatible, mlx or python",
    "model": "the model the back-end asks for: at most 1024 characters, no control characters",
    "prompt": "a prompt id (same rule as name): a folder under $GUARDEVAL_PROMPTS, ./prompts or the shipped prompts",
    "base_url": "http:// or https:// with a host, at most 2048 characters; no credentials, query or fragment "
                "(default: OpenRouter's API; http://127.0.0.1:8000/v1 for openai-compatible); --base-url overrides",
    "api_key_env": "the NAME of the environment variable holding the key (OPENROUTER_API_KEY for openrouter; none "
                   "for local back-ends); a value that looks like a token is refused without being echoed",
    "temperature": "sampling temperature",
    "max_tokens": "the answer's token cap",
    "seed": "the sampling seed sent, a signed 64-bit integer (none: not sent)",
    "timeout_s": "per attempt, in seconds",
    "max_attempts": "attempts per call before it is exhausted",
    "concurrency": "the default for --concurrency (16 when unset)",
    "price_in_per_mtok": "USD per million prompt tokens, for projections and --max-cost admission",
    "price_out_per_mtok": "USD per million answer tokens, for projections and --max-cost admission",
    "structured_output": "the shape of response_format when the prompt declares a schema: json_schema, json_object, "
                         "none (or false), auto (openai-compatible: the preflight probes and records it); true is the "
                         "back-end's default",
    "retry_initial_s": "the first backoff after a retryable failure, in seconds",
    "retry_max_s": "the largest backoff, in seconds",
    "context_tokens": "the context length (mlx: an override of the model's)",
    "max_response_bytes": "the largest response body read, decoded; a larger one is a response_too_large attempt",
    "provider": "OpenRouter routing table (openrouter only): the keys below",
    "callable": "python back-end only: package.module:function, imported when the guard runs",
    "isolation": "python back-end only: where calls run: thread (worker threads of the harness) or process (worker "
                 "processes, each importing the module once: stoppable at timeout_s, one interpreter lock each); "
                 "docs/how-to/python-guard.md says which to choose",
    "label": "what replicate, compare and the pages call runs of this guard (at most 64 characters, no control "
             "characters; default: the guard that answered, e.g. the simulator's profile, else name); --label "
             "overrides",
}
PROVIDER_DOCS: dict[str, str] = {
    "only": "the providers an answer may come from (an answer from another is quarantined as provider_drift)",
    "order": "the providers to try in order (with fallbacks off, also the allowed ones)",
    "allow_fallbacks": "let OpenRouter route elsewhere when these fail (default false)",
    "require_parameters": "only providers that support every parameter sent (default true)",
    "data_collection": "deny (default) or allow",
    "quantizations": "the quantizations a provider may serve",
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
    # A dialect (DIALECTS); true/false in a file or a constructor mean the back-end's default / "none".
    structured_output: str | bool = True
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    context_tokens: int | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    provider: dict[str, Any] | None = None
    callable: str | None = None   # backend python: "package.module:function"
    isolation: Isolation = "thread"   # backend python
    label: str | None = None      # what outputs call its runs (guardeval.run.folder.answered.run_name)
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # One spelling on the object (and in the manifest): the dialect's name.
        if isinstance(self.structured_output, bool):
            object.__setattr__(self, "structured_output", default_dialect(self.backend, self.structured_output))

    @property
    def dialect(self) -> str:
        """The structured-output dialect sent; `auto` (not yet probed) sends the OpenAI shape."""
        value = str(self.structured_output)
        return "json_schema" if value == "auto" else value

    def with_dialect(self, dialect: str) -> GuardConfig:
        """The config with `structured_output` resolved (the preflight's finding)."""
        return GuardConfig(**{**self.to_manifest(), "structured_output": dialect, "source": self.source})

    def to_manifest(self) -> dict[str, Any]:
        """The config as recorded in a run manifest: no secrets (only the variable's name)."""
        d = asdict(self)
        d.pop("source", None)
        if d["callable"] is None:
            del d["callable"]   # only python guards have one: other configs hash as before
        if d["isolation"] == "thread":
            del d["isolation"]  # the default: runs launched before it existed hash as before
        if d["label"] is None:
            del d["label"]      # likewise: a config without a label hashes as before it existed
        return d

    @property
    def sha256(self) -> str:
        return canonical_sha256(self.to_manifest())

    def with_base_url(self, url: str | None) -> GuardConfig:
        if not url:
            return self
        if (problem := base_url_problem(url)) is not None:
            raise InputError(problem, field="base_url")
        return GuardConfig(**{**self.to_manifest(), "base_url": url, "source": self.source})

    @property
    def effective_base_url(self) -> str | None:
        return self.base_url or DEFAULT_BASE_URL.get(self.backend)

    @property
    def is_local(self) -> bool:
        """Calls stay on this machine: an in-process model, or an endpoint on a loopback address
        (the simulated provider, a local vLLM or mlx_lm.server)."""
        if self.backend in ("mlx", "python"):
            return True
        host = urlsplit(self.effective_base_url or "").hostname or ""
        if host == "localhost" or host.endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def needs_key(self) -> bool:
        """Whether calls need the key `api_key_env` names: a remote endpoint does (a local one
        gets the key when it is set, and may do without)."""
        return bool(self.api_key_env) and not self.is_local

    @property
    def is_simulated(self) -> bool:
        """The openrouter back-end on a loopback address: the simulated provider (OpenRouter is
        never local), whose `usage.cost` is made up, not billed."""
        return self.backend == "openrouter" and self.is_local

    def key_is_set(self) -> bool:
        return bool(self.api_key_env and os.environ.get(self.api_key_env))

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


def default_dialect(backend: str, on: bool) -> str:
    """`structured_output = true` (the default) / `false` as a dialect: found out by the
    preflight for an OpenAI-compatible server (they differ), OpenAI's shape elsewhere."""
    if not on:
        return "none"
    return "auto" if backend == "openai-compatible" else "json_schema"


def _line_of(text: str, key: str) -> int | None:
    pat = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i, line in enumerate(text.split("\n"), start=1):
        if pat.match(line):
            return i
    return None


# -- checks on single values (also used for `--base-url`) ---------------------------------------

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_CONFIG_BYTES = 1 << 20
MAX_URL_CHARS = 2048
# Documented ranges of the numeric fields (docs/reference/guard-config.md): finite values, inclusive bounds.
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "max_tokens": (1, 1 << 20),
    "seed": (-(1 << 63), (1 << 63) - 1),
    "timeout_s": (0.001, 3600.0),
    "max_attempts": (1, 100),
    "concurrency": (1, 4096),
    "price_in_per_mtok": (0.0, 10_000.0),
    "price_out_per_mtok": (0.0, 10_000.0),
    "retry_initial_s": (0.0, 3600.0),
    "retry_max_s": (0.0, 3600.0),
    "context_tokens": (1, 10_000_000),
    "max_response_bytes": (1, 1 << 30),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Prefixes of well-known API tokens whose characters also make a valid variable name.
_TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "sk_", "rk_", "pk_", "xox",
                   "glpat", "AKIA", "ASIA", "AIza", "eyJ")
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+")


def is_safe_name(text: str) -> bool:
    """A name that may become part of a file name: `[A-Za-z0-9._-]{1,64}`, not `.` or `..`."""
    return bool(NAME_RE.fullmatch(text)) and text not in (".", "..")


def looks_like_token(name: str) -> bool:
    """An `api_key_env` value that is a key rather than the name of a variable holding one."""
    if not _ENV_NAME.fullmatch(name):
        return True
    if name.startswith(_TOKEN_PREFIXES) and len(name) >= 20:
        return True
    # Long random-looking runs: upper and lower case and digits and no word separator.
    return (len(name) >= 24 and "_" not in name and any(c.islower() for c in name)
            and any(c.isupper() for c in name) and any(c.isdigit() for c in name))


def base_url_problem(url: str) -> str | None:
    """Why `url` cannot be a guard's base URL (None: it can). Never quotes the URL: it may
    carry a password."""
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if _CONTROL.search(url) or any(c.isspace() for c in url):
        return "contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if "@" in parts.netloc:
        return ("carries credentials (user:password@host); put the key in an environment variable and name it "
                "in api_key_env")
    host = parts.hostname or ""
    if not host:
        return "has no host"
    if not _HOST_RE.fullmatch(host) and not _is_ip(host):
        return "host must be a DNS name (ASCII; punycode for other scripts) or an IP address"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not carry a query or a fragment"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def plain_http_remote(url: str | None) -> bool:
    """An unencrypted URL to a host other than this machine: the key and every prompt travel
    in clear (worth a warning, not a refusal: a lab network may be meant)."""
    if not url:
        return False
    parts = urlsplit(url)
    if parts.scheme != "http":
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


# -- loading -------------------------------------------------------------------------------------

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


def presets() -> dict[str, Path]:
    """The guard configs shipped with the package, by name (the file name less `.toml`)."""
    return {f.stem: f for f in sorted(PRESETS_DIR.glob("*.toml"))}


def resolve_guard(value: str | Path) -> Path:
    """A `--guard` value: a file, or, when no file of that name exists, the name of a preset
    shipped with the package (`haiku-4.5`, `sim`), so that an installed package needs no
    checkout. The name is looked up among the presets, never joined into a path."""
    p = Path(value)
    if isinstance(value, Path) or p.exists():
        return p
    return presets().get(value, p)


def load_guard_config(path: str | Path) -> GuardConfig:
    p = resolve_guard(path)
    text = _read_config(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"not valid TOML ({exc})", path=p, line=int(m.group(1)) if m else None) from None
    except RecursionError:
        raise InputError("not valid TOML (nested too deeply)", path=p) from None

    def fail(message: str, key: str, field: str | None = None) -> InputError:
        return InputError(message, path=p, line=_line_of(text, key), field=field or key)

    _check_config(data, p, fail)
    if data["backend"] == "openrouter":
        data.setdefault("api_key_env", "OPENROUTER_API_KEY")
        if "provider" in data:
            # docs/design.md §8 defaults: a pinned provider means no silent fallback, no parameter
            # dropping, no data collection unless the config says otherwise.
            data["provider"] = {"allow_fallbacks": False, "require_parameters": True, "data_collection": "deny",
                                **data["provider"]}
    return GuardConfig(**_floats(data), source=str(p))


def config_from_manifest(data: Any, path: Path) -> GuardConfig:
    """The guard config a run's manifest records (`GuardConfig.to_manifest`), checked as a config
    file is: a run folder is outside input too, and this config says where the key goes and how
    long a call may wait. InputError names `path` and the field (`guard.<field>`)."""
    if not isinstance(data, dict):
        raise InputError("expected an object", path=path, field="guard")

    def fail(message: str, key: str, field: str | None = None) -> InputError:
        return InputError(message, path=path, field=f"guard.{field or key}")

    # Unset optional fields are recorded as null.
    data = {k: v for k, v in data.items() if v is not None}
    _check_config(data, path, fail)
    if data.get("structured_output") is True:
        # Recorded before dialects existed: what was sent then was OpenAI's json_schema shape.
        data["structured_output"] = "json_schema"
    return GuardConfig(**_floats(data))


def _check_config(data: dict[str, Any], p: Path, fail: Callable[..., InputError]) -> None:
    """Every field rule: types, required fields, values and ranges, the provider table."""
    _check_types(data, fail)
    for key, (_, required) in _FIELDS.items():
        if required and key not in data:
            raise fail("missing required field", key)
        if required and not str(data[key]).strip():
            raise fail("must not be empty", key)
    _check_values(data, fail)
    if "provider" in data:
        _check_provider(data, p, fail)


def _floats(data: dict[str, Any]) -> dict[str, Any]:
    """The float fields as floats (TOML and JSON may hold them as integers)."""
    for key in ("temperature", "timeout_s", "price_in_per_mtok", "price_out_per_mtok", "retry_initial_s",
                "retry_max_s"):
        if key in data:
            data[key] = float(data[key])
    return data


def _read_config(p: Path) -> str:
    if not p.is_file():
        names = ", ".join(presets())
        raise InputError(f"guard config not found (give a file, or a preset name: {names})", path=p)
    data = read_bounded(p, MAX_CONFIG_BYTES, what="a guard config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError("not UTF-8 text", path=p, line=line) from None


def _check_types(data: dict[str, Any], fail: Callable[..., InputError]) -> None:
    for key, value in data.items():
        if key not in _FIELDS:
            raise fail("unknown field" + _did_you_mean(key, _FIELDS), key)
        types, _ = _FIELDS[key]
        if isinstance(value, bool) and bool not in types:
            raise fail(f"expected {'/'.join(t.__name__ for t in types)}, got bool", key)
        if not isinstance(value, types):
            raise fail(f"expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}", key)


def _did_you_mean(key: str, known: Iterable[str]) -> str:
    """'; did you mean max_tokens?' for a key one slip from a known one (as the CLI's flags do)."""
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _check_values(data: dict[str, Any], fail: Callable[..., InputError]) -> None:
    if not is_safe_name(data["name"]):
        # The name becomes part of the run folder's name: never a path.
        raise fail("must be 1-64 characters of A-Z a-z 0-9 . _ - (and not '.' or '..')", "name")
    if not is_safe_name(data["prompt"]):
        raise fail("must be a prompt id: 1-64 characters of A-Z a-z 0-9 . _ - (and not '.' or '..')", "prompt")
    if data["backend"] not in BACKENDS:
        raise fail(f"unknown backend (expected one of {', '.join(BACKENDS)})", "backend")
    if _CONTROL.search(data["model"]) or len(data["model"]) > 1024:
        raise fail("must be at most 1024 characters, no control characters", "model")
    if "label" in data and (not data["label"] or _CONTROL.search(data["label"]) or len(data["label"]) > 64):
        raise fail("must be 1-64 characters, no control characters", "label")
    for key, (lo, hi) in RANGES.items():
        if key in data:
            v = data[key]
            # (An int is compared exactly: no float conversion, which overflows past 1e308.)
            if (isinstance(v, float) and not math.isfinite(v)) or not lo <= v <= hi:
                raise fail(f"must be a finite number from {_num(lo)} to {_num(hi)}", key)
    if isinstance(data.get("structured_output"), str):
        _check_dialect(data, fail)
    if "base_url" in data and (problem := base_url_problem(data["base_url"])) is not None:
        raise fail(problem, "base_url")
    if data["backend"] == "python":
        _check_callable(data, fail)
    else:
        for key in ("callable", "isolation"):
            if key in data:
                raise fail(f"{key} applies only to the python backend", key)
    if "isolation" in data and data["isolation"] not in ISOLATIONS:
        raise fail(f"expected one of {', '.join(ISOLATIONS)}", "isolation")
    if "api_key_env" in data and looks_like_token(data["api_key_env"]):
        # Probably a pasted key: refuse without echoing it.
        raise fail("must be the NAME of an environment variable (is a key pasted here?)", "api_key_env")


def _check_dialect(data: dict[str, Any], fail: Callable[..., InputError]) -> None:
    value, backend = data["structured_output"], data["backend"]
    if value not in DIALECTS:
        raise fail(f"expected true, false or one of {', '.join(DIALECTS)}", "structured_output")
    if value == "auto" and backend != "openai-compatible":
        raise fail("'auto' (probed by the preflight) applies to the openai-compatible backend only",
                   "structured_output")
    if value == "json_object" and backend == "mlx":
        raise fail("the mlx backend constrains decoding itself: use true (json_schema) or false", "structured_output")


def _check_callable(data: dict[str, Any], fail: Callable[..., InputError]) -> None:
    """The name's shape only: importing it is `guardeval.backends.python_guard.resolve.load`."""
    from guardeval.backends.python_guard.resolve import name_problem

    if "callable" not in data:
        raise fail("missing required field (the python backend needs callable = \"package.module:function\")", "callable")
    if (problem := name_problem(data["callable"])) is not None:
        raise fail(problem, "callable")


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _check_provider(data: dict[str, Any], p: Path, fail: Callable[..., InputError]) -> None:
    if data["backend"] != "openrouter":
        raise InputError("a provider table applies only to the openrouter backend", path=p, field="provider")
    for key, value in data["provider"].items():
        name = f"provider.{key}"
        if key not in _PROVIDER_FIELDS:
            raise fail("unknown field" + _did_you_mean(key, _PROVIDER_FIELDS), key, name)
        if not isinstance(value, _PROVIDER_FIELDS[key]):
            raise fail(f"expected {_PROVIDER_FIELDS[key][0].__name__}", key, name)
        if isinstance(value, list) and (len(value) > 64 or not all(
                isinstance(v, str) and 0 < len(v) <= 128 and not _CONTROL.search(v) for v in value)):
            raise fail("expected a list of at most 64 names (strings of 1-128 characters)", key, name)
    if data["provider"].get("data_collection", "deny") not in ("deny", "allow"):
        raise fail("expected 'deny' or 'allow'", "data_collection", "provider.data_collection")
