"""The run folder carries its prompt (issue 10, item 15): resume and verify read the run's own
copy; a check that cannot be done is reported as skipped and is not `ok` unless allowed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import orjson
import pytest

from guardeval.run.folder.manifest import manifest_with_hash
from guardeval.run.run import Run

from conftest import REPO, run_cli, write_guard

pytestmark = pytest.mark.fast


def _edit_prompt(folder: Path) -> None:
    """Change the template and re-pin it, as a careless hand would."""
    (folder / "system.txt").write_text((folder / "system.txt").read_text() + "\nBe brief.\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["system.txt"] = hashlib.sha256((folder / "system.txt").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _as_old_run(run: Path) -> None:
    """What a run launched before prompt copies looks like: no prompt/, no `copy` in the manifest."""
    shutil.rmtree(run / "prompt")
    m = orjson.loads((run / "manifest.json").read_bytes())
    del m["prompt"]["copy"]
    (run / "manifest.json").write_bytes(orjson.dumps(manifest_with_hash(m), option=orjson.OPT_INDENT_2
                                                     | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))


@pytest.fixture
def pilot(tmp_path, small_cohort, sim) -> tuple[Path, dict[str, str]]:
    """A 3-call pilot launched with a private prompts folder (GUARDEVAL_PROMPTS)."""
    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts" / "guardeval-json-v1", prompts / "guardeval-json-v1")
    env = {"GUARDEVAL_PROMPTS": str(prompts)}
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-calls", "3", "--no-progress", env=env)
    assert r.code == 0, r.err
    return run, env


def test_the_run_carries_its_prompt_and_resumes_from_it(pilot):
    run, env = pilot
    src = Path(env["GUARDEVAL_PROMPTS"]) / "guardeval-json-v1"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["prompt"]["copy"] == "prompt"
    for name in ("manifest.json", "system.txt", "user.txt"):
        assert (run / "prompt" / name).read_bytes() == (src / name).read_bytes()
    # The prompts folder changes (or this is another machine without it): the run does not care.
    _edit_prompt(src)
    r = run_cli("resume", str(run), "--no-progress", env=env)
    assert r.code == 0, r.err
    shutil.rmtree(src)
    report = Run.open(run).verify()
    assert report["ok"] and report["skipped"] == [], report
    assert report["n_decisions"] == 80


def test_a_tampered_prompt_copy_is_refused_and_named(pilot):
    run, env = pilot
    _edit_prompt(run / "prompt")      # re-pinned inside the copy: only the run manifest's pin catches it
    r = run_cli("resume", str(run), env=env)
    assert r.code == 2 and "prompt" in r.err and "Traceback" not in r.err, r.err
    assert len((run / "decisions.jsonl").read_text().splitlines()) == 3   # nothing sent, nothing written off
    r = run_cli("verify", str(run), env=env)
    assert r.code == 1 and "prompt/manifest.json" in r.out, r.out   # verify's report is on stdout


@pytest.mark.slow
def test_an_old_run_without_a_copy(pilot):
    run, env = pilot
    _as_old_run(run)
    # The prompts folder still hashes as pinned: it stands in, nothing is skipped.
    report = Run.open(run).verify()
    assert report["ok"] and report["skipped"] == [], report
    # Edited since launch: resume refuses (its bodies would differ); verify cannot re-render.
    _edit_prompt(Path(env["GUARDEVAL_PROMPTS"]) / "guardeval-json-v1")
    r = run_cli("resume", str(run), env=env)
    assert r.code == 2 and "changed since it was launched" in r.err and "Traceback" not in r.err, r.err
    assert len((run / "decisions.jsonl").read_text().splitlines()) == 3
    r = run_cli("verify", str(run), env=env)
    assert r.code == 1 and "skipped: stimuli re-render" in r.out and "--allow-skipped" in r.out, r.out
    r = run_cli("verify", str(run), "--allow-skipped", env=env)
    assert r.code == 0 and "1 check(s) skipped (allowed)" in r.out, (r.out, r.err)
    report = json.loads(run_cli("verify", str(run), "--json", env=env).out)
    assert not report["ok"] and report["problems"] == []
    assert [s["check"] for s in report["skipped"]] == ["stimuli re-render"]


def test_an_unknown_parser_is_a_skipped_rederivation(pilot):
    run, _ = pilot
    m = orjson.loads((run / "manifest.json").read_bytes())
    m["prompt"]["parser"] = "from-a-newer-version"
    (run / "manifest.json").write_bytes(orjson.dumps(manifest_with_hash(m), option=orjson.OPT_INDENT_2
                                                     | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
    report = Run.open(run).verify()
    assert not report["ok"]
    assert "decision re-derivation" in [s["check"] for s in report["skipped"]]
    assert Run.open(run).verify(allow_skipped=True)["ok"]
