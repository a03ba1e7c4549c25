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
import pytest

from guardeval.estimators import synthetic as sy

from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast


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
    from guardeval.backends.http_get import shown

    text = 'the server said: set structured_output = "auto" in the guard config, or pass --no-preflight'
    cut = shown(text, 60)
    assert cut.endswith(" …") and '"au' not in cut.replace('"auto"', "") and len(cut) <= 62
    assert shown("short", 60) == "short"
    assert shown("x" * 100, 40) == "x" * 40 + " …"      # one long word: cut where it must be, and marked


@pytest.mark.slow
def test_out_folders_are_made(tmp_path):
    table = _table(tmp_path / "t.jsonl")
    out = tmp_path / "new" / "estimate"
    r = run_cli("estimate", "--table", str(table), "--bootstrap", "50", "--out", str(out))
    assert r.code == 0 and (out / "report.json").is_file(), r.err
    out = tmp_path / "new" / "compare"
    r = run_cli("compare", "--table", str(table), "--table", str(table), "--bootstrap", "50", "--out", str(out))
    assert r.code == 0 and (out / "compare.html").is_file(), r.err


@pytest.mark.slow
def test_a_bare_run_id_is_found_under_runs(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--no-progress",
                "--max-calls", "10", cwd=tmp_path)
    assert r.code == 0, r.err
    [run_id] = [p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".") and p.is_dir()]
    # What the launch printed, pasted as is: the id alone names runs/<id>.
    for args in (["status", run_id], ["verify", run_id], ["resume", run_id, "--no-progress"]):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 0 and "not a run folder" not in r.err, (args, r.err)
    st = run_cli("status", run_id, "--json", cwd=tmp_path)
    assert json.loads(st.out)["decided"] == 80
    r = run_cli("status", "no-such-run", cwd=tmp_path)
    assert r.code == 2 and "not a run folder" in r.err


def test_a_pilots_progress_line_counts_down_to_the_pilot(tmp_path, small_cohort, sim):
    from guardeval.run.dispatch.progress import RunProgress

    p = RunProgress(960, 0, enabled=False)
    p.goal, p.done = 100, 50
    p._t0 -= 10                          # 50 calls in 10 s: 5/s
    line = p.line(200, bar=False)
    assert "50/960 calls (pilot to 100)" in line and "ETA 0:10" in line, line   # 50 left at 5/s, not 910
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--max-calls", "20",
                "--run-dir", str(tmp_path / "run"))
    assert r.code == 0 and "20/80 calls (pilot to 20)" in r.err, r.err


@pytest.mark.slow
def test_a_plain_resume_of_a_finished_run_with_failed_calls_names_retry_failed(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "4", "--faults", "500=0.6")
    guard = write_guard(tmp_path / "g.toml", sim.base_url, max_attempts=2)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--seed", "9",
                "--run-dir", str(run), "--no-progress", "--no-preflight")
    assert r.code == 0, r.err
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0 and f"try them again with: guardeval resume {run} --retry-failed" in r.err, r.err
    assert "exhausted" in r.err


@pytest.mark.slow
def test_the_fingerprint_a_launch_prints_is_the_one_verify_expects(tmp_path, small_cohort, sim):
    """The token printed at the end of a session pins the run as it was left: events.jsonl, made
    after the folder was opened, included (it read as absent, and the token failed --expect)."""
    import re

    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--no-progress", "--max-calls", "30")
    assert r.code == 0, r.err
    for step in ("launch", "resume"):
        if step == "resume":
            r = run_cli("resume", str(run), "--no-progress")
        token = re.search(r"fingerprint (\S+) \(keep it", r.err)[1]
        v = run_cli("verify", str(run), "--expect", token)
        assert v.code == 0 and f"fingerprint {token}" in v.out, (step, r.err, v.out)


def test_the_typed_records_carry_the_corrected_difference_verdicts_and_mdes():
    from guardeval.api.results import difference_record, estimate_record
    from guardeval.estimators import estimate
    from guardeval.estimators.compare.compare import CompareInput, compare_inputs

    rng = np.random.default_rng(4)
    pop = sy.population(sy.design(32), rng)
    a, b = sy.guards(pop, [sy.EFFECTS, sy.EFFECTS], rng)
    report = estimate(a, roles=sy.ROLES, n_boot=300)
    est = estimate_record(report)
    e = est.effect("tool_alias")
    assert e.verdict is not None and e.verdict.mde is not None and e.verdict.family == "4 conditions"
    assert e.verdict_minus_placebo is not None and e.headline is e.verdict_minus_placebo
    _api_stars_are_the_tables(report, est)
    out = compare_inputs([CompareInput("A", a, sy.ROLES), CompareInput("B", b, sy.ROLES)], n_boot=300)
    d = difference_record(next(r for r in out["conditions"] if r["condition"] == "tool_alias"))
    assert d.difference_minus_placebo is not None and d.ci_difference_minus_placebo is not None
    assert d.verdict_minus_placebo is not None and d.verdict_minus_placebo.mde is not None
    # Two computations that must agree: compare's Holm over the family and the decision record's.
    assert d.p_holm_minus_placebo is not None and d.p_holm_minus_placebo == d.verdict_minus_placebo.p_adjusted
    assert d.p_holm is not None and d.verdict is not None and d.p_holm == d.verdict.p_adjusted


def _api_stars_are_the_tables(report, est) -> None:
    """The API's `significant` is the effects table's `*`, row by row, the placebo's included."""
    from guardeval.estimators.report.report import effects_rows

    _, rows = effects_rows(report)
    # A starred row that is not robust to the failed calls says so after its star.
    table = {r[0].split(" ")[0]: r[0].endswith(" *") or " * (not robust" in r[0] for r in rows}
    assert {e.condition: e.significant for e in est.effects} == table


def test_the_api_star_is_the_tables_when_the_placebo_itself_moves_the_guard():
    """A placebo that moves the guard: its Δ differs in the Δ family (its own check), yet its
    row carries no star, and neither does the API's record of it (it did before)."""
    from guardeval.api.results import estimate_record
    from guardeval.estimators import estimate

    rng = np.random.default_rng(5)
    effects = {**sy.EFFECTS, sy.PLACEBO: 0.30}
    rows = sy.rows(sy.population(sy.design(32), rng), effects, rng)
    report = estimate(rows, roles=sy.ROLES, n_boot=300)
    est = estimate_record(report)
    placebo = est.effect(sy.PLACEBO)
    assert placebo.verdict is not None and placebo.verdict.differs, "the placebo's own Δ should differ here"
    assert not placebo.significant
    _api_stars_are_the_tables(report, est)
