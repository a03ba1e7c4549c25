"""In-process MLX back-end (docs/design.md §8): a local (Q8) model folder under greedy decoding.

One model instance per guard, loaded lazily on first use, off the event loop. Each job (load or
generation) runs on its own short-lived thread, behind a CapacityLimiter(1) (calls queue on the
event loop) *and* a thread lock (an abandoned job and the next one never overlap on the model).
A cancelled call sets a stop flag the generating thread checks after every token and between
prefill chunks (`PREFILL_STEP` prompt tokens), so Ctrl-C waits for at most one token or one
chunk — not for the whole prompt, which mlx's CPU path prefills at a few tokens per second —
and the result is discarded.

The stimulus (`render`) is the chat messages plus decoding settings; the chat template is
applied at send time by the model's own tokenizer, exactly as `mlx_lm.server` does, so the
same rendered body means the same tokens for a given model folder.

Structured output: when `structured_output` is on (the default) and the prompt declares an
output schema with a finite answer set (guardeval's JSON verdict), greedy decoding is
constrained to those answers (`harness/guardeval/backends/constrained.py`); the request body then carries the
schema as `response_format` and `"constrained_decoding": "token-trie"`, so the raw log records
it, and `send` constrains exactly when the body says so.

Context: `context_tokens` from the guard config, else the model's `max_position_embeddings`.
A call whose prompt tokens plus `max_tokens` exceed it fails with `context_overflow` (the same
rule vLLM applies to `max_model_len`); nothing is ever cut.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio

from guardeval.backends.base import Guard, Reply, Usage
from guardeval.backends.config import GuardConfig
from guardeval.backends.constrained import AnswerTrie, TrieLogitsProcessor, answer_set, build_trie
from guardeval.backends.errors import CallFailed, FatalError
from guardeval.backends.prompts import Prompt
from guardeval.canon import canonical_sha256
from guardeval.errors import InputError

INSTALL_HINT = "pip install 'guardeval[mlx]'  (mlx-lm, plus mlx[cpu] on Linux)"


T = TypeVar("T")


class _Abandoned(Exception):
    """The awaiting task was cancelled; the thread stops early and its result is dropped."""


class _Job:
    """One call's work on its own thread: result or exception, then mlx's per-thread cleanup."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # handed to the awaiting task (or dropped if abandoned)
            self.error = exc
        finally:
            try:
                import mlx.core as mx

                mx.clear_streams()
            except Exception:  # cleanup only; never mask the job's own outcome
                pass

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def require_mlx() -> None:
    """Raise InputError unless mlx (with a working native library) and mlx-lm are importable."""
    try:
        # On Linux plain `mlx` installs a package whose native library is missing without
        # the [cpu] (or [cuda]) extra: `import mlx.core` is the real test.
        import mlx.core  # noqa: F401
    except ImportError as exc:
        raise InputError(f"the mlx backend needs the optional extra: {INSTALL_HINT} ({exc})",
                         field="backend") from None
    if importlib.util.find_spec("mlx_lm") is None:
        raise InputError(f"the mlx backend needs mlx-lm: {INSTALL_HINT}", field="backend")


def model_folder(model: str) -> Path:
    """The local model folder named by the config, checked; never a Hub repo id (no downloads)."""
    path = Path(model).expanduser()
    if not path.exists():
        raise InputError(f"model folder '{model}' does not exist (the mlx backend loads a local "
                         "folder and never downloads from the Hugging Face Hub)", field="model")
    if not path.is_dir():
        raise InputError(f"'{model}' is not a folder", field="model")
    config = path / "config.json"
    weights = sorted(path.glob("*.safetensors"))
    tokenizer = (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()
    if not config.is_file() or not weights or not tokenizer:
        raise InputError(f"'{model}' is not a model folder (expected config.json, *.safetensors and "
                         "tokenizer files; convert with `mlx_lm.convert -q --q-bits 8 --q-group-size 64`)",
                         field="model")
    return path.resolve()


def read_model_config(folder: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((folder / "config.json").read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable model config ({exc})", path=folder / "config.json") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise InputError("missing model_type", path=folder / "config.json", field="model_type")
    return cfg


def context_tokens(model_cfg: Mapping[str, Any], config: GuardConfig, folder: Path) -> int:
    if config.context_tokens:
        return config.context_tokens
    # Multimodal configs nest the language model's settings under text_config.
    nested = model_cfg.get("text_config")
    n = model_cfg.get("max_position_embeddings") or (
        nested.get("max_position_embeddings") if isinstance(nested, dict) else None)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError("no max_position_embeddings in the model config: set context_tokens in "
                         "the guard config", path=folder / "config.json")
    return n


def _messages_and_max_tokens(body: Mapping[str, Any]) -> tuple[list[dict[str, str]], int]:
    messages, max_tokens = body.get("messages"), body.get("max_tokens")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise FatalError("bad_request", "request body has no valid 'messages' list")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise FatalError("bad_request", "request body 'max_tokens' must be an integer >= 1")
    return [{"role": m["role"], "content": m["content"]} for m in messages], max_tokens


CONSTRAINED = "token-trie"
# Prompt tokens per prefill step (mlx-lm's default is 2048, with no way to stop inside one). On
# the CPU a small step costs nothing measurable and bounds how long a stop waits
# (benchmarks/mlx_prefill_step.py: 2,000 tokens on the tiny test model 1.23-1.65 s in steps of
# 2048, 0.68-0.69 s in steps of 16; 200 tokens on SmolLM2 Q8 24.9-38.7 s against 27.2-37.1 s,
# within the machine's noise); Metal prefills thousands of tokens a second, so a larger step
# there keeps its throughput.
PREFILL_STEP = {"cpu": 16, "gpu": 256}


def _constraint(body: Mapping[str, Any]) -> list[str] | None:
    """The allowed answers when the body asks for constrained decoding, else None."""
    method = body.get("constrained_decoding")
    if method is None:
        return None
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, dict) and fmt.get("type") == "json_schema" else None
    answers = answer_set(schema) if method == CONSTRAINED else None
    if answers is None:
        raise FatalError("bad_request", f"request body asks for constrained decoding ({method!r}) without a finite "
                         "json_schema answer set")
    return answers


def _prefill_step() -> int:
    import mlx.core as mx

    return PREFILL_STEP["gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"]


class MlxGuard(Guard):
    """`backend = "mlx"`: `model` is a local MLX model folder (e.g. TS-Guard converted to Q8)."""

    def __init__(self, config: GuardConfig, prompt: Prompt) -> None:
        super().__init__(config, prompt)
        if config.temperature != 0:
            raise InputError("the mlx backend decodes greedily: temperature must be 0", field="temperature")
        self.folder = model_folder(config.model)
        self.model_config = read_model_config(self.folder)
        self.context_tokens = context_tokens(self.model_config, config, self.folder)
        require_mlx()
        # The folder's name, not its absolute path: the stimulus must not depend on where the
        # folder sits on this machine (a resume or replicate elsewhere re-renders the same bytes).
        self.model_name = self.folder.name
        self.answers: list[str] | None = None
        if config.dialect != "none" and prompt.output_schema:
            self.answers = answer_set(prompt.output_schema)
            if self.answers is None:
                raise InputError(f"prompt '{prompt.id}' declares an output schema without a finite answer set; the "
                                 "mlx backend can only constrain decoding to a finite set: set structured_output = "
                                 "false", field="structured_output")
        self._tries: dict[str, AnswerTrie] = {}
        self._model: Any = None
        self._tokenizer: Any = None
        self._thread_lock = threading.Lock()   # one job on the model at a time, even an abandoned one
        self._limiter: anyio.CapacityLimiter | None = None
        self._stops: set[threading.Event] = set()
        self._closed = False

    # -- stimulus ---------------------------------------------------------------------------
    def render(self, instance: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": self.prompt.render_messages(instance),
            "max_tokens": self.config.max_tokens,
            "temperature": 0.0,
            "sampler": "greedy",
        }
        if self.answers is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": self.prompt.output_schema}
            body["constrained_decoding"] = CONSTRAINED
        return body

    def describe(self) -> dict[str, Any]:
        """Facts about the local model worth recording next to a run (no paths)."""
        return {"model_type": self.model_config.get("model_type"),
                "quantization": self.model_config.get("quantization"),
                "context_tokens": self.context_tokens,
                "constrained_answers": len(self.answers) if self.answers is not None else None}

    # -- sending ----------------------------------------------------------------------------
    async def send(self, body: Mapping[str, Any], call_id: str) -> Reply:
        if self._closed:
            raise FatalError("closed", "guard is closed")
        messages, max_tokens = _messages_and_max_tokens(body)
        return await self._in_thread(self._generate, messages, max_tokens, _constraint(body))

    async def load(self) -> None:
        """Optional warm-up: load the model now (off the event loop) instead of on first send."""
        await self._in_thread(lambda stop: self._load_locked())

    async def aclose(self) -> None:
        self._closed = True
        for stop in list(self._stops):
            stop.set()
        self._model = self._tokenizer = None  # a still-running thread keeps its own reference

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args, stop)` on a fresh thread that releases mlx's per-thread streams on exit.

        mlx keeps streams per thread and a thread that used them must call `mx.clear_streams()`
        before it exits, or the process may abort at exit ("terminate called without an active
        exception", mlx 0.32 on Linux). anyio's pooled worker threads would be reused after
        that call, so each job gets its own short-lived thread instead; an anyio worker only
        waits for it to finish (that keeps the event loop free and lets a cancelled caller
        abandon the wait while the job stops at its next token).
        """
        if self._limiter is None:  # created inside the running loop
            self._limiter = anyio.CapacityLimiter(1)
        stop = threading.Event()
        job = _Job(fn, (*args, stop))
        self._stops.add(stop)
        try:
            async with self._limiter:
                thread = threading.Thread(target=job.run, name="guardeval-mlx", daemon=False)
                thread.start()
                await anyio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
            return job.result()
        finally:
            stop.set()  # no-op when finished; stops an abandoned job after its current token
            self._stops.discard(stop)

    # -- worker thread ------------------------------------------------------------------------
    def _load_locked(self) -> None:
        with self._thread_lock:
            self._load()

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            from mlx_lm import load

            try:
                loaded = load(str(self.folder))
                model, tokenizer = loaded[0], loaded[1]
            except Exception as exc:  # a broken folder stops the run (resumable), clearly
                raise FatalError("model_load", f"cannot load model folder '{self.folder.name}': "
                                 f"{type(exc).__name__}: {exc}") from None
            if not tokenizer.has_chat_template:
                raise FatalError("model_load", f"model folder '{self.folder.name}' has no chat template")
            self._model, self._tokenizer = model, tokenizer
        return self._model, self._tokenizer

    def _trie(self, tokenizer: Any, answers: list[str]) -> AnswerTrie:
        key = canonical_sha256(answers)
        if key not in self._tries:
            try:
                self._tries[key] = build_trie(answers, lambda t: list(tokenizer.encode(t, add_special_tokens=False)),
                                              tokenizer.decode)
            except ValueError as exc:
                raise FatalError("constrained_decoding", f"model folder '{self.folder.name}': {exc}") from None
        return self._tries[key]

    def _generate(self, messages: list[dict[str, str]], max_tokens: int, answers: list[str] | None,
                  stop: threading.Event) -> Reply:
        with self._thread_lock:
            if stop.is_set():
                raise _Abandoned()
            model, tokenizer = self._load()
            from mlx_lm import stream_generate
            from mlx_lm.sample_utils import make_sampler

            # Token ids straight from the model's chat template (as mlx_lm.server does).
            try:
                ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
            except Exception as exc:  # e.g. a template that rejects this message sequence
                raise CallFailed("chat_template_error", f"{type(exc).__name__}: {exc}") from None
            if len(ids) + max_tokens > self.context_tokens:
                usage: Usage = {"prompt_tokens": len(ids), "completion_tokens": 0, "cost": 0.0,
                         "max_tokens": max_tokens, "context_tokens": self.context_tokens}
                raise CallFailed(
                    "context_overflow",
                    f"prompt of {len(ids)} tokens + max_tokens {max_tokens} exceeds the context of "
                    f"{self.context_tokens} tokens (never cut)",
                    reply=Reply(status="local", raw="", content=None, finish_reason=None, usage=usage))
            processors = None
            if answers is not None:
                if not tokenizer.eos_token_ids:
                    raise FatalError("constrained_decoding", f"model folder '{self.folder.name}' names no end-of-turn "
                                     "token, so a constrained answer could not end")
                processors = [TrieLogitsProcessor(self._trie(tokenizer, answers), len(ids), tokenizer.eos_token_ids)]
            pieces: list[str] = []
            last = None

            def prefilled(done: int, total: int) -> None:
                # Called by mlx-lm between prefill steps: a stop need not wait for the whole prompt.
                if stop.is_set():
                    raise _Abandoned()

            t0 = time.perf_counter()
            gen = stream_generate(model, tokenizer, ids, max_tokens=max_tokens, sampler=make_sampler(temp=0.0),
                                  logits_processors=processors, prefill_step_size=_prefill_step(),
                                  prompt_progress_callback=prefilled)
            try:
                for last in gen:
                    pieces.append(last.text)
                    if stop.is_set():
                        raise _Abandoned()
            except _Abandoned:
                raise
            except Exception as exc:  # deterministic per input: record it, go on with other calls
                raise CallFailed("generation_error", f"{type(exc).__name__}: {exc}") from None
            finally:
                gen.close()  # leave mlx-lm's wired-memory context even when stopping early
            generation_s = time.perf_counter() - t0
        text = "".join(pieces)
        usage = {
            "prompt_tokens": len(ids),
            "completion_tokens": last.generation_tokens if last else 0,
            "cost": 0.0,
            "generation_s": round(generation_s, 6),
            "prompt_tps": round(last.prompt_tps, 3) if last else None,
            "generation_tps": round(last.generation_tps, 3) if last else None,
        }
        finish = last.finish_reason if last else "stop"
        return Reply(status="local", raw=text, content=text, finish_reason=finish, usage=usage)
