"""The documentation site (issue 30 §2): `mkdocs build --strict` builds it (broken links and
missing pages fail), its reference covers every command, option and guard-config key (generated
from the parsers and the config's definitions, and checked here against them), the Python API
page documents every public name, and two pages render in a real Chromium."""

from __future__ import annotations

import argparse
import asyncio
import base64
import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chromium import Chromium, find_chromium
from conftest import REPO, cli_env

_REQUIRES = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or
                               importlib.util.find_spec("mkdocstrings") is None,
                               reason="the docs extra is not installed (pip install -e '.[docs]')")
pytestmark = [pytest.mark.slow, _REQUIRES]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # The hooks import guardeval: this checkout's (cli_env), not whichever one is installed.
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def _commands(parser: argparse.ArgumentParser, words: list[str]):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*words, name], sub
                yield from _commands(sub, [*words, name])


def test_every_command_and_option_is_on_the_cli_page(site):
    from guardeval.cli.app import build_parser

    page = _text(site / "reference" / "cli" / "index.html")
    n = 0
    for words, sub in _commands(build_parser(), []):
        assert f"guardeval {' '.join(words)}" in page, words
        for action in sub._actions:
            for opt in action.option_strings:
                assert opt in page, (words, opt)
        n += 1
    assert n > 40


def test_every_guard_config_key_is_on_its_page(site):
    from guardeval.backends import config_fields

    page = _text(site / "reference" / "guard-config" / "index.html")
    # Every key has its words, written where the key is declared (one declaration per field).
    for f in config_fields.FIELDS:
        assert f.name in page and config_fields.doc(f)[:40] in page, f.name
    for f in config_fields.provider_fields():
        assert f"provider.{f.name}" in page and f.doc, f.name


def test_the_api_page_documents_every_public_name(site):
    from guardeval import api

    page = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    missing = [n for n in api.__all__ if f'id="guardeval.api.{n}"' not in page]
    assert missing == [], missing


def test_the_benchmarks_page_is_benchmarks_md(site):
    page = _text(site / "benchmarks" / "index.html")
    assert "Calibration: do the printed words hold their error rates?" in page


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed here (apt-get install -y chromium)")
def test_two_pages_render_in_chromium(site, tmp_path):
    async def shot(path: Path) -> tuple[bytes, str]:
        async with Chromium() as browser:
            page = await browser.page()
            await page.send("Page.enable")
            await page.send("Page.navigate", url=path.resolve().as_uri())
            await page.wait_for("document.readyState === 'complete' && !!document.querySelector('h1')")
            title = await page.evaluate("document.querySelector('h1').textContent")
            data = await page.send("Page.captureScreenshot", format="png")
            return base64.b64decode(data["data"]), title

    for rel, heading in (("index.html", "guardeval"), ("tutorial/index.html", "Tutorial")):
        png, title = asyncio.run(shot(site / rel))
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, rel
        assert heading in title, (rel, title)
        (tmp_path / rel.replace("/", "-")).with_suffix(".png").write_bytes(png)   # kept for a look on failure
