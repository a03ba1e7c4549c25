"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) on 127.0.0.1, for
the real-engine tests and benchmarks/local_engine_run.py.

The server binds port 0 and its log names the port it got (uvicorn's "running on" line), so
there is no race for a free port. Its stderr goes to a file: llama.cpp writes its timings there
per request (`llama_perf_context_print`), which `engine_timings` reads back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The extra and its build flags (docs/local-guards.md): llama.cpp's default native build
# crashes on VMs that advertise CPU features they do not run.
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
INSTALL = f"CMAKE_ARGS=\"{CMAKE_ARGS}\" pip install -e '.[llamacpp]'"
ALIAS = "smollm2"
_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_PERF = re.compile(r"llama_perf_context_print:\s+(prompt eval|eval|total) time =\s*([\d.]+) ms"
                   r"(?: /\s*(\d+) (?:tokens|runs))?")


def llama_cpp_available() -> bool:
    """llama_cpp imports (its native library loads) and the server's dependencies are there."""
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError):
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("uvicorn", "fastapi", "sse_starlette"))


def skip_reason() -> str:
    return f"llama-cpp-python[server] is not installed; run the real-engine tests after: {INSTALL}"


@dataclass
class LlamaServer:
    base_url: str     # ends in /v1
    log: Path
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def llama_server(gguf: Path, log: Path, *, n_ctx: int = 2048, threads: int = 1, alias: str = ALIAS,
                 startup_s: float = 180.0) -> Iterator[LlamaServer]:
    """Start the server on 127.0.0.1 (port 0), wait until it listens, stop it after. One thread
    by default: on a machine with more runnable threads than cores, llama.cpp's worker threads
    spin at every barrier (docs/local-guards.md §4)."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", "0", "--n_ctx", str(n_ctx), "--n_threads", str(threads),
           "--n_threads_batch", str(threads), "--seed", "0", "--verbose", "true"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        port = _wait_for_port(proc, log, startup_s)
        yield LlamaServer(f"http://127.0.0.1:{port}/v1", log, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def _wait_for_port(proc: subprocess.Popen[bytes], log: Path, startup_s: float) -> int:
    deadline = time.monotonic() + startup_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        m = _RUNNING.search(log.read_text(errors="replace"))
        if m:
            return int(m.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"llama_cpp.server did not start within {startup_s:g} s; log: {log}")


def engine_timings(log: Path, start: int = 0) -> list[dict[str, float]]:
    """llama.cpp's own timings per completed request, in order, from the server log (from byte
    `start`): prompt eval ms and tokens, eval ms and tokens, total ms."""
    text = log.read_bytes()[start:].decode(errors="replace")
    out: list[dict[str, float]] = []
    cur: dict[str, float] = {}
    for m in _PERF.finditer(text):
        kind, ms, n = m.group(1), float(m.group(2)), m.group(3)
        if kind == "prompt eval":
            cur = {"prompt_ms": ms, "prompt_tokens": float(n or 0)}
        elif kind == "eval":
            cur.update(eval_ms=ms, eval_tokens=float(n or 0))
        else:
            cur["total_ms"] = ms
            out.append(cur)
            cur = {}
    return out
