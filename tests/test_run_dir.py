"""`--run-dir` edge cases (issue 10, item 12): refused cleanly before anything is written; a
launch that loses a race for the folder says so; partial folders of dead launches are removed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guardeval.cohorts.model import load_cohort
from guardeval.errors import InputError
from guardeval.run.folder.create import create_run_dir, remove_stale_partials
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import PARTIAL_LOCK

from conftest import REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.fast


@pytest.fixture
def guard(tmp_path) -> Path:
    return write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")


def _refused(r, *needles: str) -> None:
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err)
    for n in needles:
        assert n in r.err, (n, r.err)


def _launch(cohort: Path, guard: Path, run_dir: Path | str):
    # --no-preflight: nothing answers at the guard's address; these tests are about the folder.
    return run_cli("launch", "--no-preflight", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1",
                   "--run-dir", str(run_dir), "--no-progress")


def test_under_a_file(tmp_path, small_cohort, guard):
    (tmp_path / "afile").write_text("x")
    _refused(_launch(small_cohort, guard, tmp_path / "afile" / "sub" / "run"), "afile", "is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "x"


def test_at_a_file(tmp_path, small_cohort, guard):
    (tmp_path / "afile").write_text("x")
    _refused(_launch(small_cohort, guard, tmp_path / "afile"), "is a file, not a folder")


def test_under_proc(tmp_path, small_cohort, guard):
    _refused(_launch(small_cohort, guard, "/proc/guardeval-no-such/run"), "cannot create a folder here")
    assert not Path("/proc/guardeval-no-such").exists()


def test_at_a_dangling_symlink(tmp_path, small_cohort, guard):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    _refused(_launch(small_cohort, guard, link), "symbolic link")
    _refused(_launch(small_cohort, guard, link / "run"), "dangling symbolic link")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_missing_parents_are_made_and_removed_again_on_failure(tmp_path, small_cohort, guard):
    target = tmp_path / "a" / "b" / "run"
    with pytest.raises(InputError, match="changed"):
        create_run_dir(target, manifest={}, cohort=load_cohort(small_cohort),
                       fill=lambda folder: (_ for _ in ()).throw(InputError("the schedule changed")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]


def test_losing_a_race_for_the_folder(tmp_path, small_cohort):
    """Another launch renames its folder into place while this one writes its own: this one
    is refused, its partial folder removed, the winner's folder untouched."""
    target = tmp_path / "run"

    def fill(folder: RunFolder) -> dict:
        target.mkdir()
        (target / "manifest.json").write_text("{}")   # the other launch got there first
        return {"schedule_sha256": "", "stimuli_sha256": ""}

    with pytest.raises(InputError, match="already exists and is not empty"):
        create_run_dir(target, manifest={}, cohort=load_cohort(small_cohort), fill=fill)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]


def test_two_launches_racing_into_one_folder(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "guardeval", "launch", "--cohort", str(small_cohort), "--guard", str(guard),
           "--reps", "1", "--run-dir", str(run), "--no-progress", "--max-calls", "2"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
             for _ in range(2)]
    results = [(p.wait(120), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0, results
    loser = next(err for code, err in results if code != 0)
    assert codes[1] in (1, 2) and "Traceback" not in loser, results
    assert "already exists" in loser or "another guardeval process" in loser, loser
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    assert run_cli("verify", str(run)).code == 0


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_partial_folders_of_dead_launches_are_removed(tmp_path, small_cohort, guard):
    runs = tmp_path / "runs"
    runs.mkdir()
    dead_locked = runs / f".a.partial-{_dead_pid()}"      # died holding its lock: the kernel let go
    dead_locked.mkdir()
    (dead_locked / PARTIAL_LOCK).write_text("")
    (dead_locked / "schedule.jsonl").write_text("x" * 1000)
    dead_unlocked = runs / f".b.partial-{_dead_pid()}"    # died before taking a lock
    dead_unlocked.mkdir()
    live = runs / f".c.partial-{os.getpid()}"             # a launch still building its folder
    live.mkdir()
    fd = os.open(live / PARTIAL_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    unrelated = runs / ".notes.partial-x"
    unrelated.mkdir()
    not_ours = runs / f".e.partial-{_dead_pid()}"        # the right name, but someone else's files
    not_ours.mkdir()
    (not_ours / "thesis.tex").write_text("keep me")
    # A launch between creating its lock file and locking it: the lock is free, its process lives.
    starting = runs / f".s.partial-{os.getpid()}"
    starting.mkdir()
    (starting / PARTIAL_LOCK).write_text("")
    try:
        # Another process (as another launch would be) sweeps the folder.
        code = ("import sys; from pathlib import Path; from guardeval.run.folder.create import remove_stale_partials; "
                "print(sorted(p.name for p in remove_stale_partials(Path(sys.argv[1]))))")
        out = subprocess.run([sys.executable, "-c", code, str(runs)], capture_output=True, text=True, env=cli_env(),
                             cwd=REPO, check=True).stdout
        assert out.strip() == str(sorted([dead_locked.name, dead_unlocked.name]))
        assert live.exists() and starting.exists() and unrelated.exists() and (not_ours / "thesis.tex").exists()
        # A real launch sweeps too (and builds its own folder beside).
        dead_again = runs / f".d.partial-{_dead_pid()}"
        dead_again.mkdir()
        r = run_cli("launch", "--no-preflight", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                    "--run-dir", str(runs / "new"), "--max-calls", "1", "--no-progress")
        # Nothing answers at the guard's address: its one call is recorded as exhausted (exit 0 at --max-calls).
        assert r.code == 0 and "Traceback" not in r.err, (r.code, r.err)
        assert (runs / "new" / "manifest.json").is_file()
        assert not dead_again.exists() and live.exists() and starting.exists()
    finally:
        os.close(fd)
    # Its lock released, the folder still belongs to a living process: kept until that process is gone.
    assert remove_stale_partials(runs) == []
    assert live.exists() and starting.exists()
