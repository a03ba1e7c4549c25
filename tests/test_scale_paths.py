"""The large-run paths on a small folder built the way the scale benchmark builds a 1M-call one
(guardeval's own writers, half the calls decided): verify, status, resume, and the worker
paths that only switch on for large files, forced on here."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.fast

N_BASES, REPS, DECIDED = 40, 10, 1000      # 40 x 5 conditions x 10 = 2,000 calls


def _scale_build():
    spec = importlib.util.spec_from_file_location("scale_build", REPO / "benchmarks" / "scale_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def half_run(tmp_path_factory) -> Path:
    sb = _scale_build()
    base = tmp_path_factory.mktemp("scale")
    sb.build_cohort(base / "cohort", N_BASES)
    guard = sb.write_guard(base / "g.toml")
    sb.materialise_run(base / "run", cohort=base / "cohort", guard=guard, reps=REPS, seed=3)
    sb.fill_run(base / "run", decided=DECIDED, retry_every=37)
    return base / "run"


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture
def workers_always(monkeypatch):
    """Switch on the worker processes that large files get."""
    from guardeval.run.folder import workers

    monkeypatch.setattr(workers, "LOG_MIN_BYTES", 0)
    monkeypatch.setattr(workers, "RENDER_MIN_INSTANCES", 0)


@pytest.fixture
def no_whole_file_reads(monkeypatch):
    """Fail on any whole-file read of a run file bigger than 64 KiB (streaming is the contract)."""
    real_bytes, real_text = pathlib.Path.read_bytes, pathlib.Path.read_text

    def guard(read):
        def wrapped(self, *args, **kwargs):
            if self.is_file() and self.stat().st_size > 64 * 1024:
                raise AssertionError(f"whole-file read of {self}")
            return read(self, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(pathlib.Path, "read_bytes", guard(real_bytes))
    monkeypatch.setattr(pathlib.Path, "read_text", guard(real_text))


def test_built_folder_verifies_and_status_is_exact(half_run, no_whole_file_reads):
    from guardeval.run.run import Run

    report = Run.open(half_run).verify()
    assert report["ok"], report["problems"]
    assert report["n_calls"] == 2000 and report["n_decisions"] == DECIDED

    st = Run.open(half_run).status()
    raw = [orjson.loads(line) for line in open(half_run / "raw.jsonl", "rb")]
    decisions = [orjson.loads(line) for line in open(half_run / "decisions.jsonl", "rb")]
    assert st["decided"] == DECIDED and st["pending"] == 2000 - DECIDED and not st["complete"]
    assert st["attempts"] == len(raw) == report["n_raw"] > DECIDED
    assert st["retries"] == sum(1 for r in raw if r["outcome"] == "transient" and not r["final"]) > 0
    assert st["statuses"] == dict(Counter(d["status"] for d in decisions))
    assert st["spend_usd"] == round(sum(r["usage"].get("cost", 0) for r in raw), 6)


def test_worker_paths_give_the_same_answers(half_run, tmp_path, workers_always):
    from guardeval.run.run import Run

    assert Run.open(half_run).verify()["ok"]
    st = Run.open(half_run).status()
    assert st["decided"] == DECIDED and st["attempts"] > DECIDED
    # A damaged copy: the same problems whether the raw log is read here or in a worker.
    run = _copy(half_run, tmp_path / "damaged")
    data = bytearray((run / "raw.jsonl").read_bytes())
    second = data.index(b"\n") + 1
    data[second + 300] ^= 0x01
    (run / "raw.jsonl").write_bytes(bytes(data))
    forked = Run.open(run).verify()
    from guardeval.run.folder import workers

    workers.LOG_MIN_BYTES, workers.RENDER_MIN_INSTANCES = 1 << 60, 1 << 60
    inline = Run.open(run).verify()
    assert forked == inline and not forked["ok"]
    assert any(p["file"] == "raw.jsonl" and p["line"] in (1, 2) for p in forked["problems"])


def _open_state(run: Path):
    from guardeval.run.folder.folder import RunFolder
    from guardeval.run.folder.writer import RunWriter

    writer = RunWriter(RunFolder(run))
    try:
        st = writer.open()
        return st.last_seq, st.last_raw_sha, st.attempts, st.decided, st.final_raw, st.spent
    finally:
        writer.close()


def test_large_run_paths_without_sched_getaffinity(half_run, tmp_path, monkeypatch):
    """macOS has no os.sched_getaffinity: the CPU count falls back to os.cpu_count(), and
    verify, status and resume's scan still fork their workers and give the inline answers."""
    import os

    from guardeval.run.folder import workers
    from guardeval.run.run import Run

    inline_verify, inline_status = Run.open(half_run).verify(), Run.open(half_run).status()   # small files: no workers
    inline_open = _open_state(_copy(half_run, tmp_path / "inline"))
    monkeypatch.setattr(workers, "LOG_MIN_BYTES", 0)
    monkeypatch.setattr(workers, "RENDER_MIN_INSTANCES", 0)
    forks = []
    real_worker_init = workers.Worker.__init__

    def counting_init(self, fn, *args):
        forks.append(fn.__name__)
        real_worker_init(self, fn, *args)

    monkeypatch.setattr(workers.Worker, "__init__", counting_init)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)   # the fallback answers; this is what a 2-CPU Mac says
    assert workers.usable_cpus() == 2
    assert Run.open(half_run).verify() == inline_verify and inline_verify["ok"]
    assert Run.open(half_run).status() == inline_status
    assert _open_state(_copy(half_run, tmp_path / "forked")) == inline_open
    assert sorted(set(forks)) == ["_raw_counts", "_write_facts", "render_cells", "scan_raw_part"]


def test_schedule_fast_path_and_line_by_line_checks_agree(half_run, tmp_path, monkeypatch):
    from guardeval.run.integrity import verify
    from guardeval.run.run import Run

    run = _copy(half_run, tmp_path / "run")
    lines = (run / "schedule.jsonl").read_bytes().splitlines(keepends=True)
    row = orjson.loads(lines[7])
    row["repetition"] = 99
    lines[7] = json.dumps(row, separators=(",", ":"), sort_keys=True).encode() + b"\n"
    lines[12], lines[13] = lines[13], lines[12]
    (run / "schedule.jsonl").write_bytes(b"".join(lines))
    fast = Run.open(run).verify()
    monkeypatch.setattr(verify._Verifier, "_regenerated", lambda self: iter(()))
    slow = Run.open(run).verify()
    assert fast == slow and not fast["ok"]
    lines_hit = {p["line"] for p in fast["problems"] if p["file"] == "schedule.jsonl"}
    assert {8, 13, 14} <= lines_hit


@pytest.mark.slow
def test_resume_dispatches_exactly_the_undecided_calls(half_run, tmp_path, sim_factory):
    from guardeval.run.run import Run

    run = _copy(half_run, tmp_path / "run")
    sched = [r["call_id"] for r in _jsonl(run / "schedule.jsonl")]
    before = {d["call_id"] for d in _jsonl(run / "decisions.jsonl")}
    last_seq = _jsonl(run / "raw.jsonl")[-1]["seq"]
    sim = sim_factory("--seed", "7")
    r = run_cli("resume", str(run), "--base-url", sim.base_url, "--max-calls", "300", "--no-progress")
    assert r.code == 0, r.err
    undecided = [c for c in sched if c not in before]
    first = _jsonl(run / "raw.jsonl")[last_seq:]
    assert [rec["call_id"] for rec in first] and {rec["call_id"] for rec in first} == set(undecided[:300])
    r = run_cli("resume", str(run), "--base-url", sim.base_url, "--no-progress")
    assert r.code == 0, r.err

    decisions = _jsonl(run / "decisions.jsonl")
    ids = [d["call_id"] for d in decisions]
    assert len(ids) == len(set(ids)) == 2000 and set(ids) == set(sched)
    new_raw = [rec for rec in _jsonl(run / "raw.jsonl") if rec["seq"] > last_seq]
    assert {rec["call_id"] for rec in new_raw} == set(sched) - before   # nothing decided was sent again
    assert all(rec["attempt"] == 1 for rec in new_raw)
    report = Run.open(run).verify()
    assert report["ok"], report["problems"]
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["complete"] and st["decided"] == 2000


def test_dispatched_records_have_the_shape_the_builder_writes(half_run, tmp_path, sim_factory):
    """The benchmark's folder is only meaningful if its raw lines look like dispatched ones."""
    run = _copy(half_run, tmp_path / "run")
    n_before = len(_jsonl(run / "raw.jsonl"))
    sim = sim_factory("--seed", "7")
    assert run_cli("resume", str(run), "--base-url", sim.base_url, "--max-calls", "5").code == 0
    raw = _jsonl(run / "raw.jsonl")
    built, dispatched = raw[0], raw[n_before]
    assert set(built) == set(dispatched)
    from types import SimpleNamespace

    from guardeval.backends.backend import backend_for
    from guardeval.run.folder.records import Decision, RawLine  # the typed records name exactly the fields written

    # ... and the back-end's own fields (its record's raw_fields), asked of an answer that has every one
    manifest = json.loads((run / "manifest.json").read_text())
    everything = SimpleNamespace(response_headers={"h": "v"}, router_metadata={}, previous_errors=[{}])
    own = set(backend_for(manifest["guard"]["backend"]).raw_fields(everything))
    assert own, "the simulated provider's back-end adds fields of its own to the raw line"
    assert RawLine.__required_keys__ | {"seq"} <= set(dispatched) <= RawLine.__required_keys__ | RawLine.__optional_keys__ | own
    assert set(_jsonl(run / "decisions.jsonl")[-1]) == Decision.__required_keys__
    assert set(built["usage"]) == set(dispatched["usage"])
    assert orjson.loads(built["response"]).keys() == orjson.loads(dispatched["response"]).keys()


def test_cohort_rows_are_read_back_on_demand(tmp_path):
    from guardeval.cohorts.model import load_cohort
    from guardeval.errors import InputError

    sb = _scale_build()
    path = sb.build_cohort(tmp_path / "c", 12)
    cohort = load_cohort(path)
    rows = [orjson.loads(line) for line in open(path / "instances.jsonl", "rb")]
    assert cohort.instances == rows and cohort.n_instances == 60
    for r in rows[::7]:
        assert cohort.instance(r["base_id"], r["condition"]) == r
        assert cohort.key_fields(r["base_id"], r["condition"]) == (r["interaction_id"], r["domain"],
                                                                     r["instance_sha256"])
    with open(path / "instances.jsonl", "ab") as fh:   # changed after it was validated
        fh.write(b"\n")
    with pytest.raises(InputError, match="changed after it was loaded"):
        cohort.instance(rows[1]["base_id"], rows[1]["condition"])   # not read (cached) before
    with pytest.raises(InputError, match="instances_bytes"):
        load_cohort(path)


def test_plan_digest_equals_the_written_files(tmp_path):
    from guardeval.canon import file_sha256
    from guardeval.run.planning import materialise, plan_launch

    sb = _scale_build()
    cohort = sb.build_cohort(tmp_path / "c", 10)
    guard = sb.write_guard(tmp_path / "g.toml")
    plan = plan_launch(cohort_dir=cohort, guard_path=guard, reps=3, seed=5, order="shuffled", base_url=None)
    digests = dict(plan.digest())
    materialise(plan, tmp_path / "run")
    assert file_sha256(tmp_path / "run" / "schedule.jsonl") == digests["schedule_sha256"]
    assert file_sha256(tmp_path / "run" / "stimuli.jsonl") == digests["stimuli_sha256"]
    assert plan.n_calls == 150 == len((tmp_path / "run" / "stimuli.jsonl").read_bytes().splitlines())
