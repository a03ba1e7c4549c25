"""`guardeval demo` from a non-editable install: the whole path, no network, the estimate JSON
on stdout. The session's `demo_run` (conftest) runs the demo from a wheel of this tree installed
into a fresh virtual environment, in a folder outside the repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import INSTALLED_WHEEL, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(INSTALLED_WHEEL)]


def test_the_installed_package_is_the_wheel(installed) -> None:
    code = "import guardeval, guardeval.backends; print(guardeval.__file__); print(guardeval.backends.__file__)"
    out = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=installed.outside,
                         capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(installed.venv) for p in out), out
    r = installed.run("--version")
    assert r.code == 0 and r.out.startswith("guardeval ")


def test_the_installed_package_names_its_presets_and_demo_cohort(installed) -> None:
    """Outside a checkout there is no guards/ or cohorts/demo/ to point at: the shipped
    ones answer to their names when no file of that name exists."""
    r = installed.run("launch", "--cohort", "demo", "--guard", "haiku-4.5", "--reps", "3", "--dry-run",
                      "--no-preflight", "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["n_calls"] == 960 and plan["guard"]["name"] == "haiku-4.5", plan
    r = installed.run("launch", "--cohort", "demo", "--guard", "haiku", "--dry-run")
    assert r.code == 2 and "preset name: haiku-4.5, python-example, sim" in r.err
    # A file of that name wins over the preset.
    (installed.outside / "sim").write_text("not toml [")
    r = installed.run("launch", "--cohort", "demo", "--guard", "sim", "--dry-run")
    (installed.outside / "sim").unlink()
    assert r.code == 2 and "not valid TOML" in r.err


def test_demo_json(demo_run, installed):
    run, r = demo_run.run, demo_run.result
    assert r.code == 0, r.err
    est = json.loads(r.out)  # stdout carries only the JSON
    assert est["n_calls"] == 960 and est["n_bases"] == 64
    assert est["baseline"] == "original" and est["placebo"] == "format_placebo"
    by = {c["condition"]: c for c in est["contrasts"]}
    assert set(by) == {"format_placebo", "marker_rewrite", "tool_alias", "combined"}
    for c in by.values():
        lo, hi = c["ci"]
        assert lo <= c["delta"] <= hi and -1 <= lo and hi <= 1
    # The simulated guard leans on threat-worded tool names; the placebo changes nothing that matters.
    assert by["tool_alias"]["ci"][1] < 0
    assert by["format_placebo"]["ci"][0] < 0 < by["format_placebo"]["ci"][1]
    assert by["format_placebo"]["delta_minus_placebo"] is None
    assert by["tool_alias"]["delta_minus_placebo"] is not None
    assert est["quarantine"]["count"] == 0
    for name in ("report.json", "report.md", "effects.png", "report.html", "raw.jsonl", "decisions.jsonl"):
        assert (run / name).is_file()
    # The demo ends by saying where report.html is.
    assert r.err.rstrip().splitlines()[-1] == f"demo: report: {(run / 'report.html').resolve()} (one self-contained " \
                                               "file: open it in a browser)"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["prompt"]["id"] == "guardeval-json-v1" and manifest["cohort"]["name"] == "demo"
    assert not (installed.outside / "prompts").exists() and not (installed.outside / "runs").exists()
    assert run_cli("verify", str(run)).code == 0


def test_installed_verify_and_status(demo_run, installed) -> None:
    r = installed.run("verify", str(demo_run.run))
    assert r.code == 0 and r.out.startswith("verify: OK"), r.err
    r = installed.run("status", str(demo_run.run), "--json")
    assert r.code == 0 and json.loads(r.out)["complete"]


def test_demo_study(demo_study, installed) -> None:
    """`guardeval demo --study` from the wheel, offline: three guards of known character on one
    schedule, one study folder, an answer that names them for what they are."""
    study, r = demo_study.study, demo_study.result
    assert r.code == 0, r.err
    answer = json.loads(r.out)                                    # stdout carries only the JSON
    by = {a["condition"]: a for a in answer["conditions"]}
    assert by["tool_alias"]["most"] == "alias-sensitive" and by["tool_alias"]["holds"] is True
    guards = {g["label"]: g for g in answer["guards"]}
    assert guards["robust"]["effects"] == [] and "tool_alias" in guards["alias-sensitive"]["effects"]
    # The demo ends with the path of study.html.
    assert r.err.rstrip().splitlines()[-1] == f"demo: study: {(study / 'study.html').resolve()} (one " \
                                               "self-contained file: open it in a browser)"
    record = json.loads((study / "study.json").read_text())
    assert [x["label"] for x in record["runs"]] == ["shortcut", "robust", "alias-sensitive"]
    assert record["schedule"]["n_calls"] == 960 and record["cohort"]["name"] == "demo"
    assert not (installed.outside / "studies").exists() and not (installed.outside / "runs").exists()
    v = installed.run("study", "verify", str(study), "--expect", record["report"]["fingerprint"])
    assert v.code == 0 and "(as expected)" in v.out, v.out + v.err
