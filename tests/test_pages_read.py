"""Pages that read cleanly (issue 47, items 6, 7 and 8), measured in a real headless Chromium at
1400 and 1000 pixels, as tests/test_pages_fit.py measures them:

- report.html opened on `#call=<id>` shows the page's header, the calls table scrolled to the
  selected call and the call itself, all in the window (not the call alone under a blank top);
- report.html breaks no condition name inside a word, names which verdict of its last column is
  Δ's and which Δ − placebo's, and its forest plot writes "Δ − placebo" (not "Δ−pl");
- compare.html's figures carry no copy of the inputs' description in their titles, and name
  their p_Holm as the tables do;
- the generated guard-config reference breaks no key inside a word, prints integer ranges as
  integers, and lists every table's heading in its table of contents."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chromium import Chromium, find_chromium, load
from conftest import REPO, cli_env, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed here (apt-get install -y chromium; .ci/run installs it when missing)")]

WIDTHS = (1400, 1000)


async def _at(page, width: int) -> None:
    await page.send("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory, small_cohort) -> Path:
    """The small cohort (16 bases x 5 conditions) twice on the simulator, estimated: 160 calls."""
    from guardeval.backends.sim import SimServerProcess

    run = tmp_path_factory.mktemp("read") / "run"
    with SimServerProcess(["--seed", "7"], env=cli_env()) as sim:
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "sim", "--base-url", sim.base_url, "--reps",
                    "2", "--run-dir", str(run), "--no-progress")
        assert r.code == 0, r.err
    r = run_cli("estimate", str(run), "--bootstrap", "500")
    assert r.code == 0, r.err
    return run / "report.html"


# Where the header, the calls box, its sticky head, the selected row and the call's heading are
# in the window (px from the window's top).
PLACES = """(() => {
  const rect = e => { if (!e) return null; const r = e.getBoundingClientRect(); return [r.top, r.bottom]; };
  const row = document.querySelector('#calls tbody tr.sel');
  return {header: rect(document.querySelector('header h1')), box: rect(document.querySelector('#tab-calls .calls')),
          head: rect(document.querySelector('#calls thead')), row: rect(row), selected: row && row.dataset.callId,
          call: rect(document.querySelector('#detail h3')),
          said: (document.querySelector('#detail h3') || {}).textContent, height: window.innerHeight,
          calls_tab: document.getElementById('tab-calls').classList.contains('on')};
})()"""


def test_a_call_link_opens_on_the_call_with_the_header(report):
    async def scenario() -> dict[int, dict]:
        seen = {}
        async with Chromium() as browser:
            page = await browser.page()
            for width in WIDTHS:
                await _at(page, width)
                await load(page, report)
                ids = await page.evaluate("Array.from(document.querySelectorAll('#calls tbody tr'))"
                                          ".map(tr => tr.dataset.callId)")
                assert len(ids) == 160
                target = ids[120]   # far below the first screenful of the table
                await page.send("Page.navigate", url="about:blank")
                await page.wait_for("location.href === 'about:blank'")
                await load_url(page, report.resolve().as_uri() + "#call=" + target)
                seen[width] = {"target": target, **await page.evaluate(PLACES)}
            await page.close()
        return seen

    for width, p in asyncio.run(scenario()).items():
        assert p["calls_tab"] and p["selected"] == p["target"] and p["said"] == "call " + p["target"], (width, p)
        # the page's header at the top of the window, whole
        assert 0 <= p["header"][0] and p["header"][1] <= p["height"], (width, p)
        # the selected row inside the table's box, below its sticky head
        assert p["head"][1] - 1 <= p["row"][0] and p["row"][1] <= p["box"][1] + 1, (width, p)
        # the call itself (its heading and what follows) in the window too
        assert 0 <= p["call"][0] and p["call"][1] <= p["height"] - 150, (width, p)


async def load_url(page, url: str) -> None:
    await page.send("Page.navigate", url=url)
    await page.wait_for("document.documentElement.dataset.ready === '1'")


# Every condition name in report.html's summary tables that the layout broke inside a word
# ("format_pla|cebo"): each run of letters and digits of the name must sit on one line (a break
# after its _ or - is fine). Read from the text: the names are the run's conditions.
NAMES_BROKEN = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const names = JSON.parse(document.getElementById('guardeval-data').textContent).conditions;
  const out = []; let checked = 0;
  for (const cell of document.querySelectorAll('#tab-summary td')) {
    const text = cell.textContent.trim();
    const name = names.filter(n => text.startsWith(n)).sort((a, b) => b.length - a.length)[0];
    if (!name || !cell.offsetParent) continue;
    checked++;
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let seen = 0;
    for (let n = walk.nextNode(); n && seen < name.length; n = walk.nextNode()) {
      const lead = n.data.length - n.data.trimStart().length;
      const part = seen === 0 ? n.data.slice(lead) : n.data;
      const offset = seen === 0 ? lead : 0;
      const upto = Math.min(part.length, name.length - seen);
      for (const m of part.slice(0, upto).matchAll(/[A-Za-z0-9]+/g)) {
        const r = document.createRange();
        r.setStart(n, offset + m.index); r.setEnd(n, offset + m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
        if (lines.size > 1) out.push(name + ': ' + m[0]);
      }
      seen += upto;
    }
  }
  return {checked, broken: out};
})()"""

# The effects table's last column: its header and each cell's text.
VERDICTS = """(() => {
  const t = document.querySelector('table.contrasts');
  const ths = t.querySelectorAll('thead th');
  return {head: ths[ths.length - 1].textContent,
          cells: Array.from(t.querySelectorAll('tbody tr')).map(tr => tr.lastElementChild.innerText)};
})()"""

# The text of every SVG figure the page embeds (their labels are SVG text).
SVG_TEXT = """Array.from(document.querySelectorAll('img.plot')).map(img => {
  const b64 = img.getAttribute('src').split(',')[1];
  const svg = new TextDecoder().decode(Uint8Array.from(atob(b64), c => c.charCodeAt(0)));
  const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
  return Array.from(doc.querySelectorAll('text')).map(t => t.textContent).join('\\n');
})"""


def _each_width(path: Path, *scripts: str, ready: str | None = None) -> dict[int, list]:
    async def scenario() -> dict[int, list]:
        seen = {}
        async with Chromium() as browser:
            page = await browser.page()
            for width in WIDTHS:
                await _at(page, width)
                if ready is None:
                    await load(page, path)
                else:
                    await page.send("Page.enable")
                    await page.send("Page.navigate", url=path.resolve().as_uri())
                    await page.wait_for(ready)
                seen[width] = [await page.evaluate(s) for s in scripts]
            await page.close()
        return seen

    return asyncio.run(scenario())


def test_report_html_names_read_whole_and_verdicts_say_which(report):
    seen = _each_width(report, NAMES_BROKEN, VERDICTS, SVG_TEXT)
    for width, (names, verdicts, svgs) in seen.items():
        assert names["checked"] >= 5 and names["broken"] == [], (width, names)
        assert "Δ; Δ − placebo" not in verdicts["head"] and verdicts["head"].startswith("verdict"), verdicts["head"]
        assert len(verdicts["cells"]) >= 4
        for cell in verdicts["cells"]:
            assert re.fullmatch(r"Δ: \S.*\nΔ − placebo: \S.*", cell), (width, cell)
        assert len(svgs) == 1
        assert "Δ−pl" not in svgs[0] and "Δ − placebo +" in svgs[0].replace("Δ − placebo −", "Δ − placebo +"), svgs[0]


def test_compare_html_figures_say_what_is_new(tmp_path, small_cohort):
    runs = [tmp_path / name for name in ("a", "b", "c")]
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "python-example", "--reps", "2",
                "--run-dir", str(runs[0]), "--no-progress")
    assert r.code == 0, r.err
    for run in runs[1:]:
        r = run_cli("replicate", str(runs[0]), "--guard", "python-example", "--run-dir", str(run), "--no-progress")
        assert r.code == 0, r.err
    out = tmp_path / "cmp"
    r = run_cli("compare", *map(str, runs), "--label", "first", "--label", "second", "--label", "third",
                "--bootstrap", "300", "--out", str(out))
    assert r.code == 0, r.err
    seen = _each_width(out / "compare.html", SVG_TEXT, "document.body.innerText",
                       ready="document.readyState === 'complete' && !!document.querySelector('table.leaderboard')")
    for width, (svgs, page) in seen.items():
        assert len(svgs) == 4, width   # three pairs and the leaderboard
        # the page lists the inputs once, above the figures
        assert page.count("config python-example") == 3
        for svg in svgs:
            assert "config " not in svg and "answered by" not in svg and "; run " not in svg, svg[:400]
        pair_svgs = svgs[:3]
        for svg in pair_svgs:
            assert "A = " in svg and "B = " in svg
            # each p_Holm named as the tables name them
            assert "corr. p_Holm" not in svg and "Δ p_Holm" not in svg, svg
            assert "p_Holm (Δ − placebo)" in svg and "p_Holm (Δ)" in svg, svg


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


# In the generated guard-config page: every key (first column's code) broken across lines at a
# place other than right after its `_` or `.`; each range cell; each table's heading and the
# table of contents' links.
KEYS = """(() => {
  const out = []; let checked = 0;
  for (const code of document.querySelectorAll('article table td:first-child code')) {
    checked++;
    const chars = [];
    const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (let i = 0; i < n.data.length; i++) {
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const box = r.getClientRects()[0];
        chars.push([n.data[i], box ? Math.round(box.top) : null]);
      }
    }
    for (let i = 1; i < chars.length; i++) {
      if (chars[i][1] !== chars[i - 1][1] && !'_.'.includes(chars[i - 1][0])) {
        out.push(code.textContent + ' at ' + i);
      }
    }
  }
  return {checked, broken: out};
})()"""
RANGES = """(() => {
  const t = document.querySelector('article table');
  const heads = Array.from(t.querySelectorAll('thead th')).map(h => h.textContent.trim());
  const k = heads.indexOf('range');
  const out = {};
  for (const tr of t.querySelectorAll('tbody tr')) out[tr.cells[0].textContent.trim()] = tr.cells[k].textContent.trim();
  return out;
})()"""
TOC = """(() => {
  const toc = Array.from(document.querySelectorAll('.md-sidebar--secondary nav a'))
    .map(a => decodeURIComponent(a.getAttribute('href')));
  const unlisted = [];
  for (const t of document.querySelectorAll('article table')) {
    let e = t.closest('.md-typeset__scrollwrap') || t;
    while (e && e.tagName !== 'H2' && e.tagName !== 'H1') e = e.previousElementSibling;
    if (!e || e.tagName !== 'H2' || !toc.includes('#' + e.id)) unlisted.push(e ? e.textContent : 'no heading');
  }
  return {toc, unlisted, tables: document.querySelectorAll('article table').length};
})()"""


def test_the_guard_config_reference_reads_cleanly(site):
    seen = _each_width(site / "reference" / "guard-config" / "index.html", KEYS, RANGES, TOC,
                       ready="document.readyState === 'complete' && !!document.querySelector('article table')")
    for width, (keys, ranges, toc) in seen.items():
        assert keys["checked"] > 25 and keys["broken"] == [], (width, keys)
        assert toc["tables"] == 2 and toc["unlisted"] == [], (width, toc)
        assert not any("e+" in r or "e-" in r for r in ranges.values()), ranges
        assert ranges["max_tokens"].replace("\u202f", "").replace(",", "") == "1 – 1048576", ranges["max_tokens"]
        assert ranges["seed"] == "−2⁶³ – 2⁶³ − 1" and ranges["max_attempts"] == "1 – 100", ranges
        assert ranges["temperature"] == "0 – 2" and ranges["timeout_s"] == "0.001 – 3600", ranges
    # the repository's placeholder note is not on the built page
    text = (site / "reference" / "guard-config" / "index.html").read_text(encoding="utf-8")
    assert "Generated page." not in text
