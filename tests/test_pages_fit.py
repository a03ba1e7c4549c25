"""Pages that fit (issue 37, item 7), measured in a real headless Chromium at 1400 and 1000 pixels:
report.html's p columns never break a number across lines, and at both widths its effects table,
its families' tables (the contrast diagnostics among them) and the table of every field of its
accuracy need no sideways scroll; study.html's tables (its pairs' B − A tables among them) need none
either; nor do compare.html's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chromium import Chromium, find_chromium, load
from conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed here (apt-get install -y chromium; .ci/run installs it when missing)")]

WIDTHS = (1400, 1000)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory, sim_module) -> Path:
    """The demo design (64 bases x 5 conditions x 3 repetitions) on the simulator, estimated."""
    run = tmp_path_factory.mktemp("fit") / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", "sim", "--base-url", sim_module, "--reps", "3", "--seed", "42",
                "--run-dir", str(run), "--no-progress")
    assert r.code == 0, r.err
    r = run_cli("estimate", str(run), "--bootstrap", "2000")
    assert r.code == 0, r.err
    return run / "report.html"


@pytest.fixture(scope="module")
def sim_module():
    from guardeval.backends.sim import SimServerProcess

    from conftest import cli_env

    with SimServerProcess(["--seed", "7"], env=cli_env()) as sim:
        yield sim.base_url


async def _at(page, width: int) -> None:
    await page.send("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)


# Every word of the effects table's number cells (all but the condition's, which may wrap inside a
# long name) that the layout broke across lines ("8.6e-" / "10"): each one's text range has more
# than one line box. (Read from the text, not from any class the page gives its cells.)
BROKEN = """(() => {
  const out = [];
  for (const td of document.querySelectorAll('table.contrasts td:not(:first-child)')) {
    const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
})()"""
# The effects table, the contrast-diagnostics tables (found by their headings) and the table of
# report.json's accuracy fields (found by its row_f1; its <details> opened) wider than the box they
# sit in (a sideways scroll).
WIDE = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const tables = [['effects', document.querySelector('table.contrasts')]];
  const f1 = Array.from(document.querySelectorAll('table'))
    .find(t => Array.from(t.querySelectorAll('th, td')).some(c => c.textContent.trim() === 'row_f1'));
  tables.push(['row_f1', f1]);
  for (const h of document.querySelectorAll('h3')) {
    if (!h.textContent.startsWith('Contrast diagnostics')) continue;
    let e = h.nextElementSibling;
    while (e && e.tagName !== 'TABLE' && !e.querySelector('table')) e = e.nextElementSibling;
    if (e) tables.push([h.textContent, e.tagName === 'TABLE' ? e : e.querySelector('table')]);
  }
  if (!f1) return ['row_f1 table not found'];
  return tables.filter(([, t]) => t.scrollWidth > t.parentElement.clientWidth + 1)
               .map(([name, t]) => name + ' ' + t.scrollWidth + '>' + t.parentElement.clientWidth)
               .concat(tables.length < 4 ? ['contrast diagnostics not found'] : []);
})()"""


# Every other table of the page (its <details> opened) wider than its box, named by the heading
# above it; the calls browser and the side-by-side pairs scroll by design.
WIDE_ALL = """(() => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const out = [];
  for (const t of document.querySelectorAll('table')) {
    if (t.closest('.calls, .side') || !t.offsetParent) continue;
    if (t.scrollWidth <= t.parentElement.clientWidth + 1) continue;
    let name = '';
    for (let e = t; e && !name; e = e.parentElement) {
      let s = e.previousElementSibling;
      while (s && !/^H[1-4]$/.test(s.tagName)) s = s.previousElementSibling;
      if (s) name = s.textContent;
    }
    out.push(name + ' ' + t.scrollWidth + '>' + t.parentElement.clientWidth);
  }
  return out;
})()"""


def _at_each_width(report: Path, *scripts: str, ready: str | None = None) -> dict[int, list]:
    """Each script's value on `report` at each width, in one browser; `ready`: what says a page
    without report.html's script has loaded."""
    async def scenario() -> dict[int, list]:
        seen = {}
        async with Chromium() as browser:
            page = await browser.page()
            for width in WIDTHS:
                await _at(page, width)
                if ready is None:
                    await load(page, report)
                else:
                    await page.send("Page.enable")
                    await page.send("Page.navigate", url=report.resolve().as_uri())
                    await page.wait_for(ready)
                seen[width] = [await page.evaluate(s) for s in scripts]
            await page.close()
        return seen

    return asyncio.run(scenario())


def test_no_table_of_report_html_scrolls_sideways(demo_report):
    seen = _at_each_width(demo_report, "document.querySelectorAll('table').length", WIDE_ALL)
    assert all(n > 10 for n, _ in seen.values()), seen
    assert {w: wide for w, (_, wide) in seen.items()} == {w: [] for w in WIDTHS}


def test_report_html_fits_and_keeps_every_p_whole(demo_report):
    n_p = ("Array.from(document.querySelectorAll('table.contrasts td'))"
           ".filter(td => /\\de-\\d/.test(td.textContent)).length")
    seen = _at_each_width(demo_report, BROKEN, WIDE, n_p)
    for width, (broken, _, n) in seen.items():
        assert n > 0
        assert broken == [], (width, broken)
    assert {w: s[1] for w, s in seen.items()} == {w: [] for w in WIDTHS}, seen


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    import subprocess
    import sys

    from conftest import REPO, cli_env

    out = tmp_path_factory.mktemp("site") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          env=cli_env({"NO_MKDOCS_2_WARNING": "1"}), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


# Code blocks whose text runs past their box (cut at the right edge, or behind a scrollbar).
CUT = ("Array.from(document.querySelectorAll('pre > code')).filter(c => c.scrollWidth > c.clientWidth + 1)"
       ".map(c => c.textContent.slice(0, 60))")


def test_the_docs_code_blocks_are_not_cut(site):
    pages = ("index.html", "tutorial/index.html", "inspect/index.html", "how-to/python-guard/index.html")

    async def scenario() -> dict[tuple[int, str], list[str]]:
        seen = {}
        async with Chromium() as browser:
            page = await browser.page()
            await page.send("Page.enable")
            for width in WIDTHS:
                await _at(page, width)
                for rel in pages:
                    await page.send("Page.navigate", url=(site / rel).resolve().as_uri())
                    await page.wait_for("document.readyState === 'complete' && !!document.querySelector('h1')")
                    n = await page.evaluate("document.querySelectorAll('pre > code').length")
                    assert n > 0, rel
                    seen[(width, rel)] = await page.evaluate(CUT)
            await page.close()
        return seen

    cut = {k: v for k, v in asyncio.run(scenario()).items() if v}
    assert cut == {}, cut


# Every table wider than its box: its class and width.
WIDE_ANY = ("Array.from(document.querySelectorAll('table')).filter(t => t.scrollWidth > t.parentElement.clientWidth + 1)"
            ".map(t => (t.className || 'table') + ' ' + t.scrollWidth + '>' + t.parentElement.clientWidth)")


# The leaderboard's tables (the section, not a class the page gives them) wider than their box.
BOARD_WIDE = ("Array.from(document.querySelectorAll('#leaderboard table'))"
              ".filter(t => t.scrollWidth > t.parentElement.clientWidth + 1).map(t => t.scrollWidth)")


def test_study_html_leaderboards_show_every_column(tmp_path, small_cohort):
    """Two guards with long labels on a labelled cohort (so the leaderboard has its accuracy and
    rank-by-accuracy columns): at 1400 and at 1000 pixels no table of study.html (its leaderboards
    and its pair's B − A tables among them) needs a sideways scroll."""
    study = tmp_path / "study"
    r = run_cli("study", "launch", "--cohort", str(small_cohort), "--guard", "python-example", "--guard",
                "python-example", "--label", "shortcut-keywords", "--label", "alias-sensitive-keywords", "--reps", "2",
                "--study-dir", str(study), "--no-progress")
    assert r.code == 0, r.err
    r = run_cli("study", "report", str(study), "--bootstrap", "300")
    assert r.code == 0, r.err

    async def scenario() -> dict[int, tuple[list[str], int, list[int]]]:
        seen = {}
        async with Chromium() as browser:
            page = await browser.page()
            await page.send("Page.enable")
            for width in WIDTHS:
                await _at(page, width)
                await page.send("Page.navigate", url=(study / "study.html").resolve().as_uri())
                await page.wait_for("document.readyState === 'complete' && !!document.querySelector('#leaderboard table')")
                heads = await page.evaluate("Array.from(document.querySelectorAll('#leaderboard table thead th'))"
                                            ".filter(h => h.textContent.startsWith('rank by accuracy')).length")
                n_pair = await page.evaluate("document.querySelectorAll('#pairs table').length")
                seen[width] = (await page.evaluate(WIDE_ANY), heads, await page.evaluate(BOARD_WIDE), n_pair)
            await page.close()
        return seen

    seen = asyncio.run(scenario())
    for width in WIDTHS:
        assert seen[width][1] > 0 and seen[width][3] >= 2, seen[width]
        assert seen[width][0] == [] and seen[width][2] == [], (width, seen[width])


def test_no_table_of_compare_html_scrolls_sideways(tmp_path, small_cohort):
    """Three guards with long labels on a labelled cohort (so its leaderboards carry accuracy and
    its ranks): at 1400 and at 1000 pixels no table of compare.html (each pair's two B − A tables,
    the leaderboards) needs a sideways scroll."""
    runs = [tmp_path / name for name in ("a", "b", "c")]
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "python-example", "--reps", "2",
                "--run-dir", str(runs[0]), "--no-progress")
    assert r.code == 0, r.err
    for run in runs[1:]:
        r = run_cli("replicate", str(runs[0]), "--guard", "python-example", "--run-dir", str(run), "--no-progress")
        assert r.code == 0, r.err
    out = tmp_path / "cmp"
    r = run_cli("compare", *map(str, runs), "--label", "shortcut-keywords-first", "--label",
                "alias-sensitive-keywords-second", "--label", "robust-keywords-third", "--bootstrap", "300",
                "--out", str(out))
    assert r.code == 0, r.err
    seen = _at_each_width(out / "compare.html", "document.querySelectorAll('table').length", WIDE_ALL,
                          "Array.from(document.querySelectorAll('th')).filter(h => h.textContent.startsWith("
                          "'rank by accuracy')).length",
                          ready="document.readyState === 'complete' && !!document.querySelector('table.leaderboard')")
    # 3 pairs x 2 B − A tables, and a leaderboard per condition
    assert all(n >= 6 + 5 and ranks > 0 for n, _, ranks in seen.values()), seen
    assert {w: wide for w, (_, wide, _) in seen.items()} == {w: [] for w in WIDTHS}
