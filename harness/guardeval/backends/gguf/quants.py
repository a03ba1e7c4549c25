"""ggml tensor types: their block layout and dequantisation to float32 (numpy only).

A block type packs `block` consecutive values of a row into `nbytes` bytes:

- Q8_0: float16 scale d, then 32 int8 q; value = d·q.
- Q4_0: float16 d, then 16 bytes of 4-bit q; value = d·(q − 8).
- Q4_1: float16 d, float16 m, then 16 bytes of 4-bit q; value = d·q + m.

In both 4-bit types byte j holds value j in its low nibble and value j + 16 in its high one.
Plain types (F32, F16, BF16) are one value per element. Everything is little-endian.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GgmlType:
    name: str
    block: int    # values per block
    nbytes: int   # bytes per block


SUPPORTED: dict[int, GgmlType] = {
    0: GgmlType("F32", 1, 4),
    1: GgmlType("F16", 1, 2),
    2: GgmlType("Q4_0", 32, 18),
    3: GgmlType("Q4_1", 32, 20),
    8: GgmlType("Q8_0", 32, 34),
    30: GgmlType("BF16", 1, 2),
}

# Names of the types this module cannot dequantise, so a refusal can say what the file holds.
OTHER_NAMES: dict[int, str] = {
    6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
    15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
    22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}


def type_name(code: int) -> str:
    if code in SUPPORTED:
        return SUPPORTED[code].name
    return OTHER_NAMES.get(code, f"type {code}")


def byte_size(code: int, n_values: int) -> int:
    """Bytes that `n_values` values of a supported type occupy (n_values a multiple of its block)."""
    t = SUPPORTED[code]
    return n_values // t.block * t.nbytes


def _halves(blocks: np.ndarray, start: int) -> np.ndarray:
    return blocks[:, start:start + 2].copy().view("<f2").astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """(n, 16) bytes → (n, 32) values: low nibbles are values 0–15, high nibbles 16–31."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)


def dequantize(code: int, data: np.ndarray, n_values: int) -> np.ndarray:
    """`data` (uint8, exactly `byte_size(code, n_values)` bytes) → a flat float32 array."""
    t = SUPPORTED[code]
    if t.name == "F32":
        return data.view("<f4").astype(np.float32)
    if t.name == "F16":
        return data.view("<f2").astype(np.float32)
    if t.name == "BF16":  # the high half of a float32
        return (data.view("<u2").astype(np.uint32) << 16).view(np.float32)
    blocks = data.reshape(n_values // t.block, t.nbytes)
    if t.name == "Q8_0":
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
        return (_halves(blocks, 0) * q).reshape(-1)
    if t.name == "Q4_0":
        return (_halves(blocks, 0) * (_nibbles(blocks[:, 2:]) - 8.0)).reshape(-1)
    if t.name == "Q4_1":
        return (_halves(blocks, 0) * _nibbles(blocks[:, 4:]) + _halves(blocks, 2)).reshape(-1)
    raise AssertionError(f"no dequantiser for {t.name}")  # every SUPPORTED type is handled above
