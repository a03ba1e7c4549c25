"""What the Inspect bridge tests need around inspect_ai: the extra (or a skip naming it), and
tiktoken's o200k_base encoding without the network.

Offline, Inspect's models count tokens with tiktoken's `o200k_base`, which tiktoken downloads
on first use into its cache folder (`TIKTOKEN_CACHE_DIR`, a file named by the SHA-1 of the
encoding's URL) and checks against the SHA-256 it has built in. The README's test command
installs litellm (`--no-deps`, never imported) for the one file it ships under that very name;
it is copied into a fresh folder that `TIKTOKEN_CACHE_DIR` then names, and tiktoken checks its
hash as it would a download's. Nothing is downloaded, and no third-party file is in the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"   # tiktoken_ext.openai_public's
CACHE_NAME = hashlib.sha1(O200K_URL.encode()).hexdigest()
TIKTOKEN_SOURCE = "litellm==1.110.2"
INSTALL = f"pip install -e '.[inspect]' && pip install --no-deps {TIKTOKEN_SOURCE}"


def require_inspect() -> None:
    if importlib.util.find_spec("inspect_ai") is None:
        pytest.skip(f"the Inspect bridge tests need the optional extra: {INSTALL}")


def offline_tiktoken(dest: Path) -> Path:
    """A TIKTOKEN_CACHE_DIR holding o200k_base, copied from the litellm package (located, never imported)."""
    spec = importlib.util.find_spec("litellm")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not roots:
        pytest.skip(f"tiktoken's o200k_base is needed offline: {INSTALL} ships it (docs/inspect.md)")
    src = Path(roots[0]) / "litellm_core_utils" / "tokenizers" / CACHE_NAME
    data = src.read_bytes()
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256, f"{src} is not tiktoken's o200k_base"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / CACHE_NAME).write_bytes(data)
    return dest
