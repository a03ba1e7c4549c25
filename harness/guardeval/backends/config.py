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
from typing import Any
from urllib.parse import urlsplit

from guardeval.backends.backend import Backend, backend_for, backend_names, backends_with, find_backend
from guardeval.backends.config_fields import (
    BY_NAME,
    FIELDS,
    ISOLATIONS,
    Field,
    Isolation,
    default,
)
from guardeval.backends.config_fields import (
    DEFAULT_MAX_RESPONSE_BYTES as DEFAULT_MAX_RESPONSE_BYTES,  # re-exported: the default's name callers know
)
from guardeval.bounded import read_bounded
from guardeval.canon import canonical_sha256
from guardeval.errors import InputError

# The guard configs shipped with guardeval (haiku-4.5.toml, sim.toml, python-example.toml).
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
# How a chat back-end asks for the prompt's output schema (`structured_output`):
#   json_schema  {"type": "json_schema", "json_schema": SCHEMA}  (OpenAI, OpenRouter, vLLM)
#   json_object  {"type": "json_object", "schema": SCHEMA}       (llama-cpp-python's server: a grammar)
#   none         no response_format: free decoding
#   auto         the preflight probes the server and records what it accepts (the back-ends whose
#                `Backend.dialects` take it)
DIALECTS = ("json_schema", "json_object", "none", "auto")


@dataclass(frozen=True)
class GuardConfig:
    # The fields of FIELDS (guardeval.backends.config_fields), in its order, their defaults read from it.
    name: str
    backend: str
    model: str
    prompt: str
    base_url: str | None = default("base_url")
    api_key_env: str | None = default("api_key_env")
    temperature: float = default("temperature")
    max_tokens: int = default("max_tokens")
    seed: int | None = default("seed")
    timeout_s: float = default("timeout_s")
    max_attempts: int = default("max_attempts")
    concurrency: int | None = default("concurrency")
    price_in_per_mtok: float | None = default("price_in_per_mtok")
    price_out_per_mtok: float | None = default("price_out_per_mtok")
    # A dialect (DIALECTS); true/false in a file or a constructor mean the back-end's default / "none".
    structured_output: str | bool = default("structured_output")
    retry_initial_s: float = default("retry_initial_s")
    retry_max_s: float = default("retry_max_s")
    context_tokens: int | None = default("context_tokens")
    max_response_bytes: int = default("max_response_bytes")
    provider: dict[str, Any] | None = default("provider")
    callable: str | None = default("callable")   # backend python: "package.module:function"
    isolation: Isolation = default("isolation")   # backend python
    retry_on: list[str] | None = default("retry_on")   # backend python: exception type names retried
    start_timeout_s: float = default("start_timeout_s")   # backend python, isolation process
    label: str | None = default("label")      # what outputs call its runs (guardeval.run.folder.answered.run_name)
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
        for f in FIELDS:
            # Fields added later (callable, isolation, label) are left out at their default: runs
            # launched before they existed hash as before.
            if f.omitted_at_default and d[f.name] == f.default:
                del d[f.name]
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
        return self.base_url or self.backend_entry.default_base_url

    @property
    def backend_entry(self) -> Backend:
        """Its back-end's record (guardeval.backends.backend)."""
        return backend_for(self.backend)

    @property
    def is_local(self) -> bool:
        """Calls stay on this machine: an in-process model, or an endpoint on a loopback address
        (the simulated provider, a local vLLM or mlx_lm.server)."""
        if self.backend_entry.in_process:
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
        return self.backend_entry.simulated_when_local and self.is_local

    def key_is_set(self) -> bool:
        return bool(self.api_key_env and os.environ.get(self.api_key_env))

    @property
    def allowed_providers(self) -> tuple[str, ...]:
        """The providers an answer may come from: every slug of `provider.only`, else every slug
        of `provider.order` when fallbacks are off; () when routing is left to OpenRouter (or the
        back-end has no routing)."""
        return self.backend_entry.allowed_providers(self)

    @property
    def pinned_provider(self) -> str | None:
        """The first allowed provider (for display)."""
        allowed = self.allowed_providers
        return allowed[0] if allowed else None


def _check_declared() -> None:
    """GuardConfig's fields are FIELDS', in its order, with its defaults (a field added to one
    and not the other fails at import, not in a run)."""
    import dataclasses

    own = [(f.name, f.default) for f in dataclasses.fields(GuardConfig) if f.name != "source"]
    declared = [(f.name, dataclasses.MISSING if f.required else f.default) for f in FIELDS]
    if own != declared:
        raise RuntimeError(f"GuardConfig's fields differ from config_fields.FIELDS: {own} != {declared}")


_check_declared()


def default_dialect(backend: str, on: bool) -> str:
    """`structured_output = true` (the default) / `false` as a dialect: found out by the
    preflight for an OpenAI-compatible server (they differ), OpenAI's shape elsewhere."""
    if not on:
        return "none"
    entry = find_backend(backend)
    return entry.default_dialect if entry is not None else "json_schema"


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
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# An exception type's name, optionally with its module (`retry_on`): dotted Python identifiers.
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")
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
    entry = backend_for(data["backend"])
    if entry.default_api_key_env is not None:
        data.setdefault("api_key_env", entry.default_api_key_env)
    entry.complete(data)
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
    for f in FIELDS:
        if f.required and f.name not in data:
            raise fail("missing required field", f.name)
        if f.required and not str(data[f.name]).strip():
            raise fail("must not be empty", f.name)
    _check_values(data, fail)
    if "provider" in data:
        _check_provider(data, p, fail)


def _floats(data: dict[str, Any]) -> dict[str, Any]:
    """The float fields as floats (TOML and JSON may hold them as integers)."""
    for f in FIELDS:
        if f.is_float and f.name in data:
            data[f.name] = float(data[f.name])
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
        if key not in BY_NAME:
            raise fail("unknown field" + _did_you_mean(key, BY_NAME), key)
        f = BY_NAME[key]
        if isinstance(value, bool) and bool not in f.types:
            raise fail(f"expected {f.type_names}, got bool", key)
        if not isinstance(value, f.types):
            raise fail(f"expected {f.type_names}, got {type(value).__name__}", key)


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
    entry = find_backend(data["backend"])
    if entry is None:
        raise fail(f"unknown backend (expected one of {', '.join(backend_names())})", "backend")
    if _CONTROL.search(data["model"]) or len(data["model"]) > 1024:
        raise fail("must be at most 1024 characters, no control characters", "model")
    if "label" in data and (not data["label"] or _CONTROL.search(data["label"]) or len(data["label"]) > 64):
        raise fail("must be 1-64 characters, no control characters", "label")
    for f in FIELDS:
        if f.range is not None and f.name in data:
            v, (lo, hi) = data[f.name], f.range
            # (An int is compared exactly: no float conversion, which overflows past 1e308.)
            if (isinstance(v, float) and not math.isfinite(v)) or not lo <= v <= hi:
                raise fail(range_message(f), f.name)
    if isinstance(data.get("structured_output"), str):
        _check_dialect(data, entry, fail)
    if "base_url" in data and (problem := base_url_problem(data["base_url"])) is not None:
        raise fail(problem, "base_url")
    entry.check_config(data, fail)
    for f in FIELDS:
        # A back-end-only field elsewhere (provider is refused by _check_provider, as before).
        if f.backend_only and f.name != "provider" and f.name in data and f.name not in entry.fields:
            raise fail(f"{f.name} applies only to the {_takers(f.name)} backend", f.name)
    if "isolation" in data and data["isolation"] not in ISOLATIONS:
        raise fail(f"expected one of {', '.join(ISOLATIONS)}", "isolation")
    if "retry_on" in data and (len(data["retry_on"]) > 32 or not all(
            isinstance(v, str) and _EXCEPTION_NAME.fullmatch(v) for v in data["retry_on"])):
        raise fail("expected a list of at most 32 exception type names (TimeoutError, httpx.ReadTimeout)",
                   "retry_on")
    if "api_key_env" in data and looks_like_token(data["api_key_env"]):
        # Probably a pasted key: refuse without echoing it.
        raise fail("must be the NAME of an environment variable (is a key pasted here?)", "api_key_env")


def _check_dialect(data: dict[str, Any], entry: Backend, fail: Callable[..., InputError]) -> None:
    value = data["structured_output"]
    if value not in DIALECTS:
        raise fail(f"expected true, false or one of {', '.join(DIALECTS)}", "structured_output")
    if value in entry.dialects:
        return
    if value in entry.dialect_refusals:
        raise fail(entry.dialect_refusals[value], "structured_output")
    takers = " or ".join(backends_with(lambda b: value in b.dialects))
    what = "'auto' (probed by the preflight)" if value == "auto" else repr(value)
    raise fail(f"{what} applies to the {takers} backend only", "structured_output")


def _takers(name: str) -> str:
    """The back-ends that take a back-end-only field, for a refusal ("python", "openrouter")."""
    return " or ".join(backends_with(lambda b: name in b.fields))


def range_message(f: Field) -> str:
    """What a value outside a field's declared range is told."""
    assert f.range is not None
    return f"must be a finite number from {_num(f.range[0])} to {_num(f.range[1])}"


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _check_provider(data: dict[str, Any], p: Path, fail: Callable[..., InputError]) -> None:
    if "provider" not in backend_for(data["backend"]).fields:
        raise InputError(f"a provider table applies only to the {_takers('provider')} backend", path=p,
                         field="provider")
    by_name = {f.name: f for f in backend_for(data["backend"]).provider_fields}
    for key, value in data["provider"].items():
        name = f"provider.{key}"
        if key not in by_name:
            raise fail("unknown field" + _did_you_mean(key, by_name), key, name)
        if not isinstance(value, by_name[key].types):
            raise fail(f"expected {by_name[key].types[0].__name__}", key, name)
        if isinstance(value, list) and (len(value) > 64 or not all(
                isinstance(v, str) and 0 < len(v) <= 128 and not _CONTROL.search(v) for v in value)):
            raise fail("expected a list of at most 64 names (strings of 1-128 characters)", key, name)
    for key, value in data["provider"].items():
        if by_name[key].choices and value not in by_name[key].choices:
            raise fail("expected " + " or ".join(repr(c) for c in by_name[key].choices), key, f"provider.{key}")
