"""report.html in a real headless Chromium, driven over the DevTools protocol: the demo run's
report (effects table, 960 call rows, filters, a row's detail with its raw responses, the pairs
view, nothing fetched), and a run whose cohort and provider text is markup and terminal
escapes (rendered as text, no script runs)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from chromium import Chromium, find_chromium, load
from conftest import HOSTILE_BASE, HOSTILE_HTML, INSTALLED_WHEEL, MARKUP

_REQUIRES = pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed here (apt-get install -y chromium; .ci/run installs it when missing)")
pytestmark = [pytest.mark.slow, _REQUIRES, pytest.mark.xdist_group(INSTALLED_WHEEL)]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line]   # not splitlines: U+2028 is data


async def _select(page, name: str, value: str) -> None:
    await page.evaluate(f"(() => {{ const s = document.querySelector('select[data-filter={name}]'); "
                        f"s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()")


async def _rows(page) -> list[str]:
    return await page.evaluate(
        "Array.from(document.querySelectorAll('#calls tbody tr[data-call-id]')).map(r => r.dataset.callId)")


def test_demo_report_in_chromium(demo_run):
    assert demo_run.result.code == 0, demo_run.result.err
    run = demo_run.run
    report = json.loads((run / "report.json").read_text())
    schedule = _jsonl(run / "schedule.jsonl")
    raw = _jsonl(run / "raw.jsonl")
    attempts: dict[str, int] = {}
    for r in raw:
        attempts[r["call_id"]] = attempts.get(r["call_id"], 0) + 1
    # How often a call is retried depends on answer order: take one with exactly two attempts.
    retried = sorted(c for c, n in attempts.items() if n == 2)[0]
    responses = [r["response"] for r in raw if r["call_id"] == retried]
    base_of = {s["call_id"]: s["base_id"] for s in schedule}

    async def scenario() -> None:
        async with Chromium() as browser:
            page = await browser.page()
            await page.send("Network.enable")
            await load(page, run / "report.html")

            # the effects table: one row per contrast, in the report's order
            names = await page.evaluate("Array.from(document.querySelectorAll('table.contrasts tbody tr'))"
                                        ".map(r => r.cells[0].textContent)")
            assert [n.split()[0] for n in names] == [c["condition"] for c in report["contrasts"]]
            assert "passed" in await page.evaluate("document.querySelector('dl.header').textContent")
            # the page opens with one quotable sentence per headline, its decision and family named
            words = await page.evaluate("Array.from(document.querySelectorAll('ul.words li')).map(x => x.textContent)")
            assert len(words) == len(report["contrasts"])
            assert all("after Holm over" in w and "unadjusted 95% CI" in w for w in words), words
            first = await page.evaluate("document.querySelector('main h2, body h2').textContent")
            assert first == "In words"
            # the effects table fits the 1400-pixel window: nothing cut off, no sideways scroll
            fit = await page.evaluate("(() => { const t = document.querySelector('table.contrasts'); "
                                      "return [t.scrollWidth, t.parentElement.clientWidth]; })()")
            assert fit[0] <= fit[1], fit

            # every scheduled call is a row
            ids = await _rows(page)
            assert len(ids) == 960 and set(ids) == {s["call_id"] for s in schedule}

            # filters reduce the rows, and combine
            await _select(page, "condition", "tool_alias")
            ids = await _rows(page)
            assert len(ids) == 64 * 3 and {s["call_id"] for s in schedule if s["condition"] == "tool_alias"} == set(ids)
            await page.evaluate("(() => { const t = document.getElementById('text-filter'); "
                                f"t.value = {json.dumps(base_of[ids[0]])}; t.dispatchEvent(new Event('input')); }})()")
            assert len(await _rows(page)) == 3          # one base, one condition, three repetitions
            await _select(page, "condition", "")
            await page.evaluate("(() => { const t = document.getElementById('text-filter'); t.value = ''; "
                                "t.dispatchEvent(new Event('input')); })()")
            assert len(await _rows(page)) == 960

            # a row opens its detail: the raw response of every attempt, as text
            await page.evaluate(f"document.querySelector('tr[data-call-id=\"{retried}\"]').click()")
            shown = await page.evaluate("Array.from(document.querySelectorAll('#detail pre.response'))"
                                        ".map(p => p.textContent)")
            assert shown == responses and len(shown) == 2
            detail = await page.evaluate("document.getElementById('detail').textContent")
            assert "=== USER REQUEST ===" in detail and "✓ matches" in detail

            # the pairs view of that call's base: every condition by every repetition
            await page.evaluate("document.querySelector('#detail button.link').click()")
            await page.wait_for("document.querySelector('#tab-pairs.on table.pairs') !== null")
            cells = await page.evaluate("document.querySelectorAll('table.pairs td[data-call-id]').length")
            assert cells == 5 * 3

            # nothing but the file itself and data: URIs was requested
            urls = [e["params"]["request"]["url"] for e in page.events if e["method"] == "Network.requestWillBeSent"]
            assert urls and all(u.startswith(("file://", "data:")) for u in urls), urls
            await page.close()

    asyncio.run(scenario())


def test_hostile_text_renders_as_text(hostile_run):
    schedule = _jsonl(hostile_run / "schedule.jsonl")
    decisions = {d["call_id"]: d for d in _jsonl(hostile_run / "decisions.jsonl")}
    bad = next(s["call_id"] for s in schedule if decisions[s["call_id"]]["status"] == "unparseable"
               and s["base_id"] == HOSTILE_BASE)

    async def scenario() -> None:
        async with Chromium() as browser:
            page = await browser.page()
            await load(page, hostile_run / "report.html")
            await page.evaluate(f"location.hash = 'call={bad}'")
            await page.wait_for("document.querySelector('#detail pre.response') !== null")
            # the raw response (JSON text, as received) shows the markup as text
            response = await page.evaluate("document.querySelector('#detail pre.response').textContent")
            assert '</script><script>window.pwned=1</script><img src=x onerror=' in response
            # the rendered user message carries the cohort's markup and a real ESC: shown, escaped
            detail = await page.evaluate("document.getElementById('detail').textContent")
            assert HOSTILE_HTML in detail
            assert "\\u001b[2J" in detail and "\\u202e" in detail and "\x1b" not in detail
            await page.evaluate(f"location.hash = 'base=' + encodeURIComponent({json.dumps(HOSTILE_BASE)})")
            await page.wait_for("document.querySelector('#tab-pairs.on table.pairs') !== null")
            title = await page.evaluate("document.querySelector('#pairs h3').textContent")
            assert title.startswith('base b<img src=x onerror="window.pwned=3">')
            # No script from the run ran, and no element came from its text.
            assert await page.evaluate("window.pwned === undefined")
            assert await page.evaluate("document.scripts.length") == 2
            assert await page.evaluate("document.images.length") == 1    # the forest plot
            assert await page.evaluate("document.querySelectorAll('[onerror]').length") == 0
            await page.close()

    asyncio.run(scenario())


async def _open_static(page, path: Path) -> None:
    """Open a page without script (study.html) and wait until it has loaded."""
    await page.send("Page.enable")
    await page.send("Page.navigate", url=path.resolve().as_uri())
    await page.wait_for("document.readyState === 'complete' && document.querySelector('main') !== null")


def test_study_html_in_chromium(demo_study, installed, tmp_path):
    """The demo study's study.html opens with its answer, links each guard to its run's report.html,
    embeds its figures, fetches nothing and runs no script; text from the study (its folder's name
    here, markup) is shown as text."""
    assert demo_study.result.code == 0, demo_study.result.err
    hostile = tmp_path / ("study " + MARKUP.replace("/", "|"))
    shutil.copytree(demo_study.study, hostile)
    r = installed.run("study", "report", str(hostile), "--bootstrap", "300")
    assert r.code == 0, r.err

    async def scenario() -> None:
        async with Chromium() as browser:
            for study in (demo_study.study, hostile):
                page = await browser.page()
                await page.send("Network.enable")
                await _open_static(page, study / "study.html")
                first = await page.evaluate("document.querySelector('main section').id")
                assert first == "answer"
                answer = await page.evaluate("document.getElementById('answer').textContent")
                assert "tool_alias: alias-sensitive is the most sensitive" in answer
                assert "robust: no placebo-corrected effect" in answer
                ids = await page.evaluate("Array.from(document.querySelectorAll('main section')).map(s => s.id)")
                assert ids == ["answer", "leaderboard", "pairs", "stability", "guards", "question", "fingerprint",
                               "made"]
                links = await page.evaluate("Array.from(document.querySelectorAll('a.run-report')).map(a => a.href)")
                assert len(links) == 3
                for link in links:
                    assert Path(unquote(urlparse(link).path)).is_file(), link
                images = await page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
                assert images and all(images)
                assert await page.evaluate("document.scripts.length") == 0
                assert await page.evaluate("window.pwned === undefined")
                assert await page.evaluate("document.querySelectorAll('[onerror]').length") == 0
                made = await page.evaluate("document.getElementById('made').textContent")
                assert "guardeval study report" in made or "guardeval demo --study" in made
                if study == hostile:
                    assert MARKUP.replace("/", "|") in await page.evaluate("document.body.textContent")
                urls = [e["params"]["request"]["url"] for e in page.events
                        if e["method"] == "Network.requestWillBeSent"]
                assert urls and all(u.startswith(("file://", "data:")) for u in urls), urls
                await page.close()

    asyncio.run(scenario())
