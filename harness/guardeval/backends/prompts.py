"""Prompt templates as files with a manifest (docs/design.md §8).

`prompts/<id>/manifest.json` names the message files (role + file), their SHA-256, the
placeholders, the output schema (for structured output) and the parser. Rendering substitutes
the known placeholders in one regex pass: benchmark text is inserted verbatim and never
re-scanned, so a base containing `{user_request}` or `{0}` renders as itself.
"""

from __future__ import annotations

import json
import os
import pprint
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardeval.bounded import LINK, open_regular, read_fd
from guardeval.canon import canonical_sha256, sha256_hex
from guardeval.errors import InputError

KNOWN_PLACEHOLDERS = ("user_request", "history", "current_action", "tool_descriptions", "agent_action", "env_info")
_PLACEHOLDER_RE = re.compile(r"\{(" + "|".join(KNOWN_PLACEHOLDERS) + r")\}")


# The project's own prompts, shipped inside the package (in the repository, a link to prompts/).
BUNDLED_PROMPTS = Path(__file__).resolve().parent / "bundled_prompts"


def prompts_root() -> Path:
    """The user's prompts folder, where imported prompts go: `$GUARDEVAL_PROMPTS`, else `prompts/`
    in the current directory (as runs go to `runs/` there)."""
    env = os.environ.get("GUARDEVAL_PROMPTS")
    return Path(env) if env else Path("prompts")


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[tuple[str, str], ...]   # (role, template text)
    placeholders: tuple[str, ...]
    parser: str
    action_format: str                       # "json" or "python_repr"
    output_schema: dict[str, Any] | None
    sha256: str                              # over the manifest's file hashes + settings
    # (name, bytes) of every file the loader read and checked, manifest first: what a run
    # folder copies, so that the run can be re-rendered from itself.
    files: tuple[tuple[str, bytes], ...] = field(default=(), compare=False, repr=False)

    def render_messages(self, instance: Mapping[str, Any]) -> list[dict[str, str]]:
        values = placeholder_values(instance, self.action_format, only=self.placeholders)
        return [{"role": role, "content": _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], text)}
                for role, text in self.messages]


def _dump(value: Any, indent: int | None, action_format: str) -> str:
    if isinstance(value, str):
        return value
    if action_format == "python_repr":
        return pprint.pformat(value, indent=indent, width=100, sort_dicts=False) if indent else repr(value)
    return json.dumps(value, ensure_ascii=False, indent=indent)


def placeholder_values(instance: Mapping[str, Any], action_format: str = "json",
                       only: Iterable[str] | None = None) -> dict[str, str]:
    """String value of every known placeholder (or of those in `only`) for one instance.

    `render.indent` (the formatting placebo) changes whitespace only; values are unchanged.
    `agent_action` follows ToolSafe's shape: {'interaction_history': ..., 'current_action': ...}.
    Serialising is most of a render's cost, so a prompt renders only the placeholders it uses.
    """
    indent = (instance.get("render") or {}).get("indent")
    makers: dict[str, Callable[[], str]] = {
        "user_request": lambda: instance["user_request"],
        "history": lambda: _dump(instance["history"], indent, action_format),
        "current_action": lambda: _dump(instance["current_action"], indent, action_format),
        "tool_descriptions": lambda: _dump(instance["tool_descriptions"], indent, action_format),
        "agent_action": lambda: _dump({"interaction_history": instance["history"],
                                       "current_action": instance["current_action"]}, indent, action_format),
        "env_info": lambda: _dump(instance["tool_descriptions"], indent, action_format),
    }
    return {name: makers[name]() for name in (KNOWN_PLACEHOLDERS if only is None else only)}


MANIFEST = "manifest.json"
MAX_PROMPT_FILE_BYTES = 4 << 20   # a template or its manifest; guard prompts are a few KB


def load_prompt(prompt_id: str, root: Path | None = None) -> Prompt:
    """The prompt `prompt_id` from `root`, else from the user's folder (`prompts_root()`) or,
    failing that, the prompts shipped with guardeval."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", prompt_id) or prompt_id in (".", ".."):
        raise InputError(f"invalid prompt id '{prompt_id}'", field="prompt")
    roots = [root] if root is not None else [prompts_root(), BUNDLED_PROMPTS]
    base = next((r / prompt_id for r in roots if (r / prompt_id / MANIFEST).is_file()), None)
    if base is None:
        hint = " (run `guardeval prompts import ts-guard FILE` first)" if prompt_id.startswith("ts-guard") else ""
        where = " or ".join(str(r) for r in roots)
        raise InputError(f"prompt '{prompt_id}' not found under {where}{hint}", field="prompt")
    return load_prompt_dir(base, prompt_id)


def load_prompt_dir(base: Path, prompt_id: str, *, dir_fd: int | None = None) -> Prompt:
    """The prompt whose files are in `base` (a prompts folder's entry, or a run's copy, read
    through the run folder's descriptor of it: `dir_fd`). Each file is opened once, relative
    to the folder, never through a link, and only when it is a regular file once open (a FIFO
    renamed into place is refused, not waited on)."""
    if dir_fd is not None:
        return _load_prompt_files(base, prompt_id, dir_fd)
    try:
        own = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise InputError("file not found", path=base / MANIFEST) from None
    try:
        return _load_prompt_files(base, prompt_id, own)
    finally:
        os.close(own)


def _load_prompt_files(base: Path, prompt_id: str, dir_fd: int) -> Prompt:
    manifest_path = base / MANIFEST
    manifest_bytes = _read_small(dir_fd, MANIFEST, base, manifest_path, MANIFEST)
    if manifest_bytes is None:
        raise InputError("file not found", path=manifest_path)
    try:
        manifest = json.loads(manifest_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=manifest_path) from None
    if not isinstance(manifest, dict):
        raise InputError("not a JSON object", path=manifest_path)
    for key in ("messages", "files", "parser"):
        if key not in manifest:
            raise InputError("missing required field", path=manifest_path, field=key)
    if not isinstance(manifest["messages"], list) or not isinstance(manifest["files"], dict):
        raise InputError("messages must be a list and files an object", path=manifest_path)
    messages = []
    files: list[tuple[str, bytes]] = [(MANIFEST, manifest_bytes)]
    for i, msg in enumerate(manifest["messages"]):
        fname = msg.get("file", "") if isinstance(msg, dict) else ""
        plain = isinstance(fname, str) and fname not in ("", ".", "..") and "/" not in fname and "\0" not in fname
        data = _read_small(dir_fd, fname, base, manifest_path, f"messages.{i}.file") if plain else None
        if data is None:
            raise InputError(f"template file '{fname}' missing", path=manifest_path, field=f"messages.{i}.file")
        want = manifest["files"].get(fname)
        if sha256_hex(data) != want:
            raise InputError(f"SHA-256 of {fname} does not match the manifest", path=manifest_path,
                             field=f"files.{fname}")
        try:
            messages.append((msg["role"], data.decode("utf-8")))
        except (KeyError, UnicodeDecodeError) as exc:
            raise InputError(f"a message needs a role and UTF-8 text ({exc})", path=manifest_path,
                             field=f"messages.{i}") from None
        files.append((fname, data))
    found = sorted({m for _, t in messages for m in _PLACEHOLDER_RE.findall(t)})
    declared = sorted(manifest.get("placeholders", found))
    if found != declared:
        raise InputError(f"templates use placeholders {found}, manifest declares {declared}",
                         path=manifest_path, field="placeholders")
    settings = {k: manifest.get(k) for k in ("files", "messages", "parser", "action_format", "output_schema")}
    return Prompt(
        id=prompt_id, messages=tuple(messages), placeholders=tuple(declared), parser=manifest["parser"],
        action_format=manifest.get("action_format", "json"), output_schema=manifest.get("output_schema"),
        sha256=canonical_sha256(settings), files=tuple(files),
    )


def _read_small(dir_fd: int, name: str, base: Path, manifest_path: Path, field: str) -> bytes | None:
    """A prompt file's bytes (None: absent or a link), read under MAX_PROMPT_FILE_BYTES."""
    try:
        fd = open_regular(name, path=base / name, dir_fd=dir_fd, follow=False)
    except FileNotFoundError:
        return None
    except InputError as exc:
        if exc.message == LINK:
            return None
        raise
    try:
        return read_fd(fd, MAX_PROMPT_FILE_BYTES, path=base / name, what="a prompt file")
    except InputError:
        raise InputError(f"{name} is larger than {MAX_PROMPT_FILE_BYTES} bytes", path=manifest_path,
                         field=field) from None
    finally:
        os.close(fd)
