"""A llama-architecture GGUF as mlx-lm's `llama` model: its config and its parameters.

Facts about the GGUF side (llama.cpp's naming): `token_embd`, `output_norm`, `output` (absent
when the output head is tied to the embeddings), and per block `blk.N.attn_norm`, `attn_q`,
`attn_k`, `attn_v`, `attn_output`, `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_down`.

llama.cpp applies rotary embeddings to adjacent pairs of a head's dimensions (0,1), (2,3), …,
and its converter reorders the rows of the query and key projections so that this gives the
same result as the Hugging Face layout, which rotates the first half of a head against the
second (mlx-lm's `traditional=False`). Inside each head, GGUF row 2j+t is Hugging Face row
t·(head_dim/2)+j; `unpermute_rows` puts the rows back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardeval.backends.gguf import quants
from guardeval.backends.gguf.reader import GgufFile, shown, shown_value
from guardeval.errors import InputError

ARCHITECTURE = "llama"

_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
_BLOCK = {"attn_norm.weight": "input_layernorm.weight",
          "attn_q.weight": "self_attn.q_proj.weight",
          "attn_k.weight": "self_attn.k_proj.weight",
          "attn_v.weight": "self_attn.v_proj.weight",
          "attn_output.weight": "self_attn.o_proj.weight",
          "ffn_norm.weight": "post_attention_layernorm.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight",
          "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight"}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class LlamaShape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int
    rms_eps: float
    rope_theta: float
    tied: bool


def _int(gguf: GgufFile, key: str, default: int | None = None) -> int:
    value = gguf.metadata.get(key, default)
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        what = "missing" if value is None else f"must be a positive integer, got {shown_value(value)}"
        raise InputError(what, path=gguf.path, field=key)
    return value


def _float(gguf: GgufFile, key: str, default: float | None = None) -> float:
    value = gguf.metadata.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value) or value <= 0:
        what = "missing" if value is None else f"must be a positive number, got {shown_value(value)}"
        raise InputError(what, path=gguf.path, field=key)
    # GGUF stores float32: keep the shortest decimal that reads back as that float32 (1e-05, not 9.99…e-06).
    return float(str(np.float32(value)))


def architecture(gguf: GgufFile) -> str:
    arch = gguf.metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError("missing", path=gguf.path, field="general.architecture")
    return arch


def read_shape(gguf: GgufFile) -> LlamaShape:
    """The model's dimensions from the metadata, checked against the tensors; exit 2 otherwise."""
    arch = architecture(gguf)
    if arch != ARCHITECTURE:
        raise InputError(f"architecture {shown(arch)} is not supported (only '{ARCHITECTURE}' GGUF files "
                         "can be imported)", path=gguf.path, field="general.architecture")
    p = f"{ARCHITECTURE}."
    if gguf.metadata.get(p + "expert_count", 0):
        raise InputError("mixture-of-experts llama files are not supported", path=gguf.path, field=p + "expert_count")
    scaling = gguf.metadata.get(p + "rope.scaling.type", "none")
    if scaling not in ("none", ""):
        raise InputError(f"rotary scaling {shown(str(scaling))} is not supported", path=gguf.path,
                         field=p + "rope.scaling.type")
    heads = _int(gguf, p + "attention.head_count")
    hidden = _int(gguf, p + "embedding_length")
    if hidden % heads:
        raise InputError(f"embedding_length {hidden} is not a multiple of head_count {heads}", path=gguf.path,
                         field=p + "embedding_length")
    head_dim = _int(gguf, p + "attention.key_length", hidden // heads)
    if _int(gguf, p + "attention.value_length", head_dim) != head_dim:
        raise InputError("key and value head sizes differ", path=gguf.path, field=p + "attention.value_length")
    if head_dim % 2 or _int(gguf, p + "rope.dimension_count", head_dim) != head_dim:
        raise InputError("rotary embeddings must cover whole heads of even size", path=gguf.path,
                         field=p + "rope.dimension_count")
    kv_heads = _int(gguf, p + "attention.head_count_kv", heads)
    if heads % kv_heads:
        raise InputError(f"head_count {heads} is not a multiple of head_count_kv {kv_heads}", path=gguf.path,
                         field=p + "attention.head_count_kv")
    embd = gguf.tensors.get("token_embd.weight")
    if embd is None:
        raise InputError("tensor 'token_embd.weight' is missing", path=gguf.path)
    if len(embd.shape) != 2 or embd.shape[1] != hidden:
        raise InputError(f"tensor 'token_embd.weight' has shape {embd.shape}, expected (vocab, {hidden})",
                         path=gguf.path)
    vocab = embd.shape[0]
    layers = _int(gguf, p + "block_count")
    if layers > len(gguf.tensors):  # before anything is built per block (a near miss names the missing tensor)
        raise InputError(f"{layers} blocks, but the file holds only {len(gguf.tensors)} tensors "
                         f"({len(_BLOCK)} per block)", path=gguf.path, field=p + "block_count")
    shape = LlamaShape(
        layers=layers, hidden=hidden, ffn=_int(gguf, p + "feed_forward_length"),
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab,
        context=_int(gguf, p + "context_length"),
        rms_eps=_float(gguf, p + "attention.layer_norm_rms_epsilon"),
        rope_theta=_float(gguf, p + "rope.freq_base", 10000.0),
        tied="output.weight" not in gguf.tensors)
    _check_tensors(gguf, shape)
    return shape


def expected_shapes(s: LlamaShape) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name → numpy shape, for every tensor the model needs."""
    out: dict[str, tuple[int, ...]] = {"token_embd.weight": (s.vocab, s.hidden), "output_norm.weight": (s.hidden,)}
    if not s.tied:
        out["output.weight"] = (s.vocab, s.hidden)
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    for i in range(s.layers):
        b = f"blk.{i}."
        out |= {b + "attn_norm.weight": (s.hidden,), b + "ffn_norm.weight": (s.hidden,),
                b + "attn_q.weight": (q, s.hidden), b + "attn_k.weight": (kv, s.hidden),
                b + "attn_v.weight": (kv, s.hidden), b + "attn_output.weight": (s.hidden, q),
                b + "ffn_gate.weight": (s.ffn, s.hidden), b + "ffn_up.weight": (s.ffn, s.hidden),
                b + "ffn_down.weight": (s.hidden, s.ffn)}
    return out


def _check_tensors(gguf: GgufFile, s: LlamaShape) -> None:
    want = expected_shapes(s)
    for name, shape in want.items():
        if name not in gguf.tensors:
            raise InputError(f"tensor {shown(name)} is missing", path=gguf.path)
        if gguf.tensors[name].shape != shape:
            raise InputError(f"tensor {shown(name)} has shape {gguf.tensors[name].shape}, expected {shape}",
                             path=gguf.path)
    extra = sorted(set(gguf.tensors) - set(want))
    if extra:  # e.g. rope_freqs (Llama 3.1 rotary scaling) or biases: refuse rather than drop them
        raise InputError(f"tensor {shown(extra[0])} is not part of a plain llama model"
                         f"{f' (and {len(extra) - 1} more)' if len(extra) > 1 else ''}", path=gguf.path)
    refused = [n for n in want if gguf.tensors[n].type_code not in quants.SUPPORTED]
    if refused:
        gguf.tensor(refused[0])  # raises, naming the tensor and its type


def mlx_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    m = _BLOCK_RE.fullmatch(gguf_name)
    if not m or m.group(2) not in _BLOCK:
        raise KeyError(gguf_name)
    return f"model.layers.{int(m.group(1))}.{_BLOCK[m.group(2)]}"


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's query/key row order (adjacent rotary pairs → half-split)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def mlx_weights(gguf: GgufFile, s: LlamaShape) -> Iterator[tuple[str, np.ndarray]]:
    """(mlx-lm parameter name, float32 array) for every tensor, dequantised and reordered."""
    for name in expected_shapes(s):
        w = gguf.tensor(name)
        if name.endswith("attn_q.weight"):
            w = unpermute_rows(w, s.heads)
        elif name.endswith("attn_k.weight"):
            w = unpermute_rows(w, s.kv_heads)
        yield mlx_name(name), w


def mlx_config(s: LlamaShape, bos_id: int | None, eos_id: int | list[int] | None) -> dict[str, Any]:
    """config.json for mlx-lm's llama model (also readable by Hugging Face's LlamaForCausalLM)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": s.hidden, "num_hidden_layers": s.layers, "intermediate_size": s.ffn,
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
        "vocab_size": s.vocab, "max_position_embeddings": s.context, "rms_norm_eps": s.rms_eps,
        "rope_theta": s.rope_theta, "rope_traditional": False, "tie_word_embeddings": s.tied,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": bos_id, "eos_token_id": eos_id,
    }
