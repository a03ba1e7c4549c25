"""A tiny random-weight qwen2 chat model, built offline, for the local-guard tests.

Nothing is downloaded: the byte-level BPE tokenizer is trained on the spot from synthetic text,
the weights come from a seeded numpy generator, and the 8-bit MLX folder is produced by
mlx-lm's own converter (`mlx_lm.convert`, the path users take for the real TS-Guard). The
result exercises the real code path (`mlx_lm.load`, chat template, quantized matmuls, greedy
decoding); its answers are noise, which the tests use to check that noise is recorded as
`unparseable`, never dropped.

Use `tiny_model_dir(base, variant)`: builds once per process under `base` and returns the MLX
folder (named `mlx-q8`).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

# Qwen-style chat markup; written for this project (no third-party template text).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CONTEXT_TOKENS = 8192          # max_position_embeddings (the issue asks for >= 8192)
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128   # 64: one 8-bit quantization group

LAYER_STD = 0.3   # large enough that attention makes the answer depend on the prompt
# Scale of the end-of-turn row of the output head: "terse" stops on its own after a few to a
# few hundred tokens (finish_reason "stop": noise the parser must call `unparseable`);
# "chatty" practically never does (finish_reason "length": long generations for the
# responsiveness and cancellation tests).
EOS_SCALE = {"terse": 1.8, "chatty": 0.01}

_lock = threading.Lock()
_built: dict[str, Path] = {}


REPO = Path(__file__).resolve().parents[1]
# Text the tests actually send, so the tokenizer compresses it and the tiny model's prefill on
# mlx's CPU backend stays short: the project's own prompt and demo cohort, the tests'
# TS-Guard-shaped template, and ToolSafe's read by path from ../shared when present (never
# copied into the repo).
CORPUS_FILES = (REPO / "prompts" / "guardeval-json-v1" / "system.txt",
                REPO / "prompts" / "guardeval-json-v1" / "user.txt",
                REPO / "cohorts" / "demo" / "instances.jsonl",
                REPO / "tests" / "data" / "ts-guard-shaped-template.txt",
                REPO.parent / "shared" / "reference" / "ts-guard-prompt-v2.txt")


def _corpus() -> list[str]:
    words = ("user request agent tool call history current action environment send email transfer "
             "money file read write delete search calendar yes no rating malicious attacked think "
             "harmful safe unsafe the a of to and in is for with on").split()
    rng = np.random.default_rng(7)
    lines = []
    for _ in range(400):
        picked = rng.choice(words, size=12)
        lines.append(" ".join(picked))
        lines.append("{'name': '%s', 'arguments': {'to': '%s'}}" % (picked[0], picked[1]))
        lines.append("<Malicious_User_Request> %s <\\Malicious_User_Request>" % picked[2])
    for path in CORPUS_FILES:
        if path.is_file():
            text = path.read_text("utf-8")
            lines += text.splitlines()
            # Python-repr flavour of the JSON lines (what TS-Guard's agent_action looks like).
            lines += [line.replace('"', "'").replace("true", "True").replace("false", "False")
                      for line in text.splitlines()]
    return lines


def _train_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": CONTEXT_TOKENS,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2))
    return tok.get_vocab_size()


def _write_weights(out: Path, vocab: int, eos_id: int, seed: int, eos_scale: float) -> None:
    from safetensors.numpy import save_file

    head_dim = HIDDEN // HEADS
    kv = KV_HEADS * head_dim
    rng = np.random.default_rng(seed)

    def w(*shape: int, std: float = LAYER_STD) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float16)

    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": w(vocab, HIDDEN, std=1.0),
                                "model.norm.weight": np.ones(HIDDEN, np.float16),
                                "lm_head.weight": w(vocab, HIDDEN, std=0.5)}
    # The end-of-turn row of the output head sets how soon a random model stops on its own.
    t["lm_head.weight"][eos_id] = (t["lm_head.weight"][eos_id].astype(np.float32) * eos_scale).astype(np.float16)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t |= {p + "self_attn.q_proj.weight": w(HIDDEN, HIDDEN), p + "self_attn.q_proj.bias": w(HIDDEN),
              p + "self_attn.k_proj.weight": w(kv, HIDDEN), p + "self_attn.k_proj.bias": w(kv),
              p + "self_attn.v_proj.weight": w(kv, HIDDEN), p + "self_attn.v_proj.bias": w(kv),
              p + "self_attn.o_proj.weight": w(HIDDEN, HIDDEN),
              p + "mlp.gate_proj.weight": w(FFN, HIDDEN), p + "mlp.up_proj.weight": w(FFN, HIDDEN),
              p + "mlp.down_proj.weight": w(HIDDEN, FFN),
              p + "input_layernorm.weight": np.ones(HIDDEN, np.float16),
              p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float16)}
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "intermediate_size": FFN, "vocab_size": vocab,
        "max_position_embeddings": CONTEXT_TOKENS, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float16",
        "bos_token_id": None, "eos_token_id": eos_id,
    }, indent=2))


def build_tiny_model(base: Path, seed: int = 0, eos_scale: float = 1.0) -> Path:
    """Write `base/hf` (float16 checkpoint) and `base/mlx-q8` (8-bit MLX); return the latter."""
    from mlx_lm import convert  # the package attribute is the converter function

    hf, q8 = base / "hf", base / "mlx-q8"
    hf.mkdir(parents=True, exist_ok=True)
    vocab = _train_tokenizer(hf)
    added = json.loads((hf / "tokenizer.json").read_text())["added_tokens"]
    eos_id = next(t["id"] for t in added if t["content"] == "<|im_end|>")
    _write_weights(hf, vocab, eos_id, seed, eos_scale)
    # float32 activations and scales: mlx's CPU kernels for float16 are several times slower
    # (Linux runs mlx on the CPU); the weights are 8-bit either way.
    convert(hf_path=str(hf), mlx_path=str(q8), quantize=True, q_bits=8, q_group_size=64, dtype="float32")
    return q8


def tiny_model_dir(base: Path, variant: str = "terse") -> Path:
    """Build each variant once per process (test modules and the benchmark share them).

    `base` is used only by the first caller per variant; later callers get the cached folder.
    """
    with _lock:
        if variant not in _built:
            _built[variant] = build_tiny_model(base / variant, eos_scale=EOS_SCALE[variant])
        return _built[variant]
