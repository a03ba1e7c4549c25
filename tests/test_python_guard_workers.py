"""A python guard's workers (issue 40): a plain function runs on worker threads kept for the run
(thread-local state built once per worker), or, with `isolation = "process"`, in worker
processes that can be stopped for real. Through the CLI in subprocesses and through the API in
this process: real threads, real processes, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import orjson
import pytest

from conftest import REPO, cli_env, run_cli

pytestmark = pytest.mark.fast

ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'

# Every module below is imported by the harness, and by each worker process: what it does at
# import and per call is written to files under PW_DIR (its own pid, counts), for the test to read.
COMMON = f'''
import os, threading, time
from pathlib import Path

DIR = Path(os.environ["PW_DIR"])
ALLOW = {ALLOW!r}
with open(DIR / f"imported-{{os.getpid()}}", "a") as f:
    f.write("x\\n")


def once(name):
    """True for the first caller of any process: a file made with O_EXCL."""
    try:
        fd = os.open(DIR / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True
'''


def _guard(tmp_path: Path, name: str, source: str, fn: str, **fields: object) -> tuple[Path, dict[str, str]]:
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / f"{name}.py").write_text(COMMON + textwrap.dedent(source))
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    fields = {"retry_initial_s": 0.01, "retry_max_s": 0.05, **fields}
    cfg = tmp_path / f"{name}-{fn}.toml"
    cfg.write_text(f'name = "{name}"\nbackend = "python"\ncallable = "{name}:{fn}"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    return cfg, {"PYTHONPATH": f"{REPO / 'harness'}:{lib}", "PW_DIR": str(state), "PW_SECRET": "pwsecret-" + "Zq8" * 8}


def _launch(tmp_path: Path, guard: tuple[Path, dict[str, str]], *extra: str, run: str = "run"):
    cfg, env = guard
    return run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(tmp_path / run),
                   "--no-progress", "--json", *extra, env=env, timeout=180)


def _raw(run: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run / "raw.jsonl").read_bytes().splitlines()]


def _stdout(line: dict) -> str:
    return (line.get("guard_output") or {}).get("stdout", "")


def _worker_pids(state: Path, harness: set[int] | None = None) -> set[int]:
    """The processes that imported the guard's module (the harness's own among them)."""
    return {int(p.name.split("-")[1]) for p in state.glob("imported-*")} - (harness or set())


def _alive(pid: int) -> bool:
    """Running (a zombie not yet reaped by whoever is its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- item 1: worker threads kept for the run -------------------------------------------------------

THREAD_LOCAL = '''
_local = threading.local()
_lock = threading.Lock()
SETUPS = []


def guard(inp):
    if not hasattr(_local, "worker"):        # the per-thread state a library that is not thread-safe needs
        with _lock:
            SETUPS.append(threading.current_thread().name)
            _local.worker = len(SETUPS)
        print(f"setup {_local.worker}")
    print(f"worker {_local.worker}")
    if once("stuck"):                        # the first call blocks past timeout_s, once
        time.sleep(float(os.environ.get("PW_STUCK_S", "0")))
        (DIR / "returned").write_text("")
    returned = DIR / "returned"
    if returned.exists() and time.time() - returned.stat().st_mtime > 0.5:
        # Well after the stuck call returned: the worker threads alive now.
        print("pool", sum(t.name.startswith("guardeval-python-guard") for t in threading.enumerate()))
    time.sleep(float(os.environ.get("PW_CALL_S", "0")))
    return ALLOW
'''


def test_thread_local_state_is_built_once_per_worker_thread(tmp_path: Path) -> None:
    """60 calls at --concurrency 3: at most 3 worker threads, each sets its state up once
    (before issue 40, a thread per call: 60 set-ups)."""
    guard = _guard(tmp_path, "pw_local", THREAD_LOCAL, "guard")
    r = _launch(tmp_path, guard, "--max-calls", "60", "--concurrency", "3")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 60}, r.err
    out = "".join(_stdout(x) for x in _raw(tmp_path / "run"))
    setups = out.count("setup ")
    assert 1 <= setups <= 3, out
    assert out.count("worker ") == 60


def test_an_abandoned_thread_leaves_the_pool_and_a_fresh_one_takes_its_place(tmp_path: Path) -> None:
    """The first call sleeps 2 s past timeout_s 1 s: its attempt is a timeout, its thread is
    never given another call (even after it returns: the other calls take 4.5 s at least),
    and a fresh thread joins the pool."""
    cfg, env = _guard(tmp_path, "pw_local", THREAD_LOCAL, "guard", timeout_s=1, concurrency=2)
    r = _launch(tmp_path, (cfg, {**env, "PW_STUCK_S": "2", "PW_CALL_S": "0.03"}), "--max-calls", "300")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 300}, r.err
    raw = _raw(tmp_path / "run")
    timeouts = [x for x in raw if x["error_class"] == "timeout"]
    assert len(timeouts) >= 1
    stuck = _stdout(timeouts[0]).split("worker ")[1].split()[0]
    # Its worker number shows in its own attempt only, though the run went on after it returned,
    # and once it has returned, its thread is gone: the pool holds 2 threads again.
    assert [x for x in raw if f"worker {stuck}\n" in _stdout(x)] == [timeouts[0]]
    pools = [line for x in raw for line in _stdout(x).splitlines() if line.startswith("pool ")]
    assert pools and set(pools) == {"pool 2"}, pools
    assert "".join(_stdout(x) for x in raw).count("setup ") == 2 + len(timeouts)


def test_through_the_api_the_pool_is_shut_down_when_the_run_ends(tmp_path: Path, monkeypatch) -> None:
    """In this process: the module's own record of set-ups says how many threads served 40
    calls at concurrency 4, and none of them is alive once `launch` returns."""
    from guardeval import api

    cfg, env = _guard(tmp_path, "pw_api_local", THREAD_LOCAL, "guard")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.setenv("PW_DIR", env["PW_DIR"])
    result = api.launch("demo", api.python_guard("pw-api", "pw_api_local:guard", concurrency=4), reps=1,
                        run_dir=tmp_path / "run", max_calls=40, progress=False)
    assert result.statuses == {"ok": 40}
    module = sys.modules["pw_api_local"]
    assert 1 <= len(module.SETUPS) <= 4, module.SETUPS
    assert all(name.startswith("guardeval-python-guard-") for name in module.SETUPS)
    left = [t.name for t in threading.enumerate() if t.name.startswith("guardeval-python-guard")]
    assert left == []


# -- item 2: worker processes -------------------------------------------------------------------

BEHAVIOURS = '''
import asyncio, ctypes, subprocess, sys
from dataclasses import dataclass
from guardeval.backends.errors import FatalError
from guardeval.backends.python_guard import Verdict

print("pw_proc imported")


@dataclass
class Mine:
    malicious_user_request: bool
    third_party_attack: bool
    current_action_harmfulness: float


def text(inp):
    print("pid", os.getpid())
    os.write(1, b"written to descriptor 1\\n")     # as C code would: never into launch --json
    return ALLOW


INSIDE = []


def exclusive(inp):
    INSIDE.append(1)
    time.sleep(0.02)
    print("alone" if len(INSIDE) == 1 else "shared")
    INSIDE.pop()
    return ALLOW


def own_dataclass(inp):
    return Mine(False, True, 0.5)


async def coroutine(inp):
    await asyncio.sleep(0)
    return Verdict(True, False, 1)


def mutates(inp):
    inp.current_action.clear()
    inp.messages.clear()
    return ALLOW


def raises(inp):
    print("key", os.environ["PW_SECRET"], file=sys.stderr)
    raise ValueError("upstream said no to key " + os.environ["PW_SECRET"] + " " + "x" * 5000)


def fatal(inp):
    raise FatalError("licence", "the classifier's licence server refused us")


def exits(inp):
    raise SystemExit(4)


def unpicklable(inp):
    return lambda: ALLOW


def stuck_in_c(inp):
    if once("stuck"):
        child = subprocess.Popen(["sleep", "3600"])     # something the guard started
        (DIR / "child").write_text(str(child.pid))
        ctypes.CDLL(None).sleep(3600)      # no Python frame to interrupt: only a kill stops it
    return ALLOW


def blocks_forever(inp):
    (DIR / f"calling-{os.getpid()}").write_text("")
    ctypes.CDLL(None).sleep(3600)


def segfaults(inp):
    if once("crash"):
        ctypes.string_at(0)
    return ALLOW


def leaves(inp):
    if once("crash"):
        print("leaving")
        os._exit(3)
    return ALLOW


def rendezvous(inp):
    """Two calls meet: each waits (at most 20 s) until two worker processes are inside a call."""
    (DIR / f"inside-{os.getpid()}").write_text("")
    deadline = time.monotonic() + 20
    while len(list(DIR.glob("inside-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    print("met" if len(list(DIR.glob("inside-*"))) >= 2 else "alone")
    return ALLOW


def edits_itself(inp):
    if once("edited"):
        with open(__file__, "a") as f:
            f.write("# changed during the run\\n")
        os._exit(3)
    return ALLOW
'''


def _process(tmp_path: Path, fn: str, **fields: object) -> tuple[Path, dict[str, str]]:
    return _guard(tmp_path, "pw_proc", BEHAVIOURS, fn, isolation="process", **fields)


@pytest.mark.parametrize(("fn", "decision", "returned"), [("text", 0, "str"), ("own_dataclass", 1, "Mine"),
                                                          ("coroutine", 1, "Verdict"), ("mutates", 0, "str")])
def test_in_worker_processes_each_importing_the_module_once(tmp_path: Path, fn: str, decision: int,
                                                            returned: str) -> None:
    guard = _process(tmp_path, fn, concurrency=3, api_key_env="PW_SECRET")
    r = _launch(tmp_path, guard, "--max-calls", "30")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 30}, r.err
    decisions = [orjson.loads(x) for x in (tmp_path / "run" / "decisions.jsonl").read_bytes().splitlines()]
    assert {d["decision"] for d in decisions} == {decision}
    raw = _raw(tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["guard"]["isolation"] == "process"
    responses = [orjson.loads(x["response"]) for x in raw]
    assert {x["returned"] for x in responses} == {returned}
    # Provenance: every answer names the pinned code.
    assert {json.dumps(x["callable"], sort_keys=True) for x in responses} == {
        json.dumps(manifest["guard_callable"], sort_keys=True)}
    state = Path(guard[1]["PW_DIR"])
    imports = {p.name: p.read_text() for p in state.glob("imported-*")}
    # The harness imported it (launch pins it), and at most 3 workers did, each once.
    assert 2 <= len(imports) <= 4 and set(imports.values()) == {"x\n"}, imports
    # What the module prints as it is imported goes to stderr, once per process that imports it.
    assert r.err.count("pw_proc imported") == len(imports)
    if fn == "text":   # the calls ran in the workers, never in the harness
        pids = {int(_stdout(x).split()[1]) for x in raw}
        assert pids <= {int(p.split("-")[1]) for p in imports} and len(pids) <= 3
        assert len(_worker_pids(state) - pids) == 1   # the one pid that answered nothing: the harness's
        # Written to descriptor 1 in a worker, as C code would: kept with its call (issue 46), never
        # on the command's stdout (still the JSON alone) nor its stderr.
        assert all(_stdout(x).endswith("written to descriptor 1\n") for x in raw)
        assert "written to descriptor 1" not in r.err
    assert run_cli("verify", str(tmp_path / "run"), env=guard[1]).code == 0


def test_an_exception_in_a_worker_is_recorded_redacted_and_bounded(tmp_path: Path) -> None:
    r = _launch(tmp_path, _process(tmp_path, "raises", max_attempts=2, api_key_env="PW_SECRET"), "--max-calls", "2")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"guard_error": 2}, r.err
    raw = _raw(tmp_path / "run")
    assert len(raw) == 4 and {x["error_class"] for x in raw} == {"python_exception"}
    assert raw[0]["error"].startswith("ValueError: upstream said no to key [redacted]") and len(raw[0]["error"]) < 700
    assert raw[0]["redacted"] is True
    assert raw[0]["guard_output"] == {"stderr": "key [redacted]\n", "stderr_chars": len("key pwsecret-") + 24 + 1}
    text = (tmp_path / "run" / "raw.jsonl").read_text()
    assert "pwsecret-" not in text and "Traceback" not in text


@pytest.mark.parametrize(("fn", "said"), [("fatal", "licence server refused us"), ("exits", "SystemExit: 4")])
def test_fatal_errors_from_a_worker_stop_the_run(tmp_path: Path, fn: str, said: str) -> None:
    r = _launch(tmp_path, _process(tmp_path, fn))
    assert r.code == 1 and said in r.err and "Traceback" not in r.err, r.err
    assert json.loads(r.out)["stop_reason"] == "fatal"


def test_a_return_that_is_no_decision_shape_fails_the_attempt_naming_the_type(tmp_path: Path) -> None:
    """Refused in the worker (issue 46: nothing but the decision's data crosses), as in a thread."""
    r = _launch(tmp_path, _process(tmp_path, "unpicklable", max_attempts=2), "--max-calls", "2")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"guard_error": 2}, r.err
    raw = _raw(tmp_path / "run")
    assert [x["error_class"] for x in raw] == ["python_return_type"] * 4
    assert "pw_proc:unpicklable returned a function: expected str" in raw[0]["error"]


def test_a_guard_stuck_in_c_is_stopped_and_nothing_of_it_is_left(tmp_path: Path) -> None:
    """ctypes sleeping an hour, timeout_s 1: the attempt is a timeout, its worker is killed
    (the pid the guard wrote is gone), the retry and every other call are decided, and no
    worker outlives the launch."""
    guard = _process(tmp_path, "stuck_in_c", timeout_s=1, concurrency=2)
    t0 = time.monotonic()
    r = _launch(tmp_path, guard, "--max-calls", "20")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 20}, r.err
    assert time.monotonic() - t0 < 90
    raw = _raw(tmp_path / "run")
    assert [x["error_class"] for x in raw].count("timeout") == 1
    assert "did not return within timeout_s (1 s)" in next(x["error"] for x in raw if x["error_class"])
    state = Path(guard[1]["PW_DIR"])
    stuck = int((state / "stuck").read_text())
    assert not _alive(stuck)
    assert not _alive(int((state / "child").read_text()))   # killed with its worker's process group
    assert [pid for pid in _worker_pids(state) if _alive(pid)] == []


def test_through_the_api_a_stuck_worker_leaves_no_thread_and_no_process(tmp_path: Path, monkeypatch) -> None:
    from guardeval import api

    cfg, env = _process(tmp_path, "stuck_in_c")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.setenv("PW_DIR", env["PW_DIR"])
    before = set(threading.enumerate())
    result = api.launch("demo", api.python_guard("pw-api", "pw_proc:stuck_in_c", isolation="process",
                                                 timeout_s=1, concurrency=2, retry_initial_s=0.01),
                        reps=1, run_dir=tmp_path / "run", max_calls=10, progress=False)
    assert result.statuses == {"ok": 10}
    assert [t.name for t in set(threading.enumerate()) - before] == []
    state = Path(env["PW_DIR"])
    workers = _worker_pids(state, {os.getpid()})
    assert workers and [pid for pid in workers if _alive(pid)] == []
    assert not _alive(int((state / "stuck").read_text()))


@pytest.mark.parametrize(("fn", "said"), [("segfaults", "was killed by signal SIGSEGV"),
                                          ("leaves", "exited with code 3")])
def test_a_worker_that_dies_fails_one_attempt_which_is_retried(tmp_path: Path, fn: str, said: str) -> None:
    r = _launch(tmp_path, _process(tmp_path, fn, concurrency=2), "--max-calls", "20")
    assert r.code == 0 and json.loads(r.out)["statuses"] == {"ok": 20}, r.err
    raw = _raw(tmp_path / "run")
    died = [x for x in raw if x["error_class"]]
    assert len(died) == 1 and died[0]["error_class"] == "python_worker_died", died
    assert f"the worker process running pw_proc:{fn} {said} during the call" in died[0]["error"]
    assert "guard_output" not in died[0]     # what it printed died with it
    # The same call, retried, was answered.
    assert any(x["call_id"] == died[0]["call_id"] and x["error_class"] is None for x in raw)


def test_calls_run_at_once_in_separate_interpreters(tmp_path: Path) -> None:
    """Two calls are inside the guard at the same time, in two worker processes (each with its
    own interpreter lock), neither of them the harness."""
    guard = _process(tmp_path, "rendezvous", concurrency=2)
    r = _launch(tmp_path, guard, "--max-calls", "2")
    assert r.code == 0, r.err
    assert [_stdout(x) for x in _raw(tmp_path / "run")] == ["met\n", "met\n"]
    state = Path(guard[1]["PW_DIR"])
    inside = {int(p.name.split("-")[1]) for p in state.glob("inside-*")}
    assert len(inside) == 2 and inside <= _worker_pids(state)


def test_no_two_calls_share_a_worker_process_at_once(tmp_path: Path) -> None:
    r = _launch(tmp_path, _process(tmp_path, "exclusive", concurrency=4), "--max-calls", "24")
    assert r.code == 0, r.err
    assert [_stdout(x) for x in _raw(tmp_path / "run")] == ["alone\n"] * 24


def test_a_worker_that_cannot_import_the_module_stops_the_run(tmp_path: Path) -> None:
    """The harness imports it (the launch pins it); every later import fails."""
    guard = _guard(tmp_path, "pw_once", 'if not once("imported"):\n    raise RuntimeError("licence file locked")\n'
                   "def guard(inp):\n    return ALLOW\n", "guard", isolation="process")
    r = _launch(tmp_path, guard, "--max-calls", "3")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "a worker process could not start pw_once:guard" in r.err and "licence file locked" in r.err, r.err
    assert {x["error_class"] for x in _raw(tmp_path / "run")} == {"python_worker_start"}


def test_a_worker_that_imports_changed_source_stops_the_run(tmp_path: Path) -> None:
    """The first call edits the module and ends its worker: the worker started for the retry
    imports other code than the run pinned, so the run stops (fatal, resumable) instead of
    mixing answers."""
    guard = _process(tmp_path, "edits_itself", concurrency=1)
    r = _launch(tmp_path, guard, "--max-calls", "5")
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "the source of pw_proc changed during the run" in r.err, r.err
    raw = _raw(tmp_path / "run")
    assert [x["error_class"] for x in raw] == ["python_worker_died", "python_source_changed"]
    assert json.loads(r.out)["stop_reason"] == "fatal"


def _stuck_launch(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """A launch (in a session of its own, as a terminal's foreground job) whose two workers are
    both stuck in C, timeout_s 600."""
    cfg, env = _process(tmp_path, "blocks_forever", timeout_s=600, concurrency=2)
    run, state = tmp_path / "run", Path(env["PW_DIR"])
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg),
                             "--reps", "1", "--run-dir", str(run), "--no-progress"], env=cli_env(env), cwd=REPO,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list(state.glob("calling-*"))) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate())
        time.sleep(0.05)
    return proc, run, state


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_run_whose_workers_are_stuck_in_c(tmp_path: Path, signum: int) -> None:
    """SIGTERM to guardeval, or SIGINT to its whole process group (Ctrl-C in a terminal): the
    run stops within seconds, cleanly, as with threads, and the workers are killed."""
    proc, run, state = _stuck_launch(tmp_path)
    try:
        t0 = time.monotonic()
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "interrupted" in err and took < 15, (took, err)
    st = json.loads(run_cli("status", str(run), "--json").out)
    name = signal.Signals(signum).name
    assert st["state"] == "stopped" and st["last_stop"]["reason"] == f"signal {name}", st   # stopped cleanly
    calling = [int(p.name.split("-")[1]) for p in state.glob("calling-*")]
    assert len(calling) >= 2 and [pid for pid in calling if _alive(pid)] == []


def test_workers_end_when_guardeval_is_killed(tmp_path: Path) -> None:
    """SIGKILL to guardeval while its workers are stuck in C: the kernel ends them too (Linux)."""
    proc, _, state = _stuck_launch(tmp_path)
    proc.kill()
    proc.wait()   # not communicate(): a worker left alive would hold the pipes open
    calling = [int(p.name.split("-")[1]) for p in state.glob("calling-*")]
    deadline = time.monotonic() + 20
    while (left := [pid for pid in calling if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:    # the test's own clean-up, should it fail
        os.kill(pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        assert stream is not None
        stream.close()
    assert len(calling) >= 2 and left == []


@pytest.mark.parametrize(("lines", "said"), [
    ('backend = "python"\ncallable = "m:f"\nisolation = "fork"\n', "line 6, field 'isolation': expected one of thread, process"),
    ('backend = "openrouter"\nisolation = "process"\n', "line 5, field 'isolation': isolation applies only to the python backend"),
    ('backend = "python"\ncallable = "m:f"\nisolation = 1\n', "line 6, field 'isolation': expected str, got int"),
])
def test_a_bad_isolation_is_exit_2_naming_the_line_and_field(tmp_path: Path, lines: str, said: str) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "g"\nmodel = "m"\nprompt = "guardeval-json-v1"\n' + lines)
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--dry-run")
    assert r.code == 2 and said in r.err and "Traceback" not in r.err, r.err
