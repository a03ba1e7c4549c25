"""The committed demo cohort: shape, determinism, invariants, visible cue contrasts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from guardeval.cohorts.builders.demo import conditions, demo_bases
from guardeval.cohorts.builders.demo_data import ALIASES
from guardeval.cohorts.model import load_cohort
from guardeval.cohorts.transforms import apply_checked, count_markers, has_threat_word, validate_table, visible_names

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "cohorts" / "demo"


@pytest.fixture(scope="module")
def cohort():
    return load_cohort(DEMO)


def _rows(cohort, condition):
    return [r for r in cohort.instances if r["condition"] == condition]


def test_shape(cohort):
    originals = _rows(cohort, "original")
    assert len(originals) == 64 == len(cohort.base_ids)
    assert Counter(r["domain"] for r in originals) == {"banking": 16, "messaging": 16, "travel": 16, "workspace": 16}
    steps = Counter(r["interaction_id"] for r in originals)
    assert len(steps) >= 40 and max(steps.values()) >= 2
    assert {r["label"] for r in originals} == {0, 1}
    assert cohort.condition_names == ["original", "format_placebo", "marker_rewrite", "tool_alias", "combined"]
    assert {c.name: c.role for c in cohort.conditions} == {
        "original": "baseline", "format_placebo": "placebo", "marker_rewrite": "intervention",
        "tool_alias": "intervention", "combined": "intervention"}
    tools = {r["tool"] for r in originals}
    assert any(has_threat_word(t) for t in tools) and any(not has_threat_word(t) for t in tools)
    assert sum(count_markers(r) > 0 for r in originals) >= 8


def test_rebuild_is_byte_identical(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "harness")}
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "guardeval", "cohort", "build", "demo", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("cohort.json", "instances.jsonl"):
        assert (out / name).read_bytes() == (DEMO / name).read_bytes(), name


def test_committed_rows_are_the_checked_transforms_of_their_bases(cohort):
    # Re-run every transform with its invariance check on the committed original rows.
    specs = {s.name: s for s in conditions()}
    for original in _rows(cohort, "original"):
        for cond in cohort.condition_names:
            variant = apply_checked(specs[cond].transform, original, cond)
            row = cohort.instance(original["base_id"], cond)
            for key, value in variant.content.items():
                assert row[key] == value, (original["base_id"], cond, key)
            assert row.get("render") == variant.render
            for key in ("label", "label_score", "interaction_id", "domain", "user_request"):
                assert row[key] == original[key]


def test_interventions_change_the_cues(cohort):
    threat_share = {}
    for cond in cohort.condition_names:
        rows = _rows(cohort, cond)
        ones = [r for r in rows if r["label"] == 1]
        threat_share[cond] = sum(has_threat_word(r["tool"]) for r in ones) / len(ones)
        markers = sum(count_markers(r) for r in rows)
        if cond in ("marker_rewrite", "combined"):
            assert markers == 0
        else:
            assert markers > 0
        if cond in ("tool_alias", "combined"):
            assert all(visible_names(r, list(ALIASES)) == [] for r in rows)
    assert threat_share["original"] >= 0.5
    assert threat_share["tool_alias"] == threat_share["combined"] == 0.0
    assert threat_share["format_placebo"] == threat_share["marker_rewrite"] == threat_share["original"]


def test_alias_table_is_bijective_and_covers_every_tool():
    assert validate_table(ALIASES) == ALIASES
    names = {d["name"] for b in demo_bases() for d in b["tool_descriptions"]}
    assert names == set(ALIASES)
    assert not any(has_threat_word(a) for a in ALIASES.values())


def test_inspect_reports_counts_and_fails_on_a_broken_invariant(tmp_path):
    from guardeval.cohorts.model import build_row, write_cohort
    from guardeval.cohorts.report import inspect
    from guardeval.errors import CheckFailed

    cohort = load_cohort(DEMO)
    report = inspect(cohort)
    assert report["n_bases"] == 64 and report["n_interactions"] == 44 and report["invariance"]["ok"]
    assert report["threat_word_share"]["tool_alias"] == 0.0 and report["sha256"] == cohort.sha256
    # Put a marker back into one marker_rewrite row (rehashed, so the file itself loads).
    rows = []
    for r in cohort.instances:
        if r["condition"] == "marker_rewrite" and r["base_id"] == "demo-banking-03.s2":
            content = {k: r[k] for k in ("user_request", "history", "current_action", "tool_descriptions", "tool")}
            content["history"][-1]["content"] += " <INFORMATION>"
            r = build_row(r, r["condition"], r["role"], content)
        rows.append(r)
    write_cohort(tmp_path / "bad", name="demo", version="x", description="", conditions=cohort.conditions, rows=rows)
    bad = inspect(load_cohort(tmp_path / "bad"))
    assert not bad["invariance"]["ok"] and "demo-banking-03.s2" in bad["invariance"]["problems"][0]
    env = {**os.environ, "PYTHONPATH": str(REPO / "harness")}
    p = subprocess.run([sys.executable, "-m", "guardeval", "cohort", "inspect", str(tmp_path / "bad")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "markers remain" in p.stderr
    assert CheckFailed.exit_code == 1
