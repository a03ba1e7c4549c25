"""Hardening round 3 (issue 36): each finding as it was reproduced, refused or bounded now."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guardeval import api
from guardeval.canon import canonical_sha256

from conftest import REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow   # study launches, launch races, many CLI subprocesses: minutes in all


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# 6. `guardeval.api.resume()` applies the options the launch recorded (here its budget).
def test_api_resume_keeps_the_launchs_budget(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "2", "--max-cost", "0.02", "--concurrency", "4", "--no-progress")
    assert r.code == 0, r.err
    result = api.resume(run)
    assert result.stop_reason == "budget" and not result.complete, (result.stop_reason, result.decided)
    spent = sum(rec["usage"].get("cost", 0) for rec in _jsonl(run / "raw.jsonl"))
    assert 0 < spent <= 0.02
    # Given to the call, an option wins over the launch's.
    result = api.resume(run, max_cost=1000.0)
    assert result.complete and result.stop_reason is None


def test_an_api_launch_records_its_options_for_a_later_resume(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    first = api.launch(small_cohort, guard, reps=1, run_dir=run, max_calls=2, max_cost=0.02, concurrency=4)
    assert first.decided == 2
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["launch_options"]["max_cost"] == 0.02 and manifest["launch_options"]["concurrency"] == 4
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 1 and "as launched: --concurrency 4 --max-cost 0.02" in r.err, r.err


def _swap_for_a_link(parent: Path, name: str, entry: str, target: Path, stop: threading.Event,
                     swapped: list[Path]) -> None:
    """Watch `parent` for a partial folder `.<name>.partial-*` holding `entry`; as soon as it
    appears, put a link to `target` in its place (removed if still empty, else moved away)."""
    while not stop.is_set():
        for p in parent.glob(f".{name}.partial-*"):
            e = p / entry
            try:
                if e.is_dir() and not e.is_symlink():
                    try:
                        e.rmdir()
                    except OSError:
                        e.rename(parent / f"moved-{len(swapped)}")
                    e.symlink_to(target)
                    swapped.append(e)
                    return
            except OSError:
                continue


# 1. A study launch never writes a run folder through a link put in place of its partial `runs/`.
def test_a_study_launch_never_writes_through_a_link_planted_in_its_partial_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    study = tmp_path / "s"
    stop, swapped = threading.Event(), []
    watcher = threading.Thread(target=_swap_for_a_link, args=(tmp_path, "s", "runs", outside, stop, swapped))
    watcher.start()
    try:
        r = run_cli("study", "launch", "--cohort", "demo", "--reps", "3", "--study-dir", str(study),
                    "--guard", "python-example", "--guard", "python-example", "--guard", "python-example",
                    "--label", "a", "--label", "b", "--label", "c", "--no-preflight", "--no-progress")
    finally:
        stop.set()
        watcher.join()
    assert swapped, "the partial folder's runs/ was never seen: the test did not race"
    assert r.code == 2 and "Traceback" not in r.err, r.err
    # Refused, whichever instant of the swap the launch meets: the link itself ("symbolic link"),
    # no folder between the watcher's two steps, or its folder gone from under it (each seen in
    # full runs of this stop). What matters holds in all three: nothing is written through the link.
    refusals = ("symbolic link", "not a run folder (no such folder)", "was removed while the folder was being built")
    assert "runs" in r.err and any(words in r.err for words in refusals), r.err
    assert list(outside.iterdir()) == [], list(outside.iterdir())
    assert not study.exists() and not list(tmp_path.glob(".s.partial-*"))


# 4. A key too short to redact safely is refused before anything is sent (launch, resume, preflight).
def test_a_key_too_short_to_redact_is_refused_before_anything_is_sent(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    common = ["--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--no-progress"]
    for key in ("a", "ab", "sk-or-v1-ab"):
        r = run_cli("launch", *common, "--run-dir", str(run), env={"GUARDEVAL_TEST_KEY": key})
        assert r.code == 2 and "Traceback" not in r.err, r.err
        assert f"GUARDEVAL_TEST_KEY holds a key of {len(key)} character(s): too short" in r.err, r.err
        assert not run.exists()
    r = run_cli("preflight", "--guard", str(guard), env={"GUARDEVAL_TEST_KEY": "a"})
    assert r.code == 2 and "too short" in r.err, r.out + r.err
    long_key = {"GUARDEVAL_TEST_KEY": "sk-or-" + "v1-a-test-key-long-enough"}
    r = run_cli("launch", *common, "--run-dir", str(run), "--max-calls", "3", env=long_key)
    assert r.code == 0, r.err
    raw = (run / "raw.jsonl").read_bytes()
    r = run_cli("resume", str(run), "--no-progress", env={"GUARDEVAL_TEST_KEY": "a"})
    assert r.code == 2 and "too short" in r.err, r.err
    assert (run / "raw.jsonl").read_bytes() == raw


def _refused(r, *needles: str) -> None:
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err[-2000:])
    for n in needles:
        assert n in r.err, r.err


# 5. A dry run (or a study's) with absurd repetitions is refused at once, not planned for ever.
def test_a_dry_run_with_huge_reps_is_refused_at_once(tmp_path):
    for reps, said in (("10000000", "--reps: must be at most 2000000"),
                       ("100000", "calls: more than the 2000000 a run may have")):
        r = run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--dry-run", "--reps", reps,
                    timeout=60)
        _refused(r, said)
        r = run_cli("study", "launch", "--cohort", "demo", "--guard", "python-example", "--guard", "python-example",
                    "--label", "a", "--label", "b", "--dry-run", "--reps", reps, "--study-dir", str(tmp_path / "s"),
                    timeout=60)
        _refused(r, said)
    from guardeval.api import InputError

    with pytest.raises(InputError, match="more than the 2000000"):
        api.plan_launch("demo", "python-example", reps=100_000)


@pytest.fixture(scope="module")
def python_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("h3") / "run"
    assert api.launch("demo", "python-example", reps=1, run_dir=folder).complete
    return folder


# 7. Seeds and bootstrap counts out of range are usage errors (exit 2), not tracebacks.
def test_seeds_and_bootstrap_counts_out_of_range_are_refused_by_the_parser(python_run, tmp_path):
    big = str(2**64)
    _refused(run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--dry-run", "--seed", big),
             "--seed: must be from 0 to 18446744073709551615")
    _refused(run_cli("study", "launch", "--cohort", "demo", "--guard", "python-example", "--guard", "python-example",
                     "--label", "a", "--label", "b", "--dry-run", "--seed", big, "--study-dir", str(tmp_path / "s")),
             "--seed: must be from 0")
    for seed in (big, "-1"):
        _refused(run_cli("estimate", str(python_run), "--seed", seed, "--bootstrap", "200"), "--seed: must be from 0")
    _refused(run_cli("estimate", str(python_run), "--bootstrap", "10000000000000000000000"),
             "--bootstrap: must be at most 1000000")
    # The largest seed is a seed.
    r = run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--dry-run", "--seed", str(2**64 - 1))
    assert r.code == 0, r.err
    r = run_cli("estimate", str(python_run), "--seed", str(2**64 - 1), "--bootstrap", "200")
    assert r.code == 0, r.err


def _link_in_once_made(run: Path, name: str, target: Path, stop: threading.Event, done: list[bool]) -> None:
    """As soon as the run folder is in place (its manifest there), put a link to `target` in
    place of `name` (renamed over it: atomic)."""
    link = run.with_name("planted-link")
    link.symlink_to(target)
    while not stop.is_set():
        if (run / "manifest.json").exists():
            os.replace(link, run / name)
            done.append(True)
            return


# 9. A launch refused for a link planted in its new run folder removes the folder it built.
def test_a_launch_refused_for_a_planted_link_leaves_nothing_behind(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"")
    refused = 0
    for attempt in range(8):
        run = tmp_path / f"run{attempt}"
        stop, done = threading.Event(), []
        watcher = threading.Thread(target=_link_in_once_made, args=(run, "raw.jsonl", outside, stop, done))
        watcher.start()
        try:
            r = run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--reps", "1",
                        "--run-dir", str(run), "--no-progress")
        finally:
            stop.set()
            watcher.join()
        assert done, "the run folder never appeared"
        if r.code == 0:
            continue   # the session had opened raw.jsonl before the link arrived: not this case
        assert r.code == 2 and "symbolic link" in r.err and "Traceback" not in r.err, r.err
        assert "removed" in r.err and not os.path.lexists(run), r.err
        refused += 1
        if refused == 2:
            break
    assert refused, "no try planted the link before the first session opened the folder"
    assert outside.read_bytes() == b""


# 12. A report.json that repeats a key is refused as every other file is: exit 2, saying so.
def test_a_report_json_that_repeats_a_key_is_refused_as_such(python_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    assert run_cli("estimate", str(run), "--bootstrap", "200").code == 0
    path = run / "report.json"
    text = path.read_text().rstrip()
    assert text.endswith("}")
    path.write_text(text[:-1] + ', "source": null}\n')
    r = run_cli("report", str(run))
    _refused(r, f"{path}: an object repeats a key")
    assert "older guardeval" not in r.err


@pytest.fixture
def resetting() -> Iterator[int]:
    """A server on 127.0.0.1 that accepts, reads the request and resets the connection (RST:
    SO_LINGER 0); its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join()
        srv.close()


# 13. A server that resets the connection is said to have, not taken for a timeout or a server to start.
def test_a_connection_reset_is_reported_as_a_reset(tmp_path, resetting):
    guard = tmp_path / "g.toml"
    guard.write_text(f'name = "local"\nbackend = "openai-compatible"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                     f'base_url = "http://127.0.0.1:{resetting}/v1"\ntimeout_s = 3\nmax_attempts = 2\n'
                     'retry_initial_s = 0.01\nretry_max_s = 0.05\n')
    r = run_cli("preflight", "--guard", str(guard))
    assert r.code == 2 and "127.0.0.1 reset the connection" in r.out, r.out
    assert "start the server" not in r.out + r.err, r.out
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(guard), "--reps", "1", "--max-calls", "1",
                "--no-preflight", "--no-progress", "--run-dir", str(run))
    assert r.code == 0, r.err
    attempts = _jsonl(run / "raw.jsonl")
    assert len(attempts) == 2, attempts
    for a in attempts:
        assert a["error_class"] == "connection" and "reset the connection" in a["error"], a


@pytest.fixture(scope="module")
def py_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reported study of three python guards (no server) on the demo cohort, one repetition."""
    folder = tmp_path_factory.mktemp("h3-study") / "s"
    r = run_cli("study", "launch", "--cohort", "demo", "--reps", "1", "--study-dir", str(folder),
                "--guard", "python-example", "--guard", "python-example", "--guard", "python-example",
                "--label", "a", "--label", "b", "--label", "c", "--no-preflight", "--no-progress")
    assert r.code == 0, r.err
    r = run_cli("study", "report", str(folder), "--bootstrap", "200")
    assert r.code == 0, r.err
    return folder


def _study_copy(study: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(study, dst, symlinks=True)
    return dst


def _rehashed(study: Path, edit: Callable[[dict], None]) -> None:
    """study.json edited as someone who knows the format would: its own hash recomputed."""
    record = json.loads((study / "study.json").read_text())
    edit(record)
    body = {k: v for k, v in record.items() if k != "sha256"}
    (study / "study.json").write_text(json.dumps({**body, "sha256": canonical_sha256(body)}, indent=2))


def _question_edited(record: dict) -> None:
    record["question"]["margin"] = 0.5


def _listed_twice(record: dict) -> None:
    record["runs"][1] = {**record["runs"][0], "label": "b"}


def _removed(record: dict) -> None:
    record["runs"] = [e for e in record["runs"] if e["label"] != "c"]


# 10. What the record itself shows inconsistent, plain `study verify` says; `study report` refuses it.
@pytest.mark.parametrize("tamper, said", [
    (_question_edited, "the question's margin is 0.5, but the question at launch with its recorded edits gives 0.05"),
    (_listed_twice, "one run is listed twice, as 'a' and as 'b'"),
    (_removed, "the study's last report was made from 3 runs; the record lists 2"),
])
def test_plain_study_verify_catches_a_rehashed_record_and_report_refuses_it(py_study, tmp_path, tamper, said):
    copy = _study_copy(py_study, tmp_path)
    if tamper is _removed:
        shutil.rmtree(copy / "runs" / "c")
    if tamper is _listed_twice:   # run a's folder under b's label too, the record saying so
        shutil.rmtree(copy / "runs" / "b")
        shutil.copytree(copy / "runs" / "a", copy / "runs" / "b")
    _rehashed(copy, tamper)
    r = run_cli("study", "verify", str(copy))
    assert r.code == 1 and said in r.out and "Traceback" not in r.err, r.out + r.err
    r = run_cli("study", "report", str(copy), "--bootstrap", "200")
    assert r.code == 1 and said in r.err and "no report is made" in r.err, r.err
    assert not (copy / "study-report.json").exists() or \
        (copy / "study-report.json").read_bytes() == (py_study / "study-report.json").read_bytes()


# 11. `study status` on a damaged study says so, exit 1; `study edit` and `study add` refuse it.
@pytest.mark.parametrize("damage", ["runs-link", "raw-fifo"])
def test_study_status_says_damaged_and_edit_and_add_refuse(py_study, tmp_path, damage):
    copy = _study_copy(py_study, tmp_path)
    if damage == "runs-link":
        (copy / "runs").rename(tmp_path / "elsewhere")
        (copy / "runs").symlink_to(tmp_path / "elsewhere")
    else:
        (copy / "runs" / "b" / "raw.jsonl").unlink()
        os.mkfifo(copy / "runs" / "b" / "raw.jsonl")
    before = (copy / "study.json").read_bytes()
    r = run_cli("study", "status", str(copy), timeout=60)
    assert r.code == 1 and "damaged" in r.out and "Traceback" not in r.err, r.out + r.err
    r = run_cli("study", "status", str(copy), "--json", timeout=60)
    assert r.code == 1 and json.loads(r.out)["damaged"] is True
    r = run_cli("study", "edit", str(copy), "--margin", "0.03", "--reason", "x", timeout=60)
    assert r.code == 1 and "the study is damaged" in r.err, r.err
    r = run_cli("study", "add", str(copy), "--guard", "python-example", "--label", "d", "--no-preflight",
                "--no-progress", timeout=60)
    assert r.code == 1 and "the study is damaged" in r.err, r.err
    assert (copy / "study.json").read_bytes() == before
    assert not os.path.lexists(tmp_path / "elsewhere" / "d")


def _fsize_limited(fsize: int, *args: str) -> tuple[int, str]:
    """The CLI in a child whose files may not grow past `fsize` bytes (a write past it: EFBIG)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    proc = subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True, env=cli_env(),
                          cwd=REPO, timeout=300, preexec_fn=limit)
    return proc.returncode, proc.stderr


# 8. A full disk while a cohort is built leaves no half-written cohort and names the file; a rerun builds it.
def test_a_full_disk_while_building_a_cohort_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "c"
    code, err = _fsize_limited(50_000, "cohort", "build", "demo", "--out", str(out))
    assert code == 1 and f"{out / 'instances.jsonl'}: file too large" in err and "Traceback" not in err, err
    assert not out.exists() and not list(tmp_path.iterdir()), list(tmp_path.iterdir())
    r = run_cli("cohort", "build", "demo", "--out", str(out))
    assert r.code == 0, r.err
    assert run_cli("cohort", "inspect", str(out)).code == 0
    # Rebuilt into the existing cohort under the limit: the cohort stays as it was, whole.
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, err = _fsize_limited(50_000, "cohort", "build", "demo", "--out", str(out))
    assert code == 1 and "instances.jsonl: file too large" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


# 8. ... and `study report` on a full disk names the file it could not write.
def test_a_full_disk_during_study_report_names_the_file(py_study, tmp_path):
    copy = _study_copy(py_study, tmp_path)
    before = (copy / "study.json").read_bytes()
    code, err = _fsize_limited(30_000, "study", "report", str(copy), "--bootstrap", "200")
    assert code == 1 and "report.json: file too large" in err and "Traceback" not in err, err
    assert f"{copy}/runs/" in err, err
    assert (copy / "study.json").read_bytes() == before
    assert not [p for p in copy.rglob(".*partial*")]
