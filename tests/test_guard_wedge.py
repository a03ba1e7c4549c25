"""A python guard cannot wedge the harness (issue 27, items 4-7): an `async def` guard that
blocks the event loop is interrupted and named, and never keeps the process from answering
SIGTERM or SIGINT; what a guard returns that raises when read fails that attempt only; what it
prints stays out of the command's output; repeated timeouts are the guard's, not an
unreachable provider's. Real subprocesses, real signals, real files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from conftest import REPO, CliResult, cli_env, run_cli

pytestmark = pytest.mark.slow

GOOD = '''
def guard(inp):
    return '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
'''


ENTERED = "GUARDEVAL_TEST_ENTERED"   # the file a guard below creates once a call is inside it


def _guard(tmp_path: Path, name: str, source: str, fn: str = "guard", **extra: object) -> tuple[Path, dict[str, str]]:
    """A module `name` in tmp_path/lib and a guard config calling its `fn`; the env that finds it."""
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / f"{name}.py").write_text(textwrap.dedent(source))
    fields = {"retry_initial_s": 0.01, "retry_max_s": 0.05, **extra}
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'name = "{name}"\nbackend = "python"\ncallable = "{name}:{fn}"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    return cfg, {"PYTHONPATH": f"{REPO / 'harness'}:{lib}", ENTERED: str(tmp_path / "entered")}


def _launch(run: Path, guard: tuple[Path, dict[str, str]], *extra: str, timeout: float = 120) -> CliResult:
    cfg, env = guard
    return run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                   "--no-progress", *extra, env=env, timeout=timeout)


def _signalled_launch(run: Path, guard: tuple[Path, dict[str, str]], signum: int) -> tuple[int, str, float]:
    """Launch the demo with `guard`, send `signum` once its first call is in the guard; (exit
    code, stderr, seconds from the signal to the exit)."""
    cfg, env = guard
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg),
                             "--reps", "1", "--run-dir", str(run), "--no-progress"], env=cli_env(env), cwd=REPO,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _entered(Path(guard[1][ENTERED]), proc)
        t0 = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _entered(marker: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until a call is inside the guard: the guard itself creates `marker` on entry (an
    observable event, not a guess at how long the launch takes to get there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("no call reached the guard")


def _raw(run: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run / "raw.jsonl").read_bytes().splitlines()]


def _resumes_with_a_good_guard(tmp_path: Path, run: Path, name: str, env: dict[str, str]) -> None:
    (tmp_path / "lib" / f"{name}.py").write_text(textwrap.dedent(GOOD))
    r = run_cli("resume", str(run), "--no-progress", "--allow-changed-callable", env=env)
    assert r.code == 0 and "320/320 calls decided: ok 320" in r.out, r.out + r.err
    # Nothing was lost or duplicated (the changed code is reported by verify, as it should be).
    v = run_cli("verify", str(run), "--json", env=env)
    problems = json.loads(v.out)["problems"]
    assert len(problems) == 1, problems
    assert problems[0]["message"].startswith(f"guard_callable: the source of {name} no longer matches the launch")


BLOCKING = '''
import os
import time

async def guard(inp):
    open(os.environ["GUARDEVAL_TEST_ENTERED"], "a").close()
    time.sleep(3600)   # a blocking call inside an async function
'''


def test_an_async_guard_that_blocks_the_loop_is_stopped_naming_it(tmp_path):
    """Issue 27 item 4, no signal: the watchdog interrupts the call once it is past timeout_s."""
    guard = _guard(tmp_path, "blocker", BLOCKING, timeout_s=1)
    run = tmp_path / "run"
    t0 = time.monotonic()
    r = _launch(run, guard, timeout=60)
    took = time.monotonic() - t0
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "blocker:guard blocked the event loop" in r.err and "(in guard at blocker.py:7)" in r.err, r.err
    assert "resume with: guardeval resume" in r.err
    assert "stopped by a fatal guard error" in r.err and "provider" not in r.err, r.err   # the guard's, not a provider's
    assert took < 30, took
    raw = _raw(run)
    assert raw and {x["error_class"] for x in raw} == {"python_blocked_loop"}
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["state"] == "stopped" and st["decided"] == 0
    _resumes_with_a_good_guard(tmp_path, run, "blocker", guard[1])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_blocked_loop_answers_a_signal_within_seconds(tmp_path, signum):
    """timeout_s = 600: only the signal can end this launch soon. It does, saying why."""
    run, env = tmp_path / "run", _guard(tmp_path, "blocker", BLOCKING, timeout_s=600)
    code, err, took = _signalled_launch(run, env, signum)
    assert code == 1 and "Traceback" not in err, err
    assert took < 5, took
    name = signal.Signals(signum).name
    assert f"interrupted (signal {name}: blocker:guard blocked the event loop when {name} came" in err, err
    assert {x["error_class"] for x in _raw(run)} == {"python_blocked_loop"}
    _resumes_with_a_good_guard(tmp_path, run, "blocker", env[1])


SWALLOWING = '''
import os
import time

async def guard(inp):
    open(os.environ["GUARDEVAL_TEST_ENTERED"], "a").close()
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass      # nothing stops it from the inside
'''


def test_a_guard_that_swallows_the_interrupt_cannot_keep_the_process_alive(tmp_path):
    run, env = tmp_path / "run", _guard(tmp_path, "swallower", SWALLOWING, timeout_s=600)
    code, err, took = _signalled_launch(run, env, signal.SIGTERM)
    assert code == 1 and "Traceback" not in err, err
    assert took < 10, took
    assert "swallower:guard still blocks the event loop (in guard at swallower.py:9)" in err, err
    assert json.loads(run_cli("status", str(run), "--json").out)["state"] == "interrupted"
    _resumes_with_a_good_guard(tmp_path, run, "swallower", env[1])


def test_repeated_async_timeouts_stop_the_run_as_the_guards_not_the_providers(tmp_path):
    """Issue 27 item 7."""
    run = tmp_path / "run"
    r = _launch(run, _guard(tmp_path, "slow", "import anyio\n\nasync def guard(inp):\n    await anyio.sleep(30)\n",
                            timeout_s=0.2, max_attempts=8))
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "stopped: the guard kept timing out" in r.err and "did not return within timeout_s" in r.err, r.err
    assert "unreachable" not in r.err
    assert json.loads(run_cli("status", str(run), "--json").out)["last_stop"]["reason"] == "guard_timeouts"


HOSTILE_RETURNS = '''
import dataclasses
from collections.abc import Mapping


class Exploding(Mapping):
    def __getitem__(self, key):
        raise KeyError(key)

    def __len__(self):
        return 3

    def __iter__(self):
        raise RuntimeError("iteration exploded")


@dataclasses.dataclass
class Loop:
    me: object = None


def mapping(inp):
    return Exploding()


def loop(inp):
    value = Loop()
    value.me = value
    return value
'''


@pytest.mark.parametrize("fn, said", [("mapping", "a Exploding that cannot be read: RuntimeError: iteration exploded"),
                                      ("loop", "a Loop that cannot be read: RecursionError")])
def test_a_return_that_raises_when_read_fails_that_attempt_only(tmp_path, fn, said):
    """Issue 27 item 5: a failed attempt (`python_return_type`), retried, then `guard_error`; no
    ExceptionGroup traceback, the run goes on."""
    run = tmp_path / "run"
    r = _launch(run, _guard(tmp_path, "returns", HOSTILE_RETURNS, fn, max_attempts=2), "--max-calls", "3")
    assert r.code == 0 and "Traceback" not in r.err and "ExceptionGroup" not in r.err, r.err
    raw = _raw(run)
    assert len(raw) == 6 and {x["error_class"] for x in raw} == {"python_return_type"}
    assert all(said in x["error"] for x in raw), raw[0]["error"]
    assert "3/320 calls decided: guard_error 3" in r.out


PRINTING = '''
import sys

print("loading the guard's rules")        # at import time


def guard(inp):
    print("x" * 52_000)                     # 52 KB of debug text per call
    print("a warning", file=sys.stderr)
    return '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'


async def async_guard(inp):
    return guard(inp)
'''


@pytest.mark.parametrize("fn", ["guard", "async_guard"])
def test_what_a_guard_prints_stays_out_of_launch_json(tmp_path, fn):
    """Issue 27 item 6: stdout is the JSON alone; the guard's output is kept, bounded, on its
    attempt's raw line."""
    run = tmp_path / "run"
    guard = _guard(tmp_path, "chatty", PRINTING, fn)
    r = _launch(run, guard, "--max-calls", "5", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)      # nothing but the outcome on stdout
    assert out["decided"] == 5 and out["statuses"] == {"ok": 5}
    assert "xxxx" not in r.err and "loading the guard's rules" in r.err
    raw = _raw(run)
    for line in raw:
        got = line["guard_output"]
        assert got["stdout"] == "x" * 2048 and got["stdout_chars"] == 52_001
        assert got["stderr"] == "a warning\n" and got["stderr_chars"] == 10
    assert run_cli("verify", str(run), env=guard[1]).code == 0
