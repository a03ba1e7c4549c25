"""MkDocs hook: the reference pages that must not drift from the code are generated from it at
build time — every command and option from the argparse parsers (`reference/cli.md`), every
guard-config key from the config's own definitions (`reference/guard-config.md`). The pages in
the tree hold only a title and a marker; `mkdocs build --strict` fails if a marker is left."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

MARKERS = {"<!-- generated: cli -->": "cli", "<!-- generated: guard-config -->": "config",
           "<!-- generated: api-records -->": "records", "<!-- include: BENCHMARKS.md -->": "benchmarks"}
ROOT = Path(__file__).resolve().parents[2]


def on_config(config: Any) -> Any:
    # argparse wraps usage lines to the terminal's width: the same page on every machine.
    os.environ["COLUMNS"] = "80"
    return config


# In the repository a generated page is a marker and this note, which says where the page is;
# the built page has the generated text in their place.
_WHERE = re.compile(r"\n> \*\*Generated page\.\*\*[^\n]*(?:\n>[^\n]*)*")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, kind in MARKERS.items():
        if marker in markdown:
            markdown = _WHERE.sub("", markdown).replace(marker, _generated(kind))
    return markdown


def _generated(kind: str) -> str:
    if kind == "cli":
        return cli_reference()
    if kind == "config":
        return config_reference()
    if kind == "records":
        return records_reference()
    # BENCHMARKS.md stays at the repository's root (where the benchmarks' own docstrings name it);
    # the site shows it as it is, without its own first heading.
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    text = text.split("\n", 1)[1] if text.startswith("# ") else text
    # Its links are written from the repository's root: on the site, docs/ is the root.
    return re.sub(r"\]\(docs/", "](", text)


# ----------------------------------------------------------------------------- commands

def _commands(parser: argparse.ArgumentParser, path: list[str]) -> list[tuple[list[str], argparse.ArgumentParser, str]]:
    """(the words that name it, its parser, its one-line help) for every command, depth first."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append(([*path, name], sub, helps.get(name, "")))
                out += _commands(sub, [*path, name])
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            names = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0:
                names += f" `{formatter._format_args(action, formatter._get_default_metavar_for_optional(action))}`"
        else:
            names = f"`{formatter._format_args(action, formatter._get_default_metavar_for_positional(action))}`"
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {_cell(names)} | {_cell(help_text)} |")
    return rows


def cli_reference() -> str:
    from guardeval.cli.app import build_parser

    top = build_parser()
    out = ["Every command and option, generated from the command line's own parsers when the site is "
           "built. `guardeval COMMAND --help` prints the same.", ""]
    for words, sub, one_line in _commands(top, []):
        has_sub = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
        out += [f"## `guardeval {' '.join(words)}`", ""]
        if one_line:
            out += [one_line[0].upper() + one_line[1:] + ("" if one_line.endswith(".") else "."), ""]
        if sub.description and sub.description != one_line:
            out += [sub.description, ""]
        usage = sub.format_usage().strip()
        out += ["```text", usage, "```", ""]
        rows = _options(sub)
        if rows and not has_sub:
            out += ["| option | what it does |", "|---|---|", *rows, ""]
        elif has_sub:
            out += ["Subcommands: " + ", ".join(f"`{w}`" for w, s, _ in _commands(sub, words)
                                                if len(w) == len(words) + 1), ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------- guard config

def _key(name: str) -> str:
    """A key as code that a narrow column may break after `_` or `.`, never inside a word
    (`api_key_e|nv`); guardeval.css keeps it from breaking anywhere else."""
    return '<code class="key">' + re.sub(r"([_.])", r"\1<wbr>", name) + "</code>"


def _bound(x: float, is_float: bool) -> str:
    """A range's end as the field holds it: an integer field's as an integer (a signed 64-bit
    one's as its power of two), a float field's as the shortest float."""
    if is_float:
        return f"{x:g}"
    n = int(x)
    if n == -(1 << 63):
        return "−2⁶³"
    if n == (1 << 63) - 1:
        return "2⁶³ − 1"
    return f"{n:,}".replace(",", "\u202f")   # a narrow no-break space: one number, one line


def config_reference() -> str:
    from guardeval.backends import config_fields as c

    out = ["Every key of a guard config (a TOML file), generated from the config's one declaration of its fields "
           "(`harness/guardeval/backends/config_fields.py`) when the site is built: types, whether required, "
           "defaults, allowed ranges.", "",
           "## Top-level keys", "",
           "| key | type | required | default | range | meaning |", "|---|---|---|---|---|---|"]
    for f in c.FIELDS:
        rng = "" if f.range is None else f"{_bound(f.range[0], f.is_float)} – {_bound(f.range[1], f.is_float)}"
        out.append(f"| {_key(f.name)} | {' or '.join(t.__name__ for t in f.types)} | {'yes' if f.required else ''} | "
                   f"{'' if f.required or f.default is None else f'`{f.default!r}`'} | "
                   f"{rng} | {_cell(c.doc(f))} |")
    out += ["", "## `[provider]`", "", "The routing table of the `openrouter` back-end.", "",
            "| key | type | meaning |", "|---|---|---|"]
    for f in c.provider_fields():
        out.append(f"| {_key('provider.' + f.name)} | {' or '.join(t.__name__ for t in f.types)} | {_cell(c.doc(f))} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- API records

_FIELD_LINE = re.compile(r"^    ([a-z][a-z0-9_]*): ([^=#]+?)\s*(?:=[^#]*)?(?:#\s*(.*))?$")


def records_reference() -> str:
    """One table per public record of `guardeval.api` (a dataclass): its fields, their types as
    written, and the comment the source gives each (its meaning); its properties after them."""
    import dataclasses
    import inspect

    import guardeval.api as api

    out: list[str] = []
    for name in sorted(api.__all__):
        cls = getattr(api, name)
        if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)):
            continue
        said: dict[str, tuple[str, str]] = {}
        for line in inspect.getsource(cls).splitlines():
            if m := _FIELD_LINE.match(line):
                said[m.group(1)] = (m.group(2).strip(), (m.group(3) or "").strip())
        doc = inspect.getdoc(cls) or ""
        out += [f"### `{name}`", "", _cell(doc.split("\n\n")[0]), "", "| field | type | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            kind, meaning = said.get(f.name, (str(f.type), ""))
            out.append(f"| `{f.name}` | `{_cell(kind)}` | {_cell(meaning)} |")
        for prop, obj in inspect.getmembers(cls, lambda o: isinstance(o, property)):
            if not prop.startswith("_"):
                first = (inspect.getdoc(obj) or "").split("\n\n")[0]
                out.append(f"| `{prop}` (property) | | {_cell(first)} |")
        out.append("")
    return "\n".join(out)
