"""The tokenizer rebuilt from a GGUF vocabulary: pre-tokenizer choice, BOS, ids (no mlx needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from tests import gguf_files as gf

from guardeval.backends.gguf.reader import GgufFile
from guardeval.backends.gguf.tokenizer import build_tokenizer, read_vocabulary, tokenizer_config

pytestmark = pytest.mark.fast


def vocabulary(tmp_path: Path, **overrides: object):  # type: ignore[no-untyped-def]
    path = tmp_path / "t.gguf"
    gf.tiny_llama(path, overrides=dict(overrides))
    with GgufFile(path) as f:
        return read_vocabulary(f, len(gf.tiny_vocab()))


def pieces(tok, text: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize(("pre", "expected"), [
    ("smollm", ["I", "Ġpaid", "Ġ", "1", "2", "3", "4", "5", "Ġeuros", ",", "Ġdon", "'t", "!"]),
    ("gpt-2", ["I", "Ġpaid", "Ġ12345", "Ġeuros", ",", "Ġdon", "'t", "!"]),
    ("llama-bpe", ["I", "Ġpaid", "Ġ", "123", "45", "Ġeuros", ",", "Ġdon", "'t", "!"]),
])
def test_pre_tokenizers_split_as_named(tmp_path: Path, pre: str, expected: list[str]) -> None:
    tok = build_tokenizer(vocabulary(tmp_path, **{"tokenizer.ggml.pre": pre}))
    assert pieces(tok, "I paid 12345 euros, don't!") == expected


def test_ids_are_the_gguf_positions_and_control_tokens_are_special(tmp_path: Path) -> None:
    v = vocabulary(tmp_path)
    tok = build_tokenizer(v)
    enc = tok.encode("<|im_start|>the theory<|im_end|>", add_special_tokens=False)
    names = gf.tiny_vocab()
    assert enc.ids == [1, names.index("t"), names.index("he"), names.index("Ġthe"), names.index("o"), names.index("r"),
                       names.index("y"), 2]
    assert tok.decode(enc.ids, skip_special_tokens=True) == "the theory"
    assert tok.decode(enc.ids, skip_special_tokens=False) == "<|im_start|>the theory<|im_end|>"
    cfg = tokenizer_config(v, 4096)
    assert (cfg["bos_token"], cfg["eos_token"], cfg["pad_token"], cfg["add_bos_token"]) == \
           ("<|im_start|>", "<|im_end|>", "<|endoftext|>", False)
    assert cfg["chat_template"] == gf.CHAT_TEMPLATE and cfg["model_max_length"] == 4096


def test_add_bos_token_is_honoured(tmp_path: Path) -> None:
    tok = build_tokenizer(vocabulary(tmp_path, **{"tokenizer.ggml.add_bos_token": True}))
    assert tok.encode("hi").ids[0] == 1 and tok.encode("hi", add_special_tokens=False).ids[0] != 1


def test_end_of_turn_token_is_the_eos_of_a_chat_model(tmp_path: Path) -> None:
    v = vocabulary(tmp_path, **{"tokenizer.ggml.eos_token_id": 0, "tokenizer.ggml.eot_token_id": 2})
    assert tokenizer_config(v, 8)["eos_token"] == "<|im_end|>"
