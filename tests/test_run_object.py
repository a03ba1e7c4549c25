"""guardeval.run.Run: one way to open a run, its parts read once, one resume for every caller
(issue 38 §2)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from guardeval import api
from guardeval.errors import InputError
from guardeval.run import Run
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST

from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_open_takes_a_path_a_run_id_a_run_folder_or_a_run(finished_run: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = json.loads((finished_run / "manifest.json").read_text())["run_id"]
    with Run.open(finished_run) as by_path, Run.open(str(finished_run)) as by_text:
        assert by_path.path == by_text.path == finished_run and by_path.manifest.run_id == run_id
    # A bare run id names runs/<id> (what a launch printed, pasted as is).
    shutil.copytree(finished_run, tmp_path / "runs" / run_id)
    monkeypatch.chdir(tmp_path)
    with Run.open(run_id) as by_id:
        assert by_id.path == Path("runs") / run_id and by_id.manifest.run_id == run_id
    folder = RunFolder(finished_run)
    with Run.open(folder) as by_folder:
        assert by_folder.folder is folder and by_folder.manifest.run_id == run_id
    assert folder.has(MANIFEST)   # a RunFolder given stays open for its owner
    folder.close()
    run = Run.open(finished_run)
    assert Run.open(run) is run
    with Run.using(run) as same:
        assert same is run
    assert run.folder.has(MANIFEST)   # `using` closes only what it opened
    run.close()


def test_run_open_refuses_a_folder_without_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        Run.open(tmp_path)
    assert err.value.exit_code == 2 and err.value.path == tmp_path
    assert err.value.message == "not a run folder (no manifest.json)"
    r = run_cli("status", str(tmp_path))
    assert r.code == 2 and "not a run folder (no manifest.json)" in r.err and str(tmp_path) in r.err


def test_each_part_is_read_once(copy_run: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from guardeval.run.folder import manifest

    reads: list[RunFolder] = []
    read_manifest = manifest.read_manifest

    def counted(folder: RunFolder) -> dict:
        reads.append(folder)
        return read_manifest(folder)

    monkeypatch.setattr(manifest, "read_manifest", counted)
    path = copy_run("run")
    run = Run.open(path)
    parts = ("manifest", "config", "prompt", "cohort", "schedule", "launch_options", "fingerprint")
    first = {name: getattr(run, name) for name in parts}
    assert len(reads) == 1
    # Changed on disk after the first read: the Run keeps what it read.
    raw = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**raw, "run_id": "changed"}))
    (path / "schedule.jsonl").write_text("")
    for name in parts:
        assert getattr(run, name) is first[name], name
    assert len(reads) == 1 and run.manifest.run_id == raw["run_id"] and len(run.schedule) == 80
    m = run.manifest
    assert (m.n_calls, m.reps, m.raw) == (80, 1, raw) and run.config.name == "sim-test"
    assert run.prompt.sha256 == m.prompt["sha256"] and run.fingerprint.manifest_sha256 == m.sha256 and run.fingerprint.n_raw >= 80
    run.close()


def _pilot(tmp_path: Path, cohort: Path, base_url: str, *options: str) -> Path:
    guard = write_guard(tmp_path / "g.toml", base_url)
    run = tmp_path / "pilot"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "2", *options, "--no-progress")
    assert r.code == 0, r.err
    return run


def test_the_api_resume_keeps_the_launchs_budget(tmp_path: Path, small_cohort: Path, sim) -> None:
    run = _pilot(tmp_path, small_cohort, sim.base_url, "--max-cost", "0.02", "--concurrency", "4")
    assert Run.open(run).launch_options == {"max_cost": 0.02, "concurrency": 4}
    result = api.resume(run)
    assert result.stop_reason == "budget" and not result.complete
    spent = sum(rec["usage"].get("cost", 0) for rec in _jsonl(run / "raw.jsonl"))
    st = api.status(run)
    assert 0 < spent <= 0.02 and st.spend_usd <= 0.02 and st.pending > 0 and st.decided + st.pending == 80


def test_the_cli_and_the_api_resume_send_the_same_calls(tmp_path: Path, small_cohort: Path, sim) -> None:
    # One call at a time (as launched, so both resumes inherit it): the order is the schedule's.
    pilot = _pilot(tmp_path, small_cohort, sim.base_url, "--concurrency", "1")
    by_cli, by_api = tmp_path / "cli", tmp_path / "api"
    shutil.copytree(pilot, by_cli)
    shutil.copytree(pilot, by_api)
    r = run_cli("resume", str(by_cli), "--max-calls", "5", "--no-progress")
    assert r.code == 0 and "as launched: --concurrency 1" in r.err, r.err
    result = api.resume(by_api, max_calls=5)
    assert result.session_dispatched == 5
    sent = [[rec["call_id"] for rec in _jsonl(run / "raw.jsonl")] for run in (by_cli, by_api)]
    assert len(sent[0]) == 7 and sent[0] == sent[1]


# -- one Run, two sessions (issue 46 §5) ---------------------------------------------------------
def test_a_session_is_refused_while_this_process_holds_the_runs_lock(tmp_path: Path, small_cohort: Path,
                                                                      sim) -> None:
    # The lock is taken through the Run's own folder, the descriptor a second session would use:
    # flock on one shared descriptor succeeded twice, so the resume went ahead under it.
    from guardeval.errors import RunLocked

    run = Run.open(_pilot(tmp_path, small_cohort, sim.base_url, "--concurrency", "1"))
    try:
        with run.folder.lock():
            with pytest.raises(RunLocked, match="another guardeval process or thread"):
                api.resume(run, max_calls=3)
            with pytest.raises(RunLocked):
                run.folder.lock().__enter__()
        assert len(_jsonl(run.path / "raw.jsonl")) == 2   # nothing was sent under the held lock
        assert api.resume(run, max_calls=3).session_dispatched == 3   # released: the next session runs
    finally:
        run.close()


def test_two_threads_resuming_one_run_never_send_a_call_twice(tmp_path: Path, small_cohort: Path,
                                                              sim_factory) -> None:
    import threading

    from guardeval.errors import RunLocked

    slow = sim_factory("--seed", "7", "--latency-ms", "40")
    path = _pilot(tmp_path, small_cohort, slow.base_url, "--concurrency", "1")
    start = threading.Barrier(2)
    results: list[object] = []

    with Run.using(path) as run:
        def resume() -> None:
            start.wait()
            try:
                results.append(api.resume(run))
            except RunLocked as exc:
                results.append(exc)

        threads = [threading.Thread(target=resume) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    refused = [r for r in results if isinstance(r, RunLocked)]
    assert len(results) == 2 and len(refused) == 1, results
    calls = [rec["call_id"] for rec in _jsonl(path / "decisions.jsonl")]
    assert len(calls) == len(set(calls)) == 80
    assert run_cli("verify", str(path)).code == 0


def test_a_closed_run_is_refused_clearly_not_reported_damaged(finished_run: Path) -> None:
    # Issue 46 §11: api.verify of a closed Run reported the run damaged ("Bad file descriptor").
    run = Run.open(finished_run)
    run.close()
    for use in (api.verify, api.status, api.resume, api.calls, lambda r: api.estimate(r, write=False),
                Run.verify, Run.status):
        with pytest.raises(InputError, match="this Run was closed.*open it again") as caught:
            use(run)
        assert "Bad file descriptor" not in str(caught.value)
    folder = RunFolder(finished_run)
    folder.close()
    with pytest.raises(InputError, match="this RunFolder was closed"):
        api.verify(folder)
    assert api.verify(finished_run).ok   # the run itself is whole
