"""`guardeval models import-gguf FILE --out DIR`: a local GGUF model as an mlx-lm folder for `backend = "mlx"`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from guardeval.cli.args import positive_int
from guardeval.terminal import safe, safe_json


def _cmd_import_gguf(args: argparse.Namespace) -> int:
    from guardeval.backends.gguf.convert import import_gguf
    from guardeval.backends.mlx_backend import require_mlx

    require_mlx()
    t0 = time.perf_counter()
    result = import_gguf(Path(args.file), Path(args.out), q_bits=args.q_bits, group_size=args.group_size,
                         dtype=args.dtype)
    seconds = round(time.perf_counter() - t0, 2)
    summary = {"out": str(result.out), "source_sha256": result.source_sha256, "source_bytes": result.source_bytes,
               "tensor_types": result.tensor_types, "parameters": result.parameters, "q_bits": result.q_bits,
               "group_size": result.group_size, "seconds": seconds}
    if args.json:
        print(safe_json(json.dumps(summary)))
    else:
        types = ", ".join(f"{n} {t}" for t, n in sorted(result.tensor_types.items()))
        print(safe(f"imported {Path(args.file).name!r} (sha256 {result.source_sha256}; tensors: {types}) as "
                   f"{result.q_bits}-bit MLX, group {result.group_size}, {result.parameters:,} parameters, in {seconds} s"),
              file=sys.stderr)
        print(safe(result.out))
    return 0


def register(subparsers: Any) -> None:
    models = subparsers.add_parser("models", help="local model files")
    sub = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    sub.required = True
    imp = sub.add_parser(
        "import-gguf", help="convert a llama GGUF file into an mlx-lm model folder (Q8 by default)",
        description="Convert a llama-architecture GGUF file (Q4_0, Q4_1, Q8_0, F16, BF16 or F32 tensors; byte-level "
                    "BPE tokenizer) into an mlx-lm model folder for `backend = \"mlx\"`: weights dequantised, "
                    "mapped to mlx-lm's names and re-quantised by mlx-lm; tokenizer and chat template from the "
                    "file's metadata; the file's SHA-256 recorded in gguf-import.json. Needs the mlx extra.")
    imp.add_argument("file", metavar="FILE", help="the .gguf file")
    imp.add_argument("--out", required=True, metavar="DIR",
                     help="the model folder to create (must not exist, or be empty)")
    imp.add_argument("--q-bits", type=positive_int, default=8, metavar="N", help="bits per weight: 2, 3, 4, 5, 6 or 8")
    imp.add_argument("--group-size", type=positive_int, default=64, metavar="N",
                     help="quantisation group: 32, 64 or 128")
    imp.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                     help="dtype of scales and norms (mlx's CPU back-end is much slower in float16)")
    imp.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    imp.set_defaults(func=_cmd_import_gguf)
