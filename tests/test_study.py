"""`guardeval study` (issue 28): N guards on one schedule, one folder, dispatched together from one
process, one record with a fingerprint, one report with the answer in words; each against real
simulated providers of known character (one server per profile) on 127.0.0.1."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from guardeval.backends.sim import SimServerProcess
from guardeval.backends.sim.profiles import PROFILES
from guardeval.canon import canonical_sha256

from conftest import CliResult, cli_env, run_cli, write_guard
from tamper import rechain_with_zero_costs

pytestmark = pytest.mark.slow

PROFILE_NAMES = ("shortcut", "robust", "alias-sensitive")
KEY = {"GUARDEVAL_TEST_KEY": "sk-test-key-0123"}


@dataclass
class Profiles:
    servers: dict[str, SimServerProcess]
    guards: dict[str, Path]
    root: Path


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profiles]:
    """One simulated provider per shipped profile, and a guard config for each."""
    root = tmp_path_factory.mktemp("profiles")
    servers = {name: SimServerProcess(["--seed", str(i + 11), "--profile", name], env=cli_env()).launch()
               for i, name in enumerate(PROFILE_NAMES)}
    try:
        for s in servers.values():
            s.wait_ready()
        guards = {name: write_guard(root / f"{name}.toml", s.base_url, name=name, model=f"sim/{name}-guard")
                  for name, s in servers.items()}
        yield Profiles(servers, guards, root)
    finally:
        for s in servers.values():
            s.stop()


def _launch(profiles: Profiles, cohort: Path, study: Path, *extra: str, env: dict[str, str] | None = None):
    args = ["study", "launch", "--cohort", str(cohort), "--reps", "2", "--seed", "3", "--study-dir", str(study),
            "--no-preflight", "--no-progress"]
    for g in profiles.guards.values():
        args += ["--guard", str(g)]
    return run_cli(*args, *extra, env={**KEY, **(env or {})})


def _guards_args(guards: dict[str, Path]) -> list[str]:
    return [x for g in guards.values() for x in ("--guard", str(g))]


@pytest.fixture(scope="module")
def study(profiles: Profiles, small_cohort: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished study of the three profiles on the small cohort (16 bases x 5 x 2 = 160 calls each)."""
    folder = tmp_path_factory.mktemp("study") / "s"
    r = _launch(profiles, small_cohort, folder)
    assert r.code == 0, r.err
    return folder


@pytest.fixture(scope="module")
def reported(study: Path) -> dict:
    r = run_cli("study", "report", str(study), "--bootstrap", "2000", "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """`guardeval ARGS` in this process (the CLI's own `main`: exit code, stdout, stderr), with the
    guards' key set; a subprocess costs the interpreter and its imports each time."""
    from guardeval.cli import main

    for k, v in KEY.items():
        monkeypatch.setenv(k, v)

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:   # a usage error
            code = int(exc.code or 0)
        got = capsys.readouterr()
        return CliResult(code, got.out, got.err)
    return run


def _copy(study: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(study, dst, symlinks=True)
    (dst / ".lock").unlink(missing_ok=True)
    for lock in dst.glob("runs/*/.lock"):
        lock.unlink()
    return dst


def _record(study: Path) -> dict:
    return json.loads((study / "study.json").read_text())


def _rewrite(study: Path, record: dict) -> None:
    """study.json as someone who knows the format would rewrite it: its own hash recomputed."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    (study / "study.json").write_text(json.dumps({**body, "sha256": canonical_sha256(body)}, indent=2))


def _prompt_variant(root: Path, new_id: str, *, system_extra: str = "", strict: bool = True) -> str:
    """A copy of guardeval-json-v1 under `root` as `new_id`: another system text, or another
    output schema (its `strict`), the manifest's hashes made right."""
    src = Path(__file__).resolve().parent.parent / "prompts" / "guardeval-json-v1"
    dst = root / new_id
    dst.mkdir(parents=True)
    manifest = json.loads((src / "manifest.json").read_text())
    for name in manifest["files"]:
        data = (src / name).read_bytes() + (system_extra.encode() if name == "system.txt" else b"")
        (dst / name).write_bytes(data)
        manifest["files"][name] = hashlib.sha256(data).hexdigest()
    manifest["id"] = new_id
    manifest["output_schema"]["strict"] = strict
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return new_id


def _refused(r, *needles: str) -> None:
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.out, r.err)
    for n in needles:
        assert n in r.err, (n, r.err)


# -- launch ---------------------------------------------------------------------------------------

def test_one_folder_one_schedule_one_process(study: Path) -> None:
    record = _record(study)
    assert [r["label"] for r in record["runs"]] == list(PROFILE_NAMES)
    schedules = {(study / "runs" / name / "schedule.jsonl").read_bytes() for name in PROFILE_NAMES}
    assert len(schedules) == 1                                   # byte-identical
    # The record pins the schedule's bytes and its own body (the hash a rewrite must recompute).
    assert record["schedule"]["sha256"] == hashlib.sha256(schedules.pop()).hexdigest()
    assert record["sha256"] == canonical_sha256({k: v for k, v in record.items() if k != "sha256"})
    assert record["schedule"]["n_calls"] == 160
    pids = set()
    for name in PROFILE_NAMES:
        run = study / "runs" / name
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["schedule_sha256"] == record["schedule"]["sha256"]
        assert manifest["run_id"] == next(r["run_id"] for r in record["runs"] if r["label"] == name)
        pids |= {json.loads(line)["pid"] for line in (run / "events.jsonl").read_text().splitlines()
                 if json.loads(line)["event"] == "start"}
        # The run shows which guard it met: every answer carries the profile's fingerprint.
        answered = [json.loads(line) for line in (run / "raw.jsonl").read_text().splitlines()]
        fps = {json.loads(a["response"])["system_fingerprint"] for a in answered if a["status"] == 200}
        assert fps == {PROFILES[name].fingerprint}
        assert len((run / "decisions.jsonl").read_text().splitlines()) == 160
    assert len(pids) == 1                                        # dispatched together, from one process
    assert record["question"] == record["question_at_launch"] == {
        "baseline": "original", "placebo": "format_placebo", "margin": 0.05, "failure_rule": "drop",
        "family": ["format_placebo", "marker_rewrite", "tool_alias", "combined"]}
    assert record["commands"][0]["command"][:3] == ["guardeval", "study", "launch"]


def test_status_and_verify(cli, study: Path) -> None:
    r = cli("study", "status", str(study), "--json")
    assert r.code == 0, r.err
    st = json.loads(r.out)
    assert st["complete"] and st["incomplete"] == [] and not st["running"] and len(st["runs"]) == 3
    assert all(x["decided"] == x["n_calls"] == 160 and x["problem"] is None for x in st["runs"])
    assert st["fingerprint"].startswith("s3.480.")
    r = cli("study", "verify", str(study))
    assert r.code == 0 and "study verify: OK" in r.out, r.out + r.err
    text = cli("study", "status", str(study))
    assert text.code == 0 and "every run complete" in text.out and st["fingerprint"] in text.out


def test_dry_run_writes_nothing(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path) -> None:
    r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "2", "--study-dir", str(tmp_path / "s"),
            "--dry-run", "--max-cost", "3", "--guard-max-cost", "robust=1", *_guards_args(profiles.guards))
    assert r.code == 0, r.err
    assert "study plan: 3 guards x 160 calls on one schedule" in r.out and "dry run: no call sent" in r.out
    assert r.out.count("preflight: OK") == 3 and "budget: $3 for the whole study; robust $1" in r.out
    assert not (tmp_path / "s").exists()
    r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "2", "--study-dir", str(tmp_path / "s"),
            "--dry-run", "--json", *_guards_args(profiles.guards))
    plan = json.loads(r.out)
    assert r.code == 0 and plan["preflight_ok"] and plan["labels"] == list(PROFILE_NAMES) and plan["n_calls"] == 160


def test_progress_has_a_line_per_guard(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path) -> None:
    # With the preflight: each guard's, before the folder is written.
    args = ["study", "launch", "--cohort", str(small_cohort), "--reps", "1", "--seed", "9", "--study-dir",
            str(tmp_path / "s")]
    for g in profiles.guards.values():
        args += ["--guard", str(g)]
    r = cli(*args)
    assert r.code == 0, r.err
    assert r.err.count("preflight: OK") == 3 and "preflight of alias-sensitive:" in r.err
    last = [line for line in r.err.splitlines() if line.startswith("progress: ")][-4:]
    assert [line.split()[1] for line in last] == [*PROFILE_NAMES, "study:"]
    assert "80/80 calls" in last[0] and "study: 240/240 calls" in last[3]
    # A launch that completes reports the study (issue 47 §3): its page, its answer, each line once.
    study = tmp_path / "s"
    assert all((study / name).is_file() for name in ("study.html", "study.md", "study-report.json"))
    assert "tool_alias: " in r.out and r.out.index("study ") < r.out.index("tool_alias: ")
    assert r.err.count("guardeval: wrote ") == 1 and r.err.count("study fingerprint") == 1, r.err
    assert f"guardeval: wrote study.html, study.md, study-report.json in {study}" in r.err
    rep = cli("study", "report", str(study), "--bootstrap", "200")
    assert rep.code == 0, rep.err
    assert rep.err.count("guardeval: wrote ") == 1 and rep.err.count("study fingerprint") == 1, rep.err


# -- report -----------------------------------------------------------------------------------------

def test_the_report_answers_in_words(cli, study: Path, reported: dict) -> None:
    ans = reported["answer"]
    by = {a["condition"]: a for a in ans["conditions"]}
    assert set(by) == {"marker_rewrite", "tool_alias", "combined"}
    assert (by["tool_alias"]["top"], by["tool_alias"]["bottom"]) == ("alias-sensitive", "robust")
    assert by["tool_alias"]["holds"] is True and by["tool_alias"]["separation"] == "separated"
    # 16 bases do not separate shortcut from either end: no guard alone is most or least (issue 45 §6).
    assert by["tool_alias"]["most"] is None and by["tool_alias"]["most_guards"] == ["alias-sensitive", "shortcut"]
    assert by["tool_alias"]["text"].startswith("tool_alias: alias-sensitive moves more than robust (")
    assert "but the data separate shortcut (" in by["tool_alias"]["text"]
    guards = {g["label"]: g for g in ans["guards"]}
    assert guards["robust"]["effects"] == [] and "no placebo-corrected effect" in guards["robust"]["text"]
    assert "tool_alias" in guards["alias-sensitive"]["effects"]
    for name in ("study.html", "study.md", "study-report.json"):
        assert (study / name).is_file()
    assert json.loads((study / "study-report.json").read_text())["fingerprint"] == reported["fingerprint"]
    md = (study / "study.md").read_text()
    assert md.index("## The answer") < md.index("## Leaderboard") < md.index("## Paired differences") \
        < md.index("## Ranking stability") < md.index("## The guards") < md.index("## The question") \
        < md.index("## Study fingerprint") < md.index("## How it was made")
    for r in reported["runs"]:
        assert (study / r["report"]).is_file() and r["report"] == f"runs/{r['label']}/report.html"
        assert f"]({r['report']})" in md
    record = _record(study)
    assert record["report"]["fingerprint"] == reported["fingerprint"]["token"]
    assert {r["label"]: r["fingerprint"] for r in record["runs"]} == reported["fingerprint"]["runs"]
    r = cli("study", "verify", str(study), "--expect", reported["fingerprint"]["token"])
    assert r.code == 0 and "(as expected)" in r.out, r.out + r.err


def test_the_api_gives_records(cli, study: Path, reported: dict, tmp_path: Path) -> None:
    from guardeval import api

    copy = _copy(study, tmp_path)
    rep = api.study_report(copy, n_boot=2000, write=False)
    assert isinstance(rep, api.StudyReport) and rep.written == []
    assert rep.most_sensitive == {a["condition"]: a["most"] for a in reported["answer"]["conditions"] if a["most"]}
    assert rep.corrected_effects["robust"] == []
    assert rep.fingerprint == reported["fingerprint"]["token"]   # the same study, the same runs
    st = api.study_status(copy)
    assert st == json.loads(cli("study", "status", str(copy), "--json").out)
    v = api.study_verify(copy, expect=rep.fingerprint)
    assert isinstance(v, api.StudyVerifyReport) and v.ok and v.problems == []
    # The records serialise to plain JSON and read back as what they said.
    assert json.loads(json.dumps(rep.to_dict()))["fingerprint"] == rep.fingerprint
    assert json.loads(json.dumps(v.to_dict())) == {**v.to_dict(), "problems": []}
    res = api.study_resume(copy)                                  # nothing left to send
    assert isinstance(res, api.StudyResult) and res.complete and not any(r.dispatched for r in res.runs)
    assert res.stopped() == {}


# -- the record pins the study ----------------------------------------------------------------------

def test_verify_expect_catches_a_rerun_run(cli, profiles: Profiles, study: Path, reported: dict, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    token = reported["fingerprint"]["token"]
    # The robust run made again on the same schedule, into its old place.
    shutil.rmtree(copy / "runs" / "robust")
    r = cli("replicate", str(copy / "runs" / "shortcut"), "--guard", str(profiles.guards["robust"]),
                "--run-dir", str(copy / "runs" / "robust"), "--no-preflight", "--no-progress")
    assert r.code == 0, r.err
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "not the run the study recorded for 'robust'" in r.out, r.out
    # Whoever re-ran it also rewrites the record to match: only the fingerprint tells.
    record = _record(copy)
    manifest = json.loads((copy / "runs" / "robust" / "manifest.json").read_text())
    for e in record["runs"]:
        if e["label"] == "robust":
            e.update(run_id=manifest["run_id"], manifest_sha256=manifest["sha256"], fingerprint=None)
    _rewrite(copy, record)
    assert cli("study", "verify", str(copy)).code == 0
    r = cli("study", "verify", str(copy), "--expect", token)
    assert r.code == 1 and f"not the expected {token}" in r.out, r.out


def test_a_run_rechained_in_place_with_the_same_ids_is_caught_by_its_fingerprint(cli, study: Path, reported: dict,
                                                                                tmp_path: Path) -> None:
    """The run id, its manifest and every call id stay; only the logged answers change, and every
    hash over them is recomputed. Nothing is left for the ids to betray: the run's fingerprint
    (its chain head and counts, pinned by the study's) is what catches it."""
    copy = _copy(study, tmp_path)
    token = reported["fingerprint"]["token"]
    run = copy / "runs" / "shortcut"
    manifest_before = (run / "manifest.json").read_bytes()
    calls_before = sorted(json.loads(x)["call_id"] for x in (run / "decisions.jsonl").read_text().splitlines())
    rechain_with_zero_costs(run)
    assert (run / "manifest.json").read_bytes() == manifest_before
    assert sorted(json.loads(x)["call_id"] for x in (run / "decisions.jsonl").read_text().splitlines()) == calls_before
    assert cli("verify", str(run)).code == 0                      # the run's own chain is consistent again
    r = cli("study", "verify", str(copy), "--expect", token)
    assert r.code == 1 and f"not the expected {token}" in r.out, r.out + r.err
    r = cli("study", "report", str(copy), "--bootstrap", "200")
    assert r.code != 0 and "Traceback" not in r.err, r.out + r.err
    assert "shortcut" in r.err and "fingerprint" in r.err, r.err


def test_verify_catches_a_removed_or_replaced_run(cli, study: Path, reported: dict, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    token = reported["fingerprint"]["token"]
    # Replaced: another run's folder in robust's place.
    shutil.rmtree(copy / "runs" / "robust")
    shutil.copytree(copy / "runs" / "shortcut", copy / "runs" / "robust")
    r = cli("study", "verify", str(copy), "--expect", token)
    assert r.code == 1 and "not the run the study recorded for 'robust'" in r.out and "not the expected" in r.out
    # Removed: the folder gone, then also struck from the record.
    shutil.rmtree(copy / "runs" / "robust")
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "the study's run 'robust' is missing" in r.out, r.out
    record = _record(copy)
    record["runs"] = [e for e in record["runs"] if e["label"] != "robust"]
    _rewrite(copy, record)
    # The record itself tells (issue 36): its last report was made from one run more.
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "the study's last report was made from 3 runs; the record lists 2" in r.out, r.out
    r = cli("study", "verify", str(copy), "--expect", token)
    assert r.code == 1 and "not the expected" in r.out
    # A run folder the record does not list.
    shutil.copytree(copy / "runs" / "shortcut", copy / "runs" / "extra")
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "a run folder the study does not list" in r.out


def test_a_damaged_record_is_refused(cli, study: Path, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    text = (copy / "study.json").read_text()
    (copy / "study.json").write_text(text.replace('"margin": 0.05', '"margin": 0.5'))
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "does not match its own sha256" in r.out, r.out
    _refused(cli("study", "report", str(copy)), "does not match its own sha256")
    record = json.loads(text)
    record["question"]["margin"] = 2
    _rewrite(copy, record)
    _refused(cli("study", "status", str(copy)), "question.margin")
    (copy / "study.json").write_text(text[:-3] + ', "sha256": "' + "0" * 64 + '"}')
    _refused(cli("study", "status", str(copy)), "repeats a key")


def test_the_question_changes_only_by_a_recorded_edit(cli, study: Path, reported: dict, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    _refused(cli("study", "edit", str(copy), "--margin", "0.03", "--reason", " "), "--reason")
    _refused(cli("study", "edit", str(copy), "--placebo", "nonesuch", "--reason", "x"), "nonesuch")
    r = cli("study", "edit", str(copy), "--margin", "0.03", "--reason", "the pre-registration said 0.03")
    assert r.code == 0, r.err
    record = _record(copy)
    assert record["question"]["margin"] == 0.03 and record["question_at_launch"]["margin"] == 0.05
    assert record["edits"][0]["changes"] == {"margin": {"from": 0.05, "to": 0.03}}
    assert record["edits"][0]["reason"] == "the pre-registration said 0.03"
    r = cli("study", "verify", str(copy), "--expect", reported["fingerprint"]["token"])
    assert r.code == 1 and "not the expected" in r.out
    r = cli("study", "report", str(copy), "--bootstrap", "500", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["question"]["margin"] == 0.03 and out["question_at_launch"]["margin"] == 0.05
    assert "the pre-registration said 0.03" in (copy / "study.md").read_text()


# -- add --------------------------------------------------------------------------------------------

def test_add_a_guard_later(cli, profiles: Profiles, study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = _copy(study, tmp_path)
    r = cli("study", "add", str(copy), "--guard", str(profiles.guards["shortcut"]), "--no-preflight",
                "--no-progress")
    _refused(r, "already has a run labelled 'shortcut'")
    monkeypatch.setenv("GUARDEVAL_PROMPTS", str(tmp_path / "prompts"))
    other_prompt = write_guard(tmp_path / "other.toml", profiles.servers["robust"].base_url, name="other",
                               prompt=_prompt_variant(tmp_path / "prompts", "other-schema", strict=False))
    _refused(cli("study", "add", str(copy), "--guard", str(other_prompt), "--no-preflight"),
             "output schema differs", "one stimulus set")
    assert not (copy / "runs" / "other").exists()
    r = cli("study", "add", str(copy), "--guard", str(profiles.guards["shortcut"]), "--label", "shortcut-2",
                "--no-progress")
    assert r.code == 0 and "preflight: OK" in r.err, r.err
    new = copy / "runs" / "shortcut-2"
    assert (new / "schedule.jsonl").read_bytes() == (copy / "runs" / "shortcut" / "schedule.jsonl").read_bytes()
    record = _record(copy)
    assert [e["label"] for e in record["runs"]] == [*PROFILE_NAMES, "shortcut-2"]
    assert record["commands"][-1]["command"][:3] == ["guardeval", "study", "add"]
    assert cli("study", "verify", str(copy)).code == 0
    # A study whose runs are on another cohort than its record says: damaged, refused (exit 1, issue 36).
    record["cohort"]["sha256"] = "0" * 64
    _rewrite(copy, record)
    r = cli("study", "add", str(copy), "--guard", str(profiles.guards["robust"]), "--label", "robust-2",
                "--no-preflight")
    assert r.code == 1 and "the study is damaged" in r.err and "another cohort" in r.err, r.err
    assert not (copy / "runs" / "robust-2").exists()


def test_add_never_writes_through_a_runs_link_swapped_in(cli, profiles: Profiles, study: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 46 §6: the study's runs/ swapped for a link to a folder outside it, once the study is
    # open and locked and the new run planned (the moment a racing swap wins): the new run must not
    # land outside the study. `study add` created it by path; it goes through the study's descriptor.
    from guardeval.study import runs as study_runs

    copy = _copy(study, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    planned = study_runs.plan_replicate

    def plan_then_swap(*args, **kwargs):
        plan = planned(*args, **kwargs)
        (copy / "runs").rename(copy / "runs.moved")
        (copy / "runs").symlink_to(outside)
        return plan

    monkeypatch.setattr(study_runs, "plan_replicate", plan_then_swap)
    r = cli("study", "add", str(copy), "--guard", str(profiles.guards["shortcut"]), "--label", "late",
            "--no-preflight", "--no-progress")
    _refused(r, "runs", "symbolic link")
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in (copy / "runs.moved").iterdir()) == sorted(PROFILE_NAMES)
    assert [e["label"] for e in _record(copy)["runs"]] == list(PROFILE_NAMES)


# -- bad input ----------------------------------------------------------------------------------------

def test_bad_launches_are_refused_and_write_nothing(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "s"
    twin = write_guard(tmp_path / "twin.toml", profiles.servers["robust"].base_url, name="shortcut")
    base = ["study", "launch", "--cohort", str(small_cohort), "--reps", "1", "--study-dir", str(target),
            "--no-preflight", "--no-progress"]
    g = profiles.guards
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(twin)),
             str(g["shortcut"]), str(twin), "both named 'shortcut'", "--label")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(twin), "--label", "a", "--label", "a",), "both labelled 'a'")
    _refused(cli(*base, "--guard", str(g["shortcut"])), "two guards or more")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(twin), "--label", "x/y", "--label", "b",), "not a slug")
    monkeypatch.setenv("GUARDEVAL_PROMPTS", str(tmp_path / "prompts"))
    for variant, what in ((_prompt_variant(tmp_path / "prompts", "other-words", system_extra="Be careful.\n"),
                           "prompt differs"),
                          (_prompt_variant(tmp_path / "prompts", "other-schema", strict=False), "output schema differs")):
        other = write_guard(tmp_path / f"{variant}.toml", profiles.servers["robust"].base_url, name="other",
                            prompt=variant)
        _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(other)), str(other), "field 'prompt'",
                 f"guard 'other' uses prompt {variant!r}", what, "one stimulus set")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(g["robust"]), "--concurrency",
                     "nobody=3"), "no guard of the study is labelled 'nobody'")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(g["robust"]), "--guard-max-cost", "1",), "LABEL=VALUE")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(g["robust"]), "--placebo", "nonesuch",), "nonesuch")
    assert not target.exists() and list(tmp_path.glob(".s.partial-*")) == []
    target.mkdir()
    (target / "x").write_text("")
    _refused(cli(*base, "--guard", str(g["shortcut"]), "--guard", str(g["robust"])),
             "study folder already exists")


def test_a_stranger_study_folder_is_read_as_a_run_folder_is(cli, study: Path, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    real = copy / "study.json"
    moved = tmp_path / "elsewhere.json"
    real.rename(moved)
    real.symlink_to(moved)
    _refused(cli("study", "status", str(copy)), "symbolic link")
    real.unlink()
    os.mkfifo(real)                                               # never waited on
    _refused(cli("study", "status", str(copy), ), "not a regular file")
    real.unlink()
    real.write_bytes(b"{" + b" " * (16 << 20) + b"}")
    _refused(cli("study", "status", str(copy)), "larger than")
    moved.rename(real)
    run = copy / "runs" / "robust"
    run.rename(tmp_path / "robust-elsewhere")
    run.symlink_to(tmp_path / "robust-elsewhere")
    r = cli("study", "verify", str(copy))
    assert r.code == 1 and "symbolic link" in r.out, r.out
    r = cli("study", "resume", str(copy), "--no-progress")
    assert r.code == 1 and "symbolic link" in r.err and "Traceback" not in r.err
    link = tmp_path / "study-link"
    link.symlink_to(copy)
    _refused(cli("study", "status", str(link)), "symbolic link")
    _refused(cli("study", "status", str(tmp_path / "nonesuch")), "not a study folder")


def test_one_writer_of_a_study(cli, study: Path, tmp_path: Path) -> None:
    copy = _copy(study, tmp_path)
    fd = os.open(copy, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)            # another process writing the study
        r = cli("study", "resume", str(copy), "--no-progress")
        assert r.code == 1 and "another guardeval process is writing this study" in r.err, r.err
        assert json.loads(cli("study", "status", str(copy), "--json").out)["running"] is True
    finally:
        os.close(fd)


# -- dispatch: failures stop alone, one budget, pilots ------------------------------------------------

def test_a_guard_that_fails_for_good_stops_alone(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with SimServerProcess(["--seed", "4", "--profile", "robust", "--expect-key-env", "STUDY_SIM_KEY"],
                          env=cli_env({"STUDY_SIM_KEY": "sk-right-key-0123"})) as keyed:
        guards = dict(profiles.guards)
        guards["robust"] = write_guard(tmp_path / "robust.toml", keyed.base_url, name="robust",
                                       model="sim/robust-guard", api_key_env="STUDY_BAD_KEY")
        monkeypatch.setenv("STUDY_BAD_KEY", "sk-wrong-key-0123")           # a bad key: 401, fatal
        study = tmp_path / "s"
        r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "1", "--study-dir", str(study),
                "--no-preflight", "--no-progress", *_guards_args(guards))
        assert r.code == 1, r.err
        assert "robust: 0/80 calls decided — stopped (fatal" in r.out and "shortcut: 80/80" in r.out, r.out
        assert "1 run(s) of the study stopped (robust: fatal)" in r.err and "study resume" in r.err
        st = json.loads(cli("study", "status", str(study), "--json").out)
        assert st["incomplete"] == ["robust"] and not st["complete"]
        r = cli("study", "report", str(study), "--bootstrap", "200")
        assert r.code == 1 and "not every run is complete: robust (0/80 decided)" in r.err
        assert not (study / "study.html").exists()
        r = cli("study", "report", str(study), "--bootstrap", "200", "--allow-partial", "--json")
        assert r.code == 0 and "incomplete runs, reported with --allow-partial" in r.err, r.err
        partial = json.loads(r.out)
        assert partial["complete"] is False
        robust = next(g for g in partial["answer"]["guards"] if g["label"] == "robust")
        assert robust["effects"] == [] and "can be estimated" in robust["text"]   # no decision: nothing to say
        monkeypatch.setenv("STUDY_BAD_KEY", "sk-right-key-0123")           # the key fixed: resumable
        r = cli("study", "resume", str(study), "--no-progress")
        assert r.code == 0, r.err
        assert "shortcut: 80/80 calls decided: ok 80 (nothing to send)" in r.out and "robust: 80/80" in r.out
        assert json.loads(cli("study", "status", str(study), "--json").out)["complete"]
        # Resumed since the (partial) report: the runs hold, the report is stale; the fingerprint says so.
        r = cli("study", "verify", str(study))
        assert r.code == 0 and "runs/robust: changed since the study's report" in r.out, r.out
        r = cli("study", "verify", str(study), "--expect", partial["fingerprint"]["token"])
        assert r.code == 1 and "not the expected" in r.out


def test_one_budget_for_the_study(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path) -> None:
    study = tmp_path / "s"
    r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "2", "--study-dir", str(study),
            "--no-preflight", "--no-progress", "--max-cost", "0.05", *_guards_args(profiles.guards))
    assert r.code == 1 and "stopped (budget" in r.out, r.out + r.err
    st = json.loads(cli("study", "status", str(study), "--json").out)
    assert 0 < st["spend_usd"] <= 0.05 and all(0 < x["decided"] < 160 for x in st["runs"]), st
    assert _record(study)["budget"] == {"max_cost": 0.05, "per_guard": {}}
    # Resumed under the recorded budget: nothing more can be admitted.
    r = cli("study", "resume", str(study), "--no-progress")
    assert r.code == 1 and json.loads(cli("study", "status", str(study), "--json").out)["spend_usd"] <= 0.05
    # One guard's own cap, no study budget: that guard stops, the others finish.
    capped = tmp_path / "c"
    r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "1", "--study-dir", str(capped),
            "--no-preflight", "--no-progress", "--guard-max-cost", "robust=0.02", *_guards_args(profiles.guards))
    assert r.code == 1, r.out + r.err
    runs = {x["label"]: x for x in json.loads(cli("study", "status", str(capped), "--json").out)["runs"]}
    assert runs["robust"]["spend_usd"] <= 0.02 and runs["robust"]["decided"] < 80
    assert runs["shortcut"]["complete"] and runs["alias-sensitive"]["complete"]


def test_a_pilot_then_resume_with_retry(cli, profiles: Profiles, small_cohort: Path, tmp_path: Path) -> None:
    study = tmp_path / "s"
    r = cli("study", "launch", "--cohort", str(small_cohort), "--reps", "1", "--study-dir", str(study),
            "--no-preflight", "--no-progress", "--max-calls", "10", "--concurrency", "2", "--concurrency",
            "robust=1", *_guards_args(profiles.guards))
    assert r.code == 0 and "not every run is complete" in r.err, r.err
    st = json.loads(cli("study", "status", str(study), "--json").out)
    assert [x["decided"] for x in st["runs"]] == [10, 10, 10]
    options = {x: json.loads((study / "runs" / x / "manifest.json").read_text())["launch_options"]["concurrency"]
               for x in PROFILE_NAMES}
    assert options == {"shortcut": 2, "robust": 1, "alias-sensitive": 2}
    r = cli("study", "resume", str(study), "--no-progress", "--retry-failed")
    assert r.code == 0, r.err
    assert json.loads(cli("study", "status", str(study), "--json").out)["complete"]
    assert cli("study", "verify", str(study)).code == 0


@pytest.mark.parametrize("command", ["status", "verify", "report", "resume", "edit"])
def test_every_study_command_closes_the_runs_it_opened(cli, study: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    # Issue 49 §3: a study's runs are held by the command's ExitStack, not left to the garbage
    # collector. Every RunFolder made is kept here, so only an explicit close shows as closed.
    from guardeval.run.folder.folder import RunFolder

    copy = _copy(study, tmp_path)
    made: list[RunFolder] = []
    init = RunFolder.__init__

    def counted(self: RunFolder, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(RunFolder, "__init__", counted)
    extra = {"report": ["--bootstrap", "200"], "resume": ["--no-progress"],
             "edit": ["--margin", "0.06", "--reason", "a wider margin, agreed before the report"]}
    r = cli("study", command, str(copy), *extra.get(command, []))
    assert r.code in (0, 1), r.err     # report: 1 when a run is not publishable; the runs are read either way
    try:
        assert len(made) > len(_record(copy)["runs"]), "the study's runs were not opened: the test proves nothing"
        assert [f for f in made if not f.closed] == [], f"study {command} left run folders open"
    finally:
        for f in made:
            f.close()
