"""Seeing a run without a browser: export (CSV/JSONL/Parquet joined across the run's files),
show (one call's story, escaped), the terminal table at 80 columns, the plots, report.html's
embedded data (escaping, large-run selection), compare's files, and their errors."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections import Counter
from html import escape as html_escape
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardeval.estimators.report.definitions import DEFINITIONS
from guardeval.estimators.report.formats import pval, rules_differ
from guardeval.estimators.report.plot import forest_plot
from guardeval.estimators.report.report import human_text
from guardeval.estimators.report.rows import effect_rows
from guardeval.run.run import Run
from guardeval.view.calls import EXPORT_COLUMNS, load_calls
from guardeval.view.html import build_html, json_for_script, select_calls, verify_summary

from conftest import INSTALLED_WHEEL, REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(INSTALLED_WHEEL)]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line]   # U+2028 is data


def _embedded(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="guardeval-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


# -- export ----------------------------------------------------------------------------------------

def test_export_csv_is_the_join_of_the_run_files(demo_run, tmp_path):
    run = demo_run.run
    out = tmp_path / "calls.csv"
    r = run_cli("export", str(run), "--out", str(out))
    assert r.code == 0, r.err
    assert r.out.strip() == str(out)
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(EXPORT_COLUMNS)
    schedule = _jsonl(run / "schedule.jsonl")
    assert [r["call_id"] for r in rows] == [s["call_id"] for s in schedule]      # schedule order
    decisions = {d["call_id"]: d for d in _jsonl(run / "decisions.jsonl")}
    raw = _jsonl(run / "raw.jsonl")
    by_seq = {a["seq"]: a for a in raw}
    attempts = Counter(a["call_id"] for a in raw)
    cells = {(i["base_id"], i["condition"]): i for i in _jsonl(run / "cohort" / "instances.jsonl")}
    text = lambda v: "" if v is None else str(v)  # noqa: E731
    for row, s in zip(rows, schedule):
        d = decisions[row["call_id"]]
        final = by_seq[d["raw_seq"]]
        for key in ("base_id", "interaction_id", "domain", "condition", "repetition"):
            assert row[key] == text(s[key])
        assert row["label"] == text(cells[(s["base_id"], s["condition"])]["label"])
        assert row["tool"] == cells[(s["base_id"], s["condition"])]["tool"]
        for key in ("decision", "score", "status", "quarantine_reason"):
            assert row[key] == text(d[key]), key
        assert int(row["attempts"]) == attempts[row["call_id"]]
        assert row["latency_s"] == text(final["latency_s"])
        assert row["provider"] == final["provider"] and row["finish_reason"] == final["finish_reason"]
        spend = sum(a["usage"]["cost"] for a in raw if a["call_id"] == row["call_id"] and "cost" in a["usage"])
        assert float(row["cost"]) == pytest.approx(spend, abs=1e-12)
    assert any(int(r["attempts"]) > 1 for r in rows)      # the demo's 429s and 5xx: some calls retried


def test_export_jsonl_stdout_and_parquet(demo_run, tmp_path):
    run = demo_run.run
    r = run_cli("export", str(run), "--format", "jsonl", "--out", "-")
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert len(rows) == 960 and list(rows[0]) == list(EXPORT_COLUMNS)
    r = run_cli("export", str(run), "--out", "-")
    assert list(csv.DictReader(io.StringIO(r.out)))[5]["call_id"] == rows[5]["call_id"]
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is the optional `parquet` extra")
    out = tmp_path / "calls.parquet"
    assert run_cli("export", str(run), "--format", "parquet", "--out", str(out)).code == 0
    assert pq.read_table(out).to_pylist() == rows


def test_export_errors_exit_2_and_write_nothing(demo_run, tmp_path):
    r = run_cli("export", str(demo_run.run), "--format", "parquet", "--out", "-")
    assert r.code == 2 and "--out FILE" in r.err and r.out == ""
    r = run_cli("export", str(demo_run.run), "--out", str(tmp_path / "missing" / "calls.csv"))
    assert r.code == 2 and "no such folder" in r.err
    r = run_cli("export", str(tmp_path))
    assert r.code == 2 and "not a run folder" in r.err and "Traceback" not in r.err
    assert list(tmp_path.iterdir()) == []


# -- show ------------------------------------------------------------------------------------------

def test_show_tells_one_calls_story(demo_run):
    run = demo_run.run
    raw = _jsonl(run / "raw.jsonl")
    ok = {d["call_id"] for d in _jsonl(run / "decisions.jsonl") if d["status"] == "ok"}
    attempts: dict[str, int] = {}
    for a in raw:
        attempts[a["call_id"]] = attempts.get(a["call_id"], 0) + 1
    # Which call is retried, and how often, depends on the order answers arrive in: pick one
    # retried exactly once and then answered.
    cid = sorted(c for c, n in attempts.items() if n == 2 and c in ok)[0]
    r = run_cli("show", str(run), cid)
    assert r.code == 0, r.err
    assert f"call {cid}" in r.out and "attempts (2)" in r.out and "=== USER REQUEST ===" in r.out
    for a in (a for a in raw if a["call_id"] == cid):
        assert a["response"] in r.out and a["response_sha256"] in r.out
    assert "decision: status ok" in r.out and "(matches)" in r.out and "DIFFERS" not in r.out
    story = json.loads(run_cli("show", str(run), cid, "--json").out)
    assert [a["attempt"] for a in story["attempts"]] == [1, 2] and story["decision"]["call_id"] == cid


def test_show_escapes_control_characters_and_refuses_bad_ids(hostile_run):
    decisions = _jsonl(hostile_run / "decisions.jsonl")
    cid = next(d["call_id"] for d in decisions if d["status"] == "unparseable")
    r = run_cli("show", str(hostile_run), cid)
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and "\u202e" not in r.out and "\x07" not in r.out
    assert "\\x1b[2J" in r.out and "\\u202e" in r.out
    r = run_cli("show", str(hostile_run), "../../etc/passwd")
    assert r.code == 2 and "not a call id" in r.err and r.out == ""
    r = run_cli("show", str(hostile_run), "0" * 32)
    assert r.code == 2 and "no call" in r.err


# -- terminal table and plots ------------------------------------------------------------------------

def test_effects_table_fits_80_columns_with_definitions_once(demo_run, monkeypatch):
    report = json.loads((demo_run.run / "report.json").read_text())
    monkeypatch.setenv("COLUMNS", "80")
    text = human_text(report)
    assert max(len(line) for line in text.splitlines()) <= 80
    for c in report["contrasts"]:
        assert c["condition"] in text
        assert f"{c['delta']:+.3f}" in text
    assert text.count("Δ − placebo:") == 1 and text.count("p_Holm:") == 1
    wide = human_text(report, width=160)
    for shown in (text, wide):          # every p_Holm whole, never cut to "1.5e-…"
        for r in effect_rows(report):
            assert f" {pval(r.headline_p)} " in shown, pval(r.headline_p)
    line = next(ln for ln in wide.splitlines() if ln.startswith("tool_alias"))
    assert "[" in line and line.count("[") == 2        # both intervals beside their estimates


def test_plots_rules_and_hostile_labels(demo_run, hostile_run, tmp_path):
    demo = json.loads((demo_run.run / "report.json").read_text())
    hostile = json.loads((hostile_run / "report.json").read_text())
    assert not rules_differ(demo)            # no failed calls: one marker per estimate
    assert rules_differ(hostile)             # unparseable answers: the rules disagree
    odd = json.loads(json.dumps(hostile))
    for c in odd["contrasts"]:
        c["condition"] = "$\\frac{" + c["condition"] + "\x1b[2J"    # mathtext would choke on this
    forest_plot(odd, tmp_path / "odd.png", title="$x^{ \x07")
    assert (tmp_path / "odd.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- report.html -----------------------------------------------------------------------------------

@given(st.text())
def test_json_for_script_cannot_close_the_script(text):
    out = json_for_script({"k": text, text: [text]})
    assert not set(out) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(out) == {"k": text, text: [text]}


def test_report_command_and_embedded_data(demo_run, tmp_path):
    out = tmp_path / "r.html"
    r = run_cli("report", str(demo_run.run), "--out", str(out))
    assert r.code == 0, r.err
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*(?!["']?data:)""", html)      # nothing but data: URIs
    data = _embedded(html)
    assert len(data["rows"]) == 960 and len(data["details"]) == 960 and data["complete"] is True
    raw = _jsonl(demo_run.run / "raw.jsonl")
    assert sum(len(d["attempts"]) for d in data["details"].values()) == len(raw)
    assert len(data["bodies"]) == len({a["request_sha256"] for a in raw})   # each body stored once


def test_report_out_is_checked_like_export_out(demo_run, tmp_path):
    # --out names a file: a folder, or a file in a folder that does not exist, is a usage error
    # (exit 2) and nothing is written anywhere (not beside the folder either).
    folder = tmp_path / "reports"
    folder.mkdir()
    for out, words in ((folder, "is a folder"), (tmp_path / "missing" / "r.html", "no such folder")):
        r = run_cli("report", str(demo_run.run), "--out", str(out))
        assert r.code == 2 and words in r.err and r.out == "" and "Traceback" not in r.err, r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"] and list(folder.iterdir()) == []


def test_report_html_shows_every_estimator_family_as_report_md_does(demo_run):
    # The quantities of docs/estimators.md have their own tables in report.html, with the same
    # numbers as report.md and their definitions one click away; nothing is left to the
    # generic "More in report.json" tables but keys this version does not know.
    from guardeval.estimators.report.report import markdown
    from guardeval.estimators.report.sections import family_sections, labels

    report = json.loads((demo_run.run / "report.json").read_text())
    report["notes"] = ["placebo: format_placebo (chosen by its name)"]
    report["future_quantity"] = {"original": {"x": 1}}
    with Run.using(demo_run.run) as run:
        html = build_html(load_calls(run), report, {"ok": True, "how": "test", "problems": []})
    md = markdown(report)
    for sec in [*family_sections(report), *labels(report)]:
        assert f"## {sec.title}" in md and f">{sec.title}</h3>" in html, sec.title
        for row in sec.rows:
            for cell in row:
                assert cell.replace("|", "\\|") in md and html_escape(cell) in html, (sec.title, cell)
    assert re.findall(r'id="more-([a-z_]+)"', html) == ["future_quantity"]
    for term in ("sign test by interaction", "exact CI over calls", "repeat disagreement", "drift",
                 "miss rate", "AUC"):
        assert f"<dt>{term}</dt>" in html, term
    assert "Note: placebo: format_placebo (chosen by its name)" in html


def test_report_html_of_a_report_json_from_before_the_diagnostic_families(demo_run):
    # `guardeval report` on a run estimated by an earlier version: its report.json lacks the
    # issue-12 quantities; the page is still written, with what the file has.
    report = json.loads((demo_run.run / "report.json").read_text())
    for key in ("notes", "repetitions", "block_rate_ci", "block_rate_exact_ci", "block_rate_by_rule", "stability",
                "worst_case", "order", "missing"):
        del report[key]
    for c in report["contrasts"]:
        for key in [k for k in c if k.startswith(("sign_test", "by_repetition", "flip_counts", "unanimous",
                                                  "accuracy_delta", "leave_one_tool_out", "increase_minus",
                                                  "decrease_minus", "tie_minus"))]:
            del c[key]
    for a in report["accuracy"].values():
        for key in ("row_accuracy", "row_accuracy_ci", "interaction_accuracy", "interaction_accuracy_ci", "auc",
                    "tpr_at_1pct_fpr", "n_scored"):
            del a[key]
    with Run.using(demo_run.run) as run:
        html = build_html(load_calls(run), report, {"ok": True, "how": "test", "problems": []})
    assert ">Effects</h2>" in html and "Stability</h3>" not in html and "row F1" in html


def test_large_run_embeds_a_selection_with_every_flip(demo_run):
    with Run.using(demo_run.run) as run:   # the rows read the folder as they are selected
        calls = load_calls(run)
        sel = select_calls(calls, full_max=100, sample_calls=60, detail_cap=50)
        chosen = [calls.rows[i] for i in sel.rows]
        flips = [r for r in calls.rows if r["flip"]]
        assert flips and all(r in chosen for r in flips)
        pairs = {(r["base_id"], r["repetition"]) for r in flips}
        assert all(any(c["condition"] == calls.baseline and (c["base_id"], c["repetition"]) == p for c in chosen)
                   for p in pairs)
        assert len(sel.details) == 50 and not sel.complete and "of 960 calls embedded" in sel.note
        report = json.loads((demo_run.run / "report.json").read_text())
        data = _embedded(build_html(calls, report, {"ok": True, "how": "test", "problems": []}, sel))
        assert len(data["rows"]) == len(sel.rows) < 960 and len(data["details"]) == 50
        assert data["note"] == sel.note and data["n_total"] == 960


def test_report_needs_estimate_and_shows_a_failed_verify(hostile_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(hostile_run, copy)
    (copy / "report.json").unlink()
    (copy / "report.html").unlink()
    r = run_cli("report", str(copy))
    assert r.code == 2 and "guardeval estimate" in r.err and not (copy / "report.html").exists()
    shutil.copy(hostile_run / "report.json", copy / "report.json")
    lines = (copy / "decisions.jsonl").read_text().split("\n")
    first = json.loads(lines[0])
    first["decision"] = 0 if first["decision"] == 1 else 1          # a decision its raw line does not say
    lines[0] = json.dumps(first, sort_keys=True, separators=(",", ":"))
    (copy / "decisions.jsonl").write_text("\n".join(lines))
    assert verify_summary(copy, {})["ok"] is False
    # Issue 27 item 9: a run that fails verify gets no report that looks like one, even from a
    # report.json that was good once (or is forged: its numbers are never shown): exit 1, and a
    # page in report.html's place that says why, and nothing else.
    report = json.loads((copy / "report.json").read_text())
    report["contrasts"][0]["delta"] = 0.999
    (copy / "report.json").write_text(json.dumps(report))
    r = run_cli("report", str(copy))
    assert r.code == 1 and "the run does not verify, so guardeval shows no report of it" in r.err, r.err
    assert "decisions.jsonl" in r.err and "Traceback" not in r.err
    page = (copy / "report.html").read_text()
    assert "No report: this run does not verify" in page and "decisions.jsonl line 1" in page
    assert "0.999" not in page and "Effects" not in page and "<script" not in page
    out = tmp_path / "elsewhere.html"
    r = run_cli("report", str(copy), "--out", str(out))
    assert r.code == 1 and "No report: this run does not verify" in out.read_text()


def test_compare_writes_markdown_html_and_plot(demo_run, tmp_path):
    copy = shutil.copytree(demo_run.run, tmp_path / "copy")   # the same folder twice is refused
    r = run_cli("compare", str(demo_run.run), str(copy), "--bootstrap", "100", "--out", str(tmp_path))
    assert r.code == 0, r.err
    md = (tmp_path / "compare.md").read_text()
    assert "| tool_alias |" in md and "![paired effects](compare.png)" in md
    html = (tmp_path / "compare.html").read_text()
    assert "<script" not in html and "data:image/svg+xml;base64," in html
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_definitions_point_at_sections_of_the_estimators_doc():
    doc = (REPO / "docs" / "estimators.md").read_text()
    for section, _ in DEFINITIONS.values():
        assert f"\n## {section}\n" in doc or f"\n### {section}\n" in doc, section
