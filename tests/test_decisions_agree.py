"""One decision, every surface (issue 38 §3): for a run whose placebo moves the guard, a compare of
two runs on one schedule and a study, every row of every output — the terminal text, `--json`,
report.md/.html, compare.md/.html, study.md/.html and the API's records — shows the star, the
verdict and the words of the one decision record the estimators made for that (quantity, row).

The record is the `equivalence…` record on each contrast or difference (decisions.decide_family).
The placebo's own row in an estimate is never starred: its Δ is decided in the Δ family and said
in words, so a surface that stars it by that Δ decision disagrees."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from guardeval import api

from conftest import cli_env, run_cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
PLACEBO = "format_placebo"
BOOT = "200"

# A guard the placebo moves: indentation in the rendered text (what format_placebo changes) tips a
# third of its calls to block, so the placebo's Δ differs from 0 and its row is a real test.
FMT_GUARD = '''
from keyword_guard import guard as keyword


def guard(inp):
    text = "".join(m["content"] for m in inp.messages)
    if '\\n  "' in text and sum(map(ord, inp.call_id)) % 3 == 0:
        return {"malicious_user_request": True, "third_party_attack": True, "current_action_harmfulness": 1.0}
    return keyword(inp)
'''
FMT_TOML = ('name = "fmt"\nbackend = "python"\ncallable = "fmt_guard:guard"\nmodel = "fmt"\n'
            'prompt = "guardeval-json-v1"\ntimeout_s = 10\nconcurrency = 8\n')


# -- the one record, read independently of every surface -----------------------------------------

def pval(p: float | None) -> str:
    return "—" if p is None else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


def short(eq: Mapping[str, Any] | None) -> str:
    if not eq or eq.get("verdict") is None:
        return "—"
    m = eq.get("mde")
    return f"{eq['verdict']}; MDE {'—' if m is None else f'{m:.4f}'}"


def headline_record(c: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return c.get("equivalence_minus_placebo") or c.get("equivalence")


def estimate_star(c: Mapping[str, Any]) -> bool:
    """An estimate row's star: its headline decision; never the placebo's own row."""
    if c["condition"] == PLACEBO:
        return False
    h = headline_record(c)
    return bool(h and h["differs"])


# -- tables of every format as (header, rows of cells) ---------------------------------------------

@dataclass
class Table:
    head: list[str]
    rows: list[list[str]] = field(default_factory=list)
    flagged: list[bool] = field(default_factory=list)   # HTML: <tr class="significant">


class Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._flag = False
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append(Table(head=[]))
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row, self._flag = [], "significant" in (dict(attrs).get("class") or "")
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            t = self.tables[-1]
            if self._in_head or not t.head:
                t.head = self._row
            else:
                t.rows.append(self._row)
                t.flagged.append(self._flag)
            self._row = None
        elif tag == "thead":
            self._in_head = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(path: Path) -> list[Table]:
    p = Tables()
    p.feed(path.read_text(encoding="utf-8"))
    return p.tables


def md_tables(text: str) -> list[Table]:
    out: list[Table] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---") and i > 0:
            t = Table(head=_md_cells(lines[i - 1]))
            for row in lines[i + 1:]:
                if not row.startswith("|"):
                    break
                t.rows.append(_md_cells(row))
            out.append(t)
    return out


def _md_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def label_of(cell: str) -> tuple[str, bool]:
    """(condition, starred) of a row's first cell: 'tool_alias *', 'format_placebo (placebo)'."""
    words = cell.replace("(placebo)", " ").split()
    return words[0], "*" in words[1:]


# -- the checks ------------------------------------------------------------------------------------

def check_estimate_table(t: Table, contrasts: Mapping[str, Mapping[str, Any]], where: str) -> int:
    """Every row of an effects table (markdown or HTML): star, the two p_Holm and the two verdicts."""
    checked = 0
    for i, row in enumerate(t.rows):
        cond, star = label_of(row[0])
        c = contrasts[cond]
        cell = dict(zip(t.head, row))
        what = f"{where}: {cond}"
        assert star == estimate_star(c), what
        if t.flagged:
            assert t.flagged[i] == estimate_star(c), what
        eq, eq_mp = c.get("equivalence"), c.get("equivalence_minus_placebo")
        for name, value in cell.items():
            if name.startswith("p_Holm (delta)") or name == "p_Holm (Δ)":
                assert value == pval(eq and eq["p_adjusted"]), what
            elif name == "p_Holm (corr.)":
                assert value == pval(eq_mp and eq_mp["p_adjusted"]), what
            elif name.startswith("delta: ±"):
                assert value == short(eq), what
            elif name.startswith("corr.: verdict"):
                assert value == short(eq_mp), what
            elif name.startswith("verdict; MDE (Δ") and value.startswith("Δ: "):   # report.html: each named
                assert value == f"Δ: {short(eq)} Δ − placebo: {short(eq_mp)}", what
            elif name.startswith("verdict; MDE (Δ"):   # report.md and the terminal: 'Δ's · Δ − placebo's'
                assert value == f"{short(eq)} · {short(eq_mp)}", what
        checked += 1
    return checked


def check_difference_table(t: Table, conditions: Mapping[str, Mapping[str, Any]], where: str) -> int:
    """A compare table of B − A: the headline table (corrected) or Δ's; each row's star, p_Holm and
    verdict are its difference's decision in that quantity's family."""
    key = "equivalence_minus_placebo" if any("Δ − placebo" in h for h in t.head) else "equivalence"
    checked = 0
    for row in t.rows:
        cond, star = label_of(row[0])
        eq = conditions[cond].get(key)
        cell = dict(zip(t.head, row))
        what = f"{where} ({key}): {cond}"
        assert star == bool(eq and eq["differs"]), what
        assert cell["p_Holm"] == pval(eq and eq["p_adjusted"]), what
        assert cell["verdict; MDE"] == short(eq), what
        checked += 1
    return checked


WORDS = re.compile(r"(not significant|significant) after Holm over (.+?) \(p_Holm (\S+)\)")


def check_words(sentence: str, eq: Mapping[str, Any] | None, where: str) -> None:
    m = WORDS.search(sentence)
    assert m is not None and eq is not None, where
    assert (m[1] == "significant") == bool(eq["differs"]), where
    assert m[2] == eq["family"], where


def check_estimate_words(lines: list[str], contrasts: Mapping[str, Mapping[str, Any]], where: str) -> int:
    """The 'In words' bullets: each condition's sentence carries its headline's decision (the
    placebo's: its Δ's, in the Δ family)."""
    n = 0
    for cond, c in contrasts.items():
        found = [s for s in lines if s.startswith(f"{cond} ") or s.startswith(f"{cond}:")]
        assert len(found) == 1, (where, cond, lines)
        check_words(found[0], c["equivalence"] if cond == PLACEBO else headline_record(c), f"{where}: {cond}")
        n += 1
    return n


def check_difference_words(lines: list[str], conditions: Mapping[str, Mapping[str, Any]], where: str) -> int:
    """compare's bullets: '<condition> (Δ − placebo): …; significant after Holm over …', and
    where the placebo failed, the Δ's sentence beside it."""
    n = 0
    for line in lines:
        parts = re.split(r"(?:^|: )([a-z_]+) \((Δ − placebo|Δ)\): ", line)
        for cond, q, rest in zip(parts[1::3], parts[2::3], parts[3::3]):
            key = "equivalence_minus_placebo" if q == "Δ − placebo" else "equivalence"
            check_words(rest, conditions[cond][key], f"{where}: {cond} ({q})")
            n += 1
    return n


def bullets(text: str) -> list[str]:
    """The 'In words' bullets of a terminal text, each joined onto one line (a bullet ends at an
    empty line, a table's line (columns: runs of spaces) or the next bullet)."""
    out: list[str] = []
    open_ = False
    for line in text.splitlines():
        if line.startswith("- "):
            out.append(line[2:])
            open_ = True
        elif open_ and line.strip() and "   " not in line.strip():
            out[-1] += " " + line
        else:
            open_ = False
    return [" ".join(b.split()) for b in out]


def terminal_estimate_rows(text: str, contrasts: Mapping[str, Mapping[str, Any]]) -> int:
    """The terminal effects table: a row per condition, its star, its p_Holm (the headline's)."""
    n = 0
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] not in contrasts or not any(re.fullmatch(r"\d+/\d+/\d+", w) for w in words):
            continue
        cond, c = words[0], contrasts[words[0]]
        starred = "*" in words[1:3]
        assert starred == estimate_star(c), f"terminal: {cond}"
        h = c["equivalence"] if cond == PLACEBO else headline_record(c)
        assert pval(h and h["p_adjusted"]) in words, f"terminal p_Holm: {cond}"
        n += 1
    return n


def terminal_difference_tables(text: str, conditions: Mapping[str, Mapping[str, Any]]) -> int:
    """The terminal's two B − A tables (fixed-width columns under a dashed rule)."""
    lines = text.splitlines()
    n = 0
    for i, line in enumerate(lines):
        if not re.fullmatch(r"-+( +-+)+", line) or not lines[i - 1].startswith("condition"):
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", line)]
        head = [lines[i - 1][a:b + 1].strip() if k + 1 < len(spans) else lines[i - 1][a:].strip()
                for k, (a, b) in enumerate(spans)]
        t = Table(head=head)
        for row in lines[i + 1:]:
            if not row.strip():
                break
            t.rows.append([row[a:spans[k + 1][0]].strip() if k + 1 < len(spans) else row[a:].strip()
                           for k, (a, _) in enumerate(spans)])
        n += check_difference_table(t, conditions, "compare terminal")
    return n


# -- the runs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("agree")
    guards = base / "guards"
    guards.mkdir()
    shutil.copy(REPO / "guards" / "keyword_guard.py", guards / "keyword_guard.py")
    (guards / "fmt_guard.py").write_text(FMT_GUARD, encoding="utf-8")
    (guards / "fmt.toml").write_text(FMT_TOML, encoding="utf-8")
    run_a = api.launch("demo", guards / "fmt.toml", reps=1, run_dir=base / "a")
    assert run_a.complete
    run_b = api.replicate(base / "a", "python-example", run_dir=base / "b")
    assert run_b.complete
    st = api.study_launch("demo", [guards / "fmt.toml", "python-example"], labels=["fmt", "kw"], reps=1,
                          study_dir=base / "study")
    assert st.complete
    return {"base": base, "a": base / "a", "b": base / "b", "study": base / "study", "guards": guards}


def env(made: dict[str, Path]) -> dict[str, str]:
    # The subprocess verifies the runs' callables: their modules are on its path. A wide terminal
    # keeps each table row on one line (the width otherwise follows the caller's COLUMNS).
    e = cli_env()
    return {"PYTHONPATH": f"{made['guards']}:{e.get('PYTHONPATH', '')}", "COLUMNS": "200"}


@pytest.fixture(autouse=True)
def guards_on_path(made: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(made["guards"]))


def by_condition(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["condition"]: r for r in records}


def test_an_estimate_says_one_decision_everywhere(made: dict[str, Path]) -> None:
    run = made["a"]
    term = run_cli("estimate", str(run), "--bootstrap", BOOT, env=env(made))
    assert term.code == 0, term.err
    js = run_cli("estimate", str(run), "--bootstrap", BOOT, "--json", env=env(made))
    assert js.code == 0, js.err
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    contrasts = by_condition(report["contrasts"])
    placebo = contrasts[PLACEBO]
    # The run is the one this test needs: the placebo moved the guard, and interventions are starred.
    assert placebo["equivalence"]["differs"] and placebo["headline"] == "placebo"
    assert any(estimate_star(c) for c in contrasts.values())

    # --json: the same records, key for key, as report.json.
    cli = by_condition(json.loads(js.out)["contrasts"])
    for cond, c in contrasts.items():
        for key in ("equivalence", "equivalence_minus_placebo", "headline", "p_holm", "p_holm_minus_placebo"):
            assert cli[cond].get(key) == c.get(key), (cond, key)

    assert terminal_estimate_rows(term.out, contrasts) == len(contrasts)
    assert check_estimate_words(bullets(term.out), contrasts, "estimate terminal") == len(contrasts)

    md = (run / "report.md").read_text(encoding="utf-8")
    effects_md = [t for t in md_tables(md) if t.head and t.head[0] == "condition" and "p_Holm (corr.)" in t.head]
    assert len(effects_md) == 1
    assert check_estimate_table(effects_md[0], contrasts, "report.md") == len(contrasts)

    tables = html_tables(run / "report.html")
    effects_html = [t for t in tables if t.head and t.head[0] == "condition" and "p_Holm (corr.)" in t.head]
    assert len(effects_html) == 1
    assert check_estimate_table(effects_html[0], contrasts, "report.html") == len(contrasts)

    est = api.estimate(run, n_boot=int(BOOT), write=False)
    assert len(est.effects) == len(contrasts)
    for e in est.effects:
        c = contrasts[e.condition]
        assert e.starred == e.significant == estimate_star(c), e.condition
        assert e.p_holm == c["equivalence"]["p_adjusted"], e.condition
        for got, eq in ((e.verdict, c.get("equivalence")), (e.verdict_minus_placebo, c.get("equivalence_minus_placebo"))):
            assert (got is None) == (eq is None), e.condition
            if got is not None and eq is not None:
                assert (got.differs, got.verdict, got.p_adjusted) == (eq["differs"], eq["verdict"], eq["p_adjusted"])


def test_an_estimate_with_condition_families_says_one_decision_everywhere(made: dict[str, Path]) -> None:
    """Issue 48: a cohort whose record names condition families is decided within each family,
    with two placebos (format_placebo for every family without its own, schema_placebo for the
    schemas family); every surface reads the same records."""
    from guardeval.cohorts.builders.demo import build_demo

    cohort = build_demo(made["base"] / "families", "format_placebo,tool_alias,arg_alias,arg_threat,arg_matched,"
                                                   "schema_placebo")
    run = made["base"] / "fam-run"
    assert api.launch(cohort, "python-example", reps=1, run_dir=run).complete
    term = run_cli("estimate", str(run), "--bootstrap", BOOT, env=env(made))
    assert term.code == 0, term.err
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    contrasts = by_condition(report["contrasts"])
    assert contrasts["schema_placebo"]["headline"] == "placebo" and contrasts["format_placebo"]["headline"] == "placebo"
    assert contrasts["arg_threat"]["equivalence_minus_placebo"]["family"] == "the arguments family (3 interventions)"
    assert estimate_star(contrasts["arg_threat"]) and not estimate_star(contrasts["schema_placebo"])
    assert terminal_estimate_rows(term.out, contrasts) == len(contrasts)
    assert check_estimate_words(bullets(term.out), contrasts, "estimate terminal") == len(contrasts)
    assert "Worst case over the arguments family" in term.out
    md = (run / "report.md").read_text(encoding="utf-8")
    effects_md = [t for t in md_tables(md) if t.head and t.head[0] == "condition" and "p_Holm (corr.)" in t.head]
    assert len(effects_md) == 1 and check_estimate_table(effects_md[0], contrasts, "report.md") == len(contrasts)
    tables = html_tables(run / "report.html")
    effects_html = [t for t in tables if t.head and t.head[0] == "condition" and "p_Holm (corr.)" in t.head]
    assert len(effects_html) == 1 and check_estimate_table(effects_html[0], contrasts, "report.html") == len(contrasts)
    est = api.estimate(run, n_boot=int(BOOT), write=False)
    for e in est.effects:
        c = contrasts[e.condition]
        assert e.starred == e.significant == estimate_star(c), e.condition


def check_comparison(conditions: dict[str, dict[str, Any]], md: str, html: Path, where: str) -> None:
    n_md = sum(check_difference_table(t, conditions, f"{where}.md") for t in md_tables(md)
               if t.head and t.head[0] == "condition" and "p_Holm" in t.head)
    n_html = sum(check_difference_table(t, conditions, f"{where}.html") for t in html_tables(html)
                 if t.head and t.head[0] == "condition" and "p_Holm" in t.head)
    headline_rows = sum(c.get("equivalence_minus_placebo") is not None for c in conditions.values())
    assert n_md == n_html == len(conditions) + headline_rows


def test_a_comparison_says_one_decision_everywhere(made: dict[str, Path]) -> None:
    out = made["base"] / "cmp"
    args = ("compare", str(made["a"]), str(made["b"]), "--bootstrap", BOOT)
    term = run_cli(*args, "--full", "--out", str(out), env=env(made))     # every table in the terminal
    assert term.code == 0, term.err
    js = run_cli(*args, "--json", "--out", str(made["base"] / "cmp-json"), env=env(made))
    assert js.code == 0, js.err
    result = json.loads(js.out)
    conditions = by_condition(result["conditions"])
    assert conditions[PLACEBO]["equivalence"]["differs"]   # the placebo row's B − A of Δ is decided, starred

    headline_rows = sum(c.get("equivalence_minus_placebo") is not None for c in conditions.values())
    assert terminal_difference_tables(term.out, conditions) == len(conditions) + headline_rows
    assert check_difference_words(bullets(term.out), conditions, "compare terminal") >= len(conditions)
    check_comparison(conditions, (out / "compare.md").read_text(encoding="utf-8"), out / "compare.html", "compare")

    cmp = api.compare(made["a"], made["b"], n_boot=int(BOOT), write=False)
    assert len(cmp.conditions) == len(conditions)
    for d in cmp.conditions:
        c = conditions[d.condition]
        for got, eq in ((d.verdict, c.get("equivalence")), (d.verdict_minus_placebo, c.get("equivalence_minus_placebo"))):
            assert (got is None) == (eq is None), d.condition
            if got is not None and eq is not None:
                assert (got.differs, got.verdict, got.p_adjusted) == (eq["differs"], eq["verdict"], eq["p_adjusted"])
        assert d.p_holm == c["equivalence"]["p_adjusted"]
        assert d.significant == bool(headline_record(c)["differs"]), d.condition


def test_a_study_says_one_decision_everywhere(made: dict[str, Path]) -> None:
    study = made["study"]
    term = run_cli("study", "report", str(study), "--bootstrap", BOOT, env=env(made))
    assert term.code == 0, term.err
    js = run_cli("study", "report", str(study), "--bootstrap", BOOT, "--json", env=env(made))
    assert js.code == 0, js.err
    rep = json.loads(js.out)
    pair = rep["compare"]["pairs"][0]
    conditions = by_condition(pair["conditions"])
    check_comparison(conditions, (study / "study.md").read_text(encoding="utf-8"), study / "study.html", "study")

    # The answer: whether a difference holds is that pair's headline decision, said in its words.
    lines = [" ".join(line.split()) for line in term.out.splitlines()]
    for a in rep["answer"]["conditions"]:
        eq = headline_record(conditions[a["condition"]])
        assert eq is not None
        assert a["holds"] == eq["differs"] and a["p_adjusted"] == eq["p_adjusted"] and a["family"] == eq["family"]
        said = [s for s in lines if s.startswith(f"{a['condition']}: ")]
        assert len(said) == 1 and ("The difference holds after" in said[0]) == bool(eq["differs"]), a["condition"]
        assert f"p_adj {pval(eq['p_adjusted'])}, {eq['family']}" in said[0]
    # Each guard's corrected effects: its own run's decisions.
    for g in rep["answer"]["guards"]:
        own = json.loads((study / "runs" / g["label"] / "report.json").read_text(encoding="utf-8"))
        contrasts = by_condition(own["contrasts"])
        for e in g["checked"]:
            eq = contrasts[e["condition"]]["equivalence_minus_placebo"]
            assert (e["differs"], e["p_adjusted"], e["family"]) == (eq["differs"], eq["p_adjusted"], eq["family"])
        assert g["effects"] == [e["condition"] for e in g["checked"] if e["differs"]]

    res = api.study_report(study, n_boot=int(BOOT), write=False)
    assert res.holds == {a["condition"]: a["holds"] for a in rep["answer"]["conditions"]}
    assert res.corrected_effects == {g["label"]: g["effects"] for g in rep["answer"]["guards"]}
