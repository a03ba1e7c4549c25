"""inspect_ai side of `benchmarks/peers.py`: run one eval over a prepared dataset.

Runs inside the peer virtual environment (`benchmarks/.peer-venv/`, created by peers.py), never
in guardeval's: it imports inspect_ai only. One sample = one single-turn call: the sample input is
exactly the system + user messages guardeval rendered for the same scheduled call; the solver is
`generate()`; there is no scorer. inspect's own eval log is written to `--log-dir` as usual (its
default format), the display is off, and like the `inspect eval` CLI only the log header is
returned to this process. The last stdout line is a JSON summary.

    python benchmarks/peers_inspect_driver.py --dataset FILE.jsonl --base-url URL --model NAME \
        --concurrency C --log-dir DIR [--adaptive]

The model is `openai-api/sim/NAME`: inspect's generic OpenAI-compatible provider, which reads the
key and address from SIM_API_KEY / SIM_BASE_URL (set here; the simulator ignores the key).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    t_start = time.monotonic()
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True, help="JSONL, one {'messages': [...]} per line")
    ap.add_argument("--base-url", required=True, help="OpenAI-compatible base URL (ends in /v1)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--adaptive", action="store_true",
                    help="inspect's adaptive connections capped at --concurrency instead of a static max_connections")
    args = ap.parse_args()

    os.environ["SIM_BASE_URL"] = args.base_url
    os.environ.setdefault("SIM_API_KEY", "sim-no-key")

    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser
    from inspect_ai.solver import generate

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser}
    samples = []
    with open(args.dataset, encoding="utf-8") as f:
        for i, line in enumerate(f):
            rec = json.loads(line)
            samples.append(Sample(id=i + 1, input=[kinds[m["role"]](content=m["content"]) for m in rec["messages"]]))
    t_loaded = time.monotonic()

    # Static concurrency: an explicit max_connections switches inspect's adaptive controller off
    # (GenerateConfig docs). --adaptive keeps the controller, bounded above by the same number.
    conc: dict[str, object] = ({"adaptive_connections": args.concurrency} if args.adaptive
                               else {"max_connections": args.concurrency})
    logs = eval(
        Task(dataset=MemoryDataset(samples), solver=generate(), scorer=None, name="peers_bench"),
        model=f"openai-api/sim/{args.model}",
        display="none",
        log_dir=args.log_dir,
        log_header_only=True,        # what the `inspect eval` CLI asks for
        max_samples=args.concurrency,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        **conc,
    )
    t_done = time.monotonic()
    log = logs[0]
    results = log.results
    summary = {
        "status": log.status,
        "error": None if log.error is None else str(log.error.message)[:500],
        "total_samples": results.total_samples if results else None,
        "completed_samples": results.completed_samples if results else None,
        "samples_given": len(samples),
        "log_location": log.location,
        "load_s": t_loaded - t_start,
        "eval_s": t_done - t_loaded,
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0 if log.status == "success" else 1


if __name__ == "__main__":
    raise SystemExit(main())
