"""benchmarks/peers.py, guardeval side only (no peer venv, nothing installed): a quick run
against real sim-servers checks the printed tables and the JSON shape."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.conftest import REPO, cli_env

pytestmark = pytest.mark.slow

SCRIPT = REPO / "benchmarks" / "peers.py"


def load_peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_guardeval_side_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "guardeval", "--concurrency", "16,64",
                           "--json", str(out)], capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Startup: one call" in proc.stdout
    assert "Concurrency 16: N = 200 calls" in proc.stdout and "Concurrency 64: N = 200 calls" in proc.stdout
    assert "(median of pairs)" not in proc.stdout and "ratio g/i " not in proc.stdout   # one side only

    data = json.loads(out.read_text())
    assert data["meta"]["peer"] is None
    startup = data["throughput"]["startup"]["runs"]
    assert [r["harness"] for r in startup] == ["guardeval"]
    assert startup[0]["decided"] == 1 and startup[0]["server_requests"] == 1

    entries = data["throughput"]["by_concurrency"]
    assert [(e["concurrency"], e["calls"]) for e in entries] == [(16, 200), (64, 200)]
    for e in entries:
        assert e["ideal_calls_per_s"] == e["concurrency"] / 0.1
        assert "ratios_guardeval_over_inspect" not in e
        (run,) = e["runs"]
        assert run["harness"] == "guardeval" and run["exit_code"] == 0
        # Every call decided, exactly one request each: no retries without faults.
        assert run["decided"] == run["ok"] == 200
        assert run["server_requests"] == 200 and run["retries"] == 0
        assert run["wall_s"] > 0.1 and run["cpu_s"] > 0 and run["peak_rss_mib"] > 10
        assert 0 < run["efficiency"] <= 1.05
        assert run["cpu_s_per_1k"] == run["cpu_s"] / 200 * 1000
        assert run["first_request_s"] is not None and run["first_request_s"] < run["wall_s"]
        assert set(e["summary"]["guardeval"]) == {"wall_s", "efficiency", "cpu_s_per_1k", "peak_rss_mib"}
        assert e["summary"]["guardeval"]["wall_s"]["values"] == [run["wall_s"]]


def test_arguments_and_ratios() -> None:
    peers = load_peers()
    a = peers.parse_args([])
    assert a.concurrency == [16, 64, 256] and a.calls == [peers.DEFAULT_CALLS] * 3
    a = peers.parse_args(["--rate-cap", "20"])
    assert a.concurrency == [64] and a.calls == [600]
    a = peers.parse_args(["--concurrency", "16,64", "--calls", "100,300"])
    assert a.calls == [100, 300]
    runs = [{"harness": "guardeval", "wall_s": 2.0}, {"harness": "inspect_ai", "wall_s": 8.0},
            {"harness": "guardeval", "wall_s": 3.0}, {"harness": "inspect_ai", "wall_s": 6.0}]
    r = peers.pair_ratios(runs, "guardeval", "inspect_ai", ["wall_s"])
    assert r["wall_s"]["values"] == [0.25, 0.5] and r["wall_s"]["median"] == 0.375
    s = peers.summarize(runs, ["wall_s"])
    assert s["inspect_ai"]["wall_s"] == {"median": 7.0, "values": [8.0, 6.0]}
