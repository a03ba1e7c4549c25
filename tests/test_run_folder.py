"""A run folder from someone else cannot make guardeval write outside it, hang it or eat its
memory (issue 19 §1): the lock holds though `.lock` is deleted; no file of a run folder is
opened through a symbolic link, for reading or writing; a FIFO or a device in its place is
refused, not read; a line far past what a writer writes is refused without being read whole.
Real processes, real files, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow

KEY = {"GUARDEVAL_TEST_KEY": "sk-or-" + "v1-test-key-for-the-simulator"}
NOWHERE = "http://127.0.0.1:9/v1"   # nothing listens: a resume that sent would record errors


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "guardeval", *args], env=cli_env(KEY), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait_for(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _lines(path) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early with {proc.returncode}: {proc.stderr.read()!r}")
        time.sleep(0.01)
    raise AssertionError("timed out waiting for progress")


def _refused(r, *needles: str) -> None:
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err)
    for n in needles:
        assert n in r.err, (n, r.err)


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--latency-ms", "200")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    proc = _spawn("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                  "--run-dir", str(run), "--concurrency", "1", "--no-progress")
    try:
        _wait_for(run / "decisions.jsonl", 2, proc)
        (run / ".lock").unlink(missing_ok=True)
        r = run_cli("resume", str(run), "--no-progress", env=KEY, timeout=120)
        assert r.code == 1 and "another guardeval process" in r.err, (r.code, r.err)
        assert json.loads(run_cli("status", str(run), "--json").out)["running"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 1
    r = run_cli("verify", str(run))
    assert r.code == 0, r.out + r.err


@pytest.fixture
def pilot(tmp_path, small_cohort, sim):
    """A run of 80 calls, 10 decided (`--max-calls`): a resume has work to do and files to append to."""
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-calls", "10", "--no-progress", env=KEY)
    assert r.code == 0, r.err
    return run


@pytest.mark.parametrize("name", [".lock", "events.jsonl", "raw.jsonl", "decisions.jsonl"])
def test_a_link_inside_the_run_folder_is_never_written_through(tmp_path, pilot, sim, name):
    victim = tmp_path / "victim"
    original = (pilot / name).read_bytes() if (pilot / name).exists() else b"precious\n"
    victim.write_bytes(original)
    (pilot / name).unlink(missing_ok=True)
    (pilot / name).symlink_to(victim)
    r = run_cli("resume", str(pilot), "--base-url", sim.base_url, "--no-progress", env=KEY)
    _refused(r, name, "symbolic link")
    assert victim.read_bytes() == original
    # Readers refuse it too, naming it (a lock link is no reader's business: status ignores it).
    if name != ".lock":
        _refused(run_cli("status", str(pilot)), name, "symbolic link")


def test_a_dangling_lock_link_does_not_create_its_target(tmp_path, pilot, sim):
    target = tmp_path / "created-by-guardeval"
    (pilot / ".lock").unlink(missing_ok=True)
    (pilot / ".lock").symlink_to(target)
    r = run_cli("resume", str(pilot), "--base-url", sim.base_url, "--no-progress", env=KEY)
    _refused(r, ".lock", "symbolic link")
    assert not target.exists() and not target.is_symlink()


@pytest.mark.parametrize("name", ["report.json", "report.md", "effects.png", "report.html"])
def test_estimate_never_writes_a_report_through_a_link(tmp_path, copy_run, name):
    run = copy_run()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (run / name).symlink_to(victim)
    r = run_cli("estimate", str(run), "--bootstrap", "200")
    assert r.code == 0, r.err
    assert victim.read_bytes() == b"precious\n"
    # The link itself was replaced by the report: a file of the run folder, not the victim.
    assert not (run / name).is_symlink() and (run / name).stat().st_size > 0


def _fifo_or_zero(run: Path, kind: str) -> None:
    (run / "raw.jsonl").unlink()
    if kind == "fifo":
        os.mkfifo(run / "raw.jsonl")
    else:
        (run / "raw.jsonl").symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_raw_log_that_is_a_fifo_or_dev_zero_is_refused_not_read(copy_run, kind):
    run = copy_run()
    _fifo_or_zero(run, kind)
    what = "symbolic link" if kind == "dev-zero" else "not a regular file"
    call_id = json.loads((run / "schedule.jsonl").read_text().splitlines()[0])["call_id"]
    for args in (("status", str(run)), ("resume", str(run), "--base-url", NOWHERE, "--no-progress"),
                 ("show", str(run), call_id), ("export", str(run), "--out", "-", "--no-verify")):
        _refused(run_cli(*args, env=KEY, timeout=30), "raw.jsonl", what)
    # verify reports it as a problem (exit 1); estimate and export, which verify first, refuse on it.
    for args in (("verify", str(run)), ("estimate", str(run), "--bootstrap", "200"),
                 ("export", str(run), "--out", "-")):
        r = run_cli(*args, timeout=30)
        assert r.code == 1 and "Traceback" not in r.err, (r.code, r.err)
        assert "raw.jsonl" in r.out + r.err and what in r.out + r.err, r.out + r.err


def _max_rss_mb(*args: str) -> tuple[int, float, str]:
    """Exit code and peak resident memory (MB) of a CLI command and every process it started."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "sys.stderr.write(r.stdout + r.stderr)")
    p = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "guardeval", *args], env=cli_env(KEY),
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    code, kb = p.stdout.split()
    return int(code), int(kb) / 1024, p.stderr


def test_a_300_mb_raw_line_is_refused_in_bounded_memory(copy_run):
    run = copy_run()
    # A sparse file: 300 MB of zero bytes, then a newline, after the run's lines (no disk used).
    with open(run / "raw.jsonl", "r+b") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(fh.tell() + (300 << 20))
        fh.write(b"\n")
    for args, want in ((("verify", str(run)), 1), (("status", str(run)), 1),
                       (("resume", str(run), "--base-url", NOWHERE, "--no-progress"), 1)):
        code, mb, err = _max_rss_mb(*args)
        assert code == want and "raw.jsonl" in err and "longer than" in err and "Traceback" not in err, (code, err)
        assert mb < 250, (args[0], mb)


def test_no_link_is_followed_to_or_below_the_run_folder(tmp_path, copy_run):
    run = copy_run()
    link = tmp_path / "latest"
    link.symlink_to(run)
    _refused(run_cli("status", str(link)), "latest", "symbolic link")
    shutil.move(run / "cohort", tmp_path / "cohort-elsewhere")
    (run / "cohort").symlink_to(tmp_path / "cohort-elsewhere")
    _refused(run_cli("resume", str(run), "--base-url", NOWHERE, "--no-progress", env=KEY), "cohort",
             "symbolic link")
    r = run_cli("verify", str(run))
    assert r.code == 1 and "cohort" in r.out and "symbolic link" in r.out, r.out + r.err


# -- RunFolder itself, in process (fast) ----------------------------------------------------------

def test_the_lock_is_the_folder_not_a_file(tmp_path):
    from guardeval.errors import RunLocked
    from guardeval.run.folder.folder import RunFolder

    first, second = RunFolder(tmp_path), RunFolder(tmp_path)
    with first.lock():
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
        (tmp_path / ".lock").unlink()
        assert second.held_by_another()
        with pytest.raises(RunLocked):
            second.lock().__enter__()
    assert not second.held_by_another()
    with second.lock():
        pass


def test_a_line_past_the_cap_is_refused_after_cap_bytes(tmp_path):
    from guardeval.run.folder.folder import LineTooLong, RunFolder

    (tmp_path / "raw.jsonl").write_bytes(b"{}\n" + b"x" * 5000 + b"\n{}\n")
    folder = RunFolder(tmp_path)
    folder._line_cap = 1000          # the cap a manifest would give, made small
    lines = folder.lines("raw.jsonl")
    assert next(lines) == (1, b"{}\n")
    with pytest.raises(LineTooLong) as exc:
        next(lines)
    assert exc.value.lineno == 2 and "raw.jsonl: line 2: longer than 1000 bytes" in str(exc.value)
    with pytest.raises(LineTooLong):
        list(folder.mapped_lines("raw.jsonl", window=4096))
    folder._line_cap = 10_000
    assert [n for n, _ in folder.lines("raw.jsonl")] == [1, 2, 3]


def test_replace_swaps_a_link_for_a_file_and_reads_see_one_file(tmp_path):
    from guardeval.errors import InputError
    from guardeval.run.folder.folder import RunFolder

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").symlink_to(victim)
    folder = RunFolder(run)
    with pytest.raises(InputError, match="symbolic link"):
        folder.has("report.json")
    folder.replace("report.json", lambda fh: fh.write(b"{}"))
    assert victim.read_bytes() == b"precious" and (run / "report.json").read_bytes() == b"{}"
    assert sorted(p.name for p in run.iterdir()) == ["report.json"]   # no partial file left
    # A file renamed away after the folder opened it is still the one read: one file per command.
    (run / "events.jsonl").write_bytes(b'{"a":1}\n')
    assert folder.has("events.jsonl")
    (run / "events.jsonl").rename(run / "moved")
    (run / "events.jsonl").write_bytes(b'{"b":2}\n')
    assert list(folder.lines("events.jsonl")) == [(1, b'{"a":1}\n')]
