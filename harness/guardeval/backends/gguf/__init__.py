"""GGUF model files → mlx-lm model folders (`guardeval models import-gguf`).

`reader` parses the GGUF container (header, metadata, tensor table) with bounds on every
count and offset, `quants` turns its tensor blocks into float32 arrays, `llama` maps a
llama-architecture file onto mlx-lm's parameter names and config, `tokenizer` rebuilds a
`tokenizers` BPE tokenizer from the file's vocabulary, and `convert` writes the folder.
Only `convert` needs mlx; the rest is numpy (and `tokenizers` for the tokenizer files).
"""
