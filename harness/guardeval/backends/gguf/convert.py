"""Convert a llama GGUF into an mlx-lm model folder, re-quantised with mlx-lm's own quantisation.

Everything in the file is checked (architecture, shapes, tensor types, tokenizer) before any
weight is touched, and the folder is written under a temporary name next to `out` and renamed
into place at the end: a refused or failed import leaves nothing behind. The folder holds
`config.json`, `model.safetensors` (+ index), `tokenizer.json`, `tokenizer_config.json` and
`gguf-import.json` (the source file's name, size and SHA-256, and the settings used).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardeval.backends.gguf import llama
from guardeval.backends.gguf.reader import GgufFile
from guardeval.backends.gguf.tokenizer import read_vocabulary, stop_ids, write_tokenizer
from guardeval.canon import file_sha256
from guardeval.errors import InputError

Q_BITS = (2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
DTYPES = ("float32", "float16", "bfloat16")
RECORD = "gguf-import.json"


@dataclass(frozen=True)
class ImportResult:
    out: Path
    source_sha256: str
    source_bytes: int
    tensor_types: dict[str, int]   # GGUF tensor type -> how many tensors of it
    parameters: int
    q_bits: int
    group_size: int


def _check_settings(q_bits: int, group_size: int, dtype: str) -> None:
    if q_bits not in Q_BITS:
        raise InputError(f"must be one of {', '.join(map(str, Q_BITS))}, got {q_bits}", field="q-bits")
    if group_size not in GROUP_SIZES:
        raise InputError(f"must be one of {', '.join(map(str, GROUP_SIZES))}, got {group_size}", field="group-size")
    if dtype not in DTYPES:
        raise InputError(f"must be one of {', '.join(DTYPES)}, got {dtype!r}", field="dtype")


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise InputError("already exists and is not an empty folder (nothing written)", path=out)


def build_model(gguf: GgufFile, dtype: str = "float32") -> tuple[Any, dict[str, Any]]:
    """mlx-lm's llama model holding the GGUF's weights (dequantised, not yet re-quantised), and its config."""
    import mlx.core as mx
    from mlx_lm.models.llama import Model, ModelArgs

    shape = llama.read_shape(gguf)
    vocab = read_vocabulary(gguf, shape.vocab)
    stops = stop_ids(vocab)
    config = llama.mlx_config(shape, vocab.bos_id, stops[0] if len(stops) == 1 else (stops or None))
    model = Model(ModelArgs.from_dict(config))
    target = getattr(mx, dtype)
    # One tensor at a time in the target dtype: peak memory is the model plus one float32 tensor.
    weights = [(name, mx.array(w).astype(target)) for name, w in llama.mlx_weights(gguf, shape)]
    model.load_weights(weights, strict=True)
    mx.eval(model.parameters())
    config["torch_dtype"] = dtype
    return model, config


def import_gguf(source: str | Path, out: str | Path, *, q_bits: int = 8, group_size: int = 64,
                dtype: str = "float32") -> ImportResult:
    """Convert `source` into the mlx-lm folder `out` (which must not exist, or be empty)."""
    from mlx_lm.utils import get_total_parameters, quantize_model, save_config, save_model

    source, out = Path(source), Path(out)
    _check_settings(q_bits, group_size, dtype)
    _check_out(out)
    with GgufFile(source) as gguf:
        shape = llama.read_shape(gguf)                 # refuses other architectures first (exit 2)
        vocab = read_vocabulary(gguf, shape.vocab)
        types: dict[str, int] = {}
        for name in llama.expected_shapes(shape):
            t = gguf.tensors[name].type_name
            types[t] = types.get(t, 0) + 1
        digest = file_sha256(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            model, config = build_model(gguf, dtype)
            with contextlib.redirect_stdout(io.StringIO()):  # mlx-lm prints bits per weight on stdout
                model, config = quantize_model(model, config, group_size, q_bits)
            parameters = int(get_total_parameters(model))
            save_model(tmp, model)
            save_config(config, config_path=tmp / "config.json")
            write_tokenizer(vocab, tmp, shape.context)
            record = {"source": {"file": source.name, "bytes": gguf.size, "sha256": digest,
                                 "gguf_version": gguf.version, "tensor_types": types},
                      "quantization": {"bits": q_bits, "group_size": group_size, "dtype": dtype,
                                       "by": "mlx_lm.utils.quantize_model"}}
            (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n", "utf-8")
            os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a model folder is ordinary readable data
            if out.exists():
                out.rmdir()  # empty, checked above
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return ImportResult(out=out, source_sha256=digest, source_bytes=gguf.size, tensor_types=types,
                        parameters=parameters, q_bits=q_bits, group_size=group_size)

