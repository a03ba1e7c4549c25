"""`guardeval prompts import ts-guard FILE`: install the user-supplied TS-Guard template.

The template text is ToolSafe's, so it is never committed: the user supplies the file, we check
it byte-for-byte against the pinned SHA-256 (docs/design.md §8) and write it, with a manifest, to
`<prompts root>/ts-guard-v2/` (git-ignored), where `load_prompt("ts-guard-v2")` finds it.
`$GUARDEVAL_PROMPTS` overrides the prompts root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from guardeval.errors import InputError

TS_GUARD_ID = "ts-guard-v2"
TS_GUARD_SHA256 = "8fd25ddb1c3248d8ffa2e1c3f87947bb245a963bde4fd77df5171a0b29d142a6"
TEMPLATE_FILE = "template.txt"


def ts_guard_manifest(template_sha256: str) -> dict[str, Any]:
    return {
        "id": TS_GUARD_ID,
        "description": "TS-Guard v2 prompt (ToolSafe instruction_ashellguardian_template_v2), "
                       "imported by the user and verified by SHA-256",
        "messages": [{"role": "user", "file": TEMPLATE_FILE}],
        "files": {TEMPLATE_FILE: template_sha256},
        "placeholders": ["agent_action", "env_info", "user_request"],
        # ToolSafe hands TS-Guard str({'interaction_history': ..., 'current_action': ...}).
        "action_format": "python_repr",
        "parser": "ts-guard-tags",
        "output_schema": None,
    }


def read_regular_file(path: Path) -> bytes:
    """The file's bytes; symlinks and non-regular files are refused (no following, no TOCTOU)."""
    if path.is_symlink():
        raise InputError("symbolic links are refused; pass the file itself", path=path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot open ({exc.strerror})", path=path) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InputError("not a regular file", path=path)
        return fh.read()


def import_ts_guard(source: Path, root: Path | None = None, *, pinned_sha256: str | None = None) -> Path:
    """Verify `source` against the pin (TS_GUARD_SHA256 unless another is given, as the tests
    do for their TS-Guard-shaped template) and install it; return the prompt folder. Nothing is
    written on failure."""
    from guardeval.backends.prompts import load_prompt, prompts_root
    from guardeval.canon import sha256_hex

    pin = pinned_sha256 or TS_GUARD_SHA256
    data = read_regular_file(source)
    digest = sha256_hex(data)
    if digest != pin:
        raise InputError(f"SHA-256 {digest} is not the pinned TS-Guard v2 template "
                         f"({pin}); nothing installed", path=source)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:  # cannot happen for the pinned bytes; kept for clarity
        raise InputError("not UTF-8", path=source) from None
    root = root or prompts_root()
    dest = root / TS_GUARD_ID
    if dest.is_symlink():
        raise InputError("refusing to replace a symbolic link", path=dest)
    root.mkdir(parents=True, exist_ok=True)
    # Write a complete folder next to the destination, then swap it in: never half-installed.
    tmp = Path(tempfile.mkdtemp(prefix=f".{TS_GUARD_ID}.", dir=root))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a prompt folder is ordinary readable data
        (tmp / TEMPLATE_FILE).write_bytes(data)
        manifest = json.dumps(ts_guard_manifest(digest), indent=2, sort_keys=True) + "\n"
        (tmp / "manifest.json").write_text(manifest, "utf-8")
        load_prompt(tmp.name, root)  # the installed files must load as a prompt
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _cmd_import(args: argparse.Namespace) -> int:
    from guardeval.backends.prompts import load_prompt

    dest = import_ts_guard(Path(args.file))
    prompt = load_prompt(TS_GUARD_ID, dest.parent)
    if args.json:
        print(json.dumps({"prompt": prompt.id, "path": str(dest), "template_sha256": TS_GUARD_SHA256,
                          "prompt_sha256": prompt.sha256}))
    else:
        print(f"installed prompt '{prompt.id}' in {dest} (template sha256 {TS_GUARD_SHA256}, "
              f"prompt sha256 {prompt.sha256})", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    prompts = subparsers.add_parser("prompts", help="guard prompt templates")
    sub = prompts.add_subparsers(dest="prompts_command", metavar="SUBCOMMAND")
    sub.required = True
    imp = sub.add_parser("import", help="install a user-supplied third-party prompt after verifying its SHA-256",
                         description="Install a user-supplied prompt template. `ts-guard`: ToolSafe's TS-Guard "
                                     f"v2 template, verified against SHA-256 {TS_GUARD_SHA256}, installed as "
                                     f"prompt id '{TS_GUARD_ID}' under $GUARDEVAL_PROMPTS or prompts/.")
    imp.add_argument("kind", choices=["ts-guard"], help="which prompt the file is")
    imp.add_argument("file", metavar="FILE", help="the template file (byte-exact copy)")
    imp.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    imp.set_defaults(func=_cmd_import)
