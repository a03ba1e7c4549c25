"""What a newcomer hit (issue 30 §4), each as it was reproduced: a guard-config typo without a
"did you mean", a wrong --placebo that lists nothing, provider text cut mid-word, `--out`
folders that must exist first, a bare run id, a pilot's ETA, a plain `resume` of a run with
failed calls. (`audit providers` on a simulator run: tests/test_openrouter_runs.py; report.html's
effects table at 1400 pixels and compare.html's title: tests/test_report_browser.py and
tests/test_decisions.py; a Python guard off PYTHONPATH: tests/test_python_guard.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.estimators import synthetic as sy

from conftest import run_cli, write_guard


def _table(path: Path) -> Path:
    rng = np.random.default_rng(1)
    rows = sy.rows(sy.population(sy.design(16), rng), sy.EFFECTS, rng)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_guard_config_typo_says_what_was_meant(tmp_path):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9", max_token=200)
    r = run_cli("launch", "--cohort", "cohorts/demo", "--guard", str(guard), "--dry-run")
    assert r.code == 2 and "field 'max_token'" in r.err and "did you mean max_tokens?" in r.err, r.err
    guard = write_guard(tmp_path / "p.toml", "http://127.0.0.1:9", provider={"only": ["sim"], "allow_fallback": False})
    r = run_cli("launch", "--cohort", "cohorts/demo", "--guard", str(guard), "--dry-run")
    assert r.code == 2 and "did you mean allow_fallbacks?" in r.err, r.err
    guard = write_guard(tmp_path / "q.toml", "http://127.0.0.1:9", zebra=1)
    r = run_cli("launch", "--cohort", "cohorts/demo", "--guard", str(guard), "--dry-run")
    assert r.code == 2 and "unknown field" in r.err and "did you mean" not in r.err, r.err


def test_a_wrong_placebo_lists_the_conditions(tmp_path):
    table = _table(tmp_path / "t.jsonl")
    r = run_cli("estimate", "--table", str(table), "--placebo", "format_placebos", "--bootstrap", "20")
    assert r.code == 2 and "(conditions: format_placebo, original, provenance_marker, threat_names, tool_alias)" in r.err, r.err
    r = run_cli("compare", "--table", str(table), "--table", str(table), "--placebo", "nope", "--bootstrap", "20")
    assert r.code == 2 and "(conditions: " in r.err and "format_placebo" in r.err, r.err


def test_provider_text_is_cut_at_a_word_not_inside_one():
    from guards.openrouter.http import shown

    text = 'the server said: set structured_output = "auto" in the guard config, or pass --no-preflight'
    cut = shown(text, 60)
    assert cut.endswith(" …") and '"au' not in cut.replace('"auto"', "") and len(cut) <= 62
    assert shown("short", 60) == "short"
    assert shown("x" * 100, 40) == "x" * 40 + " …"      # one long word: cut where it must be, and marked


def test_out_folders_are_made(tmp_path):
    table = _table(tmp_path / "t.jsonl")
    out = tmp_path / "new" / "estimate"
    r = run_cli("estimate", "--table", str(table), "--bootstrap", "50", "--out", str(out))
    assert r.code == 0 and (out / "report.json").is_file(), r.err
    out = tmp_path / "new" / "compare"
    r = run_cli("compare", "--table", str(table), "--table", str(table), "--bootstrap", "50", "--out", str(out))
    assert r.code == 0 and (out / "compare.html").is_file(), r.err
