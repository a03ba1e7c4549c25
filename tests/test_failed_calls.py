"""Every call counts (issue 45): failed calls in the numbers and the words.

Real runs of Python guards that fail on the demo cohort (tests/guard_modules/failing_guards.py):
one raising ValueError on a third of its calls, one raising exactly when it would block a call
whose tool name it does not know (tool_alias, combined). Each is launched once, through the CLI in
a subprocess, and estimated, compared and read through the API; the estimator-level checks use
decision tables with a known truth."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardeval.backends.parsers import composite
from guardeval.estimators import estimate
from guardeval.estimators import synthetic as sy

from conftest import REPO, run_cli

pytestmark = pytest.mark.fast

MODULES = REPO / "tests" / "guard_modules"
ENV = {"PYTHONPATH": f"{REPO / 'harness'}:{MODULES}"}


def _config(folder: Path, name: str, callable_: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text("\n".join([f'name = "{name}"', 'backend = "python"', f'callable = "{callable_}"',
                               'model = "rules"', 'prompt = "guardeval-json-v1"', "max_attempts = 1",
                               "retry_initial_s = 0.01", "retry_max_s = 0.05", "concurrency = 4"]) + "\n")
    return path


def _launch(folder: Path, name: str, callable_: str) -> Path:
    run = folder / name
    r = run_cli("launch", "--cohort", "demo", "--guard", str(_config(folder, name, callable_)), "--run-dir", str(run),
                "--no-progress", "--json", env=ENV)
    assert r.code == 0, r.err
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("failing")
    return {"third": _launch(folder, "third", "failing_guards:third"),
            "unknown": _launch(folder, "unknown", "failing_guards:unknown_tool"),
            "keyword": _launch(folder, "keyword", "guardeval.backends.presets.keyword_guard:guard")}


def _estimate(run: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    r = run_cli("estimate", str(run), "--json", "--bootstrap", "400", *extra, env=ENV)
    return r.code, json.loads(r.out), r.err


def test_a_third_failing_is_counted_bounded_and_not_publishable(runs: dict[str, Path]) -> None:
    """Items 1, 2 and 4: the failed calls are in the record, every surface says 'not publishable',
    each headline has its range over them, and the words lead with them."""
    code, rep, err = _estimate(runs["third"])
    ex = rep["excluded"]
    # A third by call id: about 320 of 960, each condition its share.
    assert 250 < ex["failed"] < 390 and ex["quarantined"] == 0, ex
    assert ex["share"] == ex["failed"] / 960 and ex["limit"] == 0.02 and ex["publishable"] is False
    assert sum(v["failed"] for v in ex["by_condition"].values()) == ex["failed"]
    assert all(v["calls"] == 192 for v in ex["by_condition"].values())
    # One verdict on publishing, read everywhere: exit 1 without --allow-unpublishable.
    assert rep["publishable"] is False and rep["quarantine"]["publishable"] is False
    assert code == 1 and "not publishable" in err and f"{ex['failed']} failed" in err, err
    # Failures at random: they do not depend on the condition.
    assert ex["depends_on_condition"]["differs"] is False
    assert ex["depends_on_condition"]["verdict"] == "no evidence it differs"
    for c in rep["contrasts"]:
        b = c["bounds"]
        lo, hi = b["delta"]
        assert lo < hi and lo <= c["by_rule"]["fail-open"] + 1e-12 and c["by_rule"]["fail-closed"] <= hi + 1e-12
        assert isinstance(b["robust"], bool)
        for end in b["ends"]["delta"].values():
            assert end["ci"][0] <= end["estimate"] <= end["ci"][1] and end["method"] in ("bootstrap", "sign-flip")
    md = (runs["third"] / "report.md").read_text()
    words = md.split("## In words", 1)[1].split("##", 1)[0]
    first = words.strip().splitlines()[0]
    assert first.startswith(f"- {ex['failed']} of 960 calls failed") and "NOT PUBLISHABLE" in first, first
    assert "## Excluded calls" in md and "## Bounds over the failed calls" in md
    html = (runs["third"] / "report.html").read_text()
    assert "Excluded calls" in html and "Bounds over the failed calls" in html and "NOT PUBLISHABLE" in html
    # The terminal: the summary, and the range beside the failure rules.
    r = run_cli("estimate", str(runs["third"]), "--bootstrap", "400", "--allow-unpublishable", env=ENV)
    assert r.code == 0, r.err
    assert f"failed {ex['failed']}" in r.out and "NOT PUBLISHABLE" in r.out and "headline range" in r.out, r.out
    assert r.out.split("In words:", 1)[1].lstrip().startswith(f"- {ex['failed']} of 960 calls failed"), r.out


def test_failures_that_follow_the_condition_are_a_finding_and_not_robust(runs: dict[str, Path]) -> None:
    """Items 2, 3 and 4: a guard that fails exactly when it would block an unknown tool name is
    said to fail by condition, first; its tool_alias headline is not robust, and never starred bare."""
    code, rep, _ = _estimate(runs["unknown"], "--allow-unpublishable")
    assert code == 0
    ex = rep["excluded"]
    dep = ex["depends_on_condition"]
    assert dep["differs"] is True and dep["family"] == "4 failure-rate differences"
    assert dep["members"]["tool_alias"]["differs"]
    assert not dep["members"]["format_placebo"]["differs"] and ex["by_condition"]["original"]["failed"] == 0
    by = {c["condition"]: c for c in rep["contrasts"]}
    alias = by["tool_alias"]["bounds"]
    assert alias["robust"] is False and alias["robust_corrected"] is False
    ends = alias["ends"]["corrected"]
    assert ends["lo"]["verdict"] != ends["hi"]["verdict"]
    md = (runs["unknown"] / "report.md").read_text()
    words = md.split("## In words", 1)[1].split("##", 1)[0].strip().splitlines()
    share = round(100 * ex["by_condition"]["tool_alias"]["failed"] / 192)
    assert words[0].startswith("- Failed calls depend on the condition: ") and f"tool_alias {share}%" in words[0]
    assert "against original 0%" in words[0], words[0]
    assert words[1].startswith(f"- {ex['failed']} of 960 calls failed") and "changes for" in words[1], words[1]
    alias_line = next(w for w in words if w.startswith("- tool_alias "))
    assert "NOT robust to the failed calls" in alias_line, alias_line
    # A starred row that is not robust says so beside its star, in every format.
    effects = md.split("## Effects", 1)[1].split("##", 1)[0]
    for c, x in by.items():
        if x["bounds"]["robust"] is False and (x.get("equivalence_minus_placebo") or {}).get("differs"):
            assert f"| {c} * (not robust to failed calls) |" in effects, effects


def test_compare_gate_cannot_vouch_past_the_limit(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 1: compare's record carries each input's `excluded`; --fail-on differs exits 4, even with
    --allow-unpublishable; the API reads the same records."""
    base = ["compare", str(runs["keyword"]), str(runs["third"]), "--bootstrap", "300", "--json"]
    r = run_cli(*base, "--fail-on", "differs", env=ENV)
    assert r.code == 4, (r.code, r.err)
    result = json.loads(r.out)
    assert [i["excluded"]["publishable"] for i in result["inputs"]] == [True, False]
    assert result["publishable"] is False and result["gate"]["exit"] == 4
    assert [x["label"] for x in result["gate"]["unpublishable"]] == [result["inputs"][1]["label"]]
    assert "cannot vouch" in r.err and "(exit 4)" in r.err, r.err
    r = run_cli(*base, "--fail-on", "differs", "--allow-unpublishable", env=ENV)
    assert r.code == 4, r.err
    # Without the gate: unpublishable is exit 1, as before; with it allowed, 0.
    assert run_cli(*base, env=ENV).code == 1
    r = run_cli(*base, "--allow-unpublishable", env=ENV)
    assert r.code == 0, r.err
    rows = json.loads(r.out)["conditions"]
    for row in rows:
        b = row["bounds"]
        key = "difference_minus_placebo" if row["difference_minus_placebo"] is not None else "difference"
        lo, hi = b[key]
        assert lo <= row[key] + 1e-12 <= hi + 2e-12 and isinstance(b["robust"], bool), row
    text = run_cli(*base[:-1], "--allow-unpublishable", env=ENV).out
    assert f"{result['inputs'][1]['label']}: " in text and "calls failed" in text and "failed calls as block / allow" in text, text
    from guardeval import api

    monkeypatch.syspath_prepend(str(MODULES))   # verify finds the guard's source, as the CLI's PYTHONPATH does
    est = api.estimate(runs["third"], n_boot=200, write=False, allow_unpublishable=True)
    assert est.excluded is not None and est.excluded["failed"] == est.report["excluded"]["failed"]
    assert est.publishable is False
    e = est.effect("tool_alias")
    assert e.bounds is not None and e.robust is not None
    cmp = api.compare(runs["keyword"], runs["third"], n_boot=200, write=False, allow_unpublishable=True)
    assert [e["publishable"] for e in cmp.excluded.values()] == [True, False]
    assert list(cmp.excluded.values())[0]["failed"] == 0
    assert all(d.bounds is not None for d in cmp.conditions)


# -- the estimators, on tables with a known truth ---------------------------------------------------

def _table(seed: int, n_interactions: int = 44, n_bases: int = 64) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    pop = sy.population(sy.design(n_interactions, n_bases), rng, sy.Model(fail_rate=0.0))
    return sy.rows(pop, sy.NULL, rng)


def test_bounds_are_the_manski_ends_by_the_headlines_procedure() -> None:
    """Item 2: each end is the contrast with the condition's failed calls as allows and the
    reference's as blocks (and the reverse), estimated by the procedure the headline uses — on a
    small design the sign-flip test, on a large one the bootstrap; with no failed call the range
    is the headline itself."""
    for n_int, method in ((12, "sign-flip"), (44, "bootstrap")):
        rows = _table(3, n_int, int(n_int * 1.5))
        clean = estimate(rows, n_boot=300, seed=1)
        for c in clean["contrasts"]:
            assert c["bounds"]["delta"] == [c["delta"], c["delta"]] and c["bounds"]["robust_delta"] is True
            assert c["bounds"]["ends"]["delta"]["lo"]["ci"] == c["ci"]
        assert clean["excluded"]["failed"] == 0 and clean["excluded"]["publishable"] is True
        assert clean["excluded"]["depends_on_condition"]["verdict"] == "no failed calls"
        rng = np.random.default_rng(5)
        for r in rows:
            if rng.random() < 0.2:
                r["decision"], r["status"] = None, "unparseable"
        rep = estimate(rows, n_boot=300, seed=1, allow_unpublishable=True)
        for c in rep["contrasts"]:
            lo, hi = c["bounds"]["delta"]
            # Manski's ends are the mixed fail-open / fail-closed columns: outside both single rules.
            assert lo <= min(c["by_rule"]["fail-open"], c["by_rule"]["fail-closed"]) + 1e-12
            assert hi >= max(c["by_rule"]["fail-open"], c["by_rule"]["fail-closed"]) - 1e-12
            for end in c["bounds"]["ends"]["delta"].values():
                assert end["method"] == method and (c["equivalence"] or {})["method"] == method
    # By hand, on one base pair: a failed call under the condition and one under the baseline.
    rows = []
    for i in range(30):
        for cond in ("original", "alias"):
            for rep_ in range(2):
                failed = i == 0 and rep_ == 0
                rows.append({"base_id": f"b{i}", "interaction_id": f"g{i}", "domain": "d", "condition": cond,
                             "repetition": rep_, "decision": None if failed else int(cond == "alias" and i % 2 == 0),
                             "status": "unparseable" if failed else "ok"})
    rep = estimate(rows, n_boot=200, allow_unpublishable=True)
    (c,) = rep["contrasts"]
    # Base 0: alias {fail, 1}, original {fail, 0}. Low end: alias fail→0 (0.5), original fail→1
    # (0.5): 0.0; high end: alias 1.0, original 0.0: 1.0. Other bases: Δ 1 on the even ones.
    evens = sum(1 for i in range(1, 30) if i % 2 == 0)
    assert c["bounds"]["delta"] == pytest.approx([evens / 30, (evens + 1) / 30])


def test_verdict_docstring_states_the_blocking_rule() -> None:
    """Item 7: `Verdict`'s docstring states design.md §8's rule, every case checked against the parser."""
    from guardeval.backends.python_guard.types import Verdict

    doc = Verdict.__doc__ or ""
    assert "at least 0.5" in doc and "docs/design.md §8" in doc
    cases = re.findall(r"Verdict\((True|False), (True|False), ([\d.]+)\)\s+-> (allow|block) \(score ([\d.]+)\)", doc)
    assert len(cases) == 12 and len({c[:3] for c in cases}) == 12
    for mal, att, harm, said, score in cases:
        s = composite(mal == "True", att == "True", float(harm))
        assert s == float(score) and ("block" if s != 0 else "allow") == said, (mal, att, harm)


def test_a_study_carries_each_runs_excluded_record(tmp_path: Path) -> None:
    """Item 1 in a study: study-report.json's `excluded` per run, its publishable verdict, and the
    pages lead with the failed calls."""
    guards = [_config(tmp_path, "third", "failing_guards:third"),
              _config(tmp_path, "keyword", "guardeval.backends.presets.keyword_guard:guard")]
    study = tmp_path / "study"
    r = run_cli("study", "launch", "--cohort", "demo", "--reps", "1", "--study-dir", str(study), "--no-progress",
                *(x for g in guards for x in ("--guard", str(g))), env=ENV)
    assert r.code == 0, r.err
    r = run_cli("study", "report", str(study), "--bootstrap", "300", "--json", env=ENV)
    assert r.code == 1 and "not publishable" in r.err, r.err
    rep = json.loads(r.out)
    assert rep["publishable"] is False
    failing = [label for label, e in rep["excluded"].items() if e["failed"]]
    assert len(failing) == 1 and rep["excluded"][failing[0]]["publishable"] is False
    line = next(x for x in rep["runs"] if x["label"] == failing[0])
    assert line["excluded"] == rep["excluded"][failing[0]] and "NOT PUBLISHABLE" in line["summary"]
    md = (study / "study.md").read_text()
    assert md.index("## Failed calls") < md.index("## The answer") and f"{failing[0]}: " in md
    assert "Failed calls" in (study / "study.html").read_text()
