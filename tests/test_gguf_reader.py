"""The GGUF reader on files written by tests/gguf_files.py: values, layout, and hostile files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.gguf_files import (
    ARRAY,
    BF16,
    BOOL,
    F16,
    F32,
    FLOAT32,
    FLOAT64,
    I8,
    I16,
    I32,
    I64,
    Q4_0,
    Q4_1,
    Q8_0,
    STRING,
    U8,
    U16,
    U64,
    encode,
    gguf_bytes,
)

from guardeval.backends.gguf import quants
from guardeval.backends.gguf.reader import GgufFile
from guardeval.errors import InputError

pytestmark = pytest.mark.fast


def write(path: Path, metadata: dict, tensors: list, **kw: object) -> Path:
    path.write_bytes(gguf_bytes(metadata, tensors, **kw))
    return path


def one_tensor(code: int, shape: tuple[int, ...] = (3, 64), seed: int = 0) -> tuple[tuple, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    data, values = encode(code, x)
    return ("t", code, shape, data), values.reshape(shape)


@pytest.mark.parametrize("code", [F32, F16, BF16, Q4_0, Q4_1, Q8_0])
def test_each_type_dequantises_to_the_values_its_blocks_encode(tmp_path: Path, code: int) -> None:
    tensor, values = one_tensor(code)
    with GgufFile(write(tmp_path / "m.gguf", {"general.architecture": "llama"}, [tensor])) as f:
        got = f.tensor("t")
        assert got.dtype == np.float32 and got.shape == (3, 64)
        np.testing.assert_array_equal(got, values)  # bit for bit: the same formula, written twice
        assert f.tensors["t"].type_name == quants.type_name(code) and f.tensors["t"].dims == (64, 3)


def test_block_layout_by_hand(tmp_path: Path) -> None:
    """One Q4_1 and one Q4_0 block built byte by byte: low nibble = value j, high = value j + 16."""
    qs = bytes((j & 0xF) | ((15 - (j & 0xF)) << 4) for j in range(16))
    q41 = np.float16(0.5).tobytes() + np.float16(-2.0).tobytes() + qs
    q40 = np.float16(0.25).tobytes() + qs
    q80 = np.float16(2.0).tobytes() + bytes(np.arange(-16, 16, dtype=np.int8).tobytes())
    path = write(tmp_path / "m.gguf", {}, [("a", Q4_1, (1, 32), q41), ("b", Q4_0, (1, 32), q40), ("c", Q8_0, (1, 32), q80)])
    low = np.arange(16) & 0xF
    with GgufFile(path) as f:
        np.testing.assert_array_equal(f.tensor("a")[0], np.concatenate([0.5 * low - 2.0, 0.5 * (15 - low) - 2.0]))
        np.testing.assert_array_equal(f.tensor("b")[0], np.concatenate([0.25 * (low - 8), 0.25 * (7 - low)]))
        np.testing.assert_array_equal(f.tensor("c")[0], 2.0 * np.arange(-16, 16))


def test_metadata_value_types(tmp_path: Path) -> None:
    md = {"u8": (U8, 200), "i8": (I8, -5), "u16": (U16, 60000), "i16": (I16, -300), "i32": (I32, -7),
          "u64": (U64, 1 << 40), "i64": (I64, -(1 << 40)), "f32": (FLOAT32, 0.5), "f64": (FLOAT64, 1e-300),
          "b": (BOOL, True), "s": (STRING, "héllo\n"), "strings": (ARRAY, (STRING, ["a", "", "ü"])),
          "ints": (ARRAY, (I32, [1, -2, 3])), "bools": (ARRAY, (BOOL, [True, False])),
          "nested": (ARRAY, (ARRAY, [(I32, [1]), (I32, [2, 3])]))}
    with GgufFile(write(tmp_path / "m.gguf", md, [])) as f:
        m = f.metadata
        assert (m["u8"], m["i8"], m["u16"], m["i16"], m["i32"], m["u64"], m["i64"]) == \
               (200, -5, 60000, -300, -7, 1 << 40, -(1 << 40))
        assert (m["f32"], m["f64"], m["b"], m["s"], m["strings"]) == (0.5, 1e-300, True, "héllo\n", ["a", "", "ü"])
        assert m["ints"].tolist() == [1, -2, 3] and m["bools"].tolist() == [True, False]
        assert [a.tolist() for a in m["nested"]] == [[1], [2, 3]]
        assert f.tensors == {} and f.version == 3


def test_custom_alignment_and_version_2(tmp_path: Path) -> None:
    tensor, values = one_tensor(Q8_0)
    path = write(tmp_path / "m.gguf", {"general.alignment": 64}, [tensor, ("u", F32, (2,), b"\0" * 8)],
                 alignment=64, version=2)
    with GgufFile(path) as f:
        assert f.alignment == 64 and f.data_offset % 64 == 0 and f.version == 2
        np.testing.assert_array_equal(f.tensor("t"), values)
        assert f.tensors["u"].offset % 64 == 0


def fails(path: Path, match: str) -> InputError:
    with pytest.raises(InputError, match=match) as exc:
        GgufFile(path)
    assert str(path) in str(exc.value)  # the message names the file
    return exc.value


def test_refuses_what_is_not_a_gguf_file(tmp_path: Path) -> None:
    fails(write(tmp_path / "v1.gguf", {}, [], version=1), "version 1 is not supported")
    (tmp_path / "text.gguf").write_text("hello, this is plainly not a model file")
    fails(tmp_path / "text.gguf", "no GGUF magic")
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    fails(tmp_path / "short.gguf", "too short")
    fails(tmp_path / "missing.gguf", "file not found")
    fails(tmp_path, "folder")
    big_endian = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    (tmp_path / "be.gguf").write_bytes(big_endian)
    fails(tmp_path / "be.gguf", "big-endian")


def test_every_truncation_is_a_clear_error(tmp_path: Path) -> None:
    tensor, _ = one_tensor(Q4_1, (2, 32))
    full = gguf_bytes({"general.architecture": "llama", "names": ["x", "yz"]}, [tensor])
    # Cut anywhere before the last tensor byte (not in the padding after it): always an InputError.
    end = len(full) - (-len(tensor[3]) % 32)
    for n in range(end):
        (tmp_path / "cut.gguf").write_bytes(full[:n])
        with pytest.raises(InputError):
            GgufFile(tmp_path / "cut.gguf")


def test_lengths_and_counts_are_bounded_by_the_file(tmp_path: Path) -> None:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    (tmp_path / "a.gguf").write_bytes(head + struct.pack("<Q", 1 << 62) + b"key")
    fails(tmp_path / "a.gguf", "runs past the end")
    key = struct.pack("<Q", 1) + b"k"
    (tmp_path / "b.gguf").write_bytes(head + key + struct.pack("<IIQ", ARRAY, STRING, 1 << 60) + b"\0" * 16)
    fails(tmp_path / "b.gguf", "cannot fit")
    (tmp_path / "c.gguf").write_bytes(head + key + struct.pack("<IIQ", ARRAY, I32, 1 << 61) + b"\0" * 16)
    fails(tmp_path / "c.gguf", "runs past the end")
    (tmp_path / "d.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0) + b"\0" * 16)
    fails(tmp_path / "d.gguf", "implausible counts")
    (tmp_path / "e.gguf").write_bytes(head + key + struct.pack("<I", 99) + b"\0" * 16)
    fails(tmp_path / "e.gguf", "unknown metadata value type 99")


def test_tensor_table_is_checked(tmp_path: Path) -> None:
    tensor, _ = one_tensor(Q8_0, (1, 32))
    name, code, shape, data = tensor
    full = gguf_bytes({}, [tensor])
    fails(write(tmp_path / "rows.gguf", {}, [(name, Q8_0, (1, 48), data + b"\0" * 17)]), "whole Q8_0 blocks")
    fails(write(tmp_path / "dup.gguf", {}, [tensor, tensor]), "listed twice")
    fails(write(tmp_path / "align.gguf", {"general.alignment": 24}, [tensor]), "power of two")
    (tmp_path / "past.gguf").write_bytes(full[:len(full) - (-len(data) % 32) - 1])
    fails(tmp_path / "past.gguf", "runs past the end")
    # An offset that is not aligned: patch the table entry's (type, offset) fields.
    entry = full.index(struct.pack("<IQ", Q8_0, 0))
    patched = full[:entry] + struct.pack("<IQ", Q8_0, 8) + full[entry + 12:]
    (tmp_path / "offset.gguf").write_bytes(patched)
    fails(tmp_path / "offset.gguf", "not aligned")


def test_unsupported_type_is_named_when_read(tmp_path: Path) -> None:
    k_quant = ("blk.0.ffn_down.weight", 12, (1, 256), b"\0" * 144)
    with GgufFile(write(tmp_path / "k.gguf", {}, [k_quant])) as f:
        assert f.tensors["blk.0.ffn_down.weight"].type_name == "Q4_K"
        with pytest.raises(InputError, match=r"'blk\.0\.ffn_down\.weight' is Q4_K, which cannot be converted"):
            f.tensor("blk.0.ffn_down.weight")


def test_names_from_the_file_are_escaped_in_messages(tmp_path: Path) -> None:
    tensor, _ = one_tensor(Q8_0, (1, 32))
    evil = "\x1b[2J\x07name"
    err = fails(write(tmp_path / "evil.gguf", {}, [(evil, *tensor[1:]), (evil, *tensor[1:])]), "listed twice")
    assert "\x1b" not in str(err) and "\\x1b[2J\\x07name" in str(err)


def test_a_long_key_is_cut_in_messages(tmp_path: Path) -> None:
    path = tmp_path / "long.gguf"
    key = b"k" * 100_000
    path.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(key)) + key + struct.pack("<I", 99))  # type 99: unknown
    err = fails(path, "unknown metadata value type 99")
    assert len(str(err)) < 400 and "k" * 80 + "…" in str(err)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_files_fail_only_with_input_errors(tmp_path: Path, data: st.DataObject) -> None:
    tensor, _ = one_tensor(Q4_0, (2, 32))
    full = bytearray(gguf_bytes({"general.architecture": "llama", "vals": [1, 2, 3], "s": "abc"}, [tensor]))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(full) - 1))
        full[pos] = data.draw(st.integers(0, 255))
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(full))
    try:
        with GgufFile(path) as f:
            for name in f.tensors:
                try:  # the values may be anything (a flipped scale); the shape is what the table says
                    assert f.tensor(name).shape == f.tensors[name].shape
                except InputError:
                    pass
    except InputError:
        pass
