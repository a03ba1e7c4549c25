"""A small numpy forward pass of a llama model, written for the tests, on GGUF tensors as stored.

Independent of mlx-lm: float64 throughout, the weights exactly as the GGUF stores them (query
and key rows in llama.cpp's order), and rotary embeddings the way llama.cpp applies them to
that order, i.e. to adjacent pairs of a head's dimensions. The converted MLX model, whose rows
were reordered for mlx-lm's half-split rotation, must produce the same logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate_adjacent_pairs(x: np.ndarray, base: float) -> np.ndarray:
    """x: (tokens, heads, head_dim). Pair i = dims (2i, 2i+1) turns by position · base^(-2i/head_dim)."""
    t, _, d = x.shape
    freq = base ** (-np.arange(0, d, 2) / d)                 # (d/2,)
    angle = np.arange(t)[:, None] * freq[None, :]             # (t, d/2)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def forward(tensor: Callable[[str], np.ndarray], ids: Sequence[int], *, layers: int, heads: int, kv_heads: int,
            eps: float, rope_base: float) -> np.ndarray:
    """Logits (tokens, vocab) of one causal pass over `ids`; `tensor(name)` gives a GGUF tensor."""
    def w(name: str) -> np.ndarray:
        return tensor(name).astype(np.float64)

    embd = w("token_embd.weight")
    x = embd[np.asarray(ids)]
    t = len(ids)
    causal = np.triu(np.full((t, t), -np.inf), k=1)
    for i in range(layers):
        b = f"blk.{i}."
        h = rms_norm(x, w(b + "attn_norm.weight"), eps)
        q = (h @ w(b + "attn_q.weight").T).reshape(t, heads, -1)
        k = (h @ w(b + "attn_k.weight").T).reshape(t, kv_heads, -1)
        v = (h @ w(b + "attn_v.weight").T).reshape(t, kv_heads, -1)
        d = q.shape[-1]
        q, k = rotate_adjacent_pairs(q, rope_base), rotate_adjacent_pairs(k, rope_base)
        group = heads // kv_heads                               # query heads per key/value head
        out = np.empty_like(q)
        for hd in range(heads):
            kv = hd // group
            scores = q[:, hd, :] @ k[:, kv, :].T / np.sqrt(d) + causal
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            out[:, hd, :] = p @ v[:, kv, :]
        x = x + out.reshape(t, -1) @ w(b + "attn_output.weight").T
        h = rms_norm(x, w(b + "ffn_norm.weight"), eps)
        x = x + (silu(h @ w(b + "ffn_gate.weight").T) * (h @ w(b + "ffn_up.weight").T)) @ w(b + "ffn_down.weight").T
    x = rms_norm(x, w("output_norm.weight"), eps)
    try:
        head = w("output.weight")
    except KeyError:          # tied: the embedding doubles as the output head
        head = embd
    return x @ head.T
