"""Bad cohorts and guard configs: exit 2, file/line/field named, no traceback, no run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.canon import sha256_hex

from conftest import run_cli, write_guard


def _copy_cohort(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _repin(cohort: Path) -> None:
    """Re-pin instances.jsonl in cohort.json so only the intended defect remains."""
    data = (cohort / "instances.jsonl").read_bytes()
    meta = json.loads((cohort / "cohort.json").read_text())
    meta["instances_sha256"], meta["instances_bytes"] = sha256_hex(data), len(data)
    (cohort / "cohort.json").write_text(json.dumps(meta, indent=2) + "\n")


def _launch(tmp_path: Path, cohort: Path, guard: Path) -> tuple:
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run))
    return r, run


def _assert_refused(r, run: Path, *needles: str) -> None:
    assert r.code == 2, (r.code, r.err)
    assert "Traceback" not in r.err
    for n in needles:
        assert n in r.err, (n, r.err)
    assert not run.exists()


@pytest.fixture
def guard(tmp_path) -> Path:
    return write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")


def test_bad_json_line(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_bytes().splitlines(keepends=True)
    lines[6] = lines[6][:30] + b"\n"
    (c / "instances.jsonl").write_bytes(b"".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 7", "not valid JSON")


def test_missing_field(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[11])
    del row["domain"]
    lines[11] = json.dumps(row) + "\n"
    (c / "instances.jsonl").write_text("".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 12", "field 'domain'", "missing required field")


def test_wrong_instance_hash(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[3])
    row["user_request"] += " (edited)"
    lines[3] = json.dumps(row) + "\n"
    (c / "instances.jsonl").write_text("".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 4", "field 'instance_sha256'")


def test_wrong_file_pin(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    with open(c / "instances.jsonl", "ab") as fh:
        fh.write(b"\n")
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "instances_bytes")


@pytest.mark.parametrize("text, needles", [
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\n', ["field 'prompt'", "missing required field"]),
    ('name = "x"\nbackend = "carrier-pigeon"\nmodel = "m"\nprompt = "guardeval-json-v1"\n',
     ["line 2", "field 'backend'"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\nmax_tokens = "many"\n',
     ["line 5", "field 'max_tokens'"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\ncolour = "red"\n',
     ["line 5", "field 'colour'", "unknown field"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "no-such-prompt"\n', ["field 'prompt'", "not found"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\napi_key_env = "sk-or-v1-abc"\n',
     ["line 5", "field 'api_key_env'"]),
    ('name = "x"\nbackend = "openrouter\n', ["g.toml", "line 2", "not valid TOML"]),
])
def test_bad_guard_config(tmp_path, small_cohort, text, needles):
    g = tmp_path / "g.toml"
    g.write_text(text)
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", *needles)
    assert "sk-or-v1-abc" not in r.err


def test_missing_cohort_folder(tmp_path, guard):
    r, run = _launch(tmp_path, tmp_path / "nope", guard)
    _assert_refused(r, run, "cohort.json", "not found")


def test_run_dir_not_empty(tmp_path, small_cohort, guard):
    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.txt").write_text("mine")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(run))
    assert r.code == 2 and "not empty" in r.err
    assert sorted(p.name for p in run.iterdir()) == ["keep.txt"]


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("launch").code == 2
    assert run_cli("launch", "--cohort", "x", "--guard", "y", "--reps", "0").code == 2
    assert run_cli("resume", str(tmp_path)).code == 2
