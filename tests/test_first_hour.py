"""What a new user tripped on in the first hour (issue 37), each as it was met: which guard
answered a run, a python guard beside its config with no PYTHONPATH, a run compared with itself,
compare writing into a run, a dry run into an existing run folder, "retried" with two meanings,
a resume that sent nothing and moved the fingerprint, and the study preflight heading with
nothing under it."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import orjson
import pytest

from conftest import REPO, run_cli, write_guard

pytestmark = pytest.mark.slow


def _launch(cohort: Path, guard: Path, run: Path, *extra: str, cwd: Path | None = None, env=None) -> None:
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--no-progress", *extra, cwd=cwd, env=env)
    assert r.code == 0, r.err


@pytest.fixture
def two_profiles(tmp_path, small_cohort, sim_factory) -> tuple[Path, Path]:
    """The tour's block 2 on the small cohort: a run on `shortcut`, its replicate on `alias-sensitive`,
    both through the same guard config (its name `sim-test`, its model `sim/server-profile`)."""
    a = sim_factory("--profile", "shortcut")
    b = sim_factory("--profile", "alias-sensitive")
    guard = write_guard(tmp_path / "g.toml", a.base_url)
    audit, alias = tmp_path / "runs" / "audit", tmp_path / "runs" / "alias"
    _launch(small_cohort, guard, audit)
    r = run_cli("replicate", str(audit), "--guard", str(guard), "--base-url", b.base_url, "--run-dir", str(alias),
                "--no-progress")
    assert r.code == 0, r.err
    # replicate names the guard that answered, not the config's model.
    assert "answered by: alias-sensitive" in r.out, r.out
    return audit, alias


def test_a_run_is_named_by_the_guard_that_answered(two_profiles, tmp_path):
    audit, alias = two_profiles
    stop = [json.loads(x) for x in (alias / "events.jsonl").read_text().splitlines()][-1]
    assert stop["event"] == "stop" and stop["answered_by"] == {"alias-sensitive": 80}
    st = run_cli("status", str(alias))
    assert "answered by: alias-sensitive" in st.out, st.out
    r = run_cli("compare", str(audit), str(alias), "--bootstrap", "200", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [i["label"] for i in out["inputs"]] == ["shortcut", "alias-sensitive"]
    assert out["inputs"][1]["source"]["guard"]["answered_by"] == {"alias-sensitive": 80}
    text = run_cli("compare", str(audit), str(alias), "--bootstrap", "200")
    assert "alias-sensitive: answered by alias-sensitive; config sim-test, model sim/server-profile" in text.out
    # Its own folder beside the runs, never inside one.
    folder = tmp_path / "runs" / "compare-audit-alias"
    html = (folder / "compare.html").read_text()
    assert "<title>guardeval compare · shortcut vs alias-sensitive</title>" in html, html[:800]
    assert not (alias / "compare.html").exists() and not (audit / "compare.html").exists()


def test_a_run_of_an_earlier_version_is_named_from_its_raw_log(two_profiles):
    """Stop events without `answered_by` (before issue 37, or a session killed before its stop):
    the identity is read from the raw log's answers."""
    audit, alias = two_profiles
    for run in (audit, alias):
        events = run / "events.jsonl"
        lines = [json.loads(x) for x in events.read_text().splitlines()]
        for e in lines:
            e.pop("answered_by", None)
        events.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    r = run_cli("compare", str(audit), str(alias), "--bootstrap", "100", "--json", "--no-verify")
    assert r.code == 0, r.err
    assert [i["label"] for i in json.loads(r.out)["inputs"]] == ["shortcut", "alias-sensitive"]


def test_a_guard_config_label_names_its_runs(tmp_path, small_cohort, sim_factory):
    a = sim_factory("--profile", "shortcut")
    guard = write_guard(tmp_path / "g.toml", a.base_url, label="my shortcut guard")
    run, copy = tmp_path / "run", tmp_path / "copy"
    _launch(small_cohort, guard, run)
    shutil.copytree(run, copy)
    r = run_cli("compare", str(run), str(copy), "--bootstrap", "50", "--json", "--out", str(tmp_path / "cmp"))
    assert r.code == 0, r.err
    assert [i["label"] for i in json.loads(r.out)["inputs"]] == ["my shortcut guard", "my shortcut guard (2)"]
    bad = write_guard(tmp_path / "bad.toml", a.base_url, label="")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(bad), "--dry-run")
    assert r.code == 2 and "label" in r.err and "1-64 characters" in r.err and "Traceback" not in r.err, r.err


def test_compare_refuses_a_run_with_itself_and_a_run_folder_as_out(tmp_path, finished_run):
    r = run_cli("compare", str(finished_run), str(finished_run), "--bootstrap", "50")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "are the same run" in r.err and r.out == ""
    assert not (finished_run / "compare.html").exists()
    copy = shutil.copytree(finished_run, tmp_path / "copy")
    r = run_cli("compare", str(finished_run), str(copy), "--bootstrap", "50", "--out", str(copy))
    assert r.code == 2 and "holds a run" in r.err and "--out" in r.err, r.err
    assert not (copy / "compare.html").exists()


def test_a_dry_run_into_an_existing_run_folder_says_the_launch_would_refuse(finished_run, small_cohort, tmp_path):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir",
                str(finished_run), "--dry-run", "--no-preflight")
    assert r.code == 2, r.out
    assert "would refuse:" in r.out and "it holds a run" in r.out and "would write" not in r.out, r.out
    assert "launch would refuse (exit 2)" in r.out
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir",
                str(finished_run), "--dry-run", "--no-preflight", "--json")
    assert r.code == 2 and "it holds a run" in json.loads(r.out)["run_dir_refused"]


GUARD = '''
    def guard(inp):
        return '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
'''


def test_a_python_guard_beside_its_config_needs_no_pythonpath(tmp_path, small_cohort):
    """The how-to's own guard: my_guard.py next to my-guard.toml, the commands run from another
    folder, PYTHONPATH holding only guardeval (as an installed one would)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my_guard_37.py").write_text(textwrap.dedent(GUARD))
    cfg = mine / "my-guard.toml"
    cfg.write_text('name = "my-guard"\nbackend = "python"\ncallable = "my_guard_37:guard"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    _launch(small_cohort, cfg, run, "--max-calls", "40", cwd=elsewhere)
    pin = json.loads((run / "manifest.json").read_text())["guard_callable"]
    assert pin["beside_config"] == str(mine) and pin["module"] == "my_guard_37"
    r = run_cli("resume", str(run), "--no-progress", cwd=elsewhere)
    assert r.code == 0 and "80/80 calls decided" in r.out and "answered by: my_guard_37:guard" in r.out, r.err
    assert run_cli("verify", str(run), cwd=elsewhere).code == 0
    r = run_cli("estimate", str(run), "--bootstrap", "100", cwd=elsewhere)
    assert r.code == 0, r.err
    # Moved away: the message says what was not checked once, and the option once.
    shutil.move(mine, tmp_path / "moved")
    r = run_cli("estimate", str(run), "--bootstrap", "100", cwd=elsewhere)
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "could not be done" not in r.err and r.err.count("--allow-skipped") == 1, r.err
    assert r.err.count("callable source") == 1 and f"nor in {mine}" in r.err, r.err


def test_a_module_that_fails_inside_is_not_looked_for_beside_the_config(tmp_path, small_cohort):
    """Only a module missing from the path is looked for beside the config: an import error
    inside the guard's own code is the guard's, named as it is."""
    (tmp_path / "broken_37.py").write_text("import no_such_module_37\n")
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "b"\nbackend = "python"\ncallable = "broken_37:guard"\nmodel = "m"\n'
                   'prompt = "guardeval-json-v1"\n')
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(cfg), "--run-dir", str(tmp_path / "r"))
    assert r.code == 2 and "No module named 'no_such_module_37'" in r.err and "Traceback" not in r.err, r.err


def test_status_says_retried_once_and_a_resume_that_sent_nothing_leaves_the_fingerprint(finished_run, tmp_path):
    run = shutil.copytree(finished_run, tmp_path / "run")
    st = run_cli("status", str(run))
    assert st.code == 0
    assert "failed transiently and were tried again" in st.out and " retried)" not in st.out, st.out
    events = (run / "events.jsonl").read_bytes()
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    assert "the run was left as it was (the same fingerprint)" in r.err and "moved on" not in r.err, r.err
    assert (run / "events.jsonl").read_bytes() == events   # issue 47 §5: a published fingerprint stays true


def test_the_study_preflight_of_a_python_guard_says_there_is_none(tmp_path, small_cohort):
    r = run_cli("study", "launch", "--cohort", str(small_cohort), "--guard", "python-example", "--guard",
                "python-example", "--label", "one", "--label", "two", "--reps", "1", "--study-dir",
                str(tmp_path / "study"), "--no-progress")
    assert r.code == 0, r.err
    assert "preflight of one: none (python back-end: no server to ask)" in r.err, r.err
    assert "preflight of one:\n" not in r.err


def test_the_api_reference_lists_the_records_fields():
    import sys

    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        import reference
    finally:
        sys.path.pop(0)
    page = (REPO / "docs" / "reference" / "api.md").read_text()
    assert "<!-- generated: api-records -->" in page
    table = reference.records_reference()
    assert "### `Difference`" in table and "### `Effect`" in table and "### `RunStatus`" in table
    assert "| `difference_minus_placebo` | `float \\| None` | the headline: B − A of the corrected effect |" in table
    assert "| `significant` (property) |" in table


def test_the_snippets_print_the_headline_and_the_readme_says_what_resume_prints():
    howto = (REPO / "docs" / "how-to" / "python-guard.md").read_text()
    assert "d.difference_minus_placebo, d.significant" in howto and "(d.condition, d.difference)" not in howto
    assert "value = e.delta if e.delta_minus_placebo is None else e.delta_minus_placebo" in howto
    for page in (REPO / "README.md", REPO / "docs" / "tutorial.md"):
        text = page.read_text()
        assert "names the failed calls" not in text and "counts the failed calls" in text
    assert "--cohort cohorts/demo" not in (REPO / "docs" / "study.md").read_text()
    assert "three times as hard as `shortcut`:" not in (REPO / "docs" / "tutorial.md").read_text()
