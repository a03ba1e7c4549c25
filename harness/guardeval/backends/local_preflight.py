"""Preflight for an `openai-compatible` server (vLLM, llama.cpp, mlx_lm.server): will it serve
the run as configured? Asked before a run folder exists (`launch`, `replicate`) and on its own
(`guardeval preflight`).

- `GET {base_url}/models` answers and lists the configured `model` (vLLM: `--served-model-name`;
  llama-cpp-python: `--model_alias`; otherwise the server's own name for the file); an answer
  with no list to read (mlx_lm.server without a Hugging Face cache) is a warning, and the probe
  then shows whether the model is served;
- the context the server reports (`max_model_len`, vLLM; `context_length`, `n_ctx`, `meta.n_ctx`
  where a server lists one) holds the longest rendered prompt plus `max_tokens`; a server that
  reports none is noted, and a longer prompt then fails per call (`context_overflow`);
- one tiny probe (a short message, a few tokens) with the configured structured-output shape
  is accepted. With `structured_output = "auto"` the dialects are probed in turn (json_schema,
  then json_object with a schema, then none) and the first one accepted is the run's: it goes
  into the manifest and every request. A rejected explicit dialect is a refusal that names the
  dialect the server does accept.

Each check ends `ok`, `warn`, `skip` or `fail`; any `fail` refuses the launch (exit 2) with the
reason and the fix. The probe goes through the guard's own transport, so it is judged exactly as
a run's call would be (harness/guardeval/backends/chat_http.py, harness/guardeval/backends/invalid_request.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from guardeval.backends import http_get as http
from guardeval.backends.checks import Check, CheckList, Workload
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import RESET, AttemptError, FatalError
from guardeval.backends.http_get import shown
from guardeval.backends.prompts import Prompt

TIMEOUT_S = 20.0
PROBE_TOKENS = 8
PROBE_MESSAGES = [{"role": "user", "content": "Answer with a JSON object."}]
PROBE_ORDER = ("json_schema", "json_object", "none")
FIX = {"json_schema": 'structured_output = "json_schema"',
       "json_object": 'structured_output = "json_object"',
       "none": "structured_output = false"}
# Something listens there and hangs up: starting a server is not the fix.
RESET_HINT = ("something listens there: check that base_url names the server "
              "(its port, http or https) and the server's own log")
SERVE_HINT = ("start the server, e.g. `python -m llama_cpp.server --model FILE.gguf --model_alias NAME "
              "--host 127.0.0.1 --port 8000`, or point base_url (or --base-url) at it")


@dataclass
class LocalPreflight(CheckList):
    base_url: str
    model: str
    checks: list[Check] = field(default_factory=list)
    dialect: str | None = None          # the structured-output dialect the server accepted
    context_tokens: int | None = None   # as the server reports it

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "base_url": self.base_url, "model": self.model, "dialect": self.dialect,
                "context_tokens": self.context_tokens, "checks": [c.__dict__ for c in self.checks]}


def run_local_preflight(config: GuardConfig, prompt: Prompt, work: Workload, *,
                        timeout_s: float = TIMEOUT_S) -> LocalPreflight:
    """Blocking entry point (its own event loop)."""
    return anyio.run(local_preflight, config, prompt, work, timeout_s)


async def local_preflight(config: GuardConfig, prompt: Prompt, work: Workload,
                          timeout_s: float = TIMEOUT_S) -> LocalPreflight:
    base = (config.effective_base_url or "").rstrip("/")
    result = LocalPreflight(base_url=base, model=config.model)
    key = os.environ.get(config.api_key_env) or None if config.api_key_env else None
    async with http.client() as client:
        try:
            listing = await http.get_json(client, http.url(base, "models"), key=key, timeout_s=timeout_s)
        except http.FetchError as exc:
            result.add("reach", "fail", f"{exc}: {RESET_HINT if RESET in str(exc) else SERVE_HINT}")
            return result
    if not _judge_models(result, config, listing):
        return result
    _judge_context(result, config, work)
    await _probe(result, config, prompt, work, timeout_s)
    return result


def _judge_models(result: LocalPreflight, config: GuardConfig, listing: http.Answer) -> bool:
    where = f"GET {result.base_url}/models"
    data = listing.data.get("data") if isinstance(listing.data, dict) else None
    if listing.status != 200:
        result.add("models", "fail", f"{where}: HTTP {listing.status}: {shown(listing.text, 200)} (is base_url the "
                                     "server's /v1 root?)")
        return False
    if not isinstance(data, list):
        # Answered, but no listing to read (mlx_lm.server answers an empty 200 when it has no
        # Hugging Face cache): the probe below shows whether the model is served.
        result.add("models", "warn", f"{where} answered without a model list; the probe checks the model instead")
        return True
    entries = [e for e in data[:1000] if isinstance(e, dict) and isinstance(e.get("id"), str)]
    ids = [e["id"] for e in entries]
    mine = next((e for e in entries if e["id"] == config.model), None)
    if mine is None:
        listed = ", ".join(repr(shown(i, 200)) for i in ids[:8]) or "none"
        result.add("models", "fail", f"the server does not serve {shown(config.model, 200)!r} (it lists {listed}): "
                                     "set model in the guard config to a listed name, or give the server that "
                                     "name (llama-cpp-python: --model_alias; vLLM: --served-model-name)")
        return False
    result.add("models", "ok", f"the server lists {shown(config.model, 200)!r}")
    result.context_tokens = _reported_context(mine)
    return True


def _reported_context(entry: Mapping[str, Any]) -> int | None:
    meta = entry.get("meta")
    for value in (entry.get("max_model_len"), entry.get("context_length"), entry.get("n_ctx"),
                  meta.get("n_ctx") if isinstance(meta, dict) else None):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _judge_context(result: LocalPreflight, config: GuardConfig, work: Workload) -> None:
    longest, context = work.longest_prompt_tokens, result.context_tokens
    if longest is None:
        result.add("context", "skip", "no cohort given: the prompts' length is unknown")
    elif context is None:
        result.add("context", "skip", "the server does not report its context length; a prompt longer than it "
                                      "fails per call (context_overflow)")
    elif longest + config.max_tokens > context:
        result.add("context", "fail", f"the longest prompt (~{longest} tokens, chars / 4) plus max_tokens "
                                      f"{config.max_tokens} exceeds the server's context of {context}: start it "
                                      "with a larger context (llama-cpp-python --n_ctx, vLLM --max-model-len) or "
                                      "lower max_tokens")
    else:
        result.add("context", "ok", f"the longest prompt (~{longest} tokens, chars / 4) plus max_tokens "
                                    f"{config.max_tokens} fits the server's context of {context}")


async def _probe(result: LocalPreflight, config: GuardConfig, prompt: Prompt, work: Workload,
                 timeout_s: float) -> None:
    from guardeval.backends.chat_http import OpenAICompatibleGuard

    wanted = str(config.structured_output)
    if not prompt.output_schema:
        # Nothing to constrain: the body carries no response_format in any dialect.
        order: tuple[str, ...] = ("none",)
    elif wanted == "auto":
        order = PROBE_ORDER
    else:
        order = (wanted, *(d for d in PROBE_ORDER if d != wanted))
    probe_config = GuardConfig(**{**config.to_manifest(), "timeout_s": min(config.timeout_s, timeout_s),
                                  "max_tokens": PROBE_TOKENS})
    rejected: list[str] = []
    for dialect in order:
        guard = OpenAICompatibleGuard(probe_config.with_dialect(dialect), prompt, max_connections=1)
        try:
            await guard.send(_probe_body(guard, work, dialect), "guardeval-preflight-probe")
        except FatalError as exc:
            if exc.error_class != "invalid_request":
                result.add("probe", "fail", f"the server refused a {PROBE_TOKENS}-token probe: {shown(str(exc), 400)}")
                return
            rejected.append(f"{dialect}: {shown(str(exc), 400)}")
            continue
        except AttemptError as exc:
            result.add("probe", "fail", f"a {PROBE_TOKENS}-token probe failed: {shown(str(exc), 400)}"
                       + (f" ({RESET_HINT})" if RESET in str(exc) else
                          f" ({SERVE_HINT})" if exc.error_class in ("connection", "timeout") else ""))
            return
        finally:
            await guard.aclose()
        _accepted(result, wanted, dialect, rejected, bool(prompt.output_schema))
        return
    result.add("probe", "fail", "the server rejected every request shape: " + "; ".join(rejected))


def _probe_body(guard: Any, work: Workload, dialect: str) -> dict[str, Any]:
    """The run's body shape (model, sampling settings, the dialect's response_format) with a tiny
    message and a few tokens."""
    from guardeval.backends.chat_body import response_format

    body = {k: v for k, v in work.body.items() if k != "response_format"}
    body.update(messages=PROBE_MESSAGES, max_tokens=PROBE_TOKENS, model=guard.config.model)
    schema = guard.prompt.output_schema
    fmt = response_format(dialect, schema) if schema else None
    if fmt is not None:
        body["response_format"] = fmt
    return body


def _accepted(result: LocalPreflight, wanted: str, dialect: str, rejected: list[str], has_schema: bool) -> None:
    if not has_schema:
        result.dialect = "none" if wanted == "auto" else wanted
        result.add("probe", "ok", "a probe was answered (the prompt declares no output schema: free decoding)")
        return
    said = f" (rejected: {'; '.join(rejected)})" if rejected else ""
    if wanted == "auto":
        result.dialect = dialect
        status = "warn" if dialect == "none" else "ok"
        note = (" — no structured-output shape is accepted: answers are decoded free and fewer will parse"
                if dialect == "none" else "")
        result.add("structured output", status, f"auto: the server accepts {dialect}{note}; recorded in the "
                                                f"manifest{said}")
        return
    if dialect == wanted:
        result.dialect = dialect
        result.add("structured output", "ok", f"the server accepts {dialect}")
        return
    result.add("structured output", "fail", f"the server rejects structured_output = {wanted!r}{said}; it accepts "
                                            f"{dialect}: set {FIX[dialect]} in the guard config (or \"auto\")")
