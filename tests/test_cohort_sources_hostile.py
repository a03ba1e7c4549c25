"""Hostile source files for the cohort builders and audits, through the real CLI: a pin file, a
TS-Bench record, an option value or an output path that is wrong is refused with exit 2, the
file named, no traceback, nothing written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.fast


def _pin(root: Path, rel: str, data: object) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(json.dumps(data).encode())
    b = p.read_bytes()
    return f"{len(b)} {hashlib.sha256(b).hexdigest()} {rel}"


def _agentharm_logs(tmp_path: Path) -> tuple[Path, Path]:
    """One AgentHarm TS-Guard log (a single prediction) and a pin file for it."""
    logs = tmp_path / "logs"
    base = "guardian_test_logs/agentharm/TS-Guard"
    lines = [_pin(logs, f"{base}/preds.json", [1]), _pin(logs, f"{base}/labels.json", [1]),
             _pin(logs, f"{base}/meta_data.json", [{"id-interaction": "h"}])]
    pins = tmp_path / "pins.txt"
    pins.write_text("\n".join(lines) + "\n")
    return logs, pins


def _rec(i: int, score: float = 0, **extra: object) -> dict[str, object]:
    return {"instruction": "task", "history": "h", "current_action": {"name": "send_money", "arguments": {}},
            "env_info": "tools", "score": score, "id-interaction": "1", "id-segment": i, **extra}


def _refused(r, *needles: str) -> None:
    assert r.code == 2, (r.code, r.err)
    assert "Traceback" not in r.err, r.err
    for n in needles:
        assert n in r.err, (n, r.err)


def _build(src: Path, out: Path, pins: Path):
    return run_cli("cohort", "build", "tsbench", "--source", str(src), "--out", str(out), "--pins", str(pins))


@pytest.mark.parametrize("name", ["TS-Bench/../../outside.json", "/abs/TS-Bench/x.json", "TS-Bench//x.json",
                                  "TS-Bench/./x.json", "TS-Bench\\x.json", "TS-Bench/x\x1b.json"])
def test_pin_names_that_leave_the_source_folder_are_refused(tmp_path, name):
    """A pin names a path under the source folder: never one joined out of it, never an odd one."""
    src = tmp_path / "src"
    src.mkdir()
    outside = tmp_path / "outside.json"   # what ../../ from src/TS-Bench reaches
    outside.write_bytes(json.dumps([_rec(0)]).encode())
    data = outside.read_bytes()
    pins = tmp_path / "pins.txt"
    pins.write_text(f"{len(data)} {hashlib.sha256(data).hexdigest()} {name}\n")
    r = _build(src, tmp_path / "out", pins)
    _refused(r, str(pins), "line 1")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("body", [b"\xff\xfe 12 x\n", "\u00b2 " .encode() + b"a" * 64 + b" TS-Bench/x.json\n",
                                  b"12 " + b"g" * 64 + b" TS-Bench/x.json\n"])
def test_malformed_pin_files_are_refused(tmp_path, body):
    """Not UTF-8, a digit int() does not take, a SHA-256 that is not hex: exit 2, line named."""
    src = tmp_path / "src"
    src.mkdir()
    pins = tmp_path / "pins.txt"
    pins.write_bytes(body)
    r = _build(src, tmp_path / "out", pins)
    _refused(r, str(pins))
    assert not (tmp_path / "out").exists()


def test_tsbench_record_nested_too_deep_is_refused(tmp_path):
    """orjson reads 1,024 levels but hashes only 254: a record between the two used to end in a
    traceback while hashing the row."""
    src = tmp_path / "src"
    deep: object = {"a": 1}
    for _ in range(300):
        deep = [deep]
    line = _pin(src, "TS-Bench/agentdojo-traj/banking.json", [_rec(0, history=deep)])
    pins = tmp_path / "pins.txt"
    pins.write_text(line + "\n")
    r = _build(src, tmp_path / "out", pins)
    _refused(r, "banking.json", "nested")
    assert not (tmp_path / "out").exists()


def test_import_toolsafe_tsbench_check_without_its_pins_is_refused(tmp_path):
    """--tsbench needs the AgentHarm TS-Bench pins; a pin file without them is named (was KeyError)."""
    logs, pins = _agentharm_logs(tmp_path)
    (tmp_path / "ts").mkdir()
    out = tmp_path / "rows.jsonl"
    r = run_cli("audit", "import-toolsafe", "--logs", str(logs), "--out", str(out), "--pins", str(pins),
                "--tsbench", str(tmp_path / "ts"))
    _refused(r, str(pins), "harmful_steps.json")
    assert not out.exists()


def test_import_toolsafe_summary_is_escaped_and_out_folder_refused(tmp_path):
    """The summary names the --out file: DEL and C1 controls in it reach stdout escaped. An --out
    that is a folder is a usage error (exit 2), found before anything is read."""
    logs, pins = _agentharm_logs(tmp_path)
    out = tmp_path / "rows\x7f\x9b.jsonl"
    r = run_cli("audit", "import-toolsafe", "--logs", str(logs), "--out", str(out), "--pins", str(pins))
    assert r.code == 0, r.err
    assert "\x7f" not in r.out and "\x9b" not in r.out and "\\u007f" in r.out
    assert json.loads(r.out) == {"out": str(out), "benches": {"agentharm": {"rows": 1, "null_predictions": 0}}}
    r = run_cli("audit", "import-toolsafe", "--logs", str(logs), "--out", str(tmp_path), "--pins", str(pins))
    _refused(r, str(tmp_path), "folder")


def test_cohort_rows_and_build_refuse_an_out_of_the_wrong_kind(tmp_path):
    demo = REPO / "cohorts" / "demo"
    r = run_cli("cohort", "rows", str(demo), "--out", str(tmp_path))
    _refused(r, str(tmp_path), "folder")
    r = run_cli("cohort", "rows", str(demo), "--out", str(tmp_path / "missing" / "rows.jsonl"))
    _refused(r, str(tmp_path / "missing"))
    assert not (tmp_path / "missing").exists()
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    r = run_cli("cohort", "build", "demo", "--out", str(afile))
    _refused(r, str(afile), "not a folder")
    assert afile.read_text() == "keep me"


@pytest.mark.parametrize("seeds", ["-1", "3,-2"])
def test_audit_lookup_negative_seed_is_a_usage_error(tmp_path, seeds):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"interaction_id": f"i{i}", "domain": f"d{i % 2}", "tool": f"t{i % 3}",
                                        "label": i % 2}) + "\n" for i in range(10)))
    r = run_cli("audit", "lookup", str(rows), f"--seeds={seeds}")
    _refused(r, "--seeds")
