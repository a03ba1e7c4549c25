"""A full disk or a file-size limit (issue 10, item 13): the run stops admitting work, names the
file and says the disk is full, exits 1 with no traceback, keeps no half-written line, and
resumes to a run that verifies once there is space. Real limits: `RLIMIT_FSIZE` in the child
(EFBIG) and, where this user may mount, a small tmpfs (ENOSPC)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, CliResult, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow


def _run_limited(fsize: int, *args: str) -> CliResult:
    """The CLI in a child whose files may not grow past `fsize` bytes (writes past it: EFBIG)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    proc = subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True, env=cli_env(),
                          cwd=REPO, timeout=300, preexec_fn=limit)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_whole_lines(run: Path) -> None:
    for name in ("raw.jsonl", "decisions.jsonl", "events.jsonl"):
        data = (run / name).read_bytes() if (run / name).exists() else b""
        assert not data or data.endswith(b"\n"), name


def _assert_finished_cleanly(run: Path, n: int = 80) -> None:
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    decisions = _lines(run / "decisions.jsonl")
    assert len(decisions) == n and len({d["call_id"] for d in decisions}) == n
    r = run_cli("verify", str(run))
    assert r.code == 0, r.err


@pytest.fixture
def pilot(tmp_path, small_cohort, sim) -> Path:
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "5", "--no-progress")
    assert r.code == 0, r.err
    return run


def test_file_size_limit_stops_the_run_cleanly(pilot):
    run = pilot
    size = (run / "raw.jsonl").stat().st_size
    r = _run_limited(size + 30_000, "resume", str(run), "--no-progress")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "raw.jsonl" in r.err and "file-size limit" in r.err and "guardeval resume" in r.err, r.err
    _assert_whole_lines(run)
    grown = (run / "raw.jsonl").stat().st_size
    assert size < grown <= size + 30_000
    assert run_cli("verify", str(run)).code == 0
    _assert_finished_cleanly(run)


def test_a_torn_line_is_not_moved_aside_when_the_copy_cannot_be_written(pilot):
    run = pilot
    raw = run / "raw.jsonl"
    first = raw.read_bytes().splitlines(keepends=True)[0]
    with open(raw, "ab") as fh:
        fh.write(first[:3000])      # a crash mid-line
    before = raw.read_bytes()
    r = _run_limited(1000, "resume", str(run), "--no-progress")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "raw.jsonl.torn-" in r.err and "file-size limit" in r.err, r.err
    assert not list(run.glob("*.torn-*"))             # no empty (or partial) copy left behind
    assert raw.read_bytes() == before                  # nothing changed
    _assert_finished_cleanly(run)
    torn = list(run.glob("raw.jsonl.torn-*"))
    assert len(torn) == 1 and torn[0].read_bytes() == first[:3000]


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path, leave: int = 0) -> None:
    """Write `path` until the disk is full (less `leave` bytes)."""
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    if leave:
        with open(path, "r+b") as fh:
            fh.truncate(max(0, path.stat().st_size - leave))


def test_full_disk(tmp_path, small_cohort, sim, small_disk):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = small_disk / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "3", "--no-progress")
    assert r.code == 0, r.err
    raw = run / "raw.jsonl"
    first = raw.read_bytes().splitlines(keepends=True)[0]
    with open(raw, "ab") as fh:
        fh.write(first[:2000])      # a crash mid-line, before the disk filled up
    filler = small_disk / "filler"
    _fill(filler)
    before = raw.read_bytes()

    # Still full: the torn line cannot be set aside, so nothing changes.
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "the disk is full" in r.err and "raw.jsonl.torn-" in r.err, r.err
    assert not list(run.glob("*.torn-*")) and raw.read_bytes() == before

    # Some space: the run goes on until the disk fills again mid-run, then stops cleanly.
    filler.unlink()
    _fill(filler, leave=60_000)
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "the disk is full" in r.err and "guardeval resume" in r.err, r.err
    _assert_whole_lines(run)
    assert len(list(run.glob("raw.jsonl.torn-*"))) == 1
    assert run_cli("verify", str(run)).code == 0

    # Space freed: resume completes and the run verifies.
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    _assert_finished_cleanly(run)
