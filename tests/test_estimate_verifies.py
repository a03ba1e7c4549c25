"""`estimate RUN` estimates only a run that verifies (issue 10, item 14): a tampered decision,
a broken chain or a junk line is refused with the file and line named; `--no-verify` skips the
check and the report says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture
def run(copy_run) -> Path:
    """A copy of the session's finished run (conftest), to tamper with."""
    return copy_run("run")


def _estimate(run: Path, *extra: str):
    return run_cli("estimate", str(run), "--bootstrap", "200", "--json", *extra)


def test_a_sound_run_is_verified_and_says_so(run):
    r = _estimate(run)
    assert r.code == 0, r.err
    assert "verified before estimating" in r.err
    report = json.loads(r.out)
    assert report["source"]["verified"] is True and report["source"]["verify_skipped"] == []
    assert json.loads((run / "report.json").read_text())["source"]["verified"] is True


def _flip_decisions(run: Path, n: int) -> list[int]:
    path = run / "decisions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    flipped = []
    for i, line in enumerate(lines):
        if len(flipped) < n and '"decision":0,' in line:
            lines[i] = line.replace('"decision":0,', '"decision":1,')
            flipped.append(i + 1)
    path.write_text("".join(lines))
    return flipped


def test_flipped_decisions_are_refused_naming_the_line(run):
    flipped = _flip_decisions(run, 20)
    r = _estimate(run)
    assert r.code == 1 and "Traceback" not in r.err and r.out == "", r.err
    assert f"decisions.jsonl:{flipped[0]}: decision differs from its re-derivation" in r.err, r.err
    assert "(and 19 more)" in r.err and "--no-verify" in r.err
    assert not (run / "report.json").exists()
    r = _estimate(run, "--no-verify")
    assert r.code == 0, r.err
    assert "without verification" in r.err
    report = json.loads(r.out)
    assert report["source"]["verified"] is False


def test_a_broken_chain_is_refused(run):
    path = run / "raw.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"attempt":1', b'"attempt":2', 1)
    path.write_bytes(b"".join(lines))
    r = _estimate(run)
    assert r.code == 1 and "raw.jsonl:5" in r.err, r.err


def test_a_junk_decision_line_is_named(run):
    path = run / "decisions.jsonl"
    n = len(path.read_text().splitlines())
    with open(path, "a") as fh:
        fh.write('{"x":1}\n')
    r = _estimate(run)
    assert r.code == 1 and "Traceback" not in r.err and f"decisions.jsonl:{n + 1}" in r.err, r.err
    r = _estimate(run, "--no-verify")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert f"decisions.jsonl: line {n + 1}" in r.err and "'call_id'" in r.err, r.err


def test_a_check_that_could_not_be_done_needs_allow_skipped(run, tmp_path):
    import orjson

    from guardeval.run.folder.manifest import manifest_with_hash

    # An old run (no prompt copy) whose prompt is gone from the prompts folder (an id guardeval
    # does not ship either: its own prompts are found in the package).
    shutil.rmtree(run / "prompt")
    m = orjson.loads((run / "manifest.json").read_bytes())
    del m["prompt"]["copy"]
    m["prompt"]["id"] = "retired-prompt-v1"
    (run / "manifest.json").write_bytes(orjson.dumps(manifest_with_hash(m), option=orjson.OPT_INDENT_2
                                                     | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
    env = {"GUARDEVAL_PROMPTS": str(tmp_path / "empty-prompts")}
    r = run_cli("estimate", str(run), "--bootstrap", "200", env=env)
    assert r.code == 1 and "stimuli re-render could not be done" in r.err and "--allow-skipped" in r.err, r.err
    r = run_cli("estimate", str(run), "--bootstrap", "200", "--json", "--allow-skipped", env=env)
    assert r.code == 0, r.err
    skipped = json.loads(r.out)["source"]["verify_skipped"]
    assert [s["check"] for s in skipped] == ["stimuli re-render"]


def test_compare_verifies_both_runs(run, finished_run):
    _flip_decisions(run, 3)
    r = run_cli("compare", str(finished_run), str(run), "--bootstrap", "200")
    assert r.code == 1 and "decisions.jsonl:" in r.err and str(run) in r.err, r.err
    r = run_cli("compare", str(finished_run), str(run), "--bootstrap", "200", "--no-verify", "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert result["run_a"]["verified"] is False and result["run_b"]["verified"] is False
