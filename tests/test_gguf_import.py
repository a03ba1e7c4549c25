"""`guardeval models import-gguf` on a tiny random llama GGUF written by the tests.

Checked independently: logits of the converted model against a numpy forward pass on the GGUF
tensors as stored (tests/llama_reference.py), token ids against a plain BPE encoder
(tests/bpe_reference.py); refusals exit 2 and leave nothing behind. The tiny model's answers
are noise, which shows what constrained decoding does: every constrained answer parses.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx_lm")
try:
    import mlx.core as mx
except ImportError:  # pragma: no cover
    pytest.skip("mlx has no working native library here", allow_module_level=True)

from tests import gguf_files as gf
from tests.bpe_reference import ReferenceBpe
from tests.llama_reference import forward

from guardeval.backends.config import GuardConfig
from guardeval.backends.gguf.convert import build_model
from guardeval.backends.gguf.reader import GgufFile
from guardeval.backends.mlx_backend import MlxGuard
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import load_prompt
from guardeval.errors import InputError

from conftest import REPO, run_cli

pytestmark = pytest.mark.fast

IDS = [1, 77, 260, 5, 102, 260, 0, 33, 2, 200, 150, 41, 260, 265, 9, 88]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    gf.tiny_llama(path)
    return path


@pytest.fixture(scope="module")
def imported(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-q8"
    r = run_cli("models", "import-gguf", str(tiny_gguf), "--out", str(out), "--json")
    assert r.code == 0, r.err
    summary = json.loads(r.out)  # --json: stdout is only the JSON
    assert summary["out"] == str(out) and summary["q_bits"] == 8 and summary["group_size"] == 64
    return out


def reference_logits(path: Path, ids: list[int]) -> np.ndarray:
    with GgufFile(path) as f:
        return forward(f.tensor, ids, layers=gf.LAYERS, heads=gf.HEADS, kv_heads=gf.KV_HEADS, eps=1e-5,
                       rope_base=10000.0)


@pytest.mark.slow
def test_folder_contents_and_source_record(tiny_gguf: Path, imported: Path) -> None:
    names = {p.name for p in imported.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "gguf-import.json"} <= names
    record = json.loads((imported / "gguf-import.json").read_text())
    assert record["source"]["sha256"] == hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert record["source"]["file"] == "tiny-llama.gguf" and record["source"]["bytes"] == tiny_gguf.stat().st_size
    assert record["source"]["tensor_types"] == {"Q8_0": 4, "F32": 5 + 1, "Q4_0": 3, "Q4_1": 3, "F16": 3, "BF16": 2}
    cfg = json.loads((imported / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == ("llama", 4, 2, 16)
    assert cfg["quantization"] == {"group_size": 64, "bits": 8, "mode": "affine"} and cfg["tie_word_embeddings"] is False
    assert (cfg["rms_norm_eps"], cfg["max_position_embeddings"], cfg["eos_token_id"]) == (1e-5, gf.CONTEXT, 2)


def test_logits_match_the_numpy_reference(tiny_gguf: Path, imported: Path) -> None:
    from mlx_lm import load

    ref = reference_logits(tiny_gguf, IDS)
    with GgufFile(tiny_gguf) as f:
        model, _ = build_model(f)
    before = np.array(model(mx.array([IDS]))[0], dtype=np.float64)
    assert np.abs(before - ref).max() < 1e-4 * np.abs(ref).max(), np.abs(before - ref).max()  # float32 vs float64
    q8, _ = load(str(imported))
    after = np.array(q8(mx.array([IDS]))[0], dtype=np.float64)
    # Random weights amplify rounding (~5% here); the weights themselves are checked exactly below.
    assert np.linalg.norm(after - ref) / np.linalg.norm(ref) < 0.1
    assert (after.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_q8_weights_are_within_one_step_of_the_source(tiny_gguf: Path, imported: Path) -> None:
    from guardeval.backends.gguf import llama

    stored = mx.load(str(imported / "model.safetensors"))
    with GgufFile(tiny_gguf) as f:
        shape = llama.read_shape(f)
        source = dict(llama.mlx_weights(f, shape))
    quantized = [n for n in source if n.replace(".weight", ".scales") in stored]
    assert len(quantized) == 2 * 7 + 2  # every matrix, the embedding and the output head
    for name in quantized:
        w, scales, biases = (stored[name.replace(".weight", s)] for s in (".weight", ".scales", ".biases"))
        back = np.array(mx.dequantize(w, scales, biases, group_size=64, bits=8))
        step = np.abs(np.repeat(np.array(scales), 64, axis=-1))  # mlx may store a negative scale
        ratio = np.abs(back - source[name]) / step
        # Rounding to the grid: within one step (mlx pins a group's edge value), half a step typically.
        assert ratio.max() <= 1 + 1e-5 and np.median(ratio) < 0.3, (name, ratio.max(), np.median(ratio))
    for name in set(source) - set(quantized):  # the norms, kept as they are
        np.testing.assert_array_equal(np.array(stored[name]), source[name])


def test_the_check_catches_a_missing_row_reorder(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without undoing llama.cpp's query/key row order, the logits are far off: the test can fail."""
    from guardeval.backends.gguf import llama

    monkeypatch.setattr(llama, "unpermute_rows", lambda w, n: w)
    with GgufFile(tiny_gguf) as f:
        model, _ = build_model(f)
    wrong = np.array(model(mx.array([IDS]))[0], dtype=np.float64)
    ref = reference_logits(tiny_gguf, IDS)
    assert np.abs(wrong - ref).max() > 0.05 * np.abs(ref).max()


def test_tied_output_head(tmp_path: Path) -> None:
    path = tmp_path / "tied.gguf"
    gf.tiny_llama(path, seed=3, tied=True)
    with GgufFile(path) as f:
        model, cfg = build_model(f)
    assert cfg["tie_word_embeddings"] is True
    got = np.array(model(mx.array([IDS[:6]]))[0], dtype=np.float64)
    ref = reference_logits(path, IDS[:6])
    assert np.abs(got - ref).max() < 1e-4 * np.abs(ref).max()


def test_tokenizer_matches_the_vocabulary(imported: Path) -> None:
    from transformers import AutoTokenizer

    pytest.importorskip("regex")
    tok = AutoTokenizer.from_pretrained(str(imported))
    ref = ReferenceBpe(gf.tiny_vocab(), gf.MERGES, gf.SPECIALS)
    for text in ["<|im_start|>user\nthe theory in 2024<|im_end|>\n", "  tabs\tand ünï 😀", "<|endoftext|>on er"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == ref.encode(text) and tok.decode(ids) == text
    assert tok.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tok.encode(" the", add_special_tokens=False) == [gf.tiny_vocab().index("Ġthe")]
    assert (tok.eos_token, tok.bos_token, tok.pad_token) == ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


@pytest.mark.slow
def test_refusals_through_the_cli_exit_2_and_write_nothing(tmp_path: Path, tiny_gguf: Path) -> None:
    out = tmp_path / "models" / "out"
    qwen = tmp_path / "qwen.gguf"
    gf.tiny_llama(qwen, arch="qwen2")
    r = run_cli("models", "import-gguf", str(qwen), "--out", str(out))
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "architecture 'qwen2' is not supported" in r.err and str(qwen) in r.err and "general.architecture" in r.err
    assert not out.parent.exists()  # nothing written, not even the parent folder
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    r = run_cli("models", "import-gguf", str(tiny_gguf), "--out", str(out))
    assert r.code == 2 and "already exists" in r.err and (out / "keep.txt").read_text() == "mine"
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # no temporary folder left


@pytest.mark.parametrize(("overrides", "match"), [
    ({"tokenizer.ggml.model": "llama"}, "tokenizer model 'llama' is not supported"),
    ({"tokenizer.ggml.pre": "deepseek-coder"}, "pre-tokenizer 'deepseek-coder' is not supported"),
    ({"llama.attention.head_count_kv": 3}, "not a multiple of head_count_kv 3"),
    ({"llama.block_count": 3}, "tensor 'blk.2.attn_norm.weight' is missing"),
    ({"llama.feed_forward_length": 96}, "has shape (128, 64), expected (96, 64)"),
    ({"llama.rope.scaling.type": "yarn"}, "rotary scaling 'yarn' is not supported"),
    ({"tokenizer.ggml.eos_token_id": 9999}, "must be a token id below 267"),
    ({"llama.context_length": None}, "field 'llama.context_length': missing"),
])
def test_refusals_name_the_field(tmp_path: Path, overrides: dict, match: str) -> None:
    from guardeval.backends.gguf.convert import import_gguf

    path = tmp_path / "bad.gguf"
    gf.tiny_llama(path, overrides=overrides)
    with pytest.raises(InputError, match=re.escape(match)) as exc:
        import_gguf(path, tmp_path / "out", q_bits=8)
    assert str(path) in str(exc.value)
    assert [p.name for p in tmp_path.iterdir()] == ["bad.gguf"]  # nothing written
    with pytest.raises(InputError, match="field 'q-bits'"):
        import_gguf(path, tmp_path / "out", q_bits=7)


@pytest.mark.parametrize(("overrides", "match"), [
    # A hostile count: the converter used to build a table entry per claimed block (a hang, then
    # memory without bound) before any tensor was compared.
    ({"llama.block_count": 10**12}, "field 'llama.block_count': 1000000000000 blocks, but the file holds only"),
    # tokenizers refused these only after the weights were converted: a traceback, exit 1.
    ({"tokenizer.ggml.merges": ["Ġ t", "zz qq"]}, "merge 1 ('zz', 'qq') needs the token 'zz'"),
    ({"tokenizer.ggml.merges": ["t h"]}, "merge 0 ('t', 'h') needs the token 'th'"),
    # A value from the file is cut in the message (it used to be repeated whole).
    ({"llama.context_length": "x" * 100_000}, "field 'llama.context_length': must be a positive integer, got 'xxx"),
])
def test_hostile_header_exits_2_through_the_cli(tmp_path: Path, overrides: dict, match: str) -> None:
    path, out = tmp_path / "bad.gguf", tmp_path / "out"
    gf.tiny_llama(path, overrides={k: (gf.U64, v) if isinstance(v, int) else v for k, v in overrides.items()})
    r = run_cli("models", "import-gguf", str(path), "--out", str(out), timeout=120)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert match in r.err and str(path) in r.err and len(r.err) < 1000
    assert [p.name for p in tmp_path.iterdir()] == ["bad.gguf"]  # nothing written


def test_unsupported_tensor_type_is_named(tmp_path: Path) -> None:
    path = tmp_path / "k.gguf"
    gf.tiny_llama(path)
    data = bytearray(path.read_bytes())
    with GgufFile(path) as f:
        info = f.tensors["blk.1.ffn_down.weight"]  # stored as F32
    # Re-label that tensor as Q6_K (type 14) in its table entry: name, dims, then the type field.
    name = b"blk.1.ffn_down.weight"
    at = data.index(name) + len(name) + 4 + 8 * len(info.dims)
    data[at:at + 4] = (14).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"'blk\.1\.ffn_down\.weight' is Q6_K"):
        from guardeval.backends.gguf.convert import import_gguf

        import_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
async def test_constrained_decoding_makes_noise_parse(imported: Path, tmp_path: Path) -> None:
    """The random model's free answers never parse; constrained, every answer is one of the 12."""
    prompt = load_prompt("guardeval-json-v1", REPO / "prompts")
    inst = {"user_request": "Pay the rent.", "history": [], "current_action": {"name": "pay", "arguments": {"to": "A"}},
            "tool_descriptions": [{"name": "pay", "description": "Pay.", "parameters": {}}]}
    parse = get_parser(prompt.parser)

    def guard(structured: bool) -> MlxGuard:
        return MlxGuard(GuardConfig(name="t", backend="mlx", model=str(imported), prompt=prompt.id, max_tokens=128,
                                    structured_output=structured), prompt)

    free, bound = guard(False), guard(True)
    assert "response_format" not in free.render(inst) and free.describe()["constrained_answers"] is None
    body = bound.render(inst)
    assert body["constrained_decoding"] == "token-trie" and body["response_format"]["json_schema"] == prompt.output_schema
    assert bound.describe()["constrained_answers"] == 12
    loose = await free.send(free.render(inst), "a")
    assert parse(loose.content, loose.finish_reason).status in ("unparseable", "truncated")
    for i in range(3):
        reply = await bound.send(bound.render({**inst, "user_request": f"Pay the rent, month {i}."}), f"b{i}")
        assert reply.finish_reason == "stop" and parse(reply.content, "stop").status == "ok", reply.content
    short = await bound.send({**body, "max_tokens": 5}, "c")
    assert short.finish_reason == "length" and parse(short.content, short.finish_reason).status == "truncated"
    await free.aclose()
    await bound.aclose()


def test_structured_output_needs_a_finite_answer_set(imported: Path, tmp_path: Path) -> None:
    folder = tmp_path / "open-v1"
    folder.mkdir()
    (folder / "user.txt").write_text("Say something about {user_request}.")
    schema = {"name": "free", "strict": True, "schema": {"type": "object", "properties": {"text": {"type": "string"}},
                                                           "required": ["text"], "additionalProperties": False}}
    (folder / "manifest.json").write_text(json.dumps({
        "messages": [{"role": "user", "file": "user.txt"}],
        "files": {"user.txt": hashlib.sha256(b"Say something about {user_request}.").hexdigest()},
        "placeholders": ["user_request"], "parser": "json-three-field", "output_schema": schema}))
    prompt = load_prompt("open-v1", tmp_path)
    with pytest.raises(InputError, match="finite answer set.*structured_output = false"):
        MlxGuard(GuardConfig(name="t", backend="mlx", model=str(imported), prompt="open-v1"), prompt)
    MlxGuard(GuardConfig(name="t", backend="mlx", model=str(imported), prompt="open-v1", structured_output=False), prompt)
