"""Prefill step size on mlx's CPU path: mlx-lm's default (2048 prompt tokens per step, no stop
possible inside one) against guardeval's (`guardeval.backends.mlx_backend.PREFILL_STEP`, a stop checked
between steps). One prompt of --tokens ids, one generated token, the two step sizes alternated
--rounds times (the machine's load moves absolute figures; compare within a round).

    python benchmarks/mlx_prefill_step.py                       # the tiny test model (tests/tiny_model.py)
    python benchmarks/mlx_prefill_step.py --folder models/smollm2-q8 --tokens 200
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` is the repository's folder: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from guardeval.backends.mlx_backend import PREFILL_STEP  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", help="an MLX model folder (default: build the tiny test model)")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from mlx_lm import load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    if args.folder:
        folder = Path(args.folder)
    else:
        from tests.tiny_model import tiny_model_dir

        folder = tiny_model_dir(Path(tempfile.mkdtemp(prefix="guardeval-prefill-")), "chatty")
    loaded = load(str(folder))   # (model, tokenizer), or with the config when asked for it
    model, tokenizer = loaded[0], loaded[1]
    vocab = len(tokenizer.get_vocab()) if hasattr(tokenizer, "get_vocab") else 1000
    ids = [5 + (i * 7919) % (vocab - 10) for i in range(args.tokens)]
    rows = []
    for r in range(args.rounds):
        for step in (2048, PREFILL_STEP["cpu"]):
            t0 = time.perf_counter()
            for _ in stream_generate(model, tokenizer, ids, max_tokens=1, sampler=make_sampler(temp=0.0),
                                     prefill_step_size=step):
                pass
            rows.append({"round": r + 1, "step": step, "seconds": round(time.perf_counter() - t0, 2)})
            print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
