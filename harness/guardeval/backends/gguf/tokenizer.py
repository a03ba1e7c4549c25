"""Rebuild a GGUF's byte-level BPE tokenizer (`tokenizer.ggml.model = "gpt2"`) with `tokenizers`.

The GGUF carries the vocabulary (`tokenizer.ggml.tokens`, the id is the position), the merges
in rank order (`tokenizer.ggml.merges`, "left right"), each token's type
(`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte),
the special ids, the chat template and the name of the pre-tokenizer (`tokenizer.ggml.pre`),
which fixes how text is split before BPE. Only pre-tokenizers whose splitting is known here are
accepted; any other is refused (exit 2) rather than guessed.

Output: `tokenizer.json` (written by `tokenizers`) and `tokenizer_config.json` (special tokens,
chat template, BOS/EOS flags) for `transformers.AutoTokenizer`, which mlx-lm loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardeval.backends.gguf.reader import GgufFile, shown, shown_value
from guardeval.errors import InputError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Llama 3's split: case-insensitive contractions, words with one leading non-letter, digits in
# runs of at most three, symbols, newlines.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# tokenizer.ggml.pre -> how text is split (llama.cpp's names).
PRE_TOKENIZERS = {
    "gpt-2": "gpt2",
    "smollm": "digits+gpt2", "starcoder": "digits+gpt2", "refact": "digits+gpt2",  # each digit on its own first
    "llama-bpe": "llama3", "llama3": "llama3",
}


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[str]
    types: np.ndarray
    merges: list[tuple[str, str]]
    pre: str
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    pad_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None


def _opt_id(gguf: GgufFile, key: str, n: int) -> int | None:
    value = gguf.metadata.get(key)
    if value is None:
        return None
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < n:
        raise InputError(f"must be a token id below {n}, got {shown_value(value)}", path=gguf.path, field=key)
    return value


def read_vocabulary(gguf: GgufFile, vocab_size: int) -> Vocabulary:
    """The tokenizer metadata, checked; exit 2 for anything this module would have to guess."""
    md, path = gguf.metadata, gguf.path
    model = md.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise InputError(f"tokenizer model {shown(str(model))} is not supported (byte-level BPE, 'gpt2', only)",
                         path=path, field="tokenizer.ggml.model")
    pre = md.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise InputError(f"pre-tokenizer {shown(str(pre))} is not supported (known: {', '.join(PRE_TOKENIZERS)})",
                         path=path, field="tokenizer.ggml.pre")
    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) and t for t in tokens):
        raise InputError("must be a list of non-empty strings", path=path, field="tokenizer.ggml.tokens")
    if len(tokens) > vocab_size:
        raise InputError(f"{len(tokens)} tokens but the embedding has {vocab_size} rows", path=path,
                         field="tokenizer.ggml.tokens")
    types = md.get("tokenizer.ggml.token_type", np.full(len(tokens), NORMAL, np.int32))
    if not isinstance(types, np.ndarray) or types.shape != (len(tokens),) or not np.isin(types, range(1, 7)).all():
        raise InputError("must be one type (1-6) per token", path=path, field="tokenizer.ggml.token_type")
    merges_raw = md.get("tokenizer.ggml.merges")
    if not isinstance(merges_raw, list) or not all(isinstance(m, str) and m.count(" ") == 1 for m in merges_raw):
        raise InputError("must be a list of 'left right' strings", path=path, field="tokenizer.ggml.merges")
    merges = [(a, b) for a, b in (m.split(" ") for m in merges_raw)]
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok in seen:
            raise InputError(f"token {shown(tok)} appears twice (ids {seen[tok]} and {i})", path=path,
                             field="tokenizer.ggml.tokens")
        seen[tok] = i
    for i, (a, b) in enumerate(merges):
        missing = next((t for t in (a, b, a + b) if t not in seen), None)
        if missing is not None:  # tokenizers would refuse it only after the weights were converted
            raise InputError(f"merge {i} ({shown(a)}, {shown(b)}) needs the token {shown(missing)}, which is not "
                             "in the vocabulary", path=path, field="tokenizer.ggml.merges")
    n = len(tokens)
    template = md.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise InputError("must be a string", path=path, field="tokenizer.chat_template")
    return Vocabulary(
        tokens=tokens, types=types, merges=merges, pre=PRE_TOKENIZERS[pre],
        bos_id=_opt_id(gguf, "tokenizer.ggml.bos_token_id", n), eos_id=_opt_id(gguf, "tokenizer.ggml.eos_token_id", n),
        eot_id=_opt_id(gguf, "tokenizer.ggml.eot_token_id", n),
        pad_id=_opt_id(gguf, "tokenizer.ggml.padding_token_id", n),
        unk_id=_opt_id(gguf, "tokenizer.ggml.unknown_token_id", n),
        add_bos=bool(md.get("tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(md.get("tokenizer.ggml.add_eos_token", False)),
        chat_template=template)


def build_tokenizer(v: Vocabulary) -> Any:
    """A `tokenizers.Tokenizer` with the GGUF's ids: byte-level BPE, control tokens as special."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    bpe = models.BPE(vocab={t: i for i, t in enumerate(v.tokens)}, merges=v.merges,
                     ignore_merges=v.pre == "llama3")  # Llama 3 takes whole-word vocabulary hits first
    tok = Tokenizer(bpe)
    # ByteLevel's own split (use_regex) is GPT-2's; Llama 3 splits with its own pattern first.
    if v.pre == "llama3":
        steps = [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    else:
        steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if v.pre == "digits+gpt2":
            steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    post: list[Any] = [processors.ByteLevel(trim_offsets=False)]
    first = [v.bos_id] if v.add_bos and v.bos_id is not None else []
    last = [v.eos_id] if v.add_eos and v.eos_id is not None else []
    if first or last:  # BOS/EOS added around every encoded text, as the GGUF asks
        a, b = [v.tokens[i] for i in first], [v.tokens[i] for i in last]
        post.append(processors.TemplateProcessing(
            single=[*a, "$A", *b], pair=[*a, "$A", *b, *a, "$B", *b],
            special_tokens=[(v.tokens[i], i) for i in sorted(set(first + last))]))
    tok.post_processor = processors.Sequence(post)
    specials = [AddedToken(t, special=True, normalized=False) for t, k in zip(v.tokens, v.types) if k == CONTROL]
    users = [AddedToken(t, special=False, normalized=False) for t, k in zip(v.tokens, v.types) if k == USER_DEFINED]
    tok.add_special_tokens(specials)
    tok.add_tokens(users)
    return tok


def tokenizer_config(v: Vocabulary, context: int) -> dict[str, Any]:
    def name(i: int | None) -> str | None:
        return v.tokens[i] if i is not None else None

    cfg: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name(v.bos_id), "eos_token": name(v.eot_id if v.eot_id is not None else v.eos_id),
        "pad_token": name(v.pad_id), "unk_token": name(v.unk_id),
        "add_bos_token": v.add_bos, "add_eos_token": v.add_eos,
        "clean_up_tokenization_spaces": False, "model_max_length": context,
    }
    if v.chat_template is not None:
        cfg["chat_template"] = v.chat_template
    return cfg


def stop_ids(v: Vocabulary) -> list[int]:
    """Ids that end a turn: EOS and, where the file names one, end-of-turn."""
    return sorted({i for i in (v.eos_id, v.eot_id) if i is not None})


def write_tokenizer(v: Vocabulary, out: Path, context: int) -> None:
    build_tokenizer(v).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(v, context), indent=2) + "\n", "utf-8")
