"""The boundary around a python guard (issue 46): answers tagged with their call, no unpickling of
what a guard returns, a bounded start checked before the import, resume that checks before it
imports, a guard's children ended with its worker, fds 1 and 2 kept off the command's output,
and a thread-isolated guard that ends the process named. The guards are the small modules in
tests/hostile_guards/ (copied per test: some edit themselves), run through the CLI in
subprocesses: real processes, real signals, real files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from conftest import REPO, cli_env, run_cli

pytestmark = pytest.mark.fast

MODULES = Path(__file__).parent / "hostile_guards"


def _guard(tmp_path: Path, callable_: str, **fields: object) -> tuple[Path, dict[str, str]]:
    lib = tmp_path / "lib"
    if not lib.exists():
        shutil.copytree(MODULES, lib)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    fields = {"retry_initial_s": 0.01, "retry_max_s": 0.05, **fields}
    cfg = tmp_path / f"{callable_.replace(':', '-')}.toml"
    cfg.write_text(f'name = "hg"\nbackend = "python"\ncallable = "{callable_}"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    return cfg, {"PYTHONPATH": f"{REPO / 'harness'}:{lib}", "HG_DIR": str(state)}


def _launch(tmp_path: Path, guard: tuple[Path, dict[str, str]], *extra: str, timeout: float = 180):
    cfg, env = guard
    return run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(tmp_path / "run"),
                   "--no-progress", "--json", *extra, env=env, timeout=timeout)


def _raw(run: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run / "raw.jsonl").read_bytes().splitlines()]


def _output(line: dict, stream: str = "stdout") -> str:
    return (line.get("guard_output") or {}).get(stream, "")


def _alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _left_alive(pids: list[int]) -> list[int]:
    """Those of `pids` still running once they had 20 s to end (a bound for a failing test, not a
    timing claim: they end at once when the code works); the test kills what it finds."""
    deadline = time.monotonic() + 20
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


# -- item 1: every answer is for the call it was computed for ----------------------------------------

@pytest.mark.parametrize("fn", ["forks_once", "c_forks_once"])
def test_a_copy_of_the_worker_the_guard_forks_never_answers(tmp_path: Path, fn: str) -> None:
    """The guard forks once and both copies return to the worker's loop (before issue 46 the copy
    answered too, and every later call was recorded with the previous call's answer, all `ok`)."""
    guard = _guard(tmp_path, f"hg_fork:{fn}", isolation="process", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "12")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 12}, r.err
    raw = _raw(tmp_path / "run")
    assert [_output(x) for x in raw] == [x["call_id"] + "\n" for x in raw]


def test_an_answer_for_another_call_replaces_the_worker_and_the_attempt_is_retried(tmp_path: Path) -> None:
    """A well-formed answer for the previous call, from the worker's own pid, written before the
    real one: a protocol error; the worker is killed, and the call is answered by a fresh one."""
    guard = _guard(tmp_path, "hg_fork:forges_an_answer", isolation="process", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "6")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 6}, r.err
    raw = _raw(tmp_path / "run")
    failed = [x for x in raw if x["error_class"]]
    assert len(failed) == 1 and failed[0]["error_class"] == "python_worker_died", failed
    assert "broke the worker protocol: it answered call" in failed[0]["error"], failed[0]["error"]
    assert any(x["call_id"] == failed[0]["call_id"] and x["error_class"] is None for x in raw)
    assert [_output(x) for x in raw if not x["error_class"]] == [x["call_id"] + "\n" for x in raw if not x["error_class"]]


# -- item 3: a return value never runs code in the harness ----------------------------------------------

def test_a_return_whose_unpickling_would_end_the_harness_is_refused_naming_its_type(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_return:returns_an_exit", isolation="process", max_attempts=1)
    r = _launch(tmp_path, guard, "--max-calls", "2")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"guard_error": 2}, (r.code, r.err)
    raw = _raw(tmp_path / "run")
    assert [x["error_class"] for x in raw] == ["python_return_type"] * 2
    assert "hg_return:returns_an_exit returned a Ends: expected str" in raw[0]["error"]


def test_a_mapping_return_crosses_as_its_data(tmp_path: Path) -> None:
    """A dict subclass whose unpickling would end the harness: its fields are the verdict."""
    guard = _guard(tmp_path, "hg_return:returns_a_dict_that_exits", isolation="process", max_attempts=1)
    r = _launch(tmp_path, guard, "--max-calls", "2")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 2}, (r.code, r.err)
    assert {orjson.loads(x["response"])["returned"] for x in _raw(tmp_path / "run")} == {"EndsDict"}


# -- item 2: a bounded start, and the source checked before it is imported --------------------------------

def test_a_module_whose_import_blocks_stops_the_run_at_start_timeout_s(tmp_path: Path) -> None:
    """Its source unchanged, the module blocks as a fresh worker imports it: the run stops
    (fatal, resumable) naming start_timeout_s, instead of making no progress until killed."""
    guard = _guard(tmp_path, "hg_import:flags_then_dies", isolation="process", concurrency=1, start_timeout_s=2)
    r = _launch(tmp_path, guard, "--max-calls", "4", timeout=120)
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "did not finish starting within start_timeout_s (2 s)" in r.err, r.err
    assert json.loads(r.out)["stop_reason"] == "fatal"
    assert [x["error_class"] for x in _raw(tmp_path / "run")] == ["python_worker_died", "python_worker_start"]


def test_a_module_edited_to_block_is_refused_before_it_is_imported(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_import:edits_then_dies", isolation="process", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "4", timeout=120)
    assert r.code == 1 and "the source of hg_import changed during the run" in r.err, r.err
    assert [x["error_class"] for x in _raw(tmp_path / "run")] == ["python_worker_died", "python_source_changed"]
    assert list((tmp_path / "state").glob("imported-edited-*")) == []   # the edited code never ran


@pytest.mark.parametrize(("lines", "said"), [
    ("start_timeout_s = 0\n", "field 'start_timeout_s': must be a finite number from 0.001 to 3600"),
    ('start_timeout_s = "5"\n', "field 'start_timeout_s': expected int/float, got str"),
    ('isolation = "thread"\nstart_timeout_s = 5\n', 'field \'start_timeout_s\': applies only to isolation = "process"'),
])
def test_a_bad_start_timeout_s_is_exit_2_naming_the_field(tmp_path: Path, lines: str, said: str) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "g"\nmodel = "m"\nprompt = "guardeval-json-v1"\nbackend = "python"\ncallable = "m:f"\n'
                   + ('isolation = "process"\n' if "isolation" not in lines else "") + lines)
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--dry-run")
    assert r.code == 2 and said in r.err and "Traceback" not in r.err, r.err


# -- item 4: resume checks a module before it imports it, never from inside the run folder ----------------

def _manifest_says(run: Path, **pin: object) -> None:
    """Edit the run's callable pin and hash the manifest again, as someone who knows the format would."""
    from guardeval.canon import canonical_sha256

    manifest = json.loads((run / "manifest.json").read_text())
    manifest["guard_callable"].update(pin)
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    (run / "manifest.json").write_text(json.dumps({**body, "sha256": canonical_sha256(body)}, indent=2))


def test_resume_refuses_a_manifest_that_puts_the_module_inside_the_run_folder(tmp_path: Path) -> None:
    """A stranger's run folder carrying its own copy of the guard's module, the manifest (hashed
    again) naming that folder: refused before anything is imported."""
    cfg, env = _guard(tmp_path, "hg_stranger:guard")
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.move(tmp_path / "lib" / "hg_stranger.py", mine / "hg_stranger.py")
    shutil.move(cfg, mine / "g.toml")
    r = _launch(tmp_path, (mine / "g.toml", env), "--max-calls", "4")
    assert r.code == 0, r.err
    run = tmp_path / "run"
    assert json.loads((run / "manifest.json").read_text())["guard_callable"]["beside_config"] == str(mine)
    shutil.move(mine, run / "code")            # the run now carries the code, and nothing else has it
    _manifest_says(run, beside_config=str(run / "code"))
    for f in (tmp_path / "state").glob("imported-*"):
        f.unlink()
    r = run_cli("resume", str(run), "--no-progress", env=env)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "field 'guard_callable.beside_config'" in r.err and "inside the run folder" in r.err, r.err
    assert list((tmp_path / "state").glob("imported-*")) == []


def test_resume_refuses_a_changed_module_without_importing_it(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_stranger:guard")
    r = _launch(tmp_path, guard, "--max-calls", "4")
    assert r.code == 0, r.err
    source = tmp_path / "lib" / "hg_stranger.py"
    source.write_text(source.read_text() + "\n# changed since launch\n")
    for f in (tmp_path / "state").glob("imported-*"):
        f.unlink()
    r = run_cli("resume", str(tmp_path / "run"), "--no-progress", env=guard[1])
    assert r.code == 2 and "changed since launch" in r.err and "not imported" in r.err, r.err
    assert list((tmp_path / "state").glob("imported-*")) == []
    # Accepted, it is imported (once: the harness's own import is the one checked) and goes on.
    r = run_cli("resume", str(tmp_path / "run"), "--no-progress", "--allow-changed-callable", env=guard[1])
    assert r.code == 0 and "320/320 calls decided" in r.out, r.err
    assert len(list((tmp_path / "state").glob("imported-*"))) == 1


# -- item 7: what a guard starts ends with its worker -------------------------------------------------

def _spawned(state: Path) -> list[int]:
    return [int((state / name).read_text()) for name in ("in-group", "own-session", "orphan")]


def test_a_guards_children_end_with_a_clean_run(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_children:spawns", isolation="process", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "4")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 4}, r.err
    spawned = _spawned(tmp_path / "state")
    assert _left_alive(spawned) == []


def test_a_guards_children_end_when_guardeval_is_killed(tmp_path: Path) -> None:
    cfg, env = _guard(tmp_path, "hg_children:spawns_then_blocks", isolation="process", concurrency=1,
                      timeout_s=600)
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg),
                             "--reps", "1", "--run-dir", str(tmp_path / "run"), "--no-progress"], env=cli_env(env),
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (state / "blocking").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.wait())
        time.sleep(0.05)
    worker = int((state / "blocking").read_text())
    proc.kill()
    proc.wait()
    assert _left_alive([worker, *_spawned(state)]) == []


# -- item 8: fds 1 and 2 are kept per call; --json's stdout is JSON whatever a guard writes -----------------

def test_in_a_worker_fds_1_and_2_are_kept_with_each_call(tmp_path: Path) -> None:
    """An import-time banner on fd 1 (before issue 46 it broke the wire: every call exhausted),
    and writes from C, print and a child process during each call."""
    guard = _guard(tmp_path, "hg_output:writes", isolation="process", concurrency=2)
    r = _launch(tmp_path, guard, "--max-calls", "6")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 6}, r.err
    assert "BANNER written to fd 1 at import" in r.err and "banner printed at import" in r.err
    for x in _raw(tmp_path / "run"):
        cid = x["call_id"]
        assert _output(x) == f"printed {cid}\nfd 1 {cid}\nfrom a child\n", x.get("guard_output")
        assert _output(x, "stderr") == f"fd 2 {cid}\n"
    assert "\nfd 1 " not in r.err and "fd 2 " not in r.err and "from a child" not in r.err


def test_in_a_thread_an_import_time_banner_stays_off_json_stdout(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_output:writes")
    r = _launch(tmp_path, guard, "--max-calls", "4")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 4}, r.out[:300]
    assert "BANNER written to fd 1 at import" in r.err and "from a child" in r.err


# -- item 9: a thread-isolated guard that ends the process is named -------------------------------------

def test_a_thread_guard_calling_os_exit_is_named_and_the_run_resumes(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_ends:exits", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "4")
    assert r.code == 7, (r.code, r.err)
    assert "the python guard hg_ends:exits called os._exit(7) during a call" in r.err, r.err
    assert 'belongs in isolation = "process"' in r.err
    r = run_cli("resume", str(tmp_path / "run"), "--no-progress", env=guard[1])
    assert r.code == 0 and "320/320 calls decided" in r.out, r.err


def test_a_thread_guard_that_crashes_the_interpreter_is_shown_where_it_crashed(tmp_path: Path) -> None:
    guard = _guard(tmp_path, "hg_ends:crashes", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "4")
    assert r.code == -signal.SIGSEGV, (r.code, r.err)
    assert "Fatal Python error: Segmentation fault" in r.err, r.err
    assert 'hg_ends.py", line' in r.err and "in crashes" in r.err, r.err
