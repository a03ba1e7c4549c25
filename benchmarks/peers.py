"""Peer benchmark: guardeval against inspect_ai on the same simulated provider.

    python benchmarks/peers.py [--concurrency 16,64,256] [--calls 3200] [--latency-ms 100]
                               [--repeats 1] [--quick] [--only both|guardeval|inspect]
                               [--peer-version 0.3.285] [--json FILE]
    python benchmarks/peers.py --rate-cap RPS [--rps-burst B] [--concurrency 64] [--calls N] ...
    python benchmarks/peers.py --random-429 P [--concurrency 64] [--calls 3200] ...

Throughput mode (the default): at each concurrency, N identical single-turn classification calls
go through guardeval and through inspect_ai, each against a fresh `guardeval sim-server` with a
fixed latency and no faults. Reported per harness: wall time, achieved throughput ÷ ideal (ideal
= concurrency / latency), CPU-seconds per 1,000 calls, peak RSS, the server's request count and
an estimate of the calls in flight seen by the server; then the ratios guardeval ÷ inspect_ai.
A separate table gives each harness's startup cost (a run of one call).

Rate-cap mode (`--rate-cap RPS`, run on its own): the sim-server caps requests per second with a
token bucket (`--rps-cap`, `--rps-burst`) and answers over-cap requests with an immediate 429 +
Retry-After. Reported: goodput ÷ cap (calls answered ok per second of wall ÷ RPS, over the whole
process and over the server-side active window), the 429s the server sent, and attempts per call,
for guardeval with adaptive concurrency (its default), guardeval with `--fixed-concurrency`,
inspect_ai with a static `max_connections` and inspect_ai with its adaptive controller bounded by
the same concurrency. N defaults to 30 s worth of the cap.

Random-429 mode (`--random-429 P`, run on its own): the sim-server answers a fraction P of
requests 429 at random (`--faults 429=P`: after its latency, `Retry-After` its default 0.05 s),
whatever the request rate, so cutting concurrency cannot help. The same four clients; reported:
calls answered ok per second over the whole process and over the server's active window, the
429s the server sent, attempts per call, and guardeval's lowest limit, cuts, cuts undone and
learned background rate; then adaptive ÷ `--fixed-concurrency` throughput per pair (the target:
at least 0.8). N defaults to 3,200.

Fairness rules
--------------
- Each harness runs as its own child process from a cold start: guardeval as
  `python -m guardeval launch ...` (the real CLI, writing its real run folder into a temp dir,
  `--no-progress`); inspect_ai as `benchmarks/peers_inspect_driver.py`, a small driver calling
  `inspect_ai.eval(...)` with its normal log writing on (default `.eval` format, samples logged),
  `display="none"`, and only the log header returned (as the `inspect eval` CLI does).
  Wall time runs from process start to exit; CPU (user + sys) and peak RSS come from
  `os.wait4` rusage of the child, which covers its reaped descendants (ru_maxrss is KiB on
  Linux). Headline numbers are whole-process: interpreter start, imports, loading the inputs,
  the calls, writing logs, shutdown. Startup is reported on its own (a one-call run, and the
  time to the first request seen by the server) so readers can tell it from steady state.
- Same requests: guardeval's launch is planned first (demo cohort, `--reps ceil(N/320)`, seed 1,
  `--max-calls N`), and the system + user messages of the first N scheduled calls, rendered by
  the guard's own `render`, become the inspect dataset: one sample per call, in schedule order.
  Both send model `sim-bench`, temperature 0, max_tokens 256 and no response_format (the guard
  config sets `structured_output = false`: inspect would re-encode a JSON schema its own way).
  After the first guardeval run at each N, the messages it actually sent (raw.jsonl `request`)
  are checked against the dataset as multisets (`same_messages`).
- Work per call: guardeval does what it always does (strict JSON parse, decision line, hash
  chain); inspect_ai runs `generate()` with no scorer: its lightest configuration.
- Concurrency: guardeval `--concurrency C`; inspect `max_connections = C` (which also switches its
  adaptive controller off) and `max_samples = C`; its HTTP pool allows 1,000 connections, above
  every C tested. In rate-cap and random-429 modes the `inspect_ai-adaptive` variant passes
  `adaptive_connections = C` instead: inspect's controller with its defaults (min 10, start 20,
  cut ×0.8 at most every 15 s) and max C. The server counts arrivals (`/stats`, polled
  by this script every 50 ms); with a fixed latency L, calls in flight ≈ arrival rate × L
  (Little's law), reported as the peak over 0.5 s windows, so the concurrency each harness
  actually reached is checked from the server side.
- Retries: both harnesses keep their default retry settings. inspect_ai 0.3.285's
  `openai-api` provider uses the OpenAI SDK client with its default `max_retries=2` (waits
  `retry-after-ms` / `Retry-After` when the server gives one of at most 120 s, else
  0.5 s · 2^n up to 8 s with jitter), wrapped in inspect's own tenacity loop: unlimited retries
  (`max_retries=None`, `timeout=None`), `wait_exponential_jitter(initial=3, max=1800, jitter=3)`,
  which does not read Retry-After; 429s also feed its adaptive controller when that is on.
  guardeval uses the guard config defaults (`max_attempts = 6`, backoff from 1 s up to 60 s,
  never shorter than Retry-After; with adaptive concurrency a 429 episode cuts the wire limit
  to the rate being served, Retry-After pauses new attempts, and a refused call retries when
  Retry-After says). With no faults both should show zero retries: the server's request count
  must equal N.
- Measurements alternate (g, i, g, i, … at each concurrency) so drift in machine load hits
  both; with `--repeats K` the median and every value are reported, and ratios are the median
  of the per-pair ratios. A fresh sim-server (same seed) serves each run; its own CPU use is
  reported so a saturated simulator can be told from a slow harness.
- The peer lives in its own virtual environment (`benchmarks/.peer-venv/`, created on first use,
  reused while it holds the pinned version): `pip install inspect-ai==VERSION openai` (the
  OpenAI SDK is what its `openai-api` provider needs). It is a benchmark dependency only.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))

from guardeval.backends.sim import SimServerProcess  # noqa: E402
from guardeval.canon import canonical_sha256  # noqa: E402

PEER_PACKAGE = "inspect-ai"
PEER_VERSION = "0.3.285"          # the version these numbers were first measured with
PEER_EXTRAS = ("openai",)         # inspect's `openai-api` provider needs the OpenAI SDK
PEER_VENV = REPO / "benchmarks" / ".peer-venv"
DRIVER = REPO / "benchmarks" / "peers_inspect_driver.py"
COHORT = REPO / "cohorts" / "demo"
COHORT_INSTANCES = 320            # 64 bases x 5 conditions
MODEL = "sim-bench"
MAX_TOKENS = 256
SEED = 1
DEFAULT_CALLS = 3200              # ten repetitions of the demo cohort
RANDOM_429_CALLS = 3200           # random-429 mode: a few seconds at full speed, so the opening is not all
QUICK_CALLS = 200
POLL_FAST_S, POLL_S = 0.01, 0.05  # /stats polling: fast until the first request, then slower
WINDOW_S = 0.5                    # window of the in-flight estimate

GUARD_TOML = f"""\
# Written by benchmarks/peers.py: guardeval's openai-compatible back-end, no response_format,
# so the body is exactly what inspect's openai-api provider sends (model, messages,
# temperature, max_tokens). Retry settings are the config defaults.
name = "peers"
backend = "openai-compatible"
model = "{MODEL}"
prompt = "guardeval-json-v1"
base_url = "http://127.0.0.1:1/v1"
temperature = 0
max_tokens = {MAX_TOKENS}
structured_output = false
"""


# ------------------------------------------------------------------------------ measurement

@dataclass
class Measured:
    """One child process, measured from spawn to reaping."""

    harness: str                  # guardeval | guardeval-fixed | inspect_ai | inspect_ai-adaptive
    exit_code: int
    wall_s: float
    cpu_s: float                  # user + sys of the child and its reaped descendants
    peak_rss_mib: float
    first_request_s: float | None  # process start -> first request seen at the server
    last_request_s: float | None
    inflight_est_max: float | None  # peak arrival rate over WINDOW_S x latency
    server: dict[str, Any] = field(default_factory=dict)   # /stats after the run, server CPU
    detail: dict[str, Any] = field(default_factory=dict)   # harness-side counts


class StatsPoller(threading.Thread):
    """Polls the sim-server's /stats on a kept-alive connection; records (t, requests)."""

    def __init__(self, base_url: str, t0: float) -> None:
        super().__init__(daemon=True)
        u = urlsplit(base_url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.t0 = t0
        self.samples: list[tuple[float, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        seen = False
        while not self.halt.is_set():
            try:
                conn.request("GET", "/stats")
                n = int(json.loads(conn.getresponse().read())["requests"])
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
                n = -1
            if n >= 0:
                self.samples.append((time.perf_counter() - self.t0, n))
                seen = seen or n > 0
            self.halt.wait(POLL_S if seen else POLL_FAST_S)
        conn.close()

    def summary(self, latency_s: float) -> tuple[float | None, float | None, float | None]:
        s = self.samples
        first = next((t for t, n in s if n > 0), None)
        last_n = s[-1][1] if s else 0
        last = next((t for t, n in s if n >= last_n), None) if last_n > 0 else None
        peak = None
        j = 0
        for i in range(len(s)):
            j = max(j, i)
            while j < len(s) and s[j][0] - s[i][0] < WINDOW_S:
                j += 1
            if j >= len(s):
                break
            rate = (s[j][1] - s[i][1]) / (s[j][0] - s[i][0])
            peak = rate if peak is None else max(peak, rate)
        return first, last, (peak * latency_s if peak is not None else None)


def get_stats(base_url: str) -> dict[str, Any]:
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=10)
    try:
        conn.request("GET", "/stats")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def proc_cpu_s(pid: int) -> float | None:
    """CPU seconds of a live process from /proc (Linux); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_measured(harness: str, cmd: Sequence[str], *, env: dict[str, str], cwd: Path, log_dir: Path,
                 sim: SimServerProcess, latency_s: float) -> Measured:
    """Spawn `cmd`, reap it with wait4 (rusage of the child and its reaped descendants)."""
    out, err = (log_dir / "stdout.txt").open("wb"), (log_dir / "stderr.txt").open("wb")
    assert sim.proc is not None
    server_cpu0 = proc_cpu_s(sim.proc.pid)
    t0 = time.perf_counter()
    poller = StatsPoller(sim.base_url, t0)
    poller.start()
    try:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        # wait4 rather than proc.wait(): it returns the rusage of exactly this child.
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        poller.halt.set()
        poller.join()
        out.close()
        err.close()
    server_cpu1 = proc_cpu_s(sim.proc.pid)
    first, last, inflight = poller.summary(latency_s)
    server = get_stats(sim.base_url)
    if server_cpu0 is not None and server_cpu1 is not None:
        server["cpu_s"] = round(server_cpu1 - server_cpu0, 3)
    return Measured(harness, proc.returncode, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024,
                    first, last, inflight, server)


def sim_args(latency_ms: float, extra: Sequence[str] = ()) -> list[str]:
    return ["--latency-ms", f"{latency_ms:g}", "--seed", str(SEED), *extra]


# ----------------------------------------------------------------------------------- inputs

def write_guard(tmp: Path) -> Path:
    path = tmp / "peers-guard.toml"
    path.write_text(GUARD_TOML, encoding="utf-8")
    return path


def reps_for(n: int) -> int:
    return max(1, math.ceil(n / COHORT_INSTANCES))


def messages_key(messages: Any) -> str:
    return canonical_sha256(messages)


def write_dataset(guard: Path, n: int, path: Path) -> Counter[str]:
    """The inspect dataset: the messages of guardeval's first `n` scheduled calls, rendered by
    the guard itself. Returns the multiset of message hashes for the same-content check."""
    from guardeval.backends.registry import make_guard
    from guardeval.run.planning import plan_launch

    plan = plan_launch(cohort_dir=COHORT, guard_path=guard, reps=reps_for(n), seed=SEED, order="rounds",
                       base_url=None)
    render = make_guard(plan.config, plan.prompt, max_connections=1).render
    rendered: dict[str, list[dict[str, str]]] = {}
    keys: Counter[str] = Counter()
    with path.open("w", encoding="utf-8") as f:
        for _, row in itertools.islice(plan.lines(), n):
            msgs = rendered.get(row["instance_sha256"])
            if msgs is None:
                msgs = rendered[row["instance_sha256"]] = render(plan.cohort.instance(row["base_id"], row["condition"]))["messages"]
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")
            keys[messages_key(msgs)] += 1
    return keys


def sent_messages(run_dir: Path) -> Counter[str]:
    """Multiset of the message lists guardeval sent (first attempt of each call)."""
    keys: Counter[str] = Counter()
    with (run_dir / "raw.jsonl").open("rb") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("attempt") == 1:
                keys[messages_key(rec["request"]["messages"])] += 1
    return keys


# ---------------------------------------------------------------------------------- peer venv

def peer_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_version(python: Path, dist: str) -> str | None:
    if not python.exists():
        return None
    r = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_peer_venv(version: str, venv: Path = PEER_VENV) -> Path:
    """Create or reuse the peer's own virtual environment; return its python."""
    py = peer_python(venv)
    if installed_version(py, PEER_PACKAGE) == version and all(installed_version(py, e) for e in PEER_EXTRAS):
        return py
    if venv.exists():
        print(f"peers: replacing {venv} (it does not hold {PEER_PACKAGE}=={version})", file=sys.stderr)
        shutil.rmtree(venv)
    print(f"peers: creating {venv} with {PEER_PACKAGE}=={version} (a minute or two)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{PEER_PACKAGE}=={version}", *PEER_EXTRAS],
                   check=True)
    return py


def peer_versions(py: Path) -> dict[str, str | None]:
    return {d: installed_version(py, d) for d in (PEER_PACKAGE, *PEER_EXTRAS, "httpx", "httpx2", "anyio")}


# ------------------------------------------------------------------------------------ runners

def child_env(*, guardeval: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENROUTER_API_KEY", "OPENAI_API_KEY")}
    if guardeval:
        env["PYTHONPATH"] = str(REPO / "harness")   # the checkout's code, whatever the venv's editable install points at
    return env


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_guardeval(*, tmp: Path, tag: str, guard: Path, n: int, concurrency: int, latency_ms: float,
                  fixed: bool = False, sim_extra: Sequence[str] = ()) -> tuple[Measured, Path]:
    work = tmp / tag
    work.mkdir(parents=True)
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "guardeval", "launch", "--cohort", str(COHORT), "--guard", str(guard),
           "--reps", str(reps_for(n)), "--seed", str(SEED), "--max-calls", str(n),
           "--concurrency", str(concurrency), "--run-dir", str(run_dir), "--no-progress",
           "--no-preflight"]   # the simulator lists no models for the openai-compatible preflight
    if fixed:
        cmd.append("--fixed-concurrency")
    with SimServerProcess(sim_args(latency_ms, sim_extra)) as sim:
        cmd += ["--base-url", sim.base_url + "/v1"]
        m = run_measured("guardeval-fixed" if fixed else "guardeval", cmd, env=child_env(guardeval=True),
                         cwd=REPO, log_dir=work, sim=sim, latency_s=latency_ms / 1000)
    statuses: Counter[str] = Counter()
    if (run_dir / "decisions.jsonl").exists():
        with (run_dir / "decisions.jsonl").open("rb") as f:
            for line in f:
                statuses[json.loads(line)["status"]] += 1
    decided = sum(statuses.values())
    attempts = count_lines(run_dir / "raw.jsonl")
    m.detail = {"decided": decided, "ok": statuses.get("ok", 0), "statuses": dict(statuses),
                "attempts": attempts, "retries": attempts - decided,
                **_stop_event(run_dir), "output_bytes": tree_bytes(run_dir) if run_dir.exists() else 0}
    if m.exit_code != 0:
        m.detail["stderr_tail"] = (work / "stderr.txt").read_text(errors="replace")[-2000:]
    return m, run_dir


def _stop_event(run_dir: Path) -> dict[str, Any]:
    """guardeval's own account of the run (the last `stop` event in events.jsonl): lowest
    adaptive limit, 429s seen, limit cuts."""
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return {}
    for line in reversed(lines):
        ev = json.loads(line)
        if ev.get("event") == "stop":
            return {"adaptive": ev.get("adaptive"), "min_concurrency": ev.get("min_concurrency"),
                    "limit_cuts": ev.get("limit_cuts"), "limit_restores": ev.get("limit_restores"),
                    "background_429": ev.get("background_429"), "harness_rate_limited": ev.get("rate_limited")}
    return {}


def run_inspect(*, tmp: Path, tag: str, py: Path, dataset: Path, n: int, concurrency: int, latency_ms: float,
                adaptive: bool = False, sim_extra: Sequence[str] = ()) -> Measured:
    work = tmp / tag
    work.mkdir(parents=True)
    logs = work / "logs"
    with SimServerProcess(sim_args(latency_ms, sim_extra)) as sim:
        cmd = [str(py), str(DRIVER), "--dataset", str(dataset), "--base-url", sim.base_url + "/v1",
               "--model", MODEL, "--concurrency", str(concurrency), "--log-dir", str(logs),
               "--temperature", "0", "--max-tokens", str(MAX_TOKENS)]
        if adaptive:
            cmd.append("--adaptive")
        m = run_measured("inspect_ai-adaptive" if adaptive else "inspect_ai", cmd, env=child_env(guardeval=False),
                         cwd=work, log_dir=work, sim=sim, latency_s=latency_ms / 1000)
    summary: dict[str, Any] = {}
    lines = (work / "stdout.txt").read_text(errors="replace").strip().splitlines()
    if lines:
        try:
            summary = json.loads(lines[-1])
        except ValueError:
            pass
    completed = summary.get("completed_samples") or 0
    m.detail = {"decided": completed, "ok": completed if summary.get("status") == "success" else 0,
                "status": summary.get("status"), "error": summary.get("error"),
                "attempts": m.server.get("requests"), "retries": (m.server.get("requests") or 0) - n,
                "output_bytes": tree_bytes(logs) if logs.exists() else 0}
    if m.exit_code != 0:
        m.detail["stderr_tail"] = (work / "stderr.txt").read_text(errors="replace")[-2000:]
    return m


# ------------------------------------------------------------------------------------ metrics

def derive(m: Measured, n: int, concurrency: int, latency_ms: float) -> dict[str, Any]:
    ideal = concurrency / (latency_ms / 1000)
    d = asdict(m)
    d.update({
        "calls": n,
        "throughput": n / m.wall_s,
        "efficiency": n / m.wall_s / ideal,
        "cpu_s_per_1k": m.cpu_s / n * 1000,
        "server_requests": m.server.get("requests"),
        "server_cpu_util": (m.server["cpu_s"] / m.wall_s) if "cpu_s" in m.server else None,
    })
    return d


THROUGHPUT_METRICS = ("wall_s", "efficiency", "cpu_s_per_1k", "peak_rss_mib")


def med(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict[str, Any]], metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for h in dict.fromkeys(r["harness"] for r in runs):
        mine = [r for r in runs if r["harness"] == h]
        out[h] = {k: {"median": med(r[k] for r in mine), "values": [r[k] for r in mine]} for k in metrics}
    return out


def pair_ratios(runs: list[dict[str, Any]], a: str, b: str, metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """a ÷ b per repeat (the k-th run of a with the k-th run of b), and their median."""
    xs = [r for r in runs if r["harness"] == a]
    ys = [r for r in runs if r["harness"] == b]
    out: dict[str, dict[str, Any]] = {}
    for k in metrics:
        vals = [x[k] / y[k] if x[k] and y[k] else None for x, y in zip(xs, ys)]
        out[k] = {"median": med(vals), "values": vals}
    return out


def fmt(v: Any, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def print_table(title: str, rows: list[dict[str, Any]], cols: list[tuple[str, str, str]]) -> None:
    if title:
        print(title)
    head = [c[0] for c in cols]
    body = [[fmt(r.get(key), spec) if spec else fmt(r.get(key)) for _, key, spec in cols] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    print("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for b in body:
        print("  " + "  ".join(x.rjust(w) for x, w in zip(b, widths)))


RUN_COLS = [("harness", "harness", ""), ("rep", "repeat", ""), ("exit", "exit_code", ""),
            ("wall s", "wall_s", ".2f"), ("calls/s", "throughput", ".1f"), ("eff", "efficiency", ".3f"),
            ("CPU s/1k", "cpu_s_per_1k", ".2f"), ("RSS MiB", "peak_rss_mib", ".0f"),
            ("srv req", "server_requests", ""), ("retries", "retries", ""),
            ("1st req s", "first_request_s", ".2f"), ("inflight~", "inflight_est_max", ".0f"),
            ("srv CPU", "server_cpu_util", ".2f")]


# -------------------------------------------------------------------------------------- modes

def harness_order(only: str) -> list[str]:
    return {"both": ["guardeval", "inspect_ai"], "guardeval": ["guardeval"], "inspect": ["inspect_ai"]}[only]


def throughput_mode(args: argparse.Namespace, tmp: Path, py: Path | None) -> dict[str, Any]:
    guard = write_guard(tmp)
    harnesses = harness_order(args.only)
    result: dict[str, Any] = {"startup": {}, "by_concurrency": []}
    datasets: dict[int, tuple[Path, Counter[str]]] = {}

    def dataset(n: int) -> tuple[Path, Counter[str]]:
        if n not in datasets:
            p = tmp / f"dataset-{n}.jsonl"
            datasets[n] = (p, write_dataset(guard, n, p))
        return datasets[n]

    def one(h: str, tag: str, n: int, c: int) -> dict[str, Any]:
        if h == "guardeval":
            m, run_dir = run_guardeval(tmp=tmp, tag=tag, guard=guard, n=n, concurrency=c, latency_ms=args.latency_ms)
            d = derive(m, n, c, args.latency_ms)
            if "same_messages" not in checked.setdefault(n, {}) and m.exit_code == 0 and "inspect_ai" in harnesses:
                checked[n]["same_messages"] = sent_messages(run_dir) == dataset(n)[1]
            shutil.rmtree(tmp / tag, ignore_errors=True)   # run folders are big; the numbers are kept
        else:
            assert py is not None
            m = run_inspect(tmp=tmp, tag=tag, py=py, dataset=dataset(n)[0], n=n, concurrency=c,
                            latency_ms=args.latency_ms)
            d = derive(m, n, c, args.latency_ms)
            shutil.rmtree(tmp / tag, ignore_errors=True)
        d.update(d.pop("detail"))
        return d

    checked: dict[int, dict[str, Any]] = {}
    # Startup: one call, at the first concurrency.
    c0 = args.concurrency[0]
    if "inspect_ai" in harnesses:
        dataset(1)
    startup_runs: list[dict[str, Any]] = []
    for k in range(args.repeats):
        for h in harnesses:
            r = one(h, f"startup-{h}-{k}", 1, c0)
            r["repeat"] = k + 1
            startup_runs.append(r)
            print(f"peers: startup {h} #{k + 1}: {r['wall_s']:.2f} s", file=sys.stderr)
    result["startup"] = {"calls": 1, "concurrency": c0, "runs": startup_runs,
                         "summary": summarize(startup_runs, ("wall_s", "cpu_s", "peak_rss_mib", "first_request_s"))}

    for c, n in zip(args.concurrency, args.calls):
        if "inspect_ai" in harnesses:
            dataset(n)
        runs: list[dict[str, Any]] = []
        for k in range(args.repeats):
            for h in harnesses:   # alternate: g, i, g, i, ...
                r = one(h, f"c{c}-{h}-{k}", n, c)
                r["repeat"] = k + 1
                runs.append(r)
                print(f"peers: c={c} n={n} {h} #{k + 1}: {r['wall_s']:.2f} s wall, eff {r['efficiency']:.3f}, "
                      f"server requests {r['server_requests']}", file=sys.stderr)
        entry: dict[str, Any] = {"concurrency": c, "calls": n, "latency_ms": args.latency_ms,
                                 "ideal_calls_per_s": c / (args.latency_ms / 1000), "runs": runs,
                                 "summary": summarize(runs, THROUGHPUT_METRICS)}
        if len(harnesses) == 2:
            entry["ratios_guardeval_over_inspect"] = pair_ratios(runs, "guardeval", "inspect_ai", THROUGHPUT_METRICS)
        entry.update(checked.get(n, {}))
        result["by_concurrency"].append(entry)
    return result


def print_throughput(res: dict[str, Any], args: argparse.Namespace) -> None:
    st = res["startup"]
    print_table(f"\nStartup: one call at concurrency {st['concurrency']}, latency {args.latency_ms:g} ms "
                "(whole process; '1st req s' = process start to the first request at the server)",
                st["runs"], [("harness", "harness", ""), ("rep", "repeat", ""), ("wall s", "wall_s", ".2f"),
                             ("CPU s", "cpu_s", ".2f"), ("RSS MiB", "peak_rss_mib", ".0f"),
                             ("1st req s", "first_request_s", ".2f")])
    for e in res["by_concurrency"]:
        title = (f"\nConcurrency {e['concurrency']}: N = {e['calls']} calls, latency {e['latency_ms']:g} ms, "
                 f"ideal {e['ideal_calls_per_s']:.0f} calls/s")
        if "same_messages" in e:
            title += f"; same messages as inspect's dataset: {e['same_messages']}"
        print_table(title, e["runs"], RUN_COLS)
        rat = e.get("ratios_guardeval_over_inspect")
        if rat:
            parts = []
            for k, label in (("wall_s", "wall"), ("efficiency", "throughput/ideal"), ("cpu_s_per_1k", "CPU per call"),
                             ("peak_rss_mib", "peak RSS")):
                vals = ", ".join(fmt(v, ".3f") for v in rat[k]["values"])
                parts.append(f"{label} {fmt(rat[k]['median'], '.3f')}" + (f" [{vals}]" if len(rat[k]["values"]) > 1 else ""))
            print("  guardeval ÷ inspect_ai (median of pairs): " + "; ".join(parts))
    if res["by_concurrency"]:
        print("\nSummary (medians; 'ratio g/i' = median of the per-pair ratios guardeval ÷ inspect_ai)")
        rows = []
        for e in res["by_concurrency"]:
            for h, s in e["summary"].items():
                rows.append({"c": e["concurrency"], "n": e["calls"], "harness": h,
                             **{k: s[k]["median"] for k in THROUGHPUT_METRICS}})
            rat = e.get("ratios_guardeval_over_inspect")
            if rat:
                rows.append({"c": e["concurrency"], "n": e["calls"], "harness": "ratio g/i",
                             **{k: rat[k]["median"] for k in THROUGHPUT_METRICS}})
        print_table("", rows, [("conc", "c", ""), ("N", "n", ""), ("harness", "harness", ""),
                               ("wall s", "wall_s", ".3f"), ("eff", "efficiency", ".3f"),
                               ("CPU s/1k", "cpu_s_per_1k", ".3f"), ("RSS MiB", "peak_rss_mib", ".3f")])


# ---------------------------------------------------------------------------------- rate cap

RATE_VARIANTS = ("guardeval", "guardeval-fixed", "inspect_ai", "inspect_ai-adaptive")


def check_rate_features() -> list[str]:
    """What the checkout lacks for rate-cap mode (the sim-server's cap, launch --fixed-concurrency)."""
    missing = []
    env = child_env(guardeval=True)
    sim_help = subprocess.run([sys.executable, "-m", "guardeval.backends.sim", "--help"], capture_output=True,
                              text=True, env=env, cwd=REPO).stdout
    if "--rps-cap" not in sim_help:
        missing.append("sim-server --rps-cap")
    launch_help = subprocess.run([sys.executable, "-m", "guardeval", "launch", "--help"], capture_output=True,
                                 text=True, env=env, cwd=REPO).stdout
    if "--fixed-concurrency" not in launch_help:
        missing.append("launch --fixed-concurrency")
    return missing


def variant_runs(args: argparse.Namespace, tmp: Path, py: Path | None, sim_extra: Sequence[str],
                 label: str) -> list[dict[str, Any]]:
    """Every variant against a fresh sim-server with `sim_extra`, alternating, `--repeats` times.
    Adds the server-side active window (first to last request seen, plus one latency for the
    last answer; polling resolution ~50 ms) and ok calls per second over wall and over it."""
    guard = write_guard(tmp)
    c, n = args.concurrency[0], args.calls[0]
    variants = [v for v in RATE_VARIANTS if (v.startswith("guardeval") and args.only != "inspect")
                or (v.startswith("inspect") and args.only != "guardeval")]
    ds = tmp / f"dataset-{n}.jsonl"
    if any(v.startswith("inspect") for v in variants):
        write_dataset(guard, n, ds)
    runs: list[dict[str, Any]] = []
    for k in range(args.repeats):
        for v in variants:
            tag = f"{label}-{v}-{k}"
            if v.startswith("guardeval"):
                m, _ = run_guardeval(tmp=tmp, tag=tag, guard=guard, n=n, concurrency=c, latency_ms=args.latency_ms,
                                     fixed=v.endswith("fixed"), sim_extra=sim_extra)
            else:
                assert py is not None
                m = run_inspect(tmp=tmp, tag=tag, py=py, dataset=ds, n=n, concurrency=c, latency_ms=args.latency_ms,
                                adaptive=v.endswith("adaptive"), sim_extra=sim_extra)
            shutil.rmtree(tmp / tag, ignore_errors=True)
            d = derive(m, n, c, args.latency_ms)
            d.update(d.pop("detail"))
            window = (d["last_request_s"] - d["first_request_s"] + args.latency_ms / 1000) \
                if d["first_request_s"] is not None and d["last_request_s"] is not None else None
            d.update({"repeat": k + 1, "window_s": window, "goodput": d["ok"] / d["wall_s"],
                      "window_goodput": d["ok"] / window if window else None,
                      "server_ok": d["server"].get("ok"), "attempts_per_call": (d["server_requests"] or 0) / n})
            runs.append(d)
    return runs


def rate_cap_mode(args: argparse.Namespace, tmp: Path, py: Path | None) -> dict[str, Any]:
    cap = args.rate_cap
    # The burst is passed explicitly (the server's own default, a tenth of a second's worth) so the
    # JSON records exactly what ran.
    burst = args.rps_burst if args.rps_burst is not None else max(1.0, cap / 10)
    runs = variant_runs(args, tmp, py, ["--rps-cap", f"{cap:g}", "--rps-burst", f"{burst:g}"], "rate")
    for d in runs:
        d.update({"goodput_over_cap": d["goodput"] / cap,
                  "window_goodput_over_cap": d["window_goodput"] / cap if d["window_goodput"] else None,
                  "rate_limited": d["server"].get("rate_limited")})
        print(f"peers: rate cap {cap:g}/s {d['harness']} #{d['repeat']}: {d['wall_s']:.2f} s, goodput/cap "
              f"{d['goodput_over_cap']:.3f}, 429s {d['rate_limited']}", file=sys.stderr)
    metrics = ("wall_s", "goodput_over_cap", "window_goodput_over_cap", "rate_limited", "attempts_per_call",
               "cpu_s_per_1k", "peak_rss_mib")
    return {"rate_cap_rps": cap, "rps_burst": burst, "concurrency": args.concurrency[0], "calls": args.calls[0],
            "latency_ms": args.latency_ms, "runs": runs, "summary": summarize(runs, metrics)}


def print_rate_cap(res: dict[str, Any]) -> None:
    print_table(f"\nRate cap {res['rate_cap_rps']:g} requests/s (burst {fmt(res['rps_burst'], 'g')}), concurrency "
                f"{res['concurrency']}, N = {res['calls']}, latency {res['latency_ms']:g} ms",
                res["runs"], [("harness", "harness", ""), ("rep", "repeat", ""), ("exit", "exit_code", ""),
                              ("wall s", "wall_s", ".2f"), ("ok", "ok", ""), ("goodput/cap", "goodput_over_cap", ".3f"),
                              ("window g/cap", "window_goodput_over_cap", ".3f"), ("429s", "rate_limited", ""),
                              ("srv req", "server_requests", ""), ("att/call", "attempts_per_call", ".2f"),
                              ("min conc", "min_concurrency", ""), ("cuts", "limit_cuts", ""),
                              ("undone", "limit_restores", ""), ("CPU s/1k", "cpu_s_per_1k", ".2f"),
                              ("RSS MiB", "peak_rss_mib", ".0f")])


def random_429_mode(args: argparse.Namespace, tmp: Path, py: Path | None) -> dict[str, Any]:
    """Random 429s that load does not cause: the sim-server answers a fraction P of requests
    429 (after its latency, `Retry-After` the server's default) whatever the request rate."""
    p = args.random_429
    runs = variant_runs(args, tmp, py, ["--faults", f"429={p:g}"], "random429")
    for d in runs:
        d["rate_limited"] = d["server"].get("faults", {}).get("429", 0)
        print(f"peers: random 429 p={p:g} {d['harness']} #{d['repeat']}: {d['wall_s']:.2f} s, "
              f"{d['goodput']:.1f} ok calls/s, 429s {d['rate_limited']}", file=sys.stderr)
    metrics = ("wall_s", "goodput", "window_goodput", "rate_limited", "attempts_per_call", "cpu_s_per_1k",
               "peak_rss_mib")
    out: dict[str, Any] = {"p_429": p, "concurrency": args.concurrency[0], "calls": args.calls[0],
                           "latency_ms": args.latency_ms, "runs": runs, "summary": summarize(runs, metrics)}
    if args.only != "inspect":
        out["ratios_adaptive_over_fixed"] = pair_ratios(runs, "guardeval", "guardeval-fixed",
                                                        ("goodput", "window_goodput"))
    return out


def print_random_429(res: dict[str, Any]) -> None:
    print_table(f"\nRandom 429s: P = {res['p_429']:g} of requests, whatever the load; concurrency {res['concurrency']}, "
                f"N = {res['calls']}, latency {res['latency_ms']:g} ms",
                res["runs"], [("harness", "harness", ""), ("rep", "repeat", ""), ("exit", "exit_code", ""),
                              ("wall s", "wall_s", ".2f"), ("ok", "ok", ""), ("ok/s", "goodput", ".1f"),
                              ("window ok/s", "window_goodput", ".1f"), ("429s", "rate_limited", ""),
                              ("srv req", "server_requests", ""), ("att/call", "attempts_per_call", ".2f"),
                              ("min conc", "min_concurrency", ""), ("cuts", "limit_cuts", ""),
                              ("undone", "limit_restores", ""), ("bg 429", "background_429", ".3f"),
                              ("CPU s/1k", "cpu_s_per_1k", ".2f"), ("RSS MiB", "peak_rss_mib", ".0f")])
    rat = res.get("ratios_adaptive_over_fixed")
    if rat:
        parts = []
        for k, label in (("goodput", "ok/s over wall"), ("window_goodput", "ok/s over the server's window")):
            vals = ", ".join(fmt(v, ".3f") for v in rat[k]["values"])
            parts.append(f"{label} {fmt(rat[k]['median'], '.3f')}" + (f" [{vals}]" if len(rat[k]["values"]) > 1 else ""))
        print("  guardeval adaptive ÷ --fixed-concurrency (median of pairs): " + "; ".join(parts))


# ---------------------------------------------------------------------------------------- CLI

def int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"'{text}': every value must be >= 1")
    return vals


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int_list, default=None,
                    help="comma-separated (default 16,64,256; rate-cap mode: 64, first value used)")
    ap.add_argument("--calls", type=int_list, default=None,
                    help=f"N per concurrency: one value for all, or one per concurrency (default {DEFAULT_CALLS}; "
                         "rate-cap mode: 30 s worth of the cap)")
    ap.add_argument("--latency-ms", type=float, default=100.0, help="the sim-server's fixed latency (default 100)")
    ap.add_argument("--repeats", type=int, default=1, help="alternating repeats per setting (default 1)")
    ap.add_argument("--quick", action="store_true", help=f"smoke test: N = {QUICK_CALLS} (unless --calls)")
    ap.add_argument("--only", choices=("both", "guardeval", "inspect"), default="both",
                    help="run one side only (guardeval needs no peer venv)")
    ap.add_argument("--peer-version", default=PEER_VERSION, help=f"inspect-ai version (default {PEER_VERSION})")
    ap.add_argument("--rate-cap", type=float, metavar="RPS", help="rate-cap mode: the sim-server's requests/s cap")
    ap.add_argument("--rps-burst", type=float, metavar="B",
                    help="token-bucket size in rate-cap mode (default max(1, RPS/10), the server's default)")
    ap.add_argument("--random-429", type=float, metavar="P",
                    help="random-429 mode: the sim-server answers a fraction P of requests 429 whatever the load")
    ap.add_argument("--json", metavar="FILE", help="write every raw measurement here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if args.latency_ms <= 0:
        ap.error("--latency-ms must be > 0 (ideal throughput is concurrency / latency)")
    if args.rate_cap is not None and args.rate_cap <= 0:
        ap.error("--rate-cap must be > 0")
    if args.random_429 is not None and not 0 < args.random_429 < 1:
        ap.error("--random-429 must be between 0 and 1")
    if args.rate_cap is not None and args.random_429 is not None:
        ap.error("--rate-cap and --random-429 are separate modes: run one at a time")
    if args.concurrency is None:
        args.concurrency = [64] if args.rate_cap is not None or args.random_429 is not None else [16, 64, 256]
    if args.calls is None:
        if args.quick:
            args.calls = [QUICK_CALLS]
        elif args.rate_cap is not None:
            args.calls = [max(1, round(30 * args.rate_cap))]
        elif args.random_429 is not None:
            args.calls = [RANDOM_429_CALLS]
        else:
            args.calls = [DEFAULT_CALLS]
    if len(args.calls) == 1:
        args.calls = args.calls * len(args.concurrency)
    if len(args.calls) != len(args.concurrency):
        ap.error("--calls takes one value or one per --concurrency value")
    return args


def machine_load() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"loadavg": load, "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rate_cap is not None or args.random_429 is not None:
        missing = check_rate_features()
        if missing:
            print(f"peers: this mode needs {', '.join(missing)}, which this checkout lacks", file=sys.stderr)
            return 2
    py = ensure_peer_venv(args.peer_version) if args.only != "guardeval" else None
    meta: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items()}, "python": sys.version.split()[0],
        "platform": platform.platform(), "load_before": machine_load(),
        "peer": {"versions": peer_versions(py), "model": f"openai-api/sim/{MODEL}",
                 "provider": "inspect_ai openai-api (OpenAI-compatible chat completions)",
                 "config": {"max_connections": "C (static; adaptive_connections=C in the -adaptive variant)",
                            "max_samples": "C", "temperature": 0, "max_tokens": MAX_TOKENS, "display": "none",
                            "log_header_only": True, "scorer": None, "retries": "defaults"}} if py else None,
    }
    out: dict[str, Any] = {"meta": meta}
    with tempfile.TemporaryDirectory(prefix="guardeval-peers-") as tmp_s:
        tmp = Path(tmp_s)
        if args.rate_cap is not None:
            out["rate_cap"] = rate_cap_mode(args, tmp, py)
        elif args.random_429 is not None:
            out["random_429"] = random_429_mode(args, tmp, py)
        else:
            out["throughput"] = throughput_mode(args, tmp, py)
    meta["load_after"] = machine_load()
    print(f"guardeval ({REPO}) vs {PEER_PACKAGE} {meta['peer']['versions'][PEER_PACKAGE] if py else '(not run)'}; "
          f"{os.cpu_count()} CPUs; load average before {fmt_load(meta['load_before'])}, after {fmt_load(meta['load_after'])}")
    if "throughput" in out:
        print_throughput(out["throughput"], args)
    if "rate_cap" in out:
        print_rate_cap(out["rate_cap"])
    if "random_429" in out:
        print_random_429(out["random_429"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n", encoding="utf-8")
    failed = [r for r in _all_runs(out) if r["exit_code"] != 0]
    for r in failed:
        print(f"peers: {r['harness']} exited {r['exit_code']}: {r.get('stderr_tail', '')[-500:]}", file=sys.stderr)
    return 1 if failed else 0


def fmt_load(m: dict[str, Any]) -> str:
    return "/".join(f"{x:.2f}" for x in m["loadavg"]) if m.get("loadavg") else "?"


def _all_runs(out: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    if "throughput" in out:
        runs += out["throughput"]["startup"]["runs"]
        for e in out["throughput"]["by_concurrency"]:
            runs += e["runs"]
    for mode in ("rate_cap", "random_429"):
        if mode in out:
            runs += out[mode]["runs"]
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
